// CCE (Cut Cross-Entropy): the LM head linear fused with cross-entropy, tiled along the vocabulary
// so that the full logits [N, V] never exist (ENGINE-MATH §6.2; math, options and ignore-index
// rule in ops/chunk_loss/linear_loss.h).
//
// Forward: per token block (Tb tokens) a task walks the vocabulary in blocks of Vb, computes the
// tile z = h_tile Wv_tile^T [Tb, Vb] in a small scratch buffer and folds it into a running
// log-sum-exp (online: m' = max(m, max z), s' = s exp(m - m') + sum exp(z - m')). The target
// logit comes from an indexed dot h_t . Wv[y_t]. Only lse[N] is saved.
// Backward: for each group of tokens (groupTokens, whole token blocks) and each vocab block in
// order, (1) in parallel over the group's token blocks, recompute the tile, turn it into
// G = dz (linear_loss.h) in a [group, Vb] strip and add dh_tile += G Wv_tile; (2) in parallel
// over rows of the vocab block, dWv_block += G^T h_group.
// Gradient filtering: a tile whose every |dz / g_t| is below eps (targets are never below: their
// entry is p - 1) adds nothing to dh; with filterWeightGrad it adds nothing to dWv either.
// Memory beyond inputs and outputs: lse[N], per-task scratch Tb*Vb (forward), the strip
// min(N, groupTokens)*Vb (backward): << N*V whenever Vb << V or groupTokens << N.
// Costs: forward 2 N V D flops; backward 6 N V D (recompute, dh, dWv) minus skipped tiles.
// Determinism: each dh row belongs to one task and is accumulated over vocab blocks in order;
// each dWv row belongs to one task per step and is accumulated over token groups in order (one
// GEMM per group, or its unfiltered token blocks in order); results are identical for any thread
// count. No atomics.
#pragma once

#include <cstdint>

#include "ops/chunk_loss/linear_loss.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// filterEps value meaning "numeric_limits<T>::epsilon() / 32" (2^-28 for float), as CCE's "auto".
inline constexpr double kCceFilterAuto = -1;

struct CceOptions {
  int64_t tokenBlock = 64;            // Tb, tokens per tile (> 0)
  int64_t vocabBlock = 256;           // Vb, vocabulary entries per tile (> 0)
  double filterEps = kCceFilterAuto;  // skip threshold on |dz / g_t|; 0 = no filtering
  bool filterWeightGrad = false;      // also filter dWv (false keeps dWv exact, recommended)
  int64_t groupTokens = 1024;         // backward strip rows (rounded down to whole token blocks)
  LinearLossOptions loss;
};

// What the forward keeps for the backward.
template <typename T>
struct CceSaved {
  Tensor<T> lse;            // [N] log-sum-exp of the (capped) logits
  int64_t validTokens = 0;  // N_valid of the forward
};

// Tile counts of one backward (for tests and tuning).
struct CceStats {
  int64_t tiles = 0;         // (token block, vocab block) tiles visited
  int64_t skippedTiles = 0;  // tiles whose contribution the filter dropped
};

// The filter threshold for T: options.filterEps, or epsilon<T>/32 for kCceFilterAuto.
template <typename T>
double cceFilterThreshold(const CceOptions& options);

// Returns the mean loss over valid tokens (linear_loss.h) and fills `saved`.
// h[N, D] final hidden, wv[V, D] LM head, targets[N] in [0, V) or options.loss.ignoreIndex.
// With no valid token the loss is 0. Shapes and block sizes are checked (abort on mismatch).
template <typename T>
LinearLossResult cceForward(ThreadPool& pool, const Tensor<T>& h /*[N, D]*/,
                            const Tensor<T>& wv /*[V, D]*/, const Tensor<int32_t>& targets /*[N]*/,
                            const CceOptions& options, CceSaved<T>& saved);

// Returns dh[N, D] = dLoss * d(objective)/dh and adds dLoss * d(objective)/dWv into dWv[V, D].
// h, wv, targets and options must be those of the forward that filled `saved`. `stats` may be
// null.
template <typename T>
Tensor<T> cceBackward(ThreadPool& pool, const Tensor<T>& h /*[N, D]*/,
                      const Tensor<T>& wv /*[V, D]*/, const Tensor<int32_t>& targets /*[N]*/,
                      const CceOptions& options, const CceSaved<T>& saved, double dLoss,
                      Tensor<T>& dWv /*[V, D]*/, CceStats* stats = nullptr);

}  // namespace moewb::engine
