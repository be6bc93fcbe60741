// The chunked KDA core kernels' shared definitions (ENGINE-MATH §2.3 / §2.5; kernel plan, limits
// and costs in kda_cuda.h): the argument structs, the workspace layouts, the tensor-core helpers
// every later kernel uses, and the fp32 intra-chunk forward and per-chunk backward
// (kda_intra_fwd_kernel, kda_bwd_kernel), which the engine runs for the shapes the tensor-core
// kernels do not take (chunk or keyDim not a multiple of 16, valueDim not of 8; kda_intra_mma.cuh,
// kda_intra_r5.cuh, kda_bwd_mma.cuh and kda_bwd_chunk.cuh hold those). kda_chunk_cuda.cu wraps
// the launchers into Status. Needs only the CUDA runtime and cuda_bf16.h. The recurrences are in
// kda_recurrent_r3.cuh, the backward products in kda_products_r3.cuh (their earlier rounds
// were never reached once round 3 ran for every shape, and are gone).
//
// Numerics: the state, every sum and the triangular solve are fp32; decay factors are only ever
// exp(G_i - G_j) with j <= i, exp(G_i) or exp(G_C - G_i) (never a positive exponent, so gates at
// the lower bound g = -5 per step cannot overflow). The tensor-core products split each fp32
// operand x into bf16 hi = bf16(x), lo = bf16(x - hi) and sum hi·hi + hi·lo + lo·hi on mma.sync
// m16n8k16 with fp32 accumulation: relative error ~1e-5, close to fp32 (bf16 appears only as MMA
// operands).
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

#include "runtime/cuda/warp_mma.cuh"

namespace moewb::engine::cuda::kda_detail {

using bf16 = __nv_bfloat16;

// Inputs, workspaces and outputs of the backward products and the per-chunk backward (see
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

// ---- Tensor-core helpers, the backward products' shape ------------------------------------------

// d += a b (m16n8k16, bf16 operands, fp32 accumulators; fragment layouts of the PTX ISA).

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

constexpr int kProdThreads = 256;  // 8 warps: 4 row tiles of 16 x 2 column halves
constexpr int kProdRows = 64;      // rows of X staged (>= C)
constexpr int kProdCols = 128;     // rows of Y staged (>= K and >= C)
constexpr int kNumProducts = 5;

// Row stride (floats) of the staged operands: the reduction length rounded up to 16, plus 8 so
// that the float2 fragment loads of a half warp hit 32 distinct banks.
__host__ __device__ inline int productLd(int64_t vd) { return int((vd + 15) / 16 * 16 + 8); }

// Shared bytes of kda_bwd_products_r3_kernel (kda_products_r3.cuh).
inline int64_t productsSharedBytes(int64_t vd) {
  return int64_t(kProdRows + kProdCols) * productLd(vd) * int64_t(sizeof(float));
}

// ---- Per-chunk backward ------------------------------------------------------------------------

// Shared floats of kda_bwd_kernel.
inline int64_t intraBwdSharedFloats(int64_t c, int64_t kd) {
  return 4 * c * (kd + 1) + 4 * c * (c + 1) + 2 * c;
}

// One CTA per (chunk, b * HV + hv): the rest of §2.5 for one chunk given the products P0..P4 and
// rowsum(S ⊙ dS) of kda_bwd_products_r3_kernel, Vn and dVn. Every reduction runs in a fixed order
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

// The per-chunk backward (after launchBackwardProductsR3 on the same `in`).
inline cudaError_t launchChunkBackward(cudaStream_t stream, const CoreArgs& args,
                                       const IntraBwdArgs& in) {
  const int64_t bytes = intraBwdSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
