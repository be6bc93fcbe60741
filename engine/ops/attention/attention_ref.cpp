// Reference causal attention: per-(sequence, head) GEMMs on strided head slices with a masked,
// max-subtracted row softmax in between (see attention.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/attention/attention.h"
#include "ops/linear/linear.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {
namespace {

// In place: rows of s [T, T] become causal softmax rows (zeros above the diagonal).
template <typename T>
void causalSoftmaxRows(T* s, int64_t seqLen) {
  for (int64_t t = 0; t < seqLen; ++t) {
    T* row = s + t * seqLen;
    T maxValue = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j <= t; ++j) maxValue = std::max(maxValue, row[j]);
    T sum = 0;
    for (int64_t j = 0; j <= t; ++j) {
      row[j] = std::exp(row[j] - maxValue);
      sum += row[j];
    }
    const T inv = T(1) / sum;
    for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
    for (int64_t j = t + 1; j < seqLen; ++j) row[j] = T(0);
  }
}

}  // namespace

template <typename T>
void attentionCoreForward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, Tensor<T>& probs,
                          Tensor<T>& context) {
  const int64_t tLen = dims.seqLen, heads = dims.numHeads, hd = dims.headDim, d = dims.dModel();
  const T scale = T(1) / std::sqrt(T(hd));
  probs = Tensor<T>({dims.batch, heads, tLen, tLen});  // [B, H, T, T]
  context = Tensor<T>({dims.tokens(), d});             // [N, D]
  pool.parallelFor(dims.batch * heads, [&](int64_t task) {
    const int64_t b = task / heads, h = task % heads;
    const int64_t offset = b * tLen * d + h * hd;
    T* p = probs.data() + task * tLen * tLen;  // [T, T]
    gemm<T>(false, true, tLen, tLen, hd, scale, q.data() + offset, d, k.data() + offset, d, T(0), p,
            tLen);
    causalSoftmaxRows(p, tLen);
    gemm<T>(false, false, tLen, hd, tLen, T(1), p, tLen, v.data() + offset, d, T(0),
            context.data() + offset, d);
  });
}

template <typename T>
void attentionCoreBackward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& dContext,
                           const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                           const Tensor<T>& probs, Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv) {
  const int64_t tLen = dims.seqLen, heads = dims.numHeads, hd = dims.headDim, d = dims.dModel();
  const T scale = T(1) / std::sqrt(T(hd));
  dq = Tensor<T>({dims.tokens(), d});  // [N, D]
  dk = Tensor<T>({dims.tokens(), d});  // [N, D]
  dv = Tensor<T>({dims.tokens(), d});  // [N, D]
  pool.parallelFor(dims.batch * heads, [&](int64_t task) {
    const int64_t b = task / heads, h = task % heads;
    const int64_t offset = b * tLen * d + h * hd;
    const T* p = probs.data() + task * tLen * tLen;  // [T, T]
    const T* dOut = dContext.data() + offset;        // [T, K] with stride D
    Tensor<T> dS({tLen, tLen});                      // [T, T] dP, then dS in place
    gemm<T>(false, true, tLen, tLen, hd, T(1), dOut, d, v.data() + offset, d, T(0), dS.data(),
            tLen);
    gemm<T>(true, false, tLen, hd, tLen, T(1), p, tLen, dOut, d, T(0), dv.data() + offset, d);
    for (int64_t t = 0; t < tLen; ++t) {
      const T* pr = p + t * tLen;
      T* dr = dS.row(t);
      T dot = 0;
      for (int64_t j = 0; j <= t; ++j) dot += pr[j] * dr[j];
      for (int64_t j = 0; j <= t; ++j) dr[j] = pr[j] * (dr[j] - dot);
      for (int64_t j = t + 1; j < tLen; ++j) dr[j] = T(0);
    }
    gemm<T>(false, false, tLen, hd, tLen, scale, dS.data(), tLen, k.data() + offset, d, T(0),
            dq.data() + offset, d);
    gemm<T>(true, false, tLen, hd, tLen, scale, dS.data(), tLen, q.data() + offset, d, T(0),
            dk.data() + offset, d);
  });
}

template <typename T>
Tensor<T> attentionForward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& x,
                           const AttentionWeights<T>& weights, AttentionSaved<T>& saved) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  MOEWB_CHECK(x.dim(0) == n && x.dim(1) == d);
  saved.q = Tensor<T>({n, d});
  saved.k = Tensor<T>({n, d});
  saved.v = Tensor<T>({n, d});
  linearForward(pool, x.data(), weights.wq.data(), saved.q.data(), n, d, d);
  linearForward(pool, x.data(), weights.wk.data(), saved.k.data(), n, d, d);
  linearForward(pool, x.data(), weights.wv.data(), saved.v.data(), n, d, d);
  attentionCoreForward(pool, dims, saved.q, saved.k, saved.v, saved.probs, saved.context);
  Tensor<T> y({n, d});  // [N, D]
  linearForward(pool, saved.context.data(), weights.wo.data(), y.data(), n, d, d);
  return y;
}

template <typename T>
Tensor<T> attentionBackward(ThreadPool& pool, const AttentionDims& dims, const Tensor<T>& dy,
                            const Tensor<T>& x, const AttentionWeights<T>& weights,
                            const AttentionSaved<T>& saved, const AttentionGrads<T>& grads) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  Tensor<T> dContext({n, d});  // [N, D]
  linearBackwardData(pool, dy.data(), weights.wo.data(), dContext.data(), n, d, d);
  linearBackwardWeight(pool, dy.data(), saved.context.data(), grads.wo.data(), n, d, d);
  Tensor<T> dq, dk, dv;  // [N, D] each
  attentionCoreBackward(pool, dims, dContext, saved.q, saved.k, saved.v, saved.probs, dq, dk, dv);
  Tensor<T> dx({n, d});  // [N, D]
  linearBackwardData(pool, dq.data(), weights.wq.data(), dx.data(), n, d, d, false);
  linearBackwardData(pool, dk.data(), weights.wk.data(), dx.data(), n, d, d, true);
  linearBackwardData(pool, dv.data(), weights.wv.data(), dx.data(), n, d, d, true);
  linearBackwardWeight(pool, dq.data(), x.data(), grads.wq.data(), n, d, d);
  linearBackwardWeight(pool, dk.data(), x.data(), grads.wk.data(), n, d, d);
  linearBackwardWeight(pool, dv.data(), x.data(), grads.wv.data(), n, d, d);
  return dx;
}

#define MOEWB_INSTANTIATE_ATTENTION(T)                                                          \
  template void attentionCoreForward<T>(ThreadPool&, const AttentionDims&, const Tensor<T>&,    \
                                        const Tensor<T>&, const Tensor<T>&, Tensor<T>&,         \
                                        Tensor<T>&);                                            \
  template void attentionCoreBackward<T>(ThreadPool&, const AttentionDims&, const Tensor<T>&,   \
                                         const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,  \
                                         const Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&); \
  template Tensor<T> attentionForward<T>(ThreadPool&, const AttentionDims&, const Tensor<T>&,   \
                                         const AttentionWeights<T>&, AttentionSaved<T>&);       \
  template Tensor<T> attentionBackward<T>(ThreadPool&, const AttentionDims&, const Tensor<T>&,  \
                                          const Tensor<T>&, const AttentionWeights<T>&,         \
                                          const AttentionSaved<T>&, const AttentionGrads<T>&);
MOEWB_INSTANTIATE_ATTENTION(float)
MOEWB_INSTANTIATE_ATTENTION(double)

}  // namespace moewb::engine
