// Reference sparse attention core with sink over a key selection, forward and backward, and
// the indexer's target distribution (see sparse_attention.h, ENGINE-MATH §3.3-3.5).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/sparse_attention/lane_dot.h"
#include "ops/sparse_attention/selection.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 16;  // query or key tokens per task

// One query token, one head: probabilities of the `count` selected keys and the sink, and the
// output o = sum_s p v. Max-subtracted, the sink logit included in the max.
template <typename T>
void attendRow(const T* qh, const T* kBase, const T* vBase, int64_t kvStride, const int32_t* sel,
               int64_t count, int64_t hd, T scale, T sinkLogit, T* p, T& sinkProb, T* o) {
  T maxValue = sinkLogit;
  for (int64_t slot = 0; slot < count; ++slot) {
    p[slot] = scale * laneDot(qh, kBase + sel[slot] * kvStride, hd);
    maxValue = std::max(maxValue, p[slot]);
  }
  T sum = 0;
  for (int64_t slot = 0; slot < count; ++slot) {
    p[slot] = std::exp(p[slot] - maxValue);
    sum += p[slot];
  }
  const T sinkWeight = std::exp(sinkLogit - maxValue);
  const T inv = T(1) / (sum + sinkWeight);
  sinkProb = sinkWeight * inv;
  for (int64_t i = 0; i < hd; ++i) o[i] = T(0);
  for (int64_t slot = 0; slot < count; ++slot) {
    p[slot] *= inv;
    const T* vRow = vBase + sel[slot] * kvStride;
    for (int64_t i = 0; i < hd; ++i) o[i] += p[slot] * vRow[i];
  }
}

// Phase 1 of the backward, per query token and head: dz [N, H, W], dq [N, H*dh] and the
// per-token sink terms -p_sink * delta in sinkTerms [N, H].
template <typename T>
void coreQueryGrads(ThreadPool& pool, const SparseAttentionDims& dims, const Tensor<T>& dContext,
                    const SparseAttentionSaved<T>& saved, Tensor<T>& dz, Tensor<T>& dq,
                    Tensor<T>& sinkTerms) {
  const int64_t heads = dims.numHeads, hd = dims.headDim, width = saved.selected.dim(1);
  const int64_t kvw = dims.kvWidth(), group = heads / dims.kvHeads;
  const T scale = T(1) / std::sqrt(T(hd));
  pool.parallelForRange(dims.tokens(), kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int32_t* sel = saved.selected.row(n);
      const int64_t count = selectedCount(sel, width), base = n - n % dims.seqLen;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvOffset = (h / group) * hd;
        const T* dOut = dContext.row(n) + h * hd;
        const T delta = laneDot(dOut, saved.context.row(n) + h * hd, hd);
        const T* p = saved.probs.data() + (n * heads + h) * width;
        T* dzRow = dz.data() + (n * heads + h) * width;
        T* dqh = dq.row(n) + h * hd;
        for (int64_t slot = 0; slot < count; ++slot) {
          const int64_t key = base + sel[slot];
          const T dp = laneDot(dOut, saved.v.data() + key * kvw + kvOffset, hd);
          dzRow[slot] = p[slot] * (dp - delta);
          const T* kRow = saved.k.data() + key * kvw + kvOffset;
          for (int64_t i = 0; i < hd; ++i) dqh[i] += scale * dzRow[slot] * kRow[i];
        }
        sinkTerms.at(n, h) = -saved.sinkProbs.at(n, h) * delta;
      }
    }
  });
}

// Phase 2, per key token m: dk[m] = scale sum dz q, dv[m] = sum p do over the (query, slot)
// pairs that selected m (query order), each kv head summing its group of query heads.
template <typename T>
void coreKeyGrads(ThreadPool& pool, const SparseAttentionDims& dims, const Tensor<T>& dContext,
                  const SparseAttentionSaved<T>& saved, const Tensor<T>& dz, Tensor<T>& dk,
                  Tensor<T>& dv) {
  const int64_t heads = dims.numHeads, hd = dims.headDim, width = saved.selected.dim(1);
  const int64_t group = heads / dims.kvHeads;
  const T scale = T(1) / std::sqrt(T(hd));
  const SelectionTranspose byKey = transposeSelection(saved.selected, dims.seqLen);
  pool.parallelForRange(dims.tokens(), kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      for (int64_t e = byKey.keyStart[size_t(m)]; e < byKey.keyStart[size_t(m + 1)]; ++e) {
        const int64_t entry = byKey.entries[size_t(e)];
        const int64_t n = entry / width, slot = entry % width;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t row = (n * heads + h) * width + slot;
          const T dzValue = scale * dz[row], pValue = saved.probs[row];
          const T* qh = saved.q.row(n) + h * hd;
          const T* dOut = dContext.row(n) + h * hd;
          T* dkRow = dk.row(m) + (h / group) * hd;
          T* dvRow = dv.row(m) + (h / group) * hd;
          for (int64_t i = 0; i < hd; ++i) {
            dkRow[i] += dzValue * qh[i];
            dvRow[i] += pValue * dOut[i];
          }
        }
      }
    }
  });
}

}  // namespace

template <typename T>
void sparseAttentionCoreForward(ThreadPool& pool, const SparseAttentionDims& dims,
                                const Tensor<T>& q, const Tensor<T>& k, const Tensor<T>& v,
                                const Tensor<T>& sink, const Tensor<int32_t>& selected,
                                Tensor<T>& probs, Tensor<T>& sinkProbs, Tensor<T>& context) {
  const int64_t n = dims.tokens(), heads = dims.numHeads, hd = dims.headDim;
  const int64_t qw = dims.qWidth(), kvw = dims.kvWidth(), width = selected.dim(1);
  MOEWB_CHECK(heads % dims.kvHeads == 0 && sink.numel() == heads && selected.dim(0) == n);
  MOEWB_CHECK(q.dim(0) == n && q.dim(1) == qw && k.dim(1) == kvw && v.dim(1) == kvw);
  const int64_t group = heads / dims.kvHeads;
  const T scale = T(1) / std::sqrt(T(hd));
  probs = Tensor<T>({n, heads, width});  // [N, H, W]
  sinkProbs = Tensor<T>({n, heads});     // [N, H]
  context = Tensor<T>({n, qw});          // [N, H*dh]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int32_t* sel = selected.row(r);
      const int64_t count = selectedCount(sel, width), base = r - r % dims.seqLen;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t kvOffset = base * kvw + (h / group) * hd;
        attendRow(q.row(r) + h * hd, k.data() + kvOffset, v.data() + kvOffset, kvw, sel, count, hd,
                  scale, sink[h], probs.data() + (r * heads + h) * width, sinkProbs.at(r, h),
                  context.row(r) + h * hd);
      }
    }
  });
}

template <typename T>
void sparseAttentionCoreBackward(ThreadPool& pool, const SparseAttentionDims& dims,
                                 const Tensor<T>& dContext, const SparseAttentionSaved<T>& saved,
                                 Tensor<T>& dq, Tensor<T>& dk, Tensor<T>& dv, Tensor<T>& dSink) {
  const int64_t n = dims.tokens(), heads = dims.numHeads, width = saved.selected.dim(1);
  dq = Tensor<T>({n, dims.qWidth()});   // [N, H*dh]
  dk = Tensor<T>({n, dims.kvWidth()});  // [N, Hkv*dh]
  dv = Tensor<T>({n, dims.kvWidth()});  // [N, Hkv*dh]
  Tensor<T> dz({n, heads, width});      // [N, H, W]
  Tensor<T> sinkTerms({n, heads});      // [N, H]
  coreQueryGrads(pool, dims, dContext, saved, dz, dq, sinkTerms);
  coreKeyGrads(pool, dims, dContext, saved, dz, dk, dv);
  for (int64_t h = 0; h < heads; ++h) {
    T sum = 0;
    for (int64_t r = 0; r < n; ++r) sum += sinkTerms.at(r, h);
    dSink[h] += sum;
  }
}

template <typename T>
Tensor<T> indexerTargetFromProbs(ThreadPool& pool, const Tensor<T>& probs,
                                 const Tensor<int32_t>& selected) {
  const int64_t n = probs.dim(0), heads = probs.dim(1), width = probs.dim(2);
  Tensor<T> target({n, width});  // [N, W]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t count = selectedCount(selected.row(r), width);
      T* out = target.row(r);
      for (int64_t h = 0; h < heads; ++h) {
        const T* p = probs.data() + (r * heads + h) * width;
        for (int64_t slot = 0; slot < count; ++slot) out[slot] += p[slot];
      }
      T sum = 0;
      for (int64_t slot = 0; slot < count; ++slot) sum += out[slot];
      const T inv = T(1) / sum;
      for (int64_t slot = 0; slot < count; ++slot) out[slot] *= inv;
    }
  });
  return target;
}

#define MOEWB_INSTANTIATE_SPARSE_CORE(T)                                                         \
  template void sparseAttentionCoreForward<T>(                                                   \
      ThreadPool&, const SparseAttentionDims&, const Tensor<T>&, const Tensor<T>&,               \
      const Tensor<T>&, const Tensor<T>&, const Tensor<int32_t>&, Tensor<T>&, Tensor<T>&,        \
      Tensor<T>&);                                                                               \
  template void sparseAttentionCoreBackward<T>(ThreadPool&, const SparseAttentionDims&,          \
                                               const Tensor<T>&, const SparseAttentionSaved<T>&, \
                                               Tensor<T>&, Tensor<T>&, Tensor<T>&, Tensor<T>&);  \
  template Tensor<T> indexerTargetFromProbs<T>(ThreadPool&, const Tensor<T>&,                    \
                                               const Tensor<int32_t>&);
MOEWB_INSTANTIATE_SPARSE_CORE(float)
MOEWB_INSTANTIATE_SPARSE_CORE(double)

}  // namespace moewb::engine
