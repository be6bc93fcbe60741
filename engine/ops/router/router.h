// MoE router ("softmax, top-k after", ENGINE-MATH §5.1) and the Switch load-balancing aux loss
// (§5.2). The router logits z = x Wr^T are a plain linear (ops/linear); this op starts at z.
//   idx = topk(z) (descending, ties to the lower expert id),  w = softmax(z[idx]),
//   p = softmax(z) over all E experts (only for the aux loss).
// Backward of the weights (indices are constants): dz[idx_i] += w_i (dw_i - sum_j w_j dw_j).
// Aux loss: f_e = count_e / (k N) (a constant), P_e = mean_t p[t, e],
//   L_aux = alpha E sum_e f_e P_e;  dL/dp[t, e] = alpha E f_e / N, then through the softmax:
//   dz[t, e] += p[t, e] (dp[t, e] - sum_e' p[t, e'] dp[t, e']).
// Scores are computed in the tensor's precision (fp32 for float). Costs: O(N E log k) routing,
// O(N E) aux loss; rows run in parallel, the P_e sums run over tokens in order (in double).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/thread_pool.h"
#include "tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct RouterOutput {
  Tensor<T> probs;            // [N, E] softmax over all experts
  Tensor<int32_t> topExpert;  // [N, k] chosen expert ids, best first
  Tensor<T> topWeight;        // [N, k] softmax over the chosen logits (rows sum to 1)
};

struct AuxLossStats {
  double loss = 0;               // alpha * E * sum_e f_e P_e
  std::vector<int64_t> counts;   // [E] (token, expert) assignments per expert; sums to N k
  std::vector<double> fraction;  // [E] f_e = counts_e / (k N)
};

// Routes every token: top-k of each row of logits[N, E], then the weights and full softmax.
template <typename T>
RouterOutput<T> routerTopK(ThreadPool& pool, const Tensor<T>& logits /*[N, E]*/, int32_t topK);

// dLogits[N, E] += gradient of the selected weights, given dTopWeight[N, k].
template <typename T>
void routerTopKBackward(ThreadPool& pool, const RouterOutput<T>& route,
                        const Tensor<T>& dTopWeight /*[N, k]*/, Tensor<T>& dLogits /*[N, E]*/);

// Counts and the aux loss value for one layer; alpha = moe.aux_loss_coef.
template <typename T>
AuxLossStats auxLossForward(const RouterOutput<T>& route, double alpha);

// dLogits[N, E] += gradient of L_aux (times 1: the aux loss is added to the training loss).
template <typename T>
void auxLossBackward(ThreadPool& pool, const RouterOutput<T>& route, const AuxLossStats& stats,
                     double alpha, Tensor<T>& dLogits /*[N, E]*/);

}  // namespace moewb::engine
