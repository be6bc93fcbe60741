// The MoE FFN of one decoder layer as explicit stages, each its own function so the model can
// trace them as separate phases (router -> permute -> experts -> combine, then the shared
// experts; ENGINE-MATH §5). MoeOptions (model/moe/moe_options.h) selects the variant:
//   router:  logits = x Wr^T [N, E]; softmax or sigmoid top-k (bias, group limit, route scale);
//            Switch / sequence aux loss and z-loss values; the capacity mask (drops)
//   permute: dispatch plan (expert-major, stable, dropped pairs removed); with a latent
//            projection u = x Wdown^T [N, Dl]; gather of x (or u) rows       -> xPerm [R, Dx]
//            (skipped with permuteIntoExperts: the experts gather by index)
//   experts: grouped SwiGLU / SiTU-GLU per expert                          -> yPerm [R, Dx]
//            (with combineIntoExperts the rows come out multiplied by their weight)
//   combine: yc[t] = sum_j w[t, j] yPerm[row(t, j)] [N, Dx]; with a latent projection
//            y = RMSNorm_lat(yc) Wup^T [N, D], else y = yc
//   shared:  y += SharedFFN(x) (n_shared experts fused into one FFN, see dense_ffn.h)
// Dx = D, or Dl with a latent projection; R = kept (token, expert) pairs (N k when dropless).
// The router runs on the full-width x in every variant.
// The backward stages run in reverse (combine, experts, permute, router, shared; the shared
// stage is independent of the others) and pass their intermediate gradients through
// MoeBackwardState. moeFfnForward / moeFfnBackward chain all stages (used by tests and by any
// caller that does not trace). MoeSaved keeps a copy of the options of its forward, which the
// later stages and the backward use. Costs: dominated by the experts (6 R Dx F flops forward)
// and the shared experts (6 N D S Fs).
// Not thread-safe per instance; parallel inside through the pool; results do not depend on the
// thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/experts/experts.h"
#include "ops/dense_ffn/dense_ffn.h"
#include "model/moe/expert_bias.h"
#include "model/moe/moe_options.h"
#include "ops/permute/permute.h"
#include "ops/router/router.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct MoeWeights {
  const Tensor<T>& router;                // [E, D]
  const Tensor<T>& gate;                  // [E, F, Dx]
  const Tensor<T>& up;                    // [E, F, Dx]
  const Tensor<T>& down;                  // [E, Dx, F]
  const Tensor<T>* sharedGate = nullptr;  // [S Fs, D]   when options.numSharedExperts > 0
  const Tensor<T>* sharedUp = nullptr;    // [S Fs, D]
  const Tensor<T>* sharedDown = nullptr;  // [D, S Fs]
  const Tensor<T>* latentDown = nullptr;  // [Dl, D]     when options.latentDim > 0
  const Tensor<T>* latentUp = nullptr;    // [D, Dl]
  const Tensor<T>* latentNorm = nullptr;  // [Dl] RMSNorm gain
  const ExpertBias* bias = nullptr;       // aux-loss-free selection bias, or null (no bias)
};

template <typename T>
struct MoeGrads {
  Tensor<T>& router;                // [E, D], accumulated
  Tensor<T>& gate;                  // [E, F, Dx]
  Tensor<T>& up;                    // [E, F, Dx]
  Tensor<T>& down;                  // [E, Dx, F]
  Tensor<T>* sharedGate = nullptr;  // shapes as in MoeWeights; required when the part is used
  Tensor<T>* sharedUp = nullptr;
  Tensor<T>* sharedDown = nullptr;
  Tensor<T>* latentDown = nullptr;
  Tensor<T>* latentUp = nullptr;
  Tensor<T>* latentNorm = nullptr;
};

// Router losses and load statistics of one forward.
struct MoeLossStats {
  double loss = 0;               // added to the training loss: switchLoss + seqLoss + zLoss
  double switchLoss = 0;         // alpha E sum f P
  double seqLoss = 0;            // sequence-level aux loss
  double zLoss = 0;              // c mean lse^2
  std::vector<int64_t> counts;   // [E] assignments selected (before drops); sums to N k
  std::vector<int64_t> dropped;  // [E] assignments dropped by capacity (0s when dropless)
  int64_t capacity = -1;         // pairs per expert kept at most; -1 = dropless
};

// Activations the forward keeps for the backward.
template <typename T>
struct MoeSaved {
  MoeOptions options;       // the options of this forward
  Tensor<T> logits;         // [N, E] router logits
  RouterOutput<T> route;    // probs [N, E], scores [N, E] (sigmoid), topExpert / topWeight [N, k]
  MoeLossStats aux;         // losses, counts and drops
  AuxLossStats switchAux;   // fractions f_e for the Switch loss gradient
  SeqAuxLossStats seqAux;   // per-sequence fractions (when seqAuxLossCoef != 0)
  Tensor<uint8_t> keep;     // [N, k] capacity mask (empty when dropless)
  Dispatch plan;            // permuted order
  Tensor<T> latentIn;       // [N, Dl] u = x Wdown^T (latent only)
  Tensor<T> xPerm;          // [R, Dx] (empty with permuteIntoExperts)
  Tensor<T> rowWeight;      // [R] routing weight per row (combineIntoExperts only)
  ExpertsSaved<T> experts;  // [R, F] x3
  Tensor<T> yPerm;          // [R, Dx] unweighted expert outputs (released with combineIntoExperts)
  Tensor<T> latentPre;      // [N, Dl] combined latent output, the RMSNorm input
  Tensor<T> latentRstd;     // [N]
  Tensor<T> latentOut;      // [N, Dl] RMSNorm_lat output, the Wup input
  DenseFfnSaved<T> shared;  // [N, S Fs] x3 (shared experts only)
};

// Gradients handed from one backward stage to the next.
template <typename T>
struct MoeBackwardState {
  Tensor<T> dYPerm;      // [R, Dx]; with combineIntoExperts the un-permuted [N, Dx] dy
  Tensor<T> dTopWeight;  // [N, k] (0 for dropped pairs)
  Tensor<T> dXPerm;      // [R, Dx]
};

// Forward stages. x[N, D] is the layer's (normalised) input throughout.
template <typename T>
void moeRouterForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                      const MoeOptions& options, MoeSaved<T>& saved);
template <typename T>
void moePermuteForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                       MoeSaved<T>& saved);
template <typename T>
void moeExpertsForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                       MoeSaved<T>& saved);
// Returns y[N, D] of the routed experts.
template <typename T>
Tensor<T> moeCombineForward(ThreadPool& pool, const MoeWeights<T>& w, MoeSaved<T>& saved);
// y[N, D] += the shared experts of x; no-op without shared experts.
template <typename T>
void moeSharedForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                      MoeSaved<T>& saved, Tensor<T>& y /*[N, D]*/);

// Backward stages, in this order: combine, experts, permute, router; shared at any point.
template <typename T>
void moeCombineBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/, const MoeWeights<T>& w,
                        const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                        MoeBackwardState<T>& state);
template <typename T>
void moeExpertsBackward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                        const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                        MoeBackwardState<T>& state);
// Returns dx[N, D] of the expert path (the scatter-add of the kept row gradients, through Wdown
// with a latent projection).
template <typename T>
Tensor<T> moePermuteBackward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/,
                             const MoeWeights<T>& w, const MoeSaved<T>& saved,
                             const MoeGrads<T>& grads, const MoeBackwardState<T>& state);
// Adds the router path (selected weights and the router losses, through Wr) into dx[N, D] and dWr.
template <typename T>
void moeRouterBackward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/, const MoeWeights<T>& w,
                       const MoeOptions& options, const MoeSaved<T>& saved,
                       const MoeGrads<T>& grads, const MoeBackwardState<T>& state,
                       Tensor<T>& dx /*[N, D]*/);
// Adds the shared experts' input gradient into dx[N, D] and their weight gradients; no-op
// without shared experts.
template <typename T>
void moeSharedBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/, const Tensor<T>& x,
                       const MoeWeights<T>& w, const MoeSaved<T>& saved, const MoeGrads<T>& grads,
                       Tensor<T>& dx /*[N, D]*/);

// All forward stages; returns y[N, D].
template <typename T>
Tensor<T> moeFfnForward(ThreadPool& pool, const Tensor<T>& x, const MoeWeights<T>& w,
                        const MoeOptions& options, MoeSaved<T>& saved);
// All backward stages; returns dx[N, D] (of y and of the router losses, which are added to the
// training loss with weight 1) and accumulates the weight gradients.
template <typename T>
Tensor<T> moeFfnBackward(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& x,
                         const MoeWeights<T>& w, const MoeOptions& options,
                         const MoeSaved<T>& saved, const MoeGrads<T>& grads);

}  // namespace moewb::engine
