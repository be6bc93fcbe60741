// The KDA recurrence (ENGINE-MATH §2.2) token by token: the oracle for the chunked form. One task
// per (sequence, value head) holding its [K, V] state (see kda.h).
#include <cmath>
#include <vector>

#include "ops/kda/kda.h"

namespace moewb::engine {

template <typename T>
Tensor<T> kdaNaiveForward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                          const Tensor<T>& beta, const Tensor<T>& initialState,
                          Tensor<T>& finalState) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim, tLen = dims.seqLen;
  MOEWB_CHECK(hv % h == 0);
  MOEWB_CHECK(q.numel() == n * h * kd && k.numel() == n * h * kd);
  MOEWB_CHECK(v.numel() == n * hv * vd && g.numel() == n * hv * kd && beta.numel() == n * hv);
  MOEWB_CHECK(initialState.empty() || initialState.numel() == dims.batch * hv * kd * vd);
  Tensor<T> o({n, hv * vd});                         // [N, HV*V]
  finalState = Tensor<T>({dims.batch, hv, kd, vd});  // [B, HV, K, V]
  pool.parallelFor(dims.batch * hv, [&](int64_t task) {
    const int64_t b = task / hv, head = task % hv, qkHead = head / dims.groupSize();
    T* s = finalState.data() + task * kd * vd;  // [K, V], the running state
    if (!initialState.empty()) {
      const T* s0 = initialState.data() + task * kd * vd;
      for (int64_t i = 0; i < kd * vd; ++i) s[i] = s0[i];
    }
    std::vector<T> u(static_cast<size_t>(vd));  // [V] corrected value
    for (int64_t t = 0; t < tLen; ++t) {
      const int64_t row = b * tLen + t;
      const T* qt = q.data() + row * h * kd + qkHead * kd;  // [K]
      const T* kt = k.data() + row * h * kd + qkHead * kd;  // [K]
      const T* vt = v.data() + row * hv * vd + head * vd;   // [V]
      const T* gt = g.data() + row * hv * kd + head * kd;   // [K]
      const T bt = beta[row * hv + head];
      for (int64_t d = 0; d < kd; ++d) {
        const T decay = std::exp(gt[d]);
        for (int64_t j = 0; j < vd; ++j) s[d * vd + j] *= decay;
      }
      for (int64_t j = 0; j < vd; ++j) u[size_t(j)] = vt[j];
      for (int64_t d = 0; d < kd; ++d) {
        for (int64_t j = 0; j < vd; ++j) u[size_t(j)] -= kt[d] * s[d * vd + j];
      }
      for (int64_t d = 0; d < kd; ++d) {
        const T scaledKey = bt * kt[d];
        for (int64_t j = 0; j < vd; ++j) s[d * vd + j] += scaledKey * u[size_t(j)];
      }
      T* ot = o.data() + row * hv * vd + head * vd;  // [V]
      for (int64_t d = 0; d < kd; ++d) {
        for (int64_t j = 0; j < vd; ++j) ot[j] += qt[d] * s[d * vd + j];
      }
    }
  });
  return o;
}

#define MOEWB_INSTANTIATE_KDA_NAIVE(T)                                                        \
  template Tensor<T> kdaNaiveForward<T>(ThreadPool&, const KdaCoreDims&, const Tensor<T>&,    \
                                        const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                        const Tensor<T>&, const Tensor<T>&, Tensor<T>&);
MOEWB_INSTANTIATE_KDA_NAIVE(float)
MOEWB_INSTANTIATE_KDA_NAIVE(double)

}  // namespace moewb::engine
