// Dense GLU FFN on every token: the shared experts of an MoE layer (ENGINE-MATH §5.6), on the
// full-width input x:
//   y += ( a(x Wg^T) ⊙ c(x Wu^T) ) Wd^T       (activation from ops/experts/glu_activation.h)
// n_shared shared experts of width F_s are stored as ONE fused FFN of width n_shared * F_s
// (Wg, Wu [n_shared F_s, D], Wd [D, n_shared F_s]): since the hidden units of different experts
// never mix, sum_j FFN_j(x) equals the fused FFN whose hidden vector is the concatenation
// [h_1; ...; h_n] (expert j owns hidden rows j F_s .. (j+1) F_s - 1 of Wg / Wu and columns of
// Wd), which is also how the K3 ports store their 2 shared experts.
// Backward: dh = dy Wd, (dg, du) = glu backward, dx += dg Wg + du Wu, dWd += dy^T h,
// dWg += dg^T x, dWu += du^T x. GEMMs go through ops/linear's fixed tiles, so results do not
// depend on the thread count. Costs: 6 N D F flops forward, 12 N D F backward.
#pragma once

#include "ops/experts/glu_activation.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct DenseFfnWeights {
  const Tensor<T>& gate;  // [F, D]
  const Tensor<T>& up;    // [F, D]
  const Tensor<T>& down;  // [D, F]
};

template <typename T>
struct DenseFfnGrads {
  Tensor<T>& gate;  // [F, D], accumulated
  Tensor<T>& up;    // [F, D]
  Tensor<T>& down;  // [D, F]
};

template <typename T>
struct DenseFfnSaved {
  Tensor<T> gatePre;  // [N, F] g
  Tensor<T> upPre;    // [N, F] u
  Tensor<T> hidden;   // [N, F] h
};

// y[N, D] += FFN(x[N, D]); keeps g, u, h in `saved`.
template <typename T>
void denseFfnForward(ThreadPool& pool, const Tensor<T>& x /*[N, D]*/,
                     const DenseFfnWeights<T>& weights, const GluParams& activation,
                     DenseFfnSaved<T>& saved, Tensor<T>& y /*[N, D]*/);

// dx[N, D] += the input gradient of FFN given dy[N, D]; adds the weight gradients into `grads`.
template <typename T>
void denseFfnBackward(ThreadPool& pool, const Tensor<T>& dy /*[N, D]*/,
                      const Tensor<T>& x /*[N, D]*/, const DenseFfnWeights<T>& weights,
                      const GluParams& activation, const DenseFfnSaved<T>& saved,
                      const DenseFfnGrads<T>& grads, Tensor<T>& dx /*[N, D]*/);

}  // namespace moewb::engine
