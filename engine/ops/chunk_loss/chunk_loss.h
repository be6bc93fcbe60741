// Chunk Loss: the LM head linear fused with cross-entropy, chunked along tokens (ENGINE-MATH
// §6.1; the math, options and ignore-index rule are in linear_loss.h).
//
// chunkLossForward walks the tokens in chunks of Nc: for each chunk it materialises the logits
// z_c[Nc, V] (one reused buffer), computes lse, the per-token loss and dz_c in place, then
// dh_c = dz_c Wv and dWv_acc += dz_c^T h_c, so all gradients exist when the forward returns.
// chunkLossBackward only scales them by the upstream dLoss. Exact: no approximation.
// Peak extra memory: Nc*V (logits) + N*D (dh) + V*D (dWv buffer) elements, instead of the dense
// path's 2*N*V.
// Costs: 6 N V D flops (one GEMM each for z, dh, dWv) + O(N V) exp.
// Determinism: every GEMM is split into fixed tiles (a function of the sizes only), each output
// element has one task and one reduction order, chunks are accumulated in token order; results
// are identical for any thread count.
#pragma once

#include <cstdint>

#include "ops/chunk_loss/linear_loss.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct ChunkLossOptions {
  int64_t chunkTokens = 0;  // Nc, tokens per chunk; 0 = chunkLossAutoTokens(N, V, D)
  LinearLossOptions loss;
};

// Gradients produced by the forward for dLoss = 1; consumed by chunkLossBackward.
template <typename T>
struct ChunkLossSaved {
  Tensor<T> dh;   // [N, D]
  Tensor<T> dWv;  // [V, D]
};

// Liger-Kernel's heuristic Nc = nextPow2(ceil(N / ceil(V / D))), clamped to [min(64, N), N]
// (the lower clamp keeps CPU GEMMs reasonably sized). Returns >= 1 for N >= 1.
int64_t chunkLossAutoTokens(int64_t tokens, int64_t vocab, int64_t dModel);

// Returns the mean loss over valid tokens (linear_loss.h) and fills `saved`.
// h[N, D] final hidden, wv[V, D] LM head, targets[N] in [0, V) or options.loss.ignoreIndex.
// With no valid token the loss and all gradients are 0. Shapes are checked (abort on mismatch).
template <typename T>
LinearLossResult chunkLossForward(ThreadPool& pool, const Tensor<T>& h /*[N, D]*/,
                                  const Tensor<T>& wv /*[V, D]*/,
                                  const Tensor<int32_t>& targets /*[N]*/,
                                  const ChunkLossOptions& options, ChunkLossSaved<T>& saved);

// Returns dh[N, D] = dLoss * d(objective)/dh and adds dLoss * d(objective)/dWv into dWv[V, D].
// Consumes `saved` (empty afterwards). dLoss == 1 leaves the saved values bit-exact.
template <typename T>
Tensor<T> chunkLossBackward(ThreadPool& pool, ChunkLossSaved<T>& saved, double dLoss,
                            Tensor<T>& dWv /*[V, D]*/);

}  // namespace moewb::engine
