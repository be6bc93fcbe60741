// The CUDA backend's activation bytes at a step's peak, tensor by tensor (cost_model_rules.h,
// deviceActivations), and the loss head's products and memory traffic. The shapes are the
// engine's saved structs (KdaSavedCuda, the sparse layer's SparseAttentionSavedCuda, MoeSavedCuda,
// the loss head's LossSavedCuda); the block sizes follow the engine's caching allocator. Checked
// against the memory events of 22 H200 traces (tests/tuner/data/h200_heldout_memory.txt,
// bench/RESULTS.md "cost model on 18 held-out H200 configs" and the four after it): the stack
// at the turn within 0.4% on 16 of the first 18.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cost_model_rules.h"
#include "moewb/tuner/cost_model.h"

namespace moewb::tuner::detail {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The engine's caching allocator rounds a request to 512-byte granules below 1 MiB and to 2 MiB
// granules from 1 MiB up (roundedBlockBytes in engine/runtime/cuda/caching_allocator.cpp, an
// internal function the tuner cannot call; tests/tuner/cost_model_memory_test.cpp checks this
// copy's two cases). Blocks in use are counted at that size.
double block(double bytes) {
  if (bytes <= 0) return 0;
  const double granule = bytes < kMiB ? 512 : 2 * kMiB;
  return std::ceil(bytes / granule) * granule;
}

// The sizes of one rank's step that the saved tensors are made of.
struct Dims {
  double n = 0;          // tokens of the rank
  double sequences = 0;  // n / seq_len, rounded up
  double t = 0, d = 0, v = 0;
  double rows = 0;      // routed rows of the rank: n * top_k * rank skew
  double k = 0;         // moe.top_k
  double e = 0, f = 0;  // experts, expert hidden width
  double dx = 0;        // expert row width: moe.latent_dim, or d_model without a latent MoE
  double latent = 0;    // moe.latent_dim (0 = off)
  double shared = 0;    // shared experts' hidden width (num_shared x shared_d_ff or d_ff)
};

Dims dimsOf(const engine::RunConfig& c, double tokensPerRank, double rankSkew) {
  Dims m;
  m.n = tokensPerRank;
  m.t = std::max(1, c.model.seqLen);
  m.sequences = std::ceil(m.n / m.t);
  m.d = c.model.dModel;
  m.v = c.model.vocabSize;
  m.k = c.moe.topK;
  m.rows = m.n * m.k * rankSkew;
  m.e = c.moe.numExperts;
  m.f = c.moe.dFf;
  m.latent = std::max(0, c.moe.latentDim);
  m.dx = m.latent > 0 ? m.latent : m.d;
  m.shared = double(std::max(0, c.moe.numSharedExperts)) *
             (c.moe.sharedDFf > 0 ? c.moe.sharedDFf : c.moe.dFf);
  return m;
}

// KDA core sizes: padded rows B*H*T' (T' = seq_len rounded up to the chunk) and chunk slots.
struct KdaSizes {
  double heads = 0, headDim = 0, p = 0, rank = 0, chunk = 0, rows = 0, slots = 0;
};

KdaSizes kdaSizesOf(const engine::RunConfig& c, const Dims& m) {
  KdaSizes s;
  s.heads = c.kda.numHeads > 0 ? c.kda.numHeads : c.model.numHeads;
  s.headDim = c.kda.headDim > 0 ? c.kda.headDim : m.d / std::max(1.0, s.heads);
  s.p = s.heads * s.headDim;
  s.rank = c.kda.gateRank > 0 ? c.kda.gateRank : s.headDim;
  s.chunk = std::max(1, c.kda.chunkSize);
  s.slots = m.sequences * s.heads * std::ceil(m.t / s.chunk);
  s.rows = s.slots * s.chunk;
  return s;
}

bool keepsKda(const engine::RunConfig& c) {
  return c.kda.keepIntermediates;
}

// KdaSavedCuda: the layer's normed input [N, D]; 15 bf16 [N, P] (q/k/v projections, conv outputs,
// SiLU outputs of q and k, the core inputs q k v, the gate input f, the core output o, the output
// gate and the input of Wo); fp32 g [N, P]; Aqk and M [B*H, T', C] fp32; the two bottlenecks
// [N, R] bf16; four fp32 [N, H] (two L2 inverse norms, beta, the output RMSNorm). With
// kda.keep_intermediates also the engine's kept group (kdaKeptIntermediateBytes in
// engine/ops/kda/kda_chunk_cuda.cpp): fp32 W, U, q decayed, k decayed and Vn [R', K or V], e^{G_C}
// [slots, K] and the entry states [slots, K, V].
double kdaMixerBytes(const engine::RunConfig& c, const Dims& m) {
  const KdaSizes s = kdaSizesOf(c, m);
  double bytes = block(m.n * m.d * 2) + 15 * block(m.n * s.p * 2) + block(m.n * s.p * 4) +
                 2 * block(s.rows * s.chunk * 4) + 2 * block(m.n * s.rank * 2) +
                 4 * block(m.n * s.heads * 4);
  if (keepsKda(c)) {
    bytes += 5 * block(s.rows * s.headDim * 4) + block(s.slots * s.headDim * 4) +
             block(s.slots * s.headDim * s.headDim * 4);
  }
  return bytes;
}

// SparseAttentionSavedCuda (the sparse stage: W = min(sparse.top_k, seq_len) selected keys): the
// normed input [N, D]; q, gate, context, gated [N, H*dh] and k, v [N, Hkv*dh] bf16; the selection
// [N, W] int32; the probabilities [N, H, W] and sink probabilities [N, H] fp32; the indexer's q
// [N, HI*dI], key and normalised key [N, dI], key rstd [N] and head weights [N, HI] fp32; the
// indexer probabilities and target [N, W] fp32.
double sparseMixerBytes(const engine::RunConfig& c, const Dims& m) {
  const double h = c.model.numHeads;
  const double dh = c.sparse.headDim > 0 ? c.sparse.headDim : m.d / std::max(1.0, h);
  const double w = std::min<double>(c.sparse.topK, m.t);
  const double hi = c.sparse.indexerHeads, di = c.sparse.indexerDim;
  return block(m.n * m.d * 2) + 4 * block(m.n * h * dh * 2) +
         2 * block(m.n * c.sparse.kvHeads * dh * 2) + block(m.n * w * 4) + block(m.n * h * w * 4) +
         block(m.n * h * 4) + block(m.n * hi * di * 4) + 2 * block(m.n * di * 4) + block(m.n * 4) +
         block(m.n * hi * 4) + 2 * block(m.n * w * 4);
}

// AttentionSavedCuda: the normed input, q, k, v and the context [N, D] bf16 and the row
// log-sum-exp [B, H, T] fp32 (flash attention keeps no probabilities).
double attentionMixerBytes(const engine::RunConfig& c, const Dims& m) {
  return 5 * block(m.n * m.d * 2) + block(m.sequences * c.model.numHeads * m.t * 4);
}

// MoeSavedCuda and the layer around it: the normed input, the MoE input and the layer output
// [N, D] bf16 with three [N] fp32 norm statistics; the router's logits, scores and counts
// ([N, E] fp32, three); five [N, k] routing tensors (expert ids, weights, dispatch slots); the
// latent MoE's input, pre-norm and output [N, Dl] bf16; the shared experts' gate, up and
// activated rows [N, Fs]; per routed row (N k, times the rank skew with EP) the permuted input
// (not with fusion.permute_into_experts: the experts gather through the index), the expert output
// (released at the combine with fusion.combine_into_experts, which keeps an fp32 weight per row
// instead) [rows, Dx], and the SwiGLU gate, up and activated rows [rows, F].
double moeBlockBytes(const engine::RunConfig& c, const Dims& m) {
  double bytes = 3 * block(m.n * m.d * 2) + 3 * block(m.n * 4) + 3 * block(m.n * m.e * 4) +
                 5 * block(m.n * m.k * 4);
  if (m.latent > 0) bytes += 3 * block(m.n * m.latent * 2);
  if (m.shared > 0) bytes += 3 * block(m.n * m.shared * 2);
  if (!c.fusion.permuteIntoExperts) bytes += block(m.rows * m.dx * 2);
  bytes += c.fusion.combineIntoExperts ? block(m.rows * 4) : block(m.rows * m.dx * 2);
  return bytes + 3 * block(m.rows * m.f * 2);
}

// Outside the layers: the embedding output and the residual stream [N, D] with their [N] rows,
// the final norm's output and rstd, and the loss head's [N] lse. The dense head adds its fp32
// [N, V] logits, lse and per-token loss (cce and chunk allocate neither since 2026-12-02); the
// chunk loss keeps dh [N, D] bf16 and dW [V, D] fp32 from its forward (it computes the gradients
// there).
double outsideLayersBytes(const engine::RunConfig& c, const Dims& m) {
  double bytes = 3 * block(m.n * m.d * 2) + 3 * block(m.n * 4);
  if (c.loss.kind == "dense") bytes += block(m.n * m.v * 4) + 2 * block(m.n * 4);
  if (c.loss.kind == "chunk") bytes += block(m.n * m.d * 2) + block(m.v * m.d * 4);
  return bytes;
}

// What the chunk loss frees at the start of the backward (its kept dh and dW).
double lossFreedAtTurn(const engine::RunConfig& c, const Dims& m) {
  return c.loss.kind == "chunk" ? block(m.n * m.d * 2) + block(m.v * m.d * 4) : 0;
}

// Transient at the turn: the dense head's bf16 [N, V] logit gradient and dh [N, D].
double lossBackwardBytes(const engine::RunConfig& c, const Dims& m) {
  return c.loss.kind == "dense" ? block(m.n * m.v * 2) + block(m.n * m.d * 2) : 0;
}

// A layer's MoE backward beyond its saved tensors: dYPerm and dXPerm [rows, Dx], the experts'
// two [rows, F] gradient workspaces and an fp32 [N, D] accumulator (the token gradients in and
// out come and go in equal sizes).
double moeBackwardBytes(const Dims& m) {
  return 2 * block(m.rows * m.dx * 2) + 2 * block(m.rows * m.f * 2) + block(m.n * m.d * 4);
}

// A mixer's backward beyond its saved tensors. Sparse: the probabilities' gradient [N, H, W]
// fp32, the selection's [N, W], dq and d(context) [N, H*dh] bf16, three fp32 [N, H*dh]
// accumulators, the indexer key gradients [N, dI] and the sink's [N, H]. KDA (kda_cuda.h's
// workspace list): three [R', K] scratch rows; without kept intermediates also the recomputed
// five [R', K or V], the entry states and their gradients [slots, K, V], two [R', C] and
// [slots, K]. Softmax attention: not counted (flash attention's backward workspace is small).
double mixerBackwardBytes(const engine::RunConfig& c, const Dims& m, char kind) {
  if (kind == 'S') {
    const double h = c.model.numHeads;
    const double dh = c.sparse.headDim > 0 ? c.sparse.headDim : m.d / std::max(1.0, h);
    const double w = std::min<double>(c.sparse.topK, m.t);
    return 2 * block(m.n * h * dh * 2) + 3 * block(m.n * h * dh * 4) +
           2 * block(m.n * c.sparse.indexerDim * 4) + block(m.n * w * 4) + block(m.n * h * w * 4) +
           block(m.n * h * 4);
  }
  if (kind != 'K') return 0;
  const KdaSizes s = kdaSizesOf(c, m);
  double bytes = 3 * block(s.rows * s.headDim * 4);
  if (!keepsKda(c)) {
    bytes += 5 * block(s.rows * s.headDim * 4) + 2 * block(s.slots * s.headDim * s.headDim * 4) +
             2 * block(s.rows * s.chunk * 4) + block(s.slots * s.headDim * 4);
  }
  return bytes;
}

}  // namespace

double allocatorBlockBytes(double bytes) {
  return block(bytes);
}

LossPasses lossPasses(const std::string& kind) {
  if (kind == "cce") return {1, 3};
  if (kind == "chunk") return {3, 0};
  return {1, 2};
}

double lossTrafficBytes(const engine::RunConfig& c, double tokensPerRank, bool forward) {
  const double n = tokensPerRank, v = c.model.vocabSize, d = c.model.dModel;
  if (c.loss.kind == "dense") return n * v * (forward ? 8 : 10);
  if (c.loss.kind != "chunk" || !forward) return 0;
  const double micro = std::max(1, c.microBatches());
  const double chunks = micro * std::ceil(n / micro / std::max(1, c.loss.chunkTokens));
  return n * v * 18 + chunks * v * d * 4 * 2;
}

DeviceActivations deviceActivations(const engine::RunConfig& c, double tokensPerRank,
                                    double rankSkew) {
  const Dims m = dimsOf(c, tokensPerRank, rankSkew);
  const std::string& pattern = c.model.mixerPattern;
  const int32_t layers = std::max(0, c.model.numLayers);
  std::vector<std::pair<double, char>> saved;  // per layer: saved bytes, mixer kind
  DeviceActivations out;
  out.turnBytes = outsideLayersBytes(c, m);
  for (int32_t l = 0; l < layers; ++l) {
    const char kind = pattern.empty() ? 'A' : pattern[size_t(l) % pattern.size()];
    const double mixer = kind == 'K'   ? kdaMixerBytes(c, m)
                         : kind == 'S' ? sparseMixerBytes(c, m)
                                       : attentionMixerBytes(c, m);
    const double moe = moeBlockBytes(c, m);
    out.moeBytesPerLayer = moe;
    if (kind == 'K') out.kdaMixerBytesPerLayer = mixer;
    if (kind == 'S') out.sparseMixerBytesPerLayer = mixer;
    saved.emplace_back(mixer + moe, kind);
    out.turnBytes += mixer + moe;
  }
  // The backward walks the layers last to first; each layer's saved tensors are freed after its
  // backward, so the stack a layer's backward transient sits on shrinks layer by layer.
  out.peakBytes = out.turnBytes + lossBackwardBytes(c, m);
  out.peakAt = "loss backward";
  double stack = out.turnBytes - lossFreedAtTurn(c, m);
  const double moeTransient = moeBackwardBytes(m);
  for (int32_t l = layers - 1; l >= 0; --l) {
    const double mixerTransient = mixerBackwardBytes(c, m, saved[size_t(l)].second);
    const bool moeHigher = moeTransient >= mixerTransient;
    const double here = stack + std::max(moeTransient, mixerTransient);
    if (here > out.peakBytes) {
      out.peakBytes = here;
      out.peakAt = "layer " + std::to_string(l) + (moeHigher ? " MoE" : " mixer") + " backward";
    }
    stack -= saved[size_t(l)].first;
  }
  return out;
}

double hbmBytesPerMs(const Calibration& cal) {
  auto it = cal.phaseMs.find("optimizer");
  if (cal.backend != "cuda" || it == cal.phaseMs.end() || it->second <= 0) return 0;
  return 34 * (double(cal.weightsBytes) / 6) / it->second;
}

}  // namespace moewb::tuner::detail
