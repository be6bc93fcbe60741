// Model FLOPs per training step (see model_flops.h). The sizes come from the same functions the
// model builds its layers with (ModelDims::fromConfig, mixerKdaDims, mixerSparseDims), so head
// counts, head widths, gate ranks and defaults resolve exactly as in the engine.
#include "moewb/engine/model_flops.h"

#include <algorithm>
#include <cstdint>

#include "model/cpu/mixer.h"
#include "model/cpu/parameter.h"

namespace moewb::engine {
namespace {

// A product whose input and weight both need gradients: backward = 2x forward.
FlopCount withFullBackward(double forward) {
  return {forward, 2 * forward};
}

// Query-key pairs of one sequence of `seqLen` tokens when query t sees min(width, t + 1) keys.
double causalPairs(int64_t seqLen, int64_t width) {
  const double t = double(seqLen), w = double(std::min(width, seqLen));
  return w * (w + 1) / 2 + (t - w) * w;
}

// Multiply-adds of the KDA core on one chunk of c tokens of one head (ENGINE-MATH §2.3).
double kdaChunkMacs(double c, double k, double v) {
  const double strict = c * (c - 1) / 2;  // entries of a strictly lower-triangular [c, c]
  const double lower = c * (c + 1) / 2;   // ... lower-triangular including the diagonal
  return strict * k                       // L = beta_i sum_d k_i k_j e^(G_i - G_j), j < i
         + lower * k                      // Aqk = sum_d q_i k_j e^(G_i - G_j), j <= i
         + c * (c - 1) * (c - 2) / 6      // M = (I + L)^-1 by forward substitution
         + lower * (k + v)                // W = M Diag(beta) (k e^G), U = M Diag(beta) v
         + lower * v                      // Aqk Vn
         + 3 * c * k * v;                 // W S, (q e^G) S, state update (k e^(G_C - G))^T Vn
}

void addMixer(char kind, const ModelDims& dims, const SparseAttentionDims& sparse,
              ModelFlops& flops) {
  const double n = double(dims.tokens()), d = double(dims.dModel), b = double(dims.batchSize);
  if (kind == 'A') {  // H heads of D / H: the heads together are D wide
    flops.attention += withFullBackward(2 * n * 4 * d * d);
    flops.attention += withFullBackward(2 * 2 * d * b * causalPairs(dims.seqLen, dims.seqLen));
  } else if (kind == 'K') {
    const KdaDims kda = mixerKdaDims(dims);
    const double h = double(kda.numHeads), k = double(kda.headDim), p = double(kda.innerDim()),
                 r = double(kda.rank());
    // wq, wk, wv, wo; wb; wf1 + wf2 and wg1 + wg2.
    flops.kdaProjections += withFullBackward(2 * n * (4 * d * p + d * h + 2 * r * (d + p)));
    const int64_t c = kda.chunk, full = dims.seqLen / c, rest = dims.seqLen % c;
    const double perHead = double(full) * kdaChunkMacs(double(c), k, k) +
                           (rest > 0 ? kdaChunkMacs(double(rest), k, k) : 0.0);
    flops.kdaCore += withFullBackward(2 * perHead * b * h);
  } else if (kind == 'S') {
    const double h = double(sparse.numHeads), hkv = double(sparse.kvHeads),
                 dh = double(sparse.headDim), hi = double(sparse.indexerHeads),
                 di = double(sparse.indexerDim);
    flops.sparseProjections += withFullBackward(2 * n * d * (3 * h * dh + 2 * hkv * dh));
    const double selected = b * causalPairs(sparse.seqLen, sparse.topK);
    flops.sparseAttention += withFullBackward(2 * 2 * h * dh * selected);
    // The indexer scores every causal key to choose the top-k; its KL loss reaches only the
    // selected scores, and its input is detached: weight gradients only, no input gradient.
    const double projections = 2 * n * d * (hi * di + di + hi);
    const double scores = 2 * hi * di * b * causalPairs(sparse.seqLen, sparse.seqLen);
    flops.sparseIndexer.forward += projections + scores;
    if (sparse.indexerLossCoef != 0) {
      flops.sparseIndexer.backward += projections + 2 * (2 * hi * di * selected);
    }
  }
}

void addMoe(const ModelDims& dims, ModelFlops& flops) {
  const double n = double(dims.tokens()), d = double(dims.dModel), e = double(dims.numExperts);
  const MoeOptions& moe = dims.moe;
  const double dx = moe.latent() ? double(moe.latentDim) : d;
  flops.router += withFullBackward(2 * n * d * e);
  flops.experts += withFullBackward(2 * n * double(dims.topK) * 3 * dx * double(dims.dFf));
  if (moe.latent()) flops.latent += withFullBackward(2 * n * 2 * d * dx);
  if (moe.shared()) {
    flops.sharedExperts += withFullBackward(2 * n * 3 * d * double(moe.sharedWidth()));
  }
}

}  // namespace

std::vector<ModelFlops::Part> ModelFlops::parts() const {
  return {{"attention", attention},
          {"kda.projections", kdaProjections},
          {"kda.core", kdaCore},
          {"sparse.projections", sparseProjections},
          {"sparse.attention", sparseAttention},
          {"sparse.indexer", sparseIndexer},
          {"moe.router", router},
          {"moe.experts", experts},
          {"moe.latent", latent},
          {"moe.shared", sharedExperts},
          {"lm_head", lmHead},
          {"patch_embed", patchEmbed}};
}

FlopCount ModelFlops::sum() const {
  FlopCount all;
  for (const Part& part : parts()) all += part.flops;
  return all;
}

ModelFlops modelFlopsPerStep(const RunConfig& config) {
  const ModelDims dims = ModelDims::fromConfig(config);
  // The sparse stage: the step count at which the dense warm-up is over.
  const SparseAttentionDims sparse = mixerSparseDims(dims, config.sparse.warmupSteps);
  ModelFlops flops;
  flops.tokens = double(dims.tokens());
  if (dims.mixerPattern.empty()) return flops;
  for (int64_t layer = 0; layer < dims.numLayers; ++layer) {
    addMixer(dims.mixerOf(layer), dims, sparse, flops);
    addMoe(dims, flops);
  }
  const double n = double(dims.tokens()), d = double(dims.dModel);
  flops.lmHead = withFullBackward(2 * n * d * double(dims.vocabSize));
  const double patchRows = double(dims.batchSize * dims.imagePatches);
  const double patchForward = 2 * patchRows * double(dims.patchDim) * d;
  flops.patchEmbed = {patchForward, patchForward};  // weight gradient only: the input is data
  return flops;
}

}  // namespace moewb::engine
