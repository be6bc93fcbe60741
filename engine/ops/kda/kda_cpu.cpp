// Chunked WY / UT form of KDA (ENGINE-MATH §2.3) and its backward (§2.5); see kda.h for the
// contract, the sub-block scheme and costs. Each task copies one chunk of its head into
// contiguous [c, K] / [c, V] buffers; diagonal sub-blocks of the pairwise matrices and of M are
// done element by element, everything else with the GEMM wrapper, restricted to the triangles
// that can be nonzero. Scratch comes from a per-thread buffer reused across tasks and calls
// (about C (25 K + 5 V + 9 C) elements, not counted in TensorMemory); every buffer is written
// before it is read.
#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "ops/kda/kda.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {
namespace {

constexpr int64_t kSub = kKdaSubBlock;

// sum_d x[d] y[d] with four interleaved partial sums (a fixed order, vectorisable).
template <typename T>
T dotN(const T* x, const T* y, int64_t n) {
  T acc[4] = {T(0), T(0), T(0), T(0)};
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    for (int64_t l = 0; l < 4; ++l) acc[l] += x[d + l] * y[d + l];
  }
  T sum = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; d < n; ++d) sum += x[d] * y[d];
  return sum;
}

// out[d] = prev[d] * a[d], flushed to zero below kdaDecayFlush; returns whether any is nonzero.
template <typename T>
bool decayProduct(T* out, const T* prev, const T* a, int64_t n) {
  const T flush = kdaDecayFlush<T>();
  int alive = 0;
  for (int64_t d = 0; d < n; ++d) {
    const T product = prev[d] * a[d];
    out[d] = product < flush ? T(0) : product;
    alive |= int(out[d] != T(0));
  }
  return alive != 0;
}

// Triangle-aware products of a lower-triangular L [c, c] (leading dimension ldl) with a dense
// matrix, by sub-blocks so that the zero triangle is skipped. C = alpha op + beta C.
// C[c, n] = L B with B [c, n].
template <typename T>
void lowerTimes(int64_t c, const T* l, int64_t ldl, const T* b, int64_t ldb, int64_t n, T alpha,
                T beta, T* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c);
    gemm<T>(false, false, r1 - r0, n, r1, alpha, l + r0 * ldl, ldl, b, ldb, beta, out + r0 * ldo,
            ldo);
  }
}

// C[c, n] = L^T B with B [c, n].
template <typename T>
void lowerTransTimes(int64_t c, const T* l, int64_t ldl, const T* b, int64_t ldb, int64_t n,
                     T alpha, T beta, T* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c);
    gemm<T>(true, false, r1 - r0, n, c - r0, alpha, l + r0 * ldl + r0, ldl, b + r0 * ldb, ldb, beta,
            out + r0 * ldo, ldo);
  }
}

// C[m, c] = A L with A [m, c].
template <typename T>
void timesLower(int64_t m, const T* a, int64_t lda, int64_t c, const T* l, int64_t ldl, T alpha,
                T beta, T* out, int64_t ldo) {
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c);
    gemm<T>(false, false, m, r1 - r0, c - r0, alpha, a + r0, lda, l + r0 * ldl + r0, ldl, beta,
            out + r0, ldo);
  }
}

// A per-thread scratch buffer that is reused across tasks and calls, so that the per-task
// scratch costs no allocation (and no page faults) after the first call on a thread. A nested
// user on the same thread (a task that itself runs a KDA op inline) gets a private allocation.
// Contents are never read before being written, so reuse cannot leak into results.
template <typename T>
class ThreadScratch {
 public:
  explicit ThreadScratch(int64_t size) {
    Slot& slot = threadSlot();
    if (!slot.busy) {
      slot.busy = true;
      m_slot = &slot;
      if (slot.buffer.size() < size_t(size)) slot.buffer.resize(size_t(size));
      m_data = slot.buffer.data();
    } else {
      m_own.reset(new T[size_t(size)]);
      m_data = m_own.get();
    }
  }
  ~ThreadScratch() {
    if (m_slot != nullptr) m_slot->busy = false;
  }
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  T* data() const { return m_data; }

 private:
  struct Slot {
    std::vector<T> buffer;
    bool busy = false;
  };
  static Slot& threadSlot() {
    thread_local Slot slot;
    return slot;
  }
  Slot* m_slot = nullptr;
  std::unique_ptr<T[]> m_own;
  T* m_data = nullptr;
};

// Per-task scratch for one chunk (c <= C rows). [C, C] matrices use leading dimension C. Carved
// out of one ThreadScratch; the functions below write each buffer before reading it.
template <typename T>
struct ChunkWork {
  ChunkWork(int64_t chunk, int64_t keyDim, int64_t valueDim)
      : cMax(chunk), kd(keyDim), vd(valueDim), storage(scratchSize(chunk, keyDim, valueDim)) {
    const int64_t ck = chunk * keyDim, cv = chunk * valueDim, cc = chunk * chunk;
    const std::pair<T**, int64_t> layout[] = {{&q, ck},          {&k, ck},
                                              {&a, ck},          {&eG, ck},
                                              {&eR, ck},         {&qg, ck},
                                              {&kg, ck},         {&kDec, ck},
                                              {&bk, ck},         {&fRel, ck},
                                              {&qf, ck},         {&bkf, ck},
                                              {&kh, ck},         {&hRel, ck},
                                              {&w, ck},          {&dqg, ck},
                                              {&dkd, ck},        {&dW, ck},
                                              {&dKg, ck},        {&dG, ck},
                                              {&daQ, ck},        {&daL, ck},
                                              {&dB, ck},         {&tmpA, ck},
                                              {&tmpB, ck},       {&v, cv},
                                              {&u, cv},          {&vn, cv},
                                              {&dO, cv},         {&dvn, cv},
                                              {&l, cc},          {&tm, cc},
                                              {&x, cc},          {&aqkOwn, cc},
                                              {&mOwn, cc},       {&dAqk, cc},
                                              {&dT, cc},         {&dM, cc},
                                              {&dL, cc},         {&beta, chunk},
                                              {&dbeta, chunk},   {&e, keyDim},
                                              {&z, keyDim},      {&eGC, keyDim},
                                              {&dGLast, keyDim}, {&dSPrev, keyDim * valueDim}};
    int64_t offset = 0;
    for (const auto& [ptr, size] : layout) {
      *ptr = storage.data() + offset;
      offset += size;
    }
    MOEWB_CHECK(offset == scratchSize(chunk, keyDim, valueDim));
  }
  // Elements of scratch a chunk of C rows needs.
  static int64_t scratchSize(int64_t chunk, int64_t keyDim, int64_t valueDim) {
    return chunk * (25 * keyDim + 5 * valueDim + 9 * chunk + 2) + 4 * keyDim + keyDim * valueDim;
  }
  int64_t cMax, kd, vd;
  int64_t c = 0;  // rows of the current chunk
  ThreadScratch<T> storage;
  // Chunk inputs and decays ([c, K] unless noted).
  T *q, *k, *v, *beta;     // v [c, V], beta [c]
  T *a, *eG, *eR;          // exp(g_i), exp(G_i), exp(G_c - G_i)
  T* eGC;                  // [K] exp(G_c)
  T *qg, *kg, *kDec, *bk;  // q e^G, k e^G, k e^{G_c - G}, beta k
  T* fRel;                 // exp(G_i - G_r), r = first row of i's sub-block
  T *qf, *bkf;             // q ⊙ fRel, bk ⊙ fRel for the rows of one sub-block
  T *hRel, *kh;            // exp(G_r - G_j) and k ⊙ it for the rows j < r of one sub-block
  // Forward matrices.
  T *l, *tm, *x;     // [c, C]: L, M Diag(beta), GEMM scratch
  T *aqkOwn, *mOwn;  // [c, C]: Aqk, M when the caller keeps no saved copy
  T *w, *u, *vn;     // [c, K], [c, V], [c, V]
  T *e, *z;          // [K] running decay product, k_j ⊙ e
  // Backward.
  T *dO, *dvn;                                                  // [c, V]
  T *dAqk, *dT, *dM, *dL;                                       // [c, C]
  T *dqg, *dkd, *dW, *dKg, *dG, *daQ, *daL, *dB, *tmpA, *tmpB;  // [c, K]
  T* dbeta;                                                     // [c]
  T* dGLast;                                                    // [K]
  T* dSPrev;                                                    // [K, V]
};

// Where the rows of one chunk of (b, value head) live in the [N, ...] inputs.
struct ChunkPos {
  int64_t row0;    // first token row
  int64_t c;       // rows in this chunk
  int64_t head;    // value head
  int64_t qkHead;  // q/k head
};

ChunkPos chunkPos(const KdaCoreDims& dims, int64_t b, int64_t head, int64_t chunkIdx) {
  const int64_t start = chunkIdx * dims.chunk;
  return {b * dims.seqLen + start, std::min(dims.chunk, dims.seqLen - start), head,
          head / dims.groupSize()};
}

// Offset of chunk `chunkIdx` of head task `task` in the saved [B*HV, NC*C, C] tensors.
int64_t savedOffset(const KdaCoreDims& dims, int64_t task, int64_t chunkIdx) {
  return (task * dims.numChunks() + chunkIdx) * dims.chunk * dims.chunk;
}

template <typename T>
void loadChunk(const KdaCoreDims& dims, const ChunkPos& p, const Tensor<T>& q, const Tensor<T>& k,
               const Tensor<T>& v, const Tensor<T>& g, const Tensor<T>& beta, ChunkWork<T>& wk) {
  const int64_t kd = dims.keyDim, vd = dims.valueDim, h = dims.numHeads, hv = dims.valueHeads();
  wk.c = p.c;
  for (int64_t i = 0; i < p.c; ++i) {
    const int64_t row = p.row0 + i;
    const T* qs = q.data() + row * h * kd + p.qkHead * kd;
    const T* ks = k.data() + row * h * kd + p.qkHead * kd;
    const T* gs = g.data() + row * hv * kd + p.head * kd;
    const T* vs = v.data() + row * hv * vd + p.head * vd;
    for (int64_t d = 0; d < kd; ++d) {  // short rows: a loop beats a memcpy call
      wk.q[i * kd + d] = qs[d];
      wk.k[i * kd + d] = ks[d];
      wk.a[i * kd + d] = std::exp(gs[d]);
    }
    for (int64_t d = 0; d < vd; ++d) wk.v[i * vd + d] = vs[d];
    wk.beta[i] = beta[row * hv + p.head];
  }
}

// From a = exp(g): eG, eR, eGC, fRel (running products) and the decayed q / k variants.
template <typename T>
void prepareDecays(ChunkWork<T>& wk) {
  const int64_t c = wk.c, kd = wk.kd;
  std::fill(wk.e, wk.e + kd, T(1));
  for (int64_t i = 0; i < c; ++i) {
    decayProduct(wk.eG + i * kd, i == 0 ? wk.e : wk.eG + (i - 1) * kd, wk.a + i * kd, kd);
    if (i % kSub == 0) {
      std::fill(wk.fRel + i * kd, wk.fRel + (i + 1) * kd, T(1));
    } else {
      decayProduct(wk.fRel + i * kd, wk.fRel + (i - 1) * kd, wk.a + i * kd, kd);
    }
  }
  std::fill(wk.eR + (c - 1) * kd, wk.eR + c * kd, T(1));
  for (int64_t i = c - 2; i >= 0; --i) {
    decayProduct(wk.eR + i * kd, wk.eR + (i + 1) * kd, wk.a + (i + 1) * kd, kd);
  }
  std::copy(wk.eG + (c - 1) * kd, wk.eG + c * kd, wk.eGC);
  for (int64_t i = 0; i < c * kd; ++i) {
    wk.qg[i] = wk.q[i] * wk.eG[i];
    wk.kg[i] = wk.k[i] * wk.eG[i];
    wk.kDec[i] = wk.k[i] * wk.eR[i];
    wk.bk[i] = wk.beta[i / kd] * wk.k[i];
  }
}

// For the sub-block starting at row r0 > 0: hRel[j] = exp(G_r0 - G_j) and kh = k ⊙ hRel for
// j < r0; qf = q ⊙ fRel and bkf = bk ⊙ fRel for the sub-block's rows (stored from row 0).
template <typename T>
void offDiagonalFactors(ChunkWork<T>& wk, int64_t r0, int64_t r1) {
  const int64_t kd = wk.kd;
  std::copy(wk.a + r0 * kd, wk.a + (r0 + 1) * kd, wk.hRel + (r0 - 1) * kd);
  for (int64_t j = r0 - 2; j >= 0; --j) {
    decayProduct(wk.hRel + j * kd, wk.hRel + (j + 1) * kd, wk.a + (j + 1) * kd, kd);
  }
  for (int64_t i = 0; i < r0 * kd; ++i) wk.kh[i] = wk.k[i] * wk.hRel[i];
  for (int64_t i = r0 * kd; i < r1 * kd; ++i) {
    wk.qf[i - r0 * kd] = wk.q[i] * wk.fRel[i];
    wk.bkf[i - r0 * kd] = wk.bk[i] * wk.fRel[i];
  }
}

// Aqk[i, j] = sum_d q_id k_jd E_ijd (j <= i) and L[i, j] = sum_d bk_id k_jd E_ijd (j < i),
// E_ijd = exp(G_id - G_jd). Upper triangles are zeroed.
template <typename T>
void pairwiseForward(ChunkWork<T>& wk, T* aqk, T* l) {
  const int64_t c = wk.c, kd = wk.kd, ld = wk.cMax;
  std::fill(aqk, aqk + c * ld, T(0));
  std::fill(l, l + c * ld, T(0));
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c);
    for (int64_t j = r0; j < r1; ++j) {  // diagonal sub-block, element by element
      const T* kj = wk.k + j * kd;
      aqk[j * ld + j] = dotN(wk.q + j * kd, kj, kd);
      std::fill(wk.e, wk.e + kd, T(1));
      for (int64_t i = j + 1; i < r1; ++i) {
        if (!decayProduct(wk.e, wk.e, wk.a + i * kd, kd)) break;
        for (int64_t d = 0; d < kd; ++d) wk.z[d] = kj[d] * wk.e[d];
        aqk[i * ld + j] = dotN(wk.q + i * kd, wk.z, kd);
        l[i * ld + j] = dotN(wk.bk + i * kd, wk.z, kd);
      }
    }
    if (r0 == 0) continue;
    offDiagonalFactors(wk, r0, r1);
    gemm<T>(false, true, r1 - r0, r0, kd, T(1), wk.qf, kd, wk.kh, kd, T(0), aqk + r0 * ld, ld);
    gemm<T>(false, true, r1 - r0, r0, kd, T(1), wk.bkf, kd, wk.kh, kd, T(0), l + r0 * ld, ld);
  }
}

// m = (I + L)^{-1}: diagonal sub-blocks by forward substitution, then for each sub-block row I
// m[I, :r0] = -m_II (L[I, :r0] m[:r0, :r0]).
template <typename T>
void invertUnitLower(ChunkWork<T>& wk, const T* l, T* m) {
  const int64_t c = wk.c, ld = wk.cMax;
  std::fill(m, m + c * ld, T(0));
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c), nb = r1 - r0;
    for (int64_t i = r0; i < r1; ++i) {
      T* mi = m + i * ld;
      mi[i] = T(1);
      for (int64_t t = r0; t < i; ++t) {
        const T coef = l[i * ld + t];
        const T* mt = m + t * ld;
        for (int64_t j = r0; j <= t; ++j) mi[j] -= coef * mt[j];
      }
    }
    if (r0 == 0) continue;
    timesLower(nb, l + r0 * ld, ld, r0, m, ld, T(1), T(0), wk.x, ld);
    lowerTimes(nb, m + r0 * ld + r0, ld, wk.x, ld, r0, T(-1), T(0), m + r0 * ld, ld);
  }
}

// tm = M Diag(beta); W = tm (k ⊙ e^G) [c, K]; U = tm v [c, V].
template <typename T>
void wyFactors(ChunkWork<T>& wk, const T* m) {
  const int64_t c = wk.c, ld = wk.cMax, kd = wk.kd, vd = wk.vd;
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j < c; ++j) wk.tm[i * ld + j] = m[i * ld + j] * wk.beta[j];
  }
  lowerTimes(c, wk.tm, ld, wk.kg, kd, kd, T(1), T(0), wk.w, kd);
  lowerTimes(c, wk.tm, ld, wk.v, vd, vd, T(1), T(0), wk.u, vd);
}

// vn = U - W S, the corrected values of the chunk [c, V] given the entry state s [K, V].
template <typename T>
void newValues(ChunkWork<T>& wk, const T* s) {
  const int64_t c = wk.c, kd = wk.kd, vd = wk.vd;
  std::copy(wk.u, wk.u + c * vd, wk.vn);
  gemm<T>(false, false, c, vd, kd, T(-1), wk.w, kd, s, vd, T(1), wk.vn, vd);
}

// s <- Diag(e^{G_c}) s + (k ⊙ e^{G_c - G})^T vn.
template <typename T>
void advanceState(ChunkWork<T>& wk, T* s) {
  const int64_t c = wk.c, kd = wk.kd, vd = wk.vd;
  for (int64_t d = 0; d < kd; ++d) {
    for (int64_t j = 0; j < vd; ++j) s[d * vd + j] *= wk.eGC[d];
  }
  gemm<T>(true, false, kd, vd, c, T(1), wk.kDec, kd, wk.vn, vd, T(1), s, vd);
}

template <typename T>
void checkCoreShapes(const KdaCoreDims& dims, const Tensor<T>& q, const Tensor<T>& k,
                     const Tensor<T>& v, const Tensor<T>& g, const Tensor<T>& beta,
                     const Tensor<T>& initialState) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  MOEWB_CHECK(dims.chunk >= 1 && dims.seqLen >= 1 && hv % h == 0);
  MOEWB_CHECK(q.numel() == n * h * dims.keyDim && k.numel() == n * h * dims.keyDim);
  MOEWB_CHECK(v.numel() == n * hv * dims.valueDim && g.numel() == n * hv * dims.keyDim);
  MOEWB_CHECK(beta.numel() == n * hv);
  MOEWB_CHECK(initialState.empty() ||
              initialState.numel() == dims.batch * hv * dims.keyDim * dims.valueDim);
}

}  // namespace

template <typename T>
Tensor<T> kdaChunkForward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& q,
                          const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                          const Tensor<T>& beta, const Tensor<T>& initialState,
                          Tensor<T>& finalState, KdaChunkSaved<T>* saved) {
  checkCoreShapes(dims, q, k, v, g, beta, initialState);
  const int64_t hv = dims.valueHeads(), kd = dims.keyDim, vd = dims.valueDim, cc = dims.chunk;
  const int64_t numChunks = dims.numChunks();
  Tensor<T> o({dims.tokens(), hv * vd});             // [N, HV*V]
  finalState = Tensor<T>({dims.batch, hv, kd, vd});  // [B, HV, K, V]
  if (saved != nullptr) {
    saved->aqk = Tensor<T>({dims.batch * hv, numChunks * cc, cc});  // [B*HV, NC*C, C]
    saved->m = Tensor<T>({dims.batch * hv, numChunks * cc, cc});    // [B*HV, NC*C, C]
  }
  pool.parallelFor(dims.batch * hv, [&](int64_t task) {
    const int64_t b = task / hv, head = task % hv;
    ChunkWork<T> wk(cc, kd, vd);
    T* s = finalState.data() + task * kd * vd;  // [K, V] running state
    if (!initialState.empty()) {
      std::copy(initialState.data() + task * kd * vd, initialState.data() + (task + 1) * kd * vd,
                s);
    }
    for (int64_t n = 0; n < numChunks; ++n) {
      const ChunkPos p = chunkPos(dims, b, head, n);
      T* aqk = saved != nullptr ? saved->aqk.data() + savedOffset(dims, task, n) : wk.aqkOwn;
      T* m = saved != nullptr ? saved->m.data() + savedOffset(dims, task, n) : wk.mOwn;
      loadChunk(dims, p, q, k, v, g, beta, wk);
      prepareDecays(wk);
      pairwiseForward(wk, aqk, wk.l);
      invertUnitLower(wk, wk.l, m);
      wyFactors(wk, m);
      newValues(wk, s);
      T* out = o.data() + p.row0 * hv * vd + head * vd;  // [c, V] with stride HV*V
      gemm<T>(false, false, p.c, vd, kd, T(1), wk.qg, kd, s, vd, T(0), out, hv * vd);
      lowerTimes(p.c, aqk, cc, wk.vn, vd, vd, T(1), T(1), out, hv * vd);
      advanceState(wk, s);
    }
  });
  return o;
}

namespace {

// Gradients through the inter-chunk pass (§2.5 first block) given dO (in wk.dO), the entry
// state s and ds = dS_next. Writes dvn, dAqk (lower triangle), dqg, dkd, dW, dSPrev and starts
// dG and dGLast.
template <typename T>
void interChunkBackward(ChunkWork<T>& wk, const T* aqk, const T* s, const T* ds) {
  const int64_t c = wk.c, kd = wk.kd, vd = wk.vd, ld = wk.cMax;
  lowerTransTimes(c, aqk, ld, wk.dO, vd, vd, T(1), T(0), wk.dvn, vd);
  gemm<T>(false, false, c, vd, kd, T(1), wk.kDec, kd, ds, vd, T(1), wk.dvn, vd);
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {  // dAqk = tril(dO vn^T), only the lower blocks
    const int64_t r1 = std::min(r0 + kSub, c);
    gemm<T>(false, true, r1 - r0, r1, vd, T(1), wk.dO + r0 * vd, vd, wk.vn, vd, T(0),
            wk.dAqk + r0 * ld, ld);
  }
  gemm<T>(false, true, c, kd, vd, T(1), wk.dO, vd, s, vd, T(0), wk.dqg, kd);
  gemm<T>(false, true, c, kd, vd, T(1), wk.vn, vd, ds, vd, T(0), wk.dkd, kd);
  for (int64_t d = 0; d < kd; ++d) {
    wk.dGLast[d] = wk.eGC[d] * dotN(s + d * vd, ds + d * vd, vd);  // (e^{G_c} S) ⊙ dS_next
  }
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t d = 0; d < kd; ++d) {
      const int64_t at = i * kd + d;
      const T keyTerm = wk.kDec[at] * wk.dkd[at];
      wk.dG[at] = wk.qg[at] * wk.dqg[at] - keyTerm;
      wk.dGLast[d] += keyTerm;
    }
  }
  for (int64_t d = 0; d < kd; ++d) {
    for (int64_t j = 0; j < vd; ++j) wk.dSPrev[d * vd + j] = wk.eGC[d] * ds[d * vd + j];
  }
  gemm<T>(true, false, kd, vd, c, T(1), wk.qg, kd, wk.dO, vd, T(1), wk.dSPrev, vd);
  gemm<T>(true, false, kd, vd, c, T(-1), wk.w, kd, wk.dvn, vd, T(1), wk.dSPrev, vd);
  gemm<T>(false, true, c, kd, vd, T(-1), wk.dvn, vd, s, vd, T(0), wk.dW, kd);
}

// WY / UT backward: from dW and dU = dvn to dv (written to dvOut, stride ldv), dKg, dbeta and
// dL = -strict_tril(M^T dM M^T) with dM = tril(dT) Diag(beta), dT = dW Kg^T + dU v^T.
template <typename T>
void wyBackward(ChunkWork<T>& wk, const T* m, T* dvOut, int64_t ldv) {
  const int64_t c = wk.c, kd = wk.kd, vd = wk.vd, ld = wk.cMax;
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {  // lower blocks of dT
    const int64_t r1 = std::min(r0 + kSub, c);
    gemm<T>(false, true, r1 - r0, r1, kd, T(1), wk.dW + r0 * kd, kd, wk.kg, kd, T(0),
            wk.dT + r0 * ld, ld);
    gemm<T>(false, true, r1 - r0, r1, vd, T(1), wk.dvn + r0 * vd, vd, wk.v, vd, T(1),
            wk.dT + r0 * ld, ld);
  }
  lowerTransTimes(c, wk.tm, ld, wk.dvn, vd, vd, T(1), T(0), dvOut, ldv);
  lowerTransTimes(c, wk.tm, ld, wk.dW, kd, kd, T(1), T(0), wk.dKg, kd);
  for (int64_t j = 0; j < c; ++j) wk.dbeta[j] = T(0);
  for (int64_t i = 0; i < c; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      wk.dbeta[j] += wk.dT[i * ld + j] * m[i * ld + j];
      wk.dM[i * ld + j] = wk.dT[i * ld + j] * wk.beta[j];
    }
    std::fill(wk.dM + i * ld + i + 1, wk.dM + i * ld + c, T(0));
  }
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c);
    // x[I, :r1] = (M^T dM)[I, :r1] = M[r0:, I]^T dM[r0:, :r1]
    gemm<T>(true, false, r1 - r0, r1, c - r0, T(1), m + r0 * ld + r0, ld, wk.dM + r0 * ld, ld, T(0),
            wk.x + r0 * ld, ld);
    // dL[I, :r1] = -x[I, :r1] M[:r1, :r1]^T
    gemm<T>(false, true, r1 - r0, r1, r1, T(-1), wk.x + r0 * ld, ld, m, ld, T(0), wk.dL + r0 * ld,
            ld);
  }
  for (int64_t i = 0; i < c * kd; ++i) wk.dG[i] += wk.kg[i] * wk.dKg[i];
}

// One (i, j) pair of a diagonal sub-block: z = k_j ⊙ e, daQ_i += cA z, daL_i += cL z,
// dB_j += (cA q_i + cL bk_i) ⊙ e. Restrict-qualified so that the loop vectorises.
template <typename T>
void pairBackward(int64_t n, T cA, T cL, const T* __restrict kj, const T* __restrict e,
                  const T* __restrict qi, const T* __restrict bki, T* __restrict daQi,
                  T* __restrict daLi, T* __restrict dBj) {
  for (int64_t d = 0; d < n; ++d) {
    const T zd = kj[d] * e[d];
    daQi[d] += cA * zd;
    daLi[d] += cL * zd;
    dBj[d] += (cA * qi[d] + cL * bki[d]) * e[d];
  }
}

// Diagonal sub-block [r0, r1) of the pairwise backward, element by element (see below).
template <typename T>
void pairwiseBackwardDiagonal(ChunkWork<T>& wk, int64_t r0, int64_t r1) {
  const int64_t kd = wk.kd, ld = wk.cMax;
  for (int64_t j = r0; j < r1; ++j) {
    const T* kj = wk.k + j * kd;
    const T* qj = wk.q + j * kd;
    const T diag = wk.dAqk[j * ld + j];
    T* dBj = wk.dB + j * kd;
    T* daQj = wk.daQ + j * kd;
    for (int64_t d = 0; d < kd; ++d) {
      dBj[d] += diag * qj[d];
      daQj[d] += diag * kj[d];
    }
    std::fill(wk.e, wk.e + kd, T(1));
    for (int64_t i = j + 1; i < r1; ++i) {
      if (!decayProduct(wk.e, wk.e, wk.a + i * kd, kd)) break;
      pairBackward(kd, wk.dAqk[i * ld + j], wk.dL[i * ld + j], kj, wk.e, wk.q + i * kd,
                   wk.bk + i * kd, wk.daQ + i * kd, wk.daL + i * kd, dBj);
    }
  }
}

// Backward of the pairwise products Aqk (a = q, b = k) and L (a = beta k, b = k):
//   da_i = sum_j dP_ij b_j ⊙ E_ij, db_j = sum_i dP_ij a_i ⊙ E_ij, dG += a ⊙ da - b ⊙ db.
// Accumulates daQ (for q), daL (for beta k) and dB (for k), then adds into dq (dqOut), dk (dkOut)
// [c, K], dbeta and dG.
template <typename T>
void pairwiseBackward(ChunkWork<T>& wk, T* dqOut, T* dkOut) {
  const int64_t c = wk.c, kd = wk.kd, ld = wk.cMax;
  std::fill(wk.daQ, wk.daQ + c * kd, T(0));
  std::fill(wk.daL, wk.daL + c * kd, T(0));
  std::fill(wk.dB, wk.dB + c * kd, T(0));
  for (int64_t r0 = 0; r0 < c; r0 += kSub) {
    const int64_t r1 = std::min(r0 + kSub, c), nb = r1 - r0;
    pairwiseBackwardDiagonal(wk, r0, r1);
    if (r0 == 0) continue;
    offDiagonalFactors(wk, r0, r1);
    // Rows of the sub-block: da = (dP[I, :r0] kh) ⊙ fRel.
    gemm<T>(false, false, nb, kd, r0, T(1), wk.dAqk + r0 * ld, ld, wk.kh, kd, T(0), wk.tmpA, kd);
    gemm<T>(false, false, nb, kd, r0, T(1), wk.dL + r0 * ld, ld, wk.kh, kd, T(0), wk.tmpB, kd);
    for (int64_t i = 0; i < nb * kd; ++i) {
      wk.daQ[r0 * kd + i] += wk.tmpA[i] * wk.fRel[r0 * kd + i];
      wk.daL[r0 * kd + i] += wk.tmpB[i] * wk.fRel[r0 * kd + i];
    }
    // Earlier rows: db = (dAqk[I, :r0]^T qf + dL[I, :r0]^T bkf) ⊙ hRel.
    gemm<T>(true, false, r0, kd, nb, T(1), wk.dAqk + r0 * ld, ld, wk.qf, kd, T(0), wk.tmpA, kd);
    gemm<T>(true, false, r0, kd, nb, T(1), wk.dL + r0 * ld, ld, wk.bkf, kd, T(1), wk.tmpA, kd);
    for (int64_t i = 0; i < r0 * kd; ++i) wk.dB[i] += wk.tmpA[i] * wk.hRel[i];
  }
  for (int64_t i = 0; i < c; ++i) {
    const T bi = wk.beta[i];
    wk.dbeta[i] += dotN(wk.k + i * kd, wk.daL + i * kd, kd);
    for (int64_t d = 0; d < kd; ++d) {
      const int64_t at = i * kd + d;
      dqOut[at] += wk.daQ[at];
      dkOut[at] += bi * wk.daL[at] + wk.dB[at];
      wk.dG[at] += wk.q[at] * wk.daQ[at] + wk.bk[at] * wk.daL[at] - wk.k[at] * wk.dB[at];
    }
  }
}

// Per-head scratch of kdaChunkBackward: chunk-entry states and per-chunk dq / dk rows.
template <typename T>
struct HeadWork {
  explicit HeadWork(const KdaCoreDims& dims)
      : states({dims.numChunks(), dims.keyDim, dims.valueDim}),
        ds({dims.keyDim, dims.valueDim}),
        dq({dims.chunk, dims.keyDim}),
        dk({dims.chunk, dims.keyDim}) {}
  Tensor<T> states;  // [NC, K, V] state entering each chunk
  Tensor<T> ds;      // [K, V] gradient of the state leaving the current chunk
  Tensor<T> dq, dk;  // [C, K] this chunk's contributions
};

// Everything kdaChunkBackward reads, bundled to keep signatures short.
template <typename T>
struct CoreBackwardInputs {
  const KdaCoreDims& dims;
  const Tensor<T>& dO;
  const Tensor<T>& dFinalState;
  const Tensor<T>& q;
  const Tensor<T>& k;
  const Tensor<T>& v;
  const Tensor<T>& g;
  const Tensor<T>& beta;
  const Tensor<T>& initialState;
  const KdaChunkSaved<T>& saved;
};

// Loads chunk n of a head and recomputes its decays and WY factors from the saved M.
template <typename T>
void recomputeChunk(const CoreBackwardInputs<T>& in, const ChunkPos& p, const T* m,
                    ChunkWork<T>& wk) {
  loadChunk(in.dims, p, in.q, in.k, in.v, in.g, in.beta, wk);
  prepareDecays(wk);
  wyFactors(wk, m);
}

// Chunk-entry states of (b, value head) into hw.states.
template <typename T>
void recomputeStates(const CoreBackwardInputs<T>& in, int64_t b, int64_t head, ChunkWork<T>& wk,
                     HeadWork<T>& hw) {
  const KdaCoreDims& dims = in.dims;
  const int64_t task = b * dims.valueHeads() + head, kv = dims.keyDim * dims.valueDim;
  hw.states.zero();
  if (!in.initialState.empty()) {
    std::copy(in.initialState.data() + task * kv, in.initialState.data() + (task + 1) * kv,
              hw.states.data());
  }
  for (int64_t n = 0; n + 1 < dims.numChunks(); ++n) {
    recomputeChunk(in, chunkPos(dims, b, head, n), in.saved.m.data() + savedOffset(dims, task, n),
                   wk);
    T* next = hw.states.row(n + 1);
    std::copy(hw.states.row(n), hw.states.row(n) + kv, next);
    newValues(wk, next);
    advanceState(wk, next);
  }
}

// Writes this chunk's dg (reverse cumulative sum of dG), dbeta, and adds dq / dk.
template <typename T>
void storeChunkGrads(const KdaCoreDims& dims, const ChunkPos& p, const ChunkWork<T>& wk,
                     const HeadWork<T>& hw, KdaCoreGrads<T>& grads) {
  const int64_t h = dims.numHeads, hv = dims.valueHeads(), kd = dims.keyDim, c = p.c;
  for (int64_t i = c - 1; i >= 0; --i) {
    T* dgRow = grads.dg.data() + (p.row0 + i) * hv * kd + p.head * kd;
    for (int64_t d = 0; d < kd; ++d) {
      dgRow[d] = wk.dG[i * kd + d] + (i + 1 < c ? dgRow[hv * kd + d] : T(0));
    }
    grads.dbeta[(p.row0 + i) * hv + p.head] = wk.dbeta[i];
    T* dqRow = grads.dq.data() + (p.row0 + i) * h * kd + p.qkHead * kd;
    T* dkRow = grads.dk.data() + (p.row0 + i) * h * kd + p.qkHead * kd;
    for (int64_t d = 0; d < kd; ++d) {
      dqRow[d] += hw.dq[i * kd + d];
      dkRow[d] += hw.dk[i * kd + d];
    }
  }
}

// Backward of one (sequence, value head): recompute the chunk-entry states, then walk the chunks
// in reverse. dq / dk of the q/k head are accumulated (+=) into `grads`.
template <typename T>
void valueHeadBackward(const CoreBackwardInputs<T>& in, int64_t b, int64_t head, ChunkWork<T>& wk,
                       HeadWork<T>& hw, KdaCoreGrads<T>& grads) {
  const KdaCoreDims& dims = in.dims;
  const int64_t hv = dims.valueHeads(), kd = dims.keyDim, vd = dims.valueDim;
  const int64_t task = b * hv + head, kv = kd * vd;
  recomputeStates(in, b, head, wk, hw);
  hw.ds.zero();
  if (!in.dFinalState.empty()) {
    std::copy(in.dFinalState.data() + task * kv, in.dFinalState.data() + (task + 1) * kv,
              hw.ds.data());
  }
  for (int64_t n = dims.numChunks() - 1; n >= 0; --n) {
    const ChunkPos p = chunkPos(dims, b, head, n);
    const T* aqk = in.saved.aqk.data() + savedOffset(dims, task, n);
    const T* m = in.saved.m.data() + savedOffset(dims, task, n);
    recomputeChunk(in, p, m, wk);
    const T* s = hw.states.row(n);
    newValues(wk, s);
    for (int64_t i = 0; i < p.c; ++i) {
      const T* src = in.dO.data() + (p.row0 + i) * hv * vd + head * vd;
      std::copy(src, src + vd, wk.dO + i * vd);
    }
    interChunkBackward(wk, aqk, s, hw.ds.data());
    wyBackward(wk, m, grads.dv.data() + p.row0 * hv * vd + head * vd, hv * vd);
    for (int64_t i = 0; i < p.c * kd; ++i) {
      hw.dq[i] = wk.dqg[i] * wk.eG[i];
      hw.dk[i] = wk.dkd[i] * wk.eR[i] + wk.dKg[i] * wk.eG[i];
    }
    pairwiseBackward(wk, hw.dq.data(), hw.dk.data());
    for (int64_t d = 0; d < kd; ++d) wk.dG[(p.c - 1) * kd + d] += wk.dGLast[d];
    storeChunkGrads(dims, p, wk, hw, grads);
    std::copy(wk.dSPrev, wk.dSPrev + kv, hw.ds.data());
  }
  std::copy(hw.ds.data(), hw.ds.data() + kv, grads.dInitialState.data() + task * kv);
}

}  // namespace

template <typename T>
KdaCoreGrads<T> kdaChunkBackward(ThreadPool& pool, const KdaCoreDims& dims, const Tensor<T>& dO,
                                 const Tensor<T>& dFinalState, const Tensor<T>& q,
                                 const Tensor<T>& k, const Tensor<T>& v, const Tensor<T>& g,
                                 const Tensor<T>& beta, const Tensor<T>& initialState,
                                 const KdaChunkSaved<T>& saved) {
  checkCoreShapes(dims, q, k, v, g, beta, initialState);
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  MOEWB_CHECK(dO.numel() == n * hv * vd);
  MOEWB_CHECK(dFinalState.empty() || dFinalState.numel() == dims.batch * hv * kd * vd);
  MOEWB_CHECK(saved.aqk.numel() == dims.batch * hv * dims.numChunks() * dims.chunk * dims.chunk);
  MOEWB_CHECK(saved.m.numel() == saved.aqk.numel());
  KdaCoreGrads<T> grads{Tensor<T>({n, h * kd}),  Tensor<T>({n, h * kd}),
                        Tensor<T>({n, hv * vd}), Tensor<T>({n, hv * kd}),
                        Tensor<T>({n, hv}),      Tensor<T>({dims.batch, hv, kd, vd})};
  const CoreBackwardInputs<T> in{dims, dO, dFinalState, q, k, v, g, beta, initialState, saved};
  pool.parallelFor(dims.batch * h, [&](int64_t task) {
    const int64_t b = task / h, qkHead = task % h, group = dims.groupSize();
    ChunkWork<T> wk(dims.chunk, kd, vd);
    HeadWork<T> hw(dims);
    for (int64_t head = qkHead * group; head < (qkHead + 1) * group; ++head) {
      valueHeadBackward(in, b, head, wk, hw, grads);
    }
  });
  return grads;
}

#define MOEWB_INSTANTIATE_KDA_CHUNK(T)                                                          \
  template Tensor<T> kdaChunkForward<T>(                                                        \
      ThreadPool&, const KdaCoreDims&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,    \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, Tensor<T>&, KdaChunkSaved<T>*);     \
  template KdaCoreGrads<T> kdaChunkBackward<T>(                                                 \
      ThreadPool&, const KdaCoreDims&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,    \
      const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
      const KdaChunkSaved<T>&);
MOEWB_INSTANTIATE_KDA_CHUNK(float)
MOEWB_INSTANTIATE_KDA_CHUNK(double)

}  // namespace moewb::engine
