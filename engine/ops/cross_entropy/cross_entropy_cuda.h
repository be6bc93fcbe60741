// Dense softmax cross-entropy over LM-head logits on the GPU (ops/cross_entropy/cross_entropy.h):
//   lse_t = m_t + log sum_v exp(z[t, v] - m_t),  loss_t = lse_t - z[t, y_t],
//   L = (1/N_valid) sum_t loss_t,  dz[t, :] = (softmax(z_t) - onehot(y_t)) * dLoss / N_valid.
// Targets outside [0, V) are ignored (Batch's kIgnoreTarget is negative): loss_t = 0, zero
// gradient row, and they do not count in N_valid. (The CPU reference CHECKs targets < V.)
//
// Design: one block per row with an online (max, sum) in fp32 over the row, so the logits are
// read once forward and once backward; the mean is a single-block fixed-order reduction in double,
// and it and N_valid stay on the device (no host synchronisation; the backward reads N_valid from
// device memory). Deterministic. Logits may be bf16 or fp32.
// Costs: O(N V) reads forward; O(N V) reads + writes backward.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// From logits[n, vocab] and targets[n]: lse[n] (fp32), tokenLoss[n] (fp32, 0 for ignored rows),
// loss[0] = mean over valid targets (0 when none) and validCount[0] = number of valid targets.
// All outputs are device memory. Errors: launch errors.
Status crossEntropyForwardCuda(cudaStream_t stream, const bf16* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, float* lse, float* tokenLoss, float* loss,
                               int32_t* validCount);
Status crossEntropyForwardCuda(cudaStream_t stream, const float* logits, const int32_t* targets,
                               int64_t n, int64_t vocab, float* lse, float* tokenLoss, float* loss,
                               int32_t* validCount);

// dLogits[n, vocab] = (exp(z - lse) - onehot(y)) * dLoss / validCount[0] (zero rows for ignored
// targets, all zero when validCount is 0). dLogits may be the logits buffer itself (in place,
// bf16 overload). Errors: launch errors.
Status crossEntropyBackwardCuda(cudaStream_t stream, const bf16* logits, const int32_t* targets,
                                const float* lse, const int32_t* validCount, float dLoss, int64_t n,
                                int64_t vocab, bf16* dLogits);
Status crossEntropyBackwardCuda(cudaStream_t stream, const float* logits, const int32_t* targets,
                                const float* lse, const int32_t* validCount, float dLoss, int64_t n,
                                int64_t vocab, bf16* dLogits);

}  // namespace moewb::engine::cuda
