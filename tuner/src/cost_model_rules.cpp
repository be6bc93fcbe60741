// Work estimates of the cost model (see cost_model_rules.h and the rules in cost_model.h).
#include "cost_model_rules.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "moewb/engine/model_flops.h"

namespace moewb::tuner::detail {
namespace {

// Weighted parameters of one mixer layer of each kind, from the FLOP count: a projection's
// forward costs 2 FLOPs per token and parameter. Softmax attention's QK^T / PV are not
// parameters, so 'A' layers count their four D x D projections directly.
struct LayerParams {
  double attention = 0;  // per 'A' layer
  double kda = 0;        // per 'K' layer
  double sparse = 0;     // per 'S' layer
};

LayerParams mixerParams(const engine::RunConfig& c, const engine::ModelFlops& f, double tokens) {
  const std::string& p = c.model.mixerPattern;
  const int32_t layers = c.model.numLayers;
  auto countOf = [&](char kind) {
    double n = 0;
    for (int32_t l = 0; l < layers; ++l) n += p.empty() ? 0 : (p[size_t(l) % p.size()] == kind);
    return n;
  };
  const double d = c.model.dModel;
  LayerParams out;
  out.attention = 4 * d * d;
  const double k = countOf('K'), s = countOf('S');
  if (k > 0) out.kda = f.kdaProjections.forward / (2 * tokens) / k;
  if (s > 0) out.sparse = f.sparseProjections.forward / (2 * tokens) / s;
  return out;
}

// The busiest EP rank's expert rows over the mean rank's (cost_model.h, "rank skew").
double rankSkewOf(const engine::RunConfig& c, double skew) {
  const double e = c.moe.numExperts;
  const double ep = std::max(1, c.parallel.ep);
  if (c.moe.capacityFactor > 0) skew = std::min(skew, c.moe.capacityFactor);
  skew = std::clamp(skew, 1.0, e);
  if (ep <= 1 || e <= 1) return 1;
  const double perRank = e / ep;
  const double rest = (perRank - 1) * (e - skew) / (e - 1);
  return (skew + rest) / perRank;
}

// kda.keep_intermediates on the CUDA backend (the CPU backend always recomputes): each 'K' layer
// also keeps its chunk workspace (W, U, q decayed, k decayed: 3 K + 2 V floats per padded row)
// and the chunk-entry states (K x (V + 1) floats per chunk), as kdaKeptIntermediateBytes in
// engine/ops/kda/kda_chunk_cuda.cpp counts them (an internal CUDA-only function the tuner cannot
// call): ~0.94 GB per layer on h200.toml. Per 'K' layer, in the saved activations' 2-byte
// elements (a float is two). `tokensPerRank` = sequences x seq_len.
double kdaKeptElemsPerLayer(const engine::RunConfig& c, double tokensPerRank) {
  if (!c.kda.keepIntermediates || c.run.backend == "cpu") return 0;
  const double heads = c.kda.numHeads > 0 ? c.kda.numHeads : c.model.numHeads;
  const double hd = c.kda.headDim > 0 ? c.kda.headDim : double(c.model.dModel) / heads;
  const double seq = std::max(1, c.model.seqLen), chunk = std::max(1, c.kda.chunkSize);
  const double sequences = std::ceil(tokensPerRank / seq);
  const double rows = sequences * heads * std::ceil(seq / chunk) * chunk;
  const double floats = rows * 5 * hd + rows / chunk * hd * (hd + 1);
  return 2 * floats;
}

}  // namespace

std::string phaseBase(const std::string& phaseName) {
  const auto dot = phaseName.rfind('.');
  if (dot == std::string::npos) return phaseName;
  const std::string pass = phaseName.substr(dot + 1);
  return pass == "fwd" || pass == "bwd" ? phaseName.substr(0, dot) : phaseName;
}

Work workOf(const engine::RunConfig& c, double skew) {
  Work w;
  const engine::ModelFlops f = engine::modelFlopsPerStep(c);
  const double ranks = std::max(1, c.parallel.worldSize);
  const double globalTokens = double(c.tokensPerStep());
  const double n = globalTokens / ranks;
  const double d = c.model.dModel, k = c.moe.topK, v = c.model.vocabSize;
  const double dff = c.moe.dFf, layers = c.model.numLayers;
  const double ep = std::max(1, c.parallel.ep);
  w.tokensPerRank = n;
  // Micro-batching: the same work per step in M forward + backward passes of N / M tokens; the
  // activations held are one micro-batch's, the per-pass fixed costs repeat M times.
  w.microBatches = std::max(1, c.microBatches());
  const double nMicro = n / w.microBatches;
  w.tokensPerMicroBatch = nMicro;
  w.rankSkew = rankSkewOf(c, skew);

  auto& ph = w.phaseWork;
  ph["embedding"] = n * d + f.patchEmbed.total() / ranks;
  ph["attention"] = f.attention.total() / ranks;
  ph["kda"] = (f.kdaProjections.total() + f.kdaCore.total()) / ranks;
  w.kdaCoreForwardWork = f.kdaCore.forward / ranks;
  // The KDA backward recomputes the core's chunk intermediates unless the CUDA forward kept them
  // (the CPU backend always recomputes).
  w.kdaRecomputes = !c.kda.keepIntermediates || c.run.backend == "cpu";
  ph["sparse_attention"] =
      (f.sparseProjections.total() + f.sparseAttention.total() + f.sparseIndexer.total()) / ranks;
  ph["router"] = f.router.total() / ranks;
  // Permute moves rows of the expert width (the latent width with a latent MoE). Fused into the
  // experts, the forward's gather goes (the index only); the backward still scatters dXPerm into
  // the tokens (moePermuteBackwardCuda runs either way), so it keeps its work.
  const double dx = c.moe.latentDim > 0 ? c.moe.latentDim : d;
  ph["permute.fwd"] = layers * n * k * (c.fusion.permuteIntoExperts ? 1 : dx);
  ph["permute.bwd"] = layers * n * k * dx;
  ph["permute"] = ph["permute.fwd"] + ph["permute.bwd"];  // a phase without its pass
  ph["experts"] = (f.experts.total() + f.latent.total()) / ranks * w.rankSkew;
  ph["combine"] =
      layers * n * (c.fusion.combineIntoExperts ? d : k * d) + f.sharedExperts.total() / ranks;
  // The loss's forward and backward are scaled alike; CCE's recomputation is applied to the
  // backward by the predictor (it needs the pass), so the base work is the LM head's.
  ph["loss"] = f.lmHead.total() / ranks;
  w.otherPhaseWork = n * layers;

  const LayerParams lp = mixerParams(c, f, std::max(1.0, globalTokens));
  const std::string& p = c.model.mixerPattern;
  double mixer = 0;
  for (int32_t l = 0; l < c.model.numLayers; ++l) {
    const char kind = p.empty() ? 'A' : p[size_t(l) % p.size()];
    mixer += kind == 'K' ? lp.kda : kind == 'S' ? lp.sparse : lp.attention;
  }
  const double norms = (2 * layers + 1) * d;
  const double shared = f.sharedExperts.forward / (2 * std::max(1.0, globalTokens));
  const double latent = f.latent.forward / (2 * std::max(1.0, globalTokens) * std::max(1.0, k));
  w.denseParams = 2 * v * d + mixer + norms + layers * d * c.moe.numExperts + shared;
  w.expertParams =
      f.experts.forward / (2 * std::max(1.0, globalTokens) * std::max(1.0, k)) * c.moe.numExperts +
      latent;
  const double fsdp = std::max(1, c.parallel.fsdpDegree());
  const double replicate = std::max(1, c.parallel.replicateDegree());
  w.paramsPerRank = w.denseParams / fsdp + w.expertParams / ep;
  ph["optimizer"] = w.paramsPerRank;

  // Saved activations of a CPU calibration (a CUDA one scales by deviceActivationBytes, from
  // cost_model_memory.cpp): per layer the norms, mixer input/output and projections (8 D), softmax
  // attention's probabilities (heads x T) in 'A' layers, per routed row the permuted input and
  // output (2 D; D with fusion.permute_into_experts) and the SwiGLU gate / up / activated rows
  // (3 F); plus the loss buffer; all of one micro-batch of N / M tokens.
  double perToken = 0, kdaKept = 0;
  const double keptPerKdaLayer = kdaKeptElemsPerLayer(c, nMicro);
  for (int32_t l = 0; l < c.model.numLayers; ++l) {
    const char kind = p.empty() ? 'A' : p[size_t(l) % p.size()];
    const double rowsIn = c.fusion.permuteIntoExperts ? 1 : 2;  // fused: no permuted copy
    perToken += 8 * d + k * (rowsIn * d + 3 * dff) * w.rankSkew;
    if (kind == 'A') perToken += double(c.model.numHeads) * c.model.seqLen;
    if (kind == 'K') kdaKept += keptPerKdaLayer;
  }
  double lossBuffer = nMicro * v;
  if (c.loss.kind == "chunk") lossBuffer = std::min(nMicro, double(c.loss.chunkTokens)) * v;
  if (c.loss.kind == "cce") lossBuffer = nMicro * std::min(v, double(c.loss.cceVocabBlock));
  w.activationElems = nMicro * perToken + lossBuffer + kdaKept;
  w.deviceActivationBytes = deviceActivations(c, nMicro, w.rankSkew).peakBytes;

  // EP all-to-all: dispatch, combine and their backwards per layer; a count exchange each.
  w.a2aElems = ep > 1 ? 4 * layers * n * k * d * (ep - 1) / ep * w.rankSkew : 0;
  w.a2aCount = ep > 1 ? int32_t(8 * layers * std::max(1, c.parallel.a2aChunks) *
                                w.microBatches)
                      : 0;
  const double edp = ranks / ep;
  double coll = 0;
  int32_t count = 0;
  // Once a step whatever the micro-batches: the engine gathers before the first micro-batch's
  // forward and reduce-scatters after the last one's backward.
  if (fsdp > 1) {
    coll += 3 * w.denseParams / fsdp * (fsdp - 1);  // gather fwd + bwd, reduce-scatter: shards
    count += int32_t(3 * (layers + 1));
  }
  if (replicate > 1) {
    coll += 2 * w.denseParams / fsdp * (replicate - 1) / replicate;
    count += 1;
  }
  if (edp > 1) {
    coll += 2 * w.expertParams / ep * (edp - 1) / edp;
    count += 1;
  }
  w.collectiveElems = coll;
  w.collectiveCount = count;
  // Per forward + backward pass: 10 phases a layer, embedding and loss each way; then the
  // optimizer once a step.
  w.idleUnits = w.microBatches * (10 * layers + 4) + 1;
  return w;
}

}  // namespace moewb::tuner::detail
