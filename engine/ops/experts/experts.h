// Grouped GLU experts over a permuted token matrix (ENGINE-MATH §5.8, §5.9): expert e owns the
// contiguous permuted rows offsets[e] .. offsets[e+1]-1 (possibly none) and computes
//   g = x Wg_e^T,  u = x Wu_e^T,  h = a(g) ⊙ c(u),  y = h Wd_e^T
// with the activation of ops/experts/glu_activation.h (SwiGLU by default, or SiTU-GLU).
// Backward: dh = dy Wd_e, (dg, du) = glu backward, dx = dg Wg_e + du Wu_e, dWd_e += dy^T h,
// dWg_e += dg^T x, dWu_e += du^T x; empty experts get no weight gradient.
//
// Two optional fusions (ExpertsIo), each removing one [R, D] pass over memory, results equal to
// the unfused stages:
//  - gatherIndex (permute folded into the input side): x is the un-permuted [N, D] matrix and
//    permuted row r reads x[gatherIndex[r]] through a per-tile gather, so no xPerm is built or
//    kept. Bitwise identical to permute + unfused experts.
//  - rowWeight + outputIndex (combine folded into the output side): output row r is multiplied
//    by rowWeight[r] in the tile epilogue (the same product as the unfused combine), so the
//    combine is a plain sum and the unweighted yPerm [R, D] is not kept. The backward reads the
//    token gradient dy [N, D] through outputIndex (no gathered dYPerm), forms w_r dy_r (the
//    unfused dYPerm) itself, and recomputes each tile's unweighted rows h Wd^T (one extra
//    2 R D F GEMM) for the routing-weight gradient dw_r = <dy_r, yPerm_r>. Bitwise identical to
//    the unfused combine + experts.
// Work is split into fixed tasks: (expert, 64-row tile) for activations and input gradients,
// (expert, 16-row tile of a weight) for weight gradients, so results do not depend on the thread
// count. Costs: 6 R D F flops forward, 12 R D F backward (R = permuted rows).
#pragma once

#include "ops/experts/glu_activation.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct ExpertWeights {
  const Tensor<T>& gate;  // [E, F, D]
  const Tensor<T>& up;    // [E, F, D]
  const Tensor<T>& down;  // [E, D, F]
};

template <typename T>
struct ExpertGrads {
  Tensor<T>& gate;  // [E, F, D], accumulated
  Tensor<T>& up;    // [E, F, D]
  Tensor<T>& down;  // [E, D, F]
};

template <typename T>
struct ExpertsSaved {
  Tensor<T> gatePre;  // [R, F] g
  Tensor<T> upPre;    // [R, F] u
  Tensor<T> hidden;   // [R, F] h = a(g) * c(u)
};

// How the grouped experts read their input rows and write their output rows (see file comment).
template <typename T>
struct ExpertsIo {
  const Tensor<int32_t>* gatherIndex = nullptr;  // [R] x row read by permuted row r, or null
  const Tensor<T>* rowWeight = nullptr;          // [R] weight applied to output row r, or null
  const Tensor<int32_t>* outputIndex = nullptr;  // [R] token of row r (required with rowWeight)
};

// Returns yPerm[R, D] (times rowWeight when set); `offsets` is the dispatch plan's [E + 1] row
// offsets, R = offsets[E]. x is [R, D], or [N, D] with io.gatherIndex.
template <typename T>
Tensor<T> expertsForward(ThreadPool& pool, const Tensor<T>& x /*[R or N, D]*/,
                         const Tensor<int32_t>& offsets /*[E + 1]*/,
                         const ExpertWeights<T>& weights, ExpertsSaved<T>& saved,
                         const GluParams& activation = {}, const ExpertsIo<T>& io = {});

// Returns dXPerm[R, D] (per permuted row; the permute backward scatter-adds it) and adds the
// weight gradients into `grads`. dY is dYPerm [R, D], the gradient of the forward's output rows;
// with io.rowWeight it is instead the token gradient [N, D] of the weighted rows' sum, read
// through io.outputIndex, and dRowWeight[R] (required then) receives each row weight's gradient.
template <typename T>
Tensor<T> expertsBackward(ThreadPool& pool, const Tensor<T>& dY /*[R or N, D]*/,
                          const Tensor<T>& x /*[R or N, D]*/, const Tensor<int32_t>& offsets,
                          const ExpertWeights<T>& weights, const ExpertsSaved<T>& saved,
                          const ExpertGrads<T>& grads, const GluParams& activation = {},
                          const ExpertsIo<T>& io = {}, Tensor<T>* dRowWeight = nullptr /*[R]*/);

}  // namespace moewb::engine
