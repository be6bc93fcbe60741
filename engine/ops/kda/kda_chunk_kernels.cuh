// The chunked KDA core kernels (ENGINE-MATH §2.3 / §2.5; kernel plan, limits and costs in
// kda_cuda.h), shared by the engine (kda_chunk_cuda.cu wraps the launchers below into Status) and
// the standalone benchmarks bench/scratch/kda_chunk_01.cu / _02.cu, so both run the same code.
// Needs only the CUDA runtime and cuda_bf16.h. kda_intra_fwd_kernel and kda_bwd_kernel are the
// fp32 versions; kda_intra_mma.cuh / kda_bwd_mma.cuh hold their tensor-core replacements, which
// the engine runs for the shapes they support.
//
// Numerics: the state, every sum and the triangular solve are fp32; decay factors are only ever
// exp(G_i - G_j) with j <= i, exp(G_i) or exp(G_C - G_i) (never a positive exponent, so gates at
// the lower bound g = -5 per step cannot overflow). The tensor-core products of the backward
// (kda_bwd_products_kernel) split each fp32 operand x into bf16 hi = bf16(x), lo = bf16(x - hi)
// and sum hi·hi + hi·lo + lo·hi on mma.sync m16n8k16 with fp32 accumulation: relative error
// ~1e-5, close to fp32 (bf16 appears only as MMA operands).
//
// Workspace layouts (bh = b * HV + hv, n = chunk, i = row in the chunk, padded to C rows):
//   [K]-wide rows:  ((bh * NC + n) * C + i) * K + d      (W, q ⊙ e^G, k ⊙ e^{G_C - G}, dG,
//                                                         products P0..P2)
//   [V]-wide rows:  ((bh * NC + n) * C + i) * V + e      (U, Vn, dVn)
//   [C]-wide rows:  ((bh * NC + n) * C + i) * C + j      (saved Aqk, M, products P3, P4)
//   per chunk:      (bh * NC + n) * K + d                (e^{G_C}, rowsum(S ⊙ dS))
//   states:         ((bh * NC + n) * K + d) * V + e      (entry state of chunk n / dS leaving n)
// Every matrix of the fp32-FMA kernels lives in fp32 shared memory with rows padded by one element
// so that column walks are free of bank conflicts.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace moewb::engine::cuda::kda_detail {

using bf16 = __nv_bfloat16;

// Inputs, workspaces and outputs of kda_bwd_products_kernel and kda_bwd_kernel (see
// KdaChunkBackwardArgs in kda_cuda_kernels.h for the engine's view of the same buffers).
struct IntraBwdArgs {
  const bf16 *q, *k, *v, *dO;                 // [N, H*K], [N, H*K], [N, HV*V], [N, HV*V]
  const float *g, *beta, *savedM;             // [N, HV*K], [N, HV], [B*HV, NC*C, C]
  const float *states, *dStates;              // [B*HV*NC, K, V] entry states, dS leaving chunks
  const float *vn, *dvn;                      // [R, V]
  float *dqAcc, *dkAcc;                       // [N, H*K] fp32, zeroed, added into atomically
  float* dGWork;                              // [R, K] scratch
  bf16* dv;                                   // [N, HV*V]
  float *dg, *dbeta;                          // [N, HV*K], [N, HV]
  float *p0, *p1, *p2;                        // [R, K] dO S^T, Vn dS^T, dVn S^T (then scratch)
  float *p3, *p4;                             // [R, C] dO Vn^T, dVn v^T
  float* sds;                                 // [B*HV*NC, K] rowsum(S ⊙ dS)
};

constexpr int kThreads = 256;
constexpr int kBwdThreads = 512;  // kda_bwd_kernel: one CTA (~200 KB smem) per SM, 16 warps
constexpr int kVTile = 16;  // value columns per CTA of the recurrent kernels

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

__device__ inline ChunkAt chunkAt(const CoreArgs& a, int64_t bh, int64_t n) {
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

// Loads q (skipped when qs is null), k (as fp32) and G = cumsum(g) of one chunk into [C, K+1]
// buffers; rows >= c are zero. Ends with a barrier.
__device__ inline void loadChunkQkG(const CoreArgs& a, const ChunkAt& at, const bf16* q,
                                    const bf16* k, const float* g, float* qs, float* ks,
                                    float* gs) {
  const int kd = int(a.keyDim), ld = kd + 1, cMax = int(a.chunk);
  const int64_t qkStride = a.heads * a.keyDim, gStride = a.valueHeads * a.keyDim;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float qv = 0.f, kv = 0.f, gv = 0.f;
    if (i < at.c) {
      const int64_t row = at.row0 + i;
      if (qs != nullptr) qv = __bfloat162float(q[row * qkStride + at.qkCol + d]);
      kv = __bfloat162float(k[row * qkStride + at.qkCol + d]);
      gv = g[row * gStride + at.gCol + d];
    }
    if (qs != nullptr) qs[i * ld + d] = qv;
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
  return 2 * c * (kd + 1) + 2 * c * (c + 1) + c;
}

// One CTA per (chunk, b * HV + hv). With computeM: the decayed Aqk and L, M = (I + L)^{-1}, both
// written to the saved tensors; otherwise M is read from `savedM`. Then the WY factors W, U and
// the decayed q / k and e^{G_C} into the workspaces. q is read from global memory (L1) rather
// than staged, so the CTA needs ~99 KB of shared memory at K = 128, C = 64 (two CTAs per SM).
__global__ void kda_intra_fwd_kernel(CoreArgs a, const bf16* q, const bf16* k, const bf16* v,
                                     const float* g, const float* beta, bool computeM,
                                     float* savedAqk, float* savedM, float* wOut, float* uOut,
                                     float* qgOut, float* kDecOut, float* eGCOut) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* ks = smem;                    // [C, K+1] k, later k ⊙ e^G
  float* gs = ks + cMax * ld;          // [C, K+1] G
  float* ls = gs + cMax * ld;          // [C, C+1] L
  float* ms = ls + cMax * ldc;         // [C, C+1] M
  float* betas = ms + cMax * ldc;      // [C]
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? beta[(at.row0 + i) * a.valueHeads + at.vCol / vd] : 0.f;
  }
  loadChunkQkG(a, at, q, k, g, nullptr, ks, gs);
  const int64_t savedBase = at.slot * cMax * cMax;
  const int64_t qkStride = a.heads * a.keyDim;
  if (computeM) {
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
      const int i = idx / cMax, j = idx % cMax;
      float aqk = 0.f, l = 0.f;
      if (i < c && j <= i) {
        const bf16* qi = q + (at.row0 + i) * qkStride + at.qkCol;  // same row across the warp
        const float* ki = ks + i * ld;
        const float* kj = ks + j * ld;
        const float* gi = gs + i * ld;
        const float* gj = gs + j * ld;
        for (int d = 0; d < kd; ++d) {
          const float z = kj[d] * expf(gi[d] - gj[d]);
          aqk += __bfloat162float(qi[d]) * z;
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
  // Decayed q and k; ks becomes k ⊙ e^G (each thread rewrites only its own elements; the last
  // readers of other rows of ks were before the barrier after the Aqk / L loop).
  const int64_t kBase = at.slot * cMax * kd;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float qg = 0.f, kDec = 0.f, kg = 0.f;
    if (i < c) {
      const float gi = gs[i * ld + d];
      const float eG = expf(gi);
      qg = __bfloat162float(q[(at.row0 + i) * qkStride + at.qkCol + d]) * eG;
      kg = ks[i * ld + d] * eG;
      kDec = ks[i * ld + d] * expf(gs[(c - 1) * ld + d] - gi);
    }
    qgOut[kBase + idx] = qg;
    kDecOut[kBase + idx] = kDec;
    ks[i * ld + d] = kg;
  }
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {
    eGCOut[at.slot * kd + d] = expf(gs[(c - 1) * ld + d]);
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float w = 0.f;
    for (int j = 0; j <= i && j < c; ++j) w += ms[i * ldc + j] * betas[j] * ks[j * ld + d];
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
__device__ inline void loadRows(const float* src, int c, int kd, float* dst) {
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

// ---- Tensor-core products of the backward ------------------------------------------------------

// d += a b (m16n8k16, bf16 operands, fp32 accumulators; fragment layouts of the PTX ISA).
__device__ __forceinline__ void mmaBf16(float (&d)[4], const uint32_t (&a)[4],
                                        const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Splits two fp32 values into packed bf16 hi = bf16(x) and lo = bf16(x - hi) (low half = x.x).
__device__ __forceinline__ void splitBf16(float2 x, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x.x, x.y);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x.x - hf.x, x.y - hf.y);
  memcpy(&hi, &h, sizeof(hi));
  memcpy(&lo, &l, sizeof(lo));
}

__device__ __forceinline__ float toFloat(float x) { return x; }
__device__ __forceinline__ float toFloat(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const bf16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  __nv_bfloat162 lo, hi;
  memcpy(&lo, &raw.x, sizeof(lo));
  memcpy(&hi, &raw.y, sizeof(hi));
  const float2 a = __bfloat1622float2(lo), b = __bfloat1622float2(hi);
  return make_float4(a.x, a.y, b.x, b.y);
}

// Stages rows [0, rows) x columns [0, vpad) of a row-major fp32 / bf16 source (row stride
// `stride` elements) as fp32 into shared rows of stride ld (a multiple of 4); rows >= valid and
// columns >= vd are zero. One warp per row, 4 columns per lane (vector loads when aligned).
template <typename T>
__device__ inline void stageRows(float* dst, int ld, const T* src, int64_t stride, int rows,
                                 int valid, int vd, int vpad) {
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const bool vec = (vd & 3) == 0 && (stride & 3) == 0 &&
                   (reinterpret_cast<uintptr_t>(src) & (4 * sizeof(T) - 1)) == 0;
#pragma unroll 4
  for (int r = warp; r < rows; r += warps) {
    for (int c = 4 * lane; c < vpad; c += 128) {
      float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
      if (r < valid) {
        const T* q = src + r * stride + c;
        if (vec) {
          if (c < vd) x = load4(q);
        } else {
          x.x = c < vd ? toFloat(q[0]) : 0.f;
          x.y = c + 1 < vd ? toFloat(q[1]) : 0.f;
          x.z = c + 2 < vd ? toFloat(q[2]) : 0.f;
          x.w = c + 3 < vd ? toFloat(q[3]) : 0.f;
        }
      }
      *reinterpret_cast<float4*>(dst + r * ld + c) = x;
    }
  }
}

constexpr int kProdThreads = 256;  // 8 warps: 4 row tiles of 16 x 2 column halves
constexpr int kProdRows = 64;      // rows of X staged (>= C)
constexpr int kProdCols = 128;     // rows of Y staged (>= K and >= C)
constexpr int kNumProducts = 5;

// Row stride (floats) of the staged operands: the reduction length rounded up to 16, plus 8 so
// that the float2 fragment loads of a half warp hit 32 distinct banks.
__host__ __device__ inline int productLd(int64_t vd) { return int((vd + 15) / 16 * 16 + 8); }

// Shared bytes of kda_bwd_products_kernel.
inline int64_t productsSharedBytes(int64_t vd) {
  return int64_t(kProdRows + kProdCols) * productLd(vd) * int64_t(sizeof(float));
}

// One CTA per (chunk, b * HV + hv, product z) computes P_z = X Y^T over the value dim V:
//   z = 0: dO S^T   [C, K]      z = 1: Vn dS^T [C, K] (and rowsum(S ⊙ dS) [K])
//   z = 2: dVn S^T  [C, K]      z = 3: dO Vn^T [C, C]      z = 4: dVn v^T [C, C]
// S / dS are the chunk's entry state / the gradient of the state leaving it. Rows of X (tokens)
// >= c and padding are zero, so padded rows / columns of the outputs are written as zeros.
// Operands are staged in fp32 shared memory and split into bf16 hi + lo for the MMAs.
__global__ void __launch_bounds__(kProdThreads)
    kda_bwd_products_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = productLd(vd), vpad = ld - 8;
  const int z = int(blockIdx.z);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int nCols = z < 3 ? kd : cMax;  // columns of P_z = rows of Y
  const int nPad = (nCols + 7) / 8 * 8;
  float* xs = smem;                     // [64, ld] X
  float* ys = xs + kProdRows * ld;      // [128, ld] Y
  const int64_t oStride = a.valueHeads * a.valueDim;
  const int64_t vBase = at.slot * cMax * vd;
  const int64_t sBase = at.slot * a.keyDim * a.valueDim;
  if (z == 0 || z == 3) {
    stageRows(xs, ld, p.dO + at.row0 * oStride + at.vCol, oStride, kProdRows, c, vd, vpad);
  } else {
    stageRows(xs, ld, (z == 1 ? p.vn : p.dvn) + vBase, vd, kProdRows, c, vd, vpad);
  }
  if (z < 3) {
    stageRows(ys, ld, (z == 1 ? p.dStates : p.states) + sBase, vd, nPad, nCols, vd, vpad);
  } else if (z == 3) {
    stageRows(ys, ld, p.vn + vBase, vd, nPad, c, vd, vpad);
  } else {
    stageRows(ys, ld, p.v + at.row0 * oStride + at.vCol, oStride, nPad, c, vd, vpad);
  }
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  __syncthreads();
  if (z == 1) {  // rowsum(S ⊙ dS), one row per warp, fixed shuffle order; dS from the staged ys
    for (int d = warp; d < kd; d += kProdThreads / 32) {
      float acc = 0.f;
      for (int e = lane; e < vd; e += 32) acc += p.states[sBase + d * vd + e] * ys[d * ld + e];
      for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
      if (lane == 0) p.sds[at.slot * kd + d] = acc;
    }
  }
  const int gid = lane >> 2, tig = lane & 3;
  const int m0 = (warp & 3) * 16;
  const int nTiles = nPad / 8, perWarp = (nTiles + 1) / 2, ntBegin = (warp >> 2) * perWarp;
  if (m0 >= cMax) return;  // warp-uniform; no barrier follows
  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  for (int k0 = 0; k0 < vpad; k0 += 16) {
    const float* x0 = xs + (m0 + gid) * ld + k0 + 2 * tig;
    const float* x1 = x0 + 8 * ld;
    uint32_t ah[4], al[4];
    splitBf16(*reinterpret_cast<const float2*>(x0), ah[0], al[0]);
    splitBf16(*reinterpret_cast<const float2*>(x1), ah[1], al[1]);
    splitBf16(*reinterpret_cast<const float2*>(x0 + 8), ah[2], al[2]);
    splitBf16(*reinterpret_cast<const float2*>(x1 + 8), ah[3], al[3]);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int nt = ntBegin + j;
      if (j < perWarp && nt < nTiles) {
        const float* y0 = ys + (nt * 8 + gid) * ld + k0 + 2 * tig;
        uint32_t bh[2], bl[2];
        splitBf16(*reinterpret_cast<const float2*>(y0), bh[0], bl[0]);
        splitBf16(*reinterpret_cast<const float2*>(y0 + 8), bh[1], bl[1]);
        mmaBf16(acc[j], al, bh);
        mmaBf16(acc[j], ah, bl);
        mmaBf16(acc[j], ah, bh);
      }
    }
  }
  float* out = z == 0 ? p.p0 : z == 1 ? p.p1 : z == 2 ? p.p2 : z == 3 ? p.p3 : p.p4;
  out += at.slot * cMax * nCols;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int nt = ntBegin + j;
    if (j < perWarp && nt < nTiles) {
      const int col = nt * 8 + 2 * tig;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + gid + 8 * h;
        if (row >= cMax) continue;
        if (col < nCols) out[row * nCols + col] = acc[j][2 * h];
        if (col + 1 < nCols) out[row * nCols + col + 1] = acc[j][2 * h + 1];
      }
    }
  }
}

// ---- Per-chunk backward ------------------------------------------------------------------------

// Shared floats of kda_bwd_kernel.
inline int64_t intraBwdSharedFloats(int64_t c, int64_t kd) {
  return 4 * c * (kd + 1) + 4 * c * (c + 1) + 2 * c;
}

// One CTA per (chunk, b * HV + hv): the rest of §2.5 for one chunk given the products P0..P4 and
// rowsum(S ⊙ dS) of kda_bwd_products_kernel, Vn and dVn. Every reduction runs in a fixed order
// (no shared-memory atomics); dq / dk are added into the fp32 accumulators with global atomics,
// each element by one thread of one CTA when HV == H (run-to-run deterministic), by the CTAs of
// the value heads of a group otherwise. p1 is reused for the key terms of dG_C and p0 for the
// beta terms of the pairwise products (each element rewritten by the thread that read it).
__global__ void __launch_bounds__(kBwdThreads) kda_bwd_kernel(CoreArgs a, IntraBwdArgs p) {
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
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int64_t hv = at.vCol / vd;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? p.beta[(at.row0 + i) * a.valueHeads + hv] : 0.f;
  }
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    ms[(idx / cMax) * ldc + idx % cMax] = p.savedM[at.slot * cMax * cMax + idx];
  }
  loadChunkQkG(a, at, p.q, p.k, p.g, qs, ks, gs);
  const int64_t vBase = at.slot * cMax * vd, kBase = at.slot * cMax * kd;
  const int64_t cBase = at.slot * cMax * cMax;
  const int64_t oStride = a.valueHeads * a.valueDim, qkStride = a.heads * a.keyDim;
  const float* dvn = p.dvn + vBase;
  float* dG = p.dGWork + kBase;
  float* p0 = p.p0 + kBase;
  float* p1 = p.p1 + kBase;
  const float* p2 = p.p2 + kBase;
  // Inter-chunk terms: dq += (dO S^T) ⊙ e^G, dk += (Vn dS^T) ⊙ e^{G_C - G}, dW = -dVn S^T.
  for (int idx = threadIdx.x; idx < c * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    const float sq = p0[idx], skd = p1[idx], sw = p2[idx];
    const float gi = gs[i * ld + d];
    const float eG = expf(gi), eR = expf(gs[(c - 1) * ld + d] - gi);
    dws[i * ld + d] = -sw;
    const int64_t qkAt = (at.row0 + i) * qkStride + at.qkCol + d;
    atomicAdd(p.dqAcc + qkAt, sq * eG);
    atomicAdd(p.dkAcc + qkAt, skd * eR);
    const float keyTerm = ks[i * ld + d] * eR * skd;
    dG[idx] = qs[i * ld + d] * eG * sq - keyTerm;
    p1[idx] = keyTerm;  // summed into dG_C in the final loop
  }
  // dAqk = tril(dO Vn^T); dT starts as dVn v^T (lower triangle incl. the diagonal).
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    const bool in = i < c && j <= i;
    dAqk[i * ldc + j] = in ? p.p3[cBase + idx] : 0.f;
    dT[i * ldc + j] = in ? p.p4[cBase + idx] : 0.f;
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
    dG[idx] += ks[j * ld + d] * eG * dKg;
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
    dG[idx] += qi * daQ + bi * ki * daL - ki * dB;
    p0[idx] = ki * daL;  // summed into dbeta_i below
  }
  __syncthreads();
  // dg = reverse cumsum of dG within the chunk; the last row also gets
  // dG_C = e^{G_C} rowsum(S ⊙ dS) + sum_i key terms.
  const int64_t gStride = a.valueHeads * a.keyDim;
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {
    float acc = expf(gs[(c - 1) * ld + d]) * p.sds[at.slot * kd + d];
    for (int i = 0; i < c; ++i) acc += p1[i * kd + d];
    for (int i = c - 1; i >= 0; --i) {
      acc += dG[i * kd + d];
      p.dg[(at.row0 + i) * gStride + at.gCol + d] = acc;
    }
  }
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    float acc = dbetas[i];
    for (int d = 0; d < kd; ++d) acc += p0[i * kd + d];
    p.dbeta[(at.row0 + i) * a.valueHeads + hv] = acc;
  }
}

inline dim3 recurrentGrid(const CoreArgs& args) {
  return dim3(unsigned(args.batch * args.valueHeads),
              unsigned((args.valueDim + kVTile - 1) / kVTile));
}

inline dim3 chunkGrid(const CoreArgs& args, unsigned z = 1) {
  return dim3(unsigned(args.numChunks), unsigned(args.batch * args.valueHeads), z);
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KB.
template <typename Kernel>
cudaError_t allowSharedBytes(Kernel kernel, int64_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

// The launchers: each queues one kernel on `stream` and returns the attribute or launch error.
// Arguments as in the kernels above (and kda_cuda_kernels.h).
inline cudaError_t launchIntraForward(cudaStream_t stream, const CoreArgs& args, const bf16* q,
                                      const bf16* k, const bf16* v, const float* g,
                                      const float* beta, bool computeM, float* savedAqk,
                                      float* savedM, float* w, float* u, float* qg, float* kDec,
                                      float* eGC) {
  const int64_t bytes = intraFwdSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_intra_fwd_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_intra_fwd_kernel<<<chunkGrid(args), kThreads, size_t(bytes), stream>>>(
      args, q, k, v, g, beta, computeM, savedAqk, savedM, w, u, qg, kDec, eGC);
  return cudaGetLastError();
}

inline cudaError_t launchRecurrentForward(cudaStream_t stream, const CoreArgs& args,
                                          const float* w, const float* u, const float* qg,
                                          const float* kDec, const float* eGC, const float* aqk,
                                          const float* initialState, float* statesOut,
                                          float* vnOut, bf16* o, float* finalState) {
  const int64_t bytes = recurrentSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_fwd_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_fwd_kernel<<<recurrentGrid(args), kThreads, size_t(bytes), stream>>>(
      args, w, u, qg, kDec, eGC, aqk, initialState, statesOut, vnOut, o, finalState);
  return cudaGetLastError();
}

inline cudaError_t launchStateBackward(cudaStream_t stream, const CoreArgs& args, const bf16* dO,
                                       const float* dFinalState, const float* w, const float* qg,
                                       const float* kDec, const float* eGC, const float* aqk,
                                       float* dStatesOut, float* dvnOut, float* dInitialState) {
  const int64_t bytes = recurrentSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_dh_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_dh_kernel<<<recurrentGrid(args), kThreads, size_t(bytes), stream>>>(
      args, dO, dFinalState, w, qg, kDec, eGC, aqk, dStatesOut, dvnOut, dInitialState);
  return cudaGetLastError();
}

// The five products and rowsum(S ⊙ dS): reads states, dStates, dO, v, vn, dvn; writes p0..p4, sds.
inline cudaError_t launchBackwardProducts(cudaStream_t stream, const CoreArgs& args,
                                          const IntraBwdArgs& in) {
  const int64_t bytes = productsSharedBytes(args.valueDim);
  cudaError_t err = allowSharedBytes(kda_bwd_products_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_products_kernel<<<chunkGrid(args, kNumProducts), kProdThreads, size_t(bytes), stream>>>(
      args, in);
  return cudaGetLastError();
}

// The per-chunk backward (after launchBackwardProducts on the same `in`).
inline cudaError_t launchChunkBackward(cudaStream_t stream, const CoreArgs& args,
                                       const IntraBwdArgs& in) {
  const int64_t bytes = intraBwdSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
