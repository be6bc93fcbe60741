// The ORIGINAL fp32-FMA KDA core kernels (engine/ops/kda/kda_chunk_cuda.cu before the tensor-core
// rewrite), copied verbatim into namespace kda_old so that bench/scratch/kda_chunk_01.cu can
// compare the new kernels with them at the benchmark shape. Not engine code.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>

namespace kda_old {
using bf16 = __nv_bfloat16;

struct IntraBwdArgs {
  const bf16 *q, *k, *v, *dO;
  const float *g, *beta, *savedM;
  const float *states, *dStates;
  const float *vn, *dvn;
  float *dqAcc, *dkAcc;
  float* dGWork;
  bf16* dv;
  float *dg, *dbeta;
};

constexpr int kThreads = 256;
constexpr int kVTile = 32;  // value columns per CTA of the recurrent kernels

struct CoreArgs {
  int64_t batch, seqLen, heads, valueHeads, keyDim, valueDim, chunk, numChunks;
};


// Where chunk n of (b, hv) lives.
struct ChunkAt {
  int64_t row0;   // first token row (b * T + n * C)
  int c;          // rows in the chunk
  int64_t slot;   // bh * NC + n
  int64_t qkCol;  // column of the q/k head (qkHead * K)
  int64_t gCol;   // column of the value head in [N, HV*K]
  int64_t vCol;   // column of the value head in [N, HV*V]
};

__device__ ChunkAt chunkAt(const CoreArgs& a, int64_t bh, int64_t n) {
  const int64_t b = bh / a.valueHeads, hv = bh % a.valueHeads;
  const int64_t group = a.valueHeads / a.heads;
  ChunkAt at;
  at.row0 = b * a.seqLen + n * a.chunk;
  at.c = int(min(a.chunk, a.seqLen - n * a.chunk));
  at.slot = bh * a.numChunks + n;
  at.qkCol = (hv / group) * a.keyDim;
  at.gCol = hv * a.keyDim;
  at.vCol = hv * a.valueDim;
  return at;
}

// Loads q, k (as fp32) and G = cumsum(g) of one chunk into [C, K+1] buffers; rows >= c are zero.
// Ends with a barrier.
__device__ void loadChunkQkG(const CoreArgs& a, const ChunkAt& at, const bf16* q, const bf16* k,
                             const float* g, float* qs, float* ks, float* gs) {
  const int kd = int(a.keyDim), ld = kd + 1, cMax = int(a.chunk);
  const int64_t qkStride = a.heads * a.keyDim, gStride = a.valueHeads * a.keyDim;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float qv = 0.f, kv = 0.f, gv = 0.f;
    if (i < at.c) {
      const int64_t row = at.row0 + i;
      qv = __bfloat162float(q[row * qkStride + at.qkCol + d]);
      kv = __bfloat162float(k[row * qkStride + at.qkCol + d]);
      gv = g[row * gStride + at.gCol + d];
    }
    qs[i * ld + d] = qv;
    ks[i * ld + d] = kv;
    gs[i * ld + d] = gv;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {
    float acc = 0.f;
    for (int i = 0; i < at.c; ++i) {
      acc += gs[i * ld + d];
      gs[i * ld + d] = acc;
    }
  }
  __syncthreads();
}

// Shared floats of kda_intra_fwd_kernel.
inline int64_t intraFwdSharedFloats(int64_t c, int64_t kd) {
  return 3 * c * (kd + 1) + 2 * c * (c + 1) + c;
}

// One CTA per (chunk, b * HV + hv). With computeM: the decayed Aqk and L, M = (I + L)^{-1}, both
// written to the saved tensors; otherwise M is read from `savedM`. Then the WY factors W, U and
// the decayed q / k and e^{G_C} into the workspaces.
__global__ void kda_intra_fwd_kernel(CoreArgs a, const bf16* q, const bf16* k, const bf16* v,
                                     const float* g, const float* beta, bool computeM,
                                     float* savedAqk, float* savedM, float* wOut, float* uOut,
                                     float* qgOut, float* kDecOut, float* eGCOut) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* qs = smem;                    // [C, K+1] q, later k ⊙ e^G
  float* ks = qs + cMax * ld;          // [C, K+1]
  float* gs = ks + cMax * ld;          // [C, K+1] G
  float* ls = gs + cMax * ld;          // [C, C+1] L
  float* ms = ls + cMax * ldc;         // [C, C+1] M
  float* betas = ms + cMax * ldc;      // [C]
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? beta[(at.row0 + i) * a.valueHeads + at.vCol / vd] : 0.f;
  }
  loadChunkQkG(a, at, q, k, g, qs, ks, gs);
  const int64_t savedBase = at.slot * cMax * cMax;
  if (computeM) {
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
      const int i = idx / cMax, j = idx % cMax;
      float aqk = 0.f, l = 0.f;
      if (i < c && j <= i) {
        const float* qi = qs + i * ld;
        const float* ki = ks + i * ld;
        const float* kj = ks + j * ld;
        const float* gi = gs + i * ld;
        const float* gj = gs + j * ld;
        for (int d = 0; d < kd; ++d) {
          const float z = kj[d] * expf(gi[d] - gj[d]);
          aqk += qi[d] * z;
          l += ki[d] * z;
        }
        l = j < i ? betas[i] * l : 0.f;
      }
      savedAqk[savedBase + idx] = aqk;
      ls[i * ldc + j] = l;
    }
    __syncthreads();
    // Column j of M solves (I + L) x = e_j by forward substitution; one thread per column.
    for (int j = threadIdx.x; j < cMax; j += blockDim.x) {
      for (int i = 0; i < cMax; ++i) ms[i * ldc + j] = (i == j && i < c) ? 1.f : 0.f;
      for (int i = j + 1; i < c; ++i) {
        float acc = 0.f;
        for (int t = j; t < i; ++t) acc += ls[i * ldc + t] * ms[t * ldc + j];
        ms[i * ldc + j] = -acc;
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
      savedM[savedBase + idx] = ms[(idx / cMax) * ldc + idx % cMax];
    }
  } else {
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
      ms[(idx / cMax) * ldc + idx % cMax] = savedM[savedBase + idx];
    }
  }
  // Decayed q and k; qs becomes k ⊙ e^G (each thread rewrites only its own elements).
  const int64_t kBase = at.slot * cMax * kd;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float qg = 0.f, kDec = 0.f, kg = 0.f;
    if (i < c) {
      const float gi = gs[i * ld + d];
      const float eG = expf(gi);
      qg = qs[i * ld + d] * eG;
      kg = ks[i * ld + d] * eG;
      kDec = ks[i * ld + d] * expf(gs[(c - 1) * ld + d] - gi);
    }
    qgOut[kBase + idx] = qg;
    kDecOut[kBase + idx] = kDec;
    qs[i * ld + d] = kg;
  }
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {
    eGCOut[at.slot * kd + d] = expf(gs[(c - 1) * ld + d]);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float w = 0.f;
    for (int j = 0; j <= i && j < c; ++j) w += ms[i * ldc + j] * betas[j] * qs[j * ld + d];
    wOut[kBase + idx] = w;
  }
  const int64_t vStride = a.valueHeads * a.valueDim;
  const int64_t vBase = at.slot * cMax * vd;
  for (int idx = threadIdx.x; idx < cMax * vd; idx += blockDim.x) {
    const int i = idx / vd, e = idx % vd;
    float u = 0.f;
    for (int j = 0; j <= i && j < c; ++j) {
      u += ms[i * ldc + j] * betas[j] * __bfloat162float(v[(at.row0 + j) * vStride + at.vCol + e]);
    }
    uOut[vBase + idx] = u;
  }
}

// Shared floats of the recurrent kernels.
inline int64_t recurrentSharedFloats(int64_t c, int64_t kd) {
  return kd * kVTile + c * (kd + 1) + c * (c + 1) + 2 * c * kVTile + kd;
}

// Copies rows < c of a [C, K] workspace block into a [C, K+1] shared buffer.
__device__ void loadRows(const float* src, int c, int kd, float* dst) {
  for (int idx = threadIdx.x; idx < c * kd; idx += blockDim.x) {
    dst[(idx / kd) * (kd + 1) + idx % kd] = src[idx];
  }
}

// One CTA per (b * HV + hv, value tile): walks the chunks in order with the state slice
// S[:, v0 : v0 + 32] in shared memory. Writes (each optional) the chunk-entry states, Vn, o and
// the final state.
__global__ void kda_fwd_kernel(CoreArgs a, const float* w, const float* u, const float* qg,
                               const float* kDec, const float* eGC, const float* aqk,
                               const float* initialState, float* statesOut, float* vnOut,
                               bf16* o, float* finalState) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* s = smem;                  // [K, 32] state slice
  float* buf = s + kd * kVTile;     // [C, K+1] W, then q ⊙ e^G, then k ⊙ e^{G_C - G}
  float* as = buf + cMax * ld;      // [C, C+1] Aqk
  float* vn = as + cMax * ldc;      // [C, 32]
  float* eg = vn + 2 * cMax * kVTile;  // [K]
  const int64_t bh = blockIdx.x;
  const int v0 = int(blockIdx.y) * kVTile, vw = min(kVTile, vd - v0);
  const int64_t kv = a.keyDim * a.valueDim;
  for (int idx = threadIdx.x; idx < kd * kVTile; idx += blockDim.x) {
    const int d = idx / kVTile, e = idx % kVTile;
    s[idx] = (initialState != nullptr && e < vw) ? initialState[bh * kv + d * vd + v0 + e] : 0.f;
  }
  __syncthreads();
  for (int64_t n = 0; n < a.numChunks; ++n) {
    const ChunkAt at = chunkAt(a, bh, n);
    const int c = at.c;
    if (statesOut != nullptr) {
      for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
        const int d = idx / vw, e = idx % vw;
        statesOut[at.slot * kv + d * vd + v0 + e] = s[d * kVTile + e];
      }
    }
    const int64_t kBase = at.slot * cMax * kd, vBase = at.slot * cMax * vd;
    loadRows(w + kBase, c, kd, buf);
    for (int idx = threadIdx.x; idx < c * vw; idx += blockDim.x) {
      const int i = idx / vw, e = idx % vw;
      vn[i * kVTile + e] = u[vBase + i * vd + v0 + e];
    }
    for (int idx = threadIdx.x; idx < c * cMax; idx += blockDim.x) {
      as[(idx / cMax) * ldc + idx % cMax] = aqk[at.slot * cMax * cMax + idx];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < c * vw; idx += blockDim.x) {  // Vn = U - W S
      const int i = idx / vw, e = idx % vw;
      float acc = 0.f;
      for (int d = 0; d < kd; ++d) acc += buf[i * ld + d] * s[d * kVTile + e];
      const float value = vn[i * kVTile + e] - acc;
      vn[i * kVTile + e] = value;
      if (vnOut != nullptr) vnOut[vBase + i * vd + v0 + e] = value;
    }
    __syncthreads();
    if (o != nullptr) {  // O = (q ⊙ e^G) S + Aqk Vn
      loadRows(qg + kBase, c, kd, buf);
      __syncthreads();
      const int64_t oStride = a.valueHeads * a.valueDim;
      for (int idx = threadIdx.x; idx < c * vw; idx += blockDim.x) {
        const int i = idx / vw, e = idx % vw;
        float acc = 0.f;
        for (int d = 0; d < kd; ++d) acc += buf[i * ld + d] * s[d * kVTile + e];
        for (int j = 0; j <= i; ++j) acc += as[i * ldc + j] * vn[j * kVTile + e];
        o[(at.row0 + i) * oStride + at.vCol + v0 + e] = __float2bfloat16(acc);
      }
      __syncthreads();
    }
    loadRows(kDec + kBase, c, kd, buf);
    for (int d = threadIdx.x; d < kd; d += blockDim.x) eg[d] = eGC[at.slot * kd + d];
    __syncthreads();
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {  // S update
      const int d = idx / vw, e = idx % vw;
      float acc = eg[d] * s[d * kVTile + e];
      for (int i = 0; i < c; ++i) acc += buf[i * ld + d] * vn[i * kVTile + e];
      s[d * kVTile + e] = acc;
    }
    __syncthreads();
  }
  if (finalState != nullptr) {
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      finalState[bh * kv + d * vd + v0 + e] = s[d * kVTile + e];
    }
  }
}

// One CTA per (b * HV + hv, value tile): the reverse state-gradient recurrence. For each chunk
// (last first) stores dS leaving the chunk, dVn = Aqk^T dO + (k ⊙ e^{G_C - G}) dS, then
// dS <- e^{G_C} dS + (q ⊙ e^G)^T dO - W^T dVn. Writes dInitialState when not null.
__global__ void kda_bwd_dh_kernel(CoreArgs a, const bf16* dO, const float* dFinalState,
                                  const float* w, const float* qg, const float* kDec,
                                  const float* eGC, const float* aqk, float* dStatesOut,
                                  float* dvnOut, float* dInitialState) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* ds = smem;                     // [K, 32]
  float* buf = ds + kd * kVTile;        // [C, K+1]
  float* as = buf + cMax * ld;          // [C, C+1]
  float* dos = as + cMax * ldc;         // [C, 32] dO tile
  float* dvn = dos + cMax * kVTile;     // [C, 32]
  float* eg = dvn + cMax * kVTile;      // [K]
  const int64_t bh = blockIdx.x;
  const int v0 = int(blockIdx.y) * kVTile, vw = min(kVTile, vd - v0);
  const int64_t kv = a.keyDim * a.valueDim, oStride = a.valueHeads * a.valueDim;
  for (int idx = threadIdx.x; idx < kd * kVTile; idx += blockDim.x) {
    const int d = idx / kVTile, e = idx % kVTile;
    ds[idx] = (dFinalState != nullptr && e < vw) ? dFinalState[bh * kv + d * vd + v0 + e] : 0.f;
  }
  __syncthreads();
  for (int64_t n = a.numChunks - 1; n >= 0; --n) {
    const ChunkAt at = chunkAt(a, bh, n);
    const int c = at.c;
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      dStatesOut[at.slot * kv + d * vd + v0 + e] = ds[d * kVTile + e];
    }
    const int64_t kBase = at.slot * cMax * kd, vBase = at.slot * cMax * vd;
    loadRows(kDec + kBase, c, kd, buf);
    for (int idx = threadIdx.x; idx < c * vw; idx += blockDim.x) {
      const int i = idx / vw, e = idx % vw;
      dos[i * kVTile + e] = __bfloat162float(dO[(at.row0 + i) * oStride + at.vCol + v0 + e]);
    }
    for (int idx = threadIdx.x; idx < c * cMax; idx += blockDim.x) {
      as[(idx / cMax) * ldc + idx % cMax] = aqk[at.slot * cMax * cMax + idx];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < c * vw; idx += blockDim.x) {
      const int i = idx / vw, e = idx % vw;
      float acc = 0.f;
      for (int j = i; j < c; ++j) acc += as[j * ldc + i] * dos[j * kVTile + e];
      for (int d = 0; d < kd; ++d) acc += buf[i * ld + d] * ds[d * kVTile + e];
      dvn[i * kVTile + e] = acc;
      dvnOut[vBase + i * vd + v0 + e] = acc;
    }
    __syncthreads();
    loadRows(qg + kBase, c, kd, buf);
    for (int d = threadIdx.x; d < kd; d += blockDim.x) eg[d] = eGC[at.slot * kd + d];
    __syncthreads();
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      float acc = eg[d] * ds[d * kVTile + e];
      for (int i = 0; i < c; ++i) acc += buf[i * ld + d] * dos[i * kVTile + e];
      ds[d * kVTile + e] = acc;
    }
    __syncthreads();
    loadRows(w + kBase, c, kd, buf);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      float acc = 0.f;
      for (int i = 0; i < c; ++i) acc += buf[i * ld + d] * dvn[i * kVTile + e];
      ds[d * kVTile + e] -= acc;
    }
    __syncthreads();
  }
  if (dInitialState != nullptr) {
    for (int idx = threadIdx.x; idx < kd * vw; idx += blockDim.x) {
      const int d = idx / vw, e = idx % vw;
      dInitialState[bh * kv + d * vd + v0 + e] = ds[d * kVTile + e];
    }
  }
}

// Shared floats of kda_intra_bwd_kernel.
inline int64_t intraBwdSharedFloats(int64_t c, int64_t kd) {
  return 4 * c * (kd + 1) + 4 * c * (c + 1) + 2 * c + kd;
}




// One CTA per (chunk, b * HV + hv): the rest of §2.5 for one chunk given S (entry state),
// dS (gradient of the state leaving the chunk), Vn and dVn.
__global__ void kda_bwd_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* qs = smem;                 // [C, K+1]
  float* ks = qs + cMax * ld;       // [C, K+1]
  float* gs = ks + cMax * ld;       // [C, K+1] G
  float* dws = gs + cMax * ld;      // [C, K+1] dW
  float* ms = dws + cMax * ld;      // [C, C+1] M
  float* dAqk = ms + cMax * ldc;    // [C, C+1]
  float* dT = dAqk + cMax * ldc;    // [C, C+1] dT, then dM, then dL
  float* xs = dT + cMax * ldc;      // [C, C+1] M^T dM
  float* betas = xs + cMax * ldc;   // [C]
  float* dbetas = betas + cMax;     // [C]
  float* dGLast = dbetas + cMax;    // [K]
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int64_t hv = at.vCol / vd;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? p.beta[(at.row0 + i) * a.valueHeads + hv] : 0.f;
    dbetas[i] = 0.f;
  }
  for (int d = threadIdx.x; d < kd; d += blockDim.x) dGLast[d] = 0.f;
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    ms[(idx / cMax) * ldc + idx % cMax] = p.savedM[at.slot * cMax * cMax + idx];
  }
  loadChunkQkG(a, at, p.q, p.k, p.g, qs, ks, gs);
  const int64_t kv = a.keyDim * a.valueDim;
  const float* s = p.states + at.slot * kv;
  const float* dS = p.dStates + at.slot * kv;
  const int64_t vBase = at.slot * cMax * vd, kBase = at.slot * cMax * kd;
  const int64_t oStride = a.valueHeads * a.valueDim, qkStride = a.heads * a.keyDim;
  const float* vn = p.vn + vBase;
  const float* dvn = p.dvn + vBase;
  float* dG = p.dGWork + kBase;
  // Inter-chunk terms: dq += (dO S^T) ⊙ e^G, dk += (Vn dS^T) ⊙ e^{G_C - G}, dW = -dVn S^T.
  for (int idx = threadIdx.x; idx < c * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float sq = 0.f, skd = 0.f, sw = 0.f;
    const bf16* dOi = p.dO + (at.row0 + i) * oStride + at.vCol;
    for (int e = 0; e < vd; ++e) {
      const float sde = s[d * vd + e];
      sq += __bfloat162float(dOi[e]) * sde;
      skd += vn[i * vd + e] * dS[d * vd + e];
      sw += dvn[i * vd + e] * sde;
    }
    const float gi = gs[i * ld + d];
    const float eG = expf(gi), eR = expf(gs[(c - 1) * ld + d] - gi);
    dws[i * ld + d] = -sw;
    const int64_t qkAt = (at.row0 + i) * qkStride + at.qkCol + d;
    atomicAdd(p.dqAcc + qkAt, sq * eG);
    atomicAdd(p.dkAcc + qkAt, skd * eR);
    const float keyTerm = ks[i * ld + d] * eR * skd;
    dG[i * kd + d] = qs[i * ld + d] * eG * sq - keyTerm;
    atomicAdd(dGLast + d, keyTerm);
  }
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {  // rowsum((e^{G_C} S) ⊙ dS)
    float acc = 0.f;
    for (int e = 0; e < vd; ++e) acc += s[d * vd + e] * dS[d * vd + e];
    atomicAdd(dGLast + d, expf(gs[(c - 1) * ld + d]) * acc);
  }
  // dAqk = tril(dO Vn^T); dT starts as dVn v^T (lower triangle incl. the diagonal).
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    float da = 0.f, dt = 0.f;
    if (i < c && j <= i) {
      const bf16* dOi = p.dO + (at.row0 + i) * oStride + at.vCol;
      const bf16* vj = p.v + (at.row0 + j) * oStride + at.vCol;
      for (int e = 0; e < vd; ++e) {
        da += __bfloat162float(dOi[e]) * vn[j * vd + e];
        dt += dvn[i * vd + e] * __bfloat162float(vj[e]);
      }
    }
    dAqk[i * ldc + j] = da;
    dT[i * ldc + j] = dt;
  }
  __syncthreads();
  // dT += dW (k ⊙ e^G)^T.
  for (int idx = threadIdx.x; idx < c * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    if (j > i) continue;
    float acc = 0.f;
    for (int d = 0; d < kd; ++d) acc += dws[i * ld + d] * ks[j * ld + d] * expf(gs[j * ld + d]);
    dT[i * ldc + j] += acc;
  }
  // dKg = (M Diag(beta))^T dW: dk += dKg ⊙ e^G, dG += k ⊙ e^G ⊙ dKg.
  for (int idx = threadIdx.x; idx < c * kd; idx += blockDim.x) {
    const int j = idx / kd, d = idx % kd;
    float acc = 0.f;
    for (int i = j; i < c; ++i) acc += ms[i * ldc + j] * dws[i * ld + d];
    const float eG = expf(gs[j * ld + d]);
    const float dKg = acc * betas[j];
    atomicAdd(p.dkAcc + (at.row0 + j) * qkStride + at.qkCol + d, dKg * eG);
    dG[j * kd + d] += ks[j * ld + d] * eG * dKg;
  }
  // dv = (M Diag(beta))^T dVn.
  for (int idx = threadIdx.x; idx < c * vd; idx += blockDim.x) {
    const int j = idx / vd, e = idx % vd;
    float acc = 0.f;
    for (int i = j; i < c; ++i) acc += ms[i * ldc + j] * dvn[i * vd + e];
    p.dv[(at.row0 + j) * oStride + at.vCol + e] = __float2bfloat16(acc * betas[j]);
  }
  __syncthreads();
  // dbeta_j = sum_i dT[i, j] M[i, j]; dM = dT Diag(beta) (column j per thread).
  for (int j = threadIdx.x; j < c; j += blockDim.x) {
    float acc = 0.f;
    for (int i = j; i < c; ++i) {
      acc += dT[i * ldc + j] * ms[i * ldc + j];
      dT[i * ldc + j] *= betas[j];
    }
    dbetas[j] = acc;
  }
  __syncthreads();
  // X = M^T dM (both lower triangular: t >= max(i, j)).
  for (int idx = threadIdx.x; idx < c * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    float acc = 0.f;
    if (j < c) {
      for (int t = max(i, j); t < c; ++t) acc += ms[t * ldc + i] * dT[t * ldc + j];
    }
    xs[i * ldc + j] = acc;
  }
  __syncthreads();
  // dL = -strict_tril(X M^T), written over dM.
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    float acc = 0.f;
    if (i < c && j < i) {
      for (int t = 0; t <= j; ++t) acc += xs[i * ldc + t] * ms[j * ldc + t];
    }
    dT[i * ldc + j] = -acc;
  }
  __syncthreads();
  // Pairwise products Aqk (a = q, b = k) and L (a = beta k, b = k), E = exp(G_i - G_j):
  //   da_i = sum_j dP_ij b_j E_ij, db_j = sum_i dP_ij a_i E_ij, dG += a ⊙ da - b ⊙ db.
  for (int idx = threadIdx.x; idx < c * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    const float gi = gs[i * ld + d], qi = qs[i * ld + d], ki = ks[i * ld + d];
    float daQ = 0.f, daL = 0.f, dB = 0.f;
    for (int j = 0; j <= i; ++j) {
      const float z = ks[j * ld + d] * expf(gi - gs[j * ld + d]);
      daQ += dAqk[i * ldc + j] * z;
      daL += dT[i * ldc + j] * z;
    }
    for (int r = i; r < c; ++r) {
      const float e = expf(gs[r * ld + d] - gi);
      dB += (dAqk[r * ldc + i] * qs[r * ld + d] + dT[r * ldc + i] * betas[r] * ks[r * ld + d]) * e;
    }
    const float bi = betas[i];
    const int64_t qkAt = (at.row0 + i) * qkStride + at.qkCol + d;
    atomicAdd(p.dqAcc + qkAt, daQ);
    atomicAdd(p.dkAcc + qkAt, bi * daL + dB);
    dG[i * kd + d] += qi * daQ + bi * ki * daL - ki * dB;
    atomicAdd(dbetas + i, ki * daL);
  }
  __syncthreads();
  // dg = reverse cumsum of dG within the chunk (dGLast joins the last row).
  const int64_t gStride = a.valueHeads * a.keyDim;
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {
    float acc = dGLast[d];
    for (int i = c - 1; i >= 0; --i) {
      acc += dG[i * kd + d];
      p.dg[(at.row0 + i) * gStride + at.gCol + d] = acc;
    }
  }
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    p.dbeta[(at.row0 + i) * a.valueHeads + hv] = dbetas[i];
  }
}

inline dim3 recurrentGrid(const CoreArgs& args) {
  return dim3(unsigned(args.batch * args.valueHeads),
              unsigned((args.valueDim + kVTile - 1) / kVTile));
}

}  // namespace kda_old
