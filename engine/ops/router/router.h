// MoE router (ENGINE-MATH §5.1) and its balancing losses (§5.2). The router logits z = x Wr^T
// are a plain linear (ops/linear); this op starts at z [N, E].
//
// Score functions (RouterConfig::score):
//  - softmax, top-k after (Switch/Mixtral, the default): select on z (+ b), weights
//    w = routeScale * softmax(z[idx]); p = softmax(z) over all E (for the aux losses).
//  - sigmoid + normalise (DeepSeek-V3, Kimi K2/K3): s = sigmoid(z), select on s + b, weights
//    w = routeScale * s[idx] / (sum s[idx] + 1e-20); p = s / (sum_all s + 1e-20).
// b[E] is the aux-loss-free balancing bias (§5.3): it changes the selection only, never a weight
// or a gradient (added to the logits for the softmax router, to the scores for sigmoid).
// Group-limited selection (numGroups G > 1): experts form G contiguous groups of E/G; a group's
// score is the sum of its top-2 biased selection values (top-1 if E/G = 1); only the best
// topKGroups groups (ties to the lower group id) compete in the per-expert top-k.
// Top-k order: descending selection value, ties to the lower expert id.
//
// Backward of the weights (indices are constants):
//   softmax: dz[idx_i] += w_i (dw_i - sum_j w_j dw_j / routeScale)
//   sigmoid: ds_i = (routeScale / S)(dw_i - sum_j dw_j w_j / routeScale), dz_i += ds_i s_i (1-s_i)
// Losses (each returns its value; its backward adds dL/dz into dLogits with weight 1):
//   Switch aux:   f_e = count_e / (k N) (constant), P_e = mean_t p[t, e], L = alpha E sum f P.
//   Sequence aux: the same per sequence of seqLen tokens (N = S seqLen), averaged over sequences.
//   z-loss:       L = c mean_t lse_t(z)^2,  dz[t, e] = c (2/N) lse_t softmax(z_t)_e.
// The aux losses' gradient reaches z through p: for softmax dz = p (dp - sum p dp); for sigmoid
// ds = (dp - sum p dp) / (sum_all s + 1e-20), dz = ds s (1 - s).
// Scores are computed in the tensor's precision (fp32 for float); loss sums over tokens run in
// order in double. Costs: O(N E log k) routing, O(N E) per loss; rows run in parallel.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

enum class RouterScore { kSoftmax, kSigmoid };

struct RouterConfig {
  RouterScore score = RouterScore::kSoftmax;
  int32_t topK = 2;         // experts per token, 1 <= topK <= E
  double routeScale = 1.0;  // multiplies the selected weights
  int32_t numGroups = 1;    // G; 1 = no group limit; E % G == 0
  int32_t topKGroups = 1;   // groups kept when G > 1; topK <= topKGroups * E / G
};

template <typename T>
struct RouterOutput {
  Tensor<T> probs;            // [N, E] p over all experts (softmax, or s / sum s for sigmoid)
  Tensor<T> scores;           // [N, E] s = sigmoid(z) (sigmoid router only, else empty)
  Tensor<int32_t> topExpert;  // [N, k] chosen expert ids, best first
  Tensor<T> topWeight;        // [N, k] routing weights (rows sum to routeScale)
  RouterScore score = RouterScore::kSoftmax;
  double routeScale = 1.0;
};

struct AuxLossStats {
  double loss = 0;               // alpha * E * sum_e f_e P_e
  std::vector<int64_t> counts;   // [E] (token, expert) assignments per expert; sums to N k
  std::vector<double> fraction;  // [E] f_e = counts_e / (k N)
};

struct SeqAuxLossStats {
  double loss = 0;               // alpha E mean_s sum_e f_{s,e} P_{s,e}
  int64_t seqLen = 0;            // tokens per sequence
  std::vector<double> fraction;  // [S, E] row-major, f_{s,e} = count_{s,e} / (k seqLen)
};

// Routes every token of logits[N, E] with `config`. `bias` ([E], may be null) is the
// selection-only balancing bias. Errors (MOEWB_CHECK): topK, groups or bias size out of range.
template <typename T>
RouterOutput<T> routerForward(ThreadPool& pool, const Tensor<T>& logits /*[N, E]*/,
                              const RouterConfig& config, const std::vector<float>* bias = nullptr);

// The default router (softmax, top-k after, no bias, no groups, scale 1).
template <typename T>
RouterOutput<T> routerTopK(ThreadPool& pool, const Tensor<T>& logits /*[N, E]*/, int32_t topK);

// dLogits[N, E] += gradient of the selected weights, given dTopWeight[N, k]; either router.
template <typename T>
void routerTopKBackward(ThreadPool& pool, const RouterOutput<T>& route,
                        const Tensor<T>& dTopWeight /*[N, k]*/, Tensor<T>& dLogits /*[N, E]*/);

// Counts and the Switch aux loss value for one layer; alpha = moe.aux_loss_coef.
template <typename T>
AuxLossStats auxLossForward(const RouterOutput<T>& route, double alpha);

// dLogits[N, E] += gradient of L_aux (times 1: the aux loss is added to the training loss).
template <typename T>
void auxLossBackward(ThreadPool& pool, const RouterOutput<T>& route, const AuxLossStats& stats,
                     double alpha, Tensor<T>& dLogits /*[N, E]*/);

// Sequence-level aux loss; N must be a multiple of seqLen (> 0).
template <typename T>
SeqAuxLossStats seqAuxLossForward(const RouterOutput<T>& route, double alpha, int64_t seqLen);

// dLogits[N, E] += gradient of the sequence-level aux loss.
template <typename T>
void seqAuxLossBackward(ThreadPool& pool, const RouterOutput<T>& route,
                        const SeqAuxLossStats& stats, double alpha, Tensor<T>& dLogits /*[N, E]*/);

// Router z-loss value c * mean_t lse_t^2 over the rows of logits[N, E].
template <typename T>
double zLossForward(ThreadPool& pool, const Tensor<T>& logits /*[N, E]*/, double coef);

// dLogits[N, E] += gradient of the z-loss.
template <typename T>
void zLossBackward(ThreadPool& pool, const Tensor<T>& logits /*[N, E]*/, double coef,
                   Tensor<T>& dLogits /*[N, E]*/);

}  // namespace moewb::engine
