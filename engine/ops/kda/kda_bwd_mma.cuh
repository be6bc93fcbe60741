// The per-chunk KDA backward with its matrix products on tensor cores (ENGINE-MATH §2.5, the part
// after the products of kda_bwd_products_r3_kernel): a drop-in replacement of kda_bwd_kernel
// (kda_chunk_kernels.cuh) with the same arguments, shared memory, outputs and scratch use. Shared
// by the engine (kda_chunk_cuda.cu) and bench/scratch/kda_chunk_02.cu, which checks it against a
// plain reference and against kda_bwd_kernel.
//
// Needs chunk % 16 == 0, keyDim % 16 == 0, valueDim % 8 == 0 (kdaBwdMmaSupported); other shapes
// run kda_bwd_kernel. One CTA (16 warps) per (chunk, b * HV + hv). Warps own 16 x 8 output tiles
// of mma.sync m16n8k16 with fp32 operands split into bf16 hi + lo (hi·hi + hi·lo + lo·hi, fp32
// accumulation, ~1e-5 relative: see kda_chunk_kernels.cuh); fragments are read with scalar loads
// from the fp32 shared buffers of kda_bwd_kernel ([C, K+1] and [C, C+1] rows).
//   dT  += dW (k ⊙ e^G)^T               (lower block tiles; e^G applied while loading B)
//   dKg  = (M Diag(beta))^T dW,  dv = (M Diag(beta))^T dVn   (block-triangular reduction)
//   X = M^T dM, dL = -strict_tril(X M^T)                     (C x C, block-triangular)
//   the reverse cumsum of dG and the dbeta row sums use all warps (segment sums, shuffles).
//   pairwise products (the old O(C^2 K) exp loop), in 16-token sub-blocks: for a key block J
//   before the query block I, exp(G_i - G_j) = exp(G_i - G_r) exp(G_r - G_j) with r the last row
//   of J for dq / dk-side sums over j (or r the first row of I for the sums over i), so both
//   factors have exponents <= 0 and the block is one 16 x 16 x 8 product scaled per element.
//   Diagonal blocks (I == J) stay elementwise fp32 (exp(G_i - G_j), j <= i, exponent <= 0).
// Every exponent is additionally clamped to <= 0, so padded rows of a partial chunk (G = 0) can
// never produce inf. Reductions run in a fixed order; the dq / dk terms of the earlier phases are
// parked in the dead P0..P2 scratch rows and each dq / dk element gets ONE atomic add per CTA (in
// the pairwise phase), so with HV == H the backward stays bitwise run-to-run deterministic (the
// rule of kda_bwd_kernel) and does 2 instead of 5 atomics per element.
#pragma once

#include "ops/kda/kda_chunk_kernels.cuh"
#include "ops/kda/kda_recurrent_mma.cuh"  // mma3

namespace moewb::engine::cuda::kda_detail {

// Shapes kda_bwd_mma_kernel runs (the engine runs kda_bwd_kernel for the others).
__host__ __device__ inline bool kdaBwdMmaSupported(const CoreArgs& a) {
  return a.chunk % 16 == 0 && a.keyDim % 16 == 0 && a.valueDim % 8 == 0;
}

// e^x with x clamped to <= 0 (ex2.approx; relative error ~1e-6 for |x| <= 100).
__device__ __forceinline__ float expNeg(float x) { return __expf(fminf(x, 0.f)); }

// A fragment (16 x 16, row major) of fa(m, k), split into hi / lo.
template <typename FA>
__device__ __forceinline__ void loadFragA(uint32_t (&hi)[4], uint32_t (&lo)[4], const FA& fa) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  splitBf16(make_float2(fa(g, t2), fa(g, t2 + 1)), hi[0], lo[0]);
  splitBf16(make_float2(fa(g + 8, t2), fa(g + 8, t2 + 1)), hi[1], lo[1]);
  splitBf16(make_float2(fa(g, t2 + 8), fa(g, t2 + 9)), hi[2], lo[2]);
  splitBf16(make_float2(fa(g + 8, t2 + 8), fa(g + 8, t2 + 9)), hi[3], lo[3]);
}

// B fragment (16 x 8, k x n) of fb(k, n), split into hi / lo.
template <typename FB>
__device__ __forceinline__ void loadFragB(uint32_t (&hi)[2], uint32_t (&lo)[2], const FB& fb) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  splitBf16(make_float2(fb(t2, g), fb(t2 + 1, g)), hi[0], lo[0]);
  splitBf16(make_float2(fb(t2 + 8, g), fb(t2 + 9, g)), hi[1], lo[1]);
}

// One CTA per (chunk, b * HV + hv); see the file comment and kda_bwd_kernel for the maths.
__global__ void __launch_bounds__(kBwdThreads) kda_bwd_mma_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ float smem[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const int ld = kd + 1, ldc = cMax + 1;
  float* qs = smem;                 // [C, K+1]
  float* ks = qs + cMax * ld;       // [C, K+1]
  float* gs = ks + cMax * ld;       // [C, K+1] G
  float* dws = gs + cMax * ld;      // [C, K+1] dW (rows >= c zero)
  float* ms = dws + cMax * ld;      // [C, C+1] M
  float* dAqk = ms + cMax * ldc;    // [C, C+1]
  float* dT = dAqk + cMax * ldc;    // [C, C+1] dT, then dM, then dL
  float* xs = dT + cMax * ldc;      // [C, C+1] M^T dM
  float* betas = xs + cMax * ldc;   // [C]
  float* dbetas = betas + cMax;     // [C]
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int64_t hv = at.vCol / vd;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const int g = lane >> 2, t2 = (lane & 3) * 2;
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
  float* p2 = p.p2 + kBase;
  // Inter-chunk terms: dq += (dO S^T) ⊙ e^G (parked in p2), dk += (Vn dS^T) ⊙ e^{G_C - G}
  // (parked in p1; the key term of dG_C is k ⊙ that), dW = -dVn S^T. Each element is read and
  // rewritten by the same thread.
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    if (i >= c) {
      dws[i * ld + d] = 0.f;
      continue;
    }
    const float sq = p0[idx], skd = p1[idx], sw = p2[idx];
    const float gi = gs[i * ld + d];
    const float eG = expf(gi), eR = expf(gs[(c - 1) * ld + d] - gi);
    dws[i * ld + d] = -sw;
    p2[idx] = sq * eG;
    p1[idx] = skd * eR;
    dG[idx] = qs[i * ld + d] * eG * sq - ks[i * ld + d] * eR * skd;
  }
  // dAqk = tril(dO Vn^T); dT starts as dVn v^T (lower triangle incl. the diagonal).
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    const bool in = i < c && j <= i;
    dAqk[i * ldc + j] = in ? p.p3[cBase + idx] : 0.f;
    dT[i * ldc + j] = in ? p.p4[cBase + idx] : 0.f;
  }
  __syncthreads();
  const int nb = (c + 15) / 16;  // 16-row blocks holding valid rows
  // dT += dW (k ⊙ e^G)^T on the lower block tiles (16 rows i x 8 columns j, j <= i written).
  {
    const int nTiles = nb * (cMax / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (cMax / 8), nt = tile % (cMax / 8);
      if (nt > 2 * mb + 1) continue;
      const int i0 = 16 * mb, j0 = 8 * nt;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        loadFragA(ah, al, [&](int m, int kk) { return dws[(i0 + m) * ld + k0 + kk]; });
        loadFragB(bh, bl, [&](int kk, int n) {
          const int at2 = (j0 + n) * ld + k0 + kk;
          return ks[at2] * expNeg(gs[at2]);
        });
        mma3(acc, ah, al, bh, bl);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + g + 8 * (r >> 1), j = j0 + t2 + (r & 1);
        if (i < c && j <= i) dT[i * ldc + j] += acc[r];
      }
    }
  }
  // dKg = (M Diag(beta))^T dW: dk += dKg ⊙ e^G (parked in p0, dead since the first loop),
  // dG += k ⊙ e^G ⊙ dKg.
  {
    const int nTiles = nb * (kd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (kd / 8), d0 = 8 * (tile % (kd / 8));
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int kb = mb; kb < nb; ++kb) {  // M[i, j] = 0 for i < j
        uint32_t ah[4], al[4], bh[2], bl[2];
        loadFragA(ah, al, [&](int m, int kk) { return ms[(16 * kb + kk) * ldc + 16 * mb + m]; });
        loadFragB(bh, bl, [&](int kk, int n) { return dws[(16 * kb + kk) * ld + d0 + n]; });
        mma3(acc, ah, al, bh, bl);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 16 * mb + g + 8 * (r >> 1), d = d0 + t2 + (r & 1);
        if (j >= c) continue;
        const float eG = expf(gs[j * ld + d]);
        const float dKg = acc[r] * betas[j];
        p0[j * kd + d] = dKg * eG;
        dG[j * kd + d] += ks[j * ld + d] * eG * dKg;
      }
    }
  }
  // dv = (M Diag(beta))^T dVn (dVn rows >= c read as zero).
  {
    const int nTiles = nb * (vd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (vd / 8), e0 = 8 * (tile % (vd / 8));
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int kb = mb; kb < nb; ++kb) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        loadFragA(ah, al, [&](int m, int kk) { return ms[(16 * kb + kk) * ldc + 16 * mb + m]; });
        loadFragB(bh, bl, [&](int kk, int n) {
          const int i = 16 * kb + kk;
          return i < c ? dvn[i * vd + e0 + n] : 0.f;
        });
        mma3(acc, ah, al, bh, bl);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 16 * mb + g + 8 * (r >> 1), e = e0 + t2 + (r & 1);
        if (j >= c) continue;
        p.dv[(at.row0 + j) * oStride + at.vCol + e] = __float2bfloat16(acc[r] * betas[j]);
      }
    }
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
  // X = M^T dM [C, C] (dM = 0 above the diagonal and in rows / columns >= c, M likewise):
  // row block mb reduces over t blocks >= mb.
  for (int tile = warp; tile < (cMax / 16) * (cMax / 8); tile += warps) {
    const int mb = tile / (cMax / 8), j0 = 8 * (tile % (cMax / 8));
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int kb = mb; kb < nb; ++kb) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      loadFragA(ah, al, [&](int m, int kk) { return ms[(16 * kb + kk) * ldc + 16 * mb + m]; });
      loadFragB(bh, bl, [&](int kk, int n) { return dT[(16 * kb + kk) * ldc + j0 + n]; });
      mma3(acc, ah, al, bh, bl);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      xs[(16 * mb + g + 8 * (r >> 1)) * ldc + j0 + t2 + (r & 1)] = acc[r];
    }
  }
  __syncthreads();
  // dL = -strict_tril(X M^T), written over dM (M[j, t] = 0 for t > j: t blocks <= j's block).
  for (int tile = warp; tile < (cMax / 16) * (cMax / 8); tile += warps) {
    const int mb = tile / (cMax / 8), j0 = 8 * (tile % (cMax / 8));
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kbEnd = min(j0 / 16 + 1, nb);
    for (int kb = 0; kb < kbEnd; ++kb) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      loadFragA(ah, al, [&](int m, int kk) { return xs[(16 * mb + m) * ldc + 16 * kb + kk]; });
      loadFragB(bh, bl, [&](int kk, int n) { return ms[(j0 + n) * ldc + 16 * kb + kk]; });
      mma3(acc, ah, al, bh, bl);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 16 * mb + g + 8 * (r >> 1), j = j0 + t2 + (r & 1);
      dT[i * ldc + j] = (i < c && j < i) ? -acc[r] : 0.f;
    }
  }
  __syncthreads();
  // Pairwise products Aqk (a = q, b = k) and L (a = beta k, b = k), E = exp(G_i - G_j), j <= i:
  //   daQ_i = sum_j dAqk_ij k_j E_ij, daL_i = sum_j dL_ij k_j E_ij,
  //   dB_j = sum_{i >= j} (dAqk_ij q_i + dL_ij beta_i k_i) E_ij.
  // Warp tile: rows 16 X .. +15 (the lane's rows g, g + 8) x key columns d0 .. +7 (t2, t2 + 1).
  {
    const int nTiles = nb * (kd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int X = tile / (kd / 8), d0 = 8 * (tile % (kd / 8));
      const int x0 = 16 * X;
      float aq[4] = {0.f, 0.f, 0.f, 0.f}, aL[4] = {0.f, 0.f, 0.f, 0.f};
      float db[4] = {0.f, 0.f, 0.f, 0.f};
      // Key blocks J < X (all rows valid): reference r = last row of J.
      for (int J = 0; J < X; ++J) {
        const int j0 = 16 * J, r = j0 + 15;
        uint32_t bh[2], bl[2], ah[4], al[4];
        loadFragB(bh, bl, [&](int kk, int n) {
          const int d = d0 + n;
          return ks[(j0 + kk) * ld + d] * expNeg(gs[r * ld + d] - gs[(j0 + kk) * ld + d]);
        });
        float tq[4] = {0.f, 0.f, 0.f, 0.f}, tl[4] = {0.f, 0.f, 0.f, 0.f};
        loadFragA(ah, al, [&](int m, int kk) { return dAqk[(x0 + m) * ldc + j0 + kk]; });
        mma3(tq, ah, al, bh, bl);
        loadFragA(ah, al, [&](int m, int kk) { return dT[(x0 + m) * ldc + j0 + kk]; });
        mma3(tl, ah, al, bh, bl);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
          const float f = expNeg(gs[i * ld + d] - gs[r * ld + d]);
          aq[q] += f * tq[q];
          aL[q] += f * tl[q];
        }
      }
      // Query blocks I > X (first row valid): reference r = first row of I.
      for (int I = X + 1; I < nb; ++I) {
        const int i0 = 16 * I;
        uint32_t bh[2], bl[2], ah[4], al[4];
        float tb[4] = {0.f, 0.f, 0.f, 0.f};
        loadFragA(ah, al, [&](int m, int kk) { return dAqk[(i0 + kk) * ldc + x0 + m]; });
        loadFragB(bh, bl, [&](int kk, int n) {
          const int d = d0 + n, i = i0 + kk;
          return qs[i * ld + d] * expNeg(gs[i * ld + d] - gs[i0 * ld + d]);
        });
        mma3(tb, ah, al, bh, bl);
        loadFragA(ah, al, [&](int m, int kk) { return dT[(i0 + kk) * ldc + x0 + m]; });
        loadFragB(bh, bl, [&](int kk, int n) {
          const int d = d0 + n, i = i0 + kk;
          return betas[i] * ks[i * ld + d] * expNeg(gs[i * ld + d] - gs[i0 * ld + d]);
        });
        mma3(tb, ah, al, bh, bl);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int j = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
          db[q] += expNeg(gs[i0 * ld + d] - gs[j * ld + d]) * tb[q];
        }
      }
      // Diagonal block, elementwise: j in [x0, i] and i' in [j, x0 + 15] (rows < c).
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
        if (i >= c) continue;
        const float gi = gs[i * ld + d];
        float sq = 0.f, sl = 0.f, sb = 0.f;
        for (int j = x0; j <= i; ++j) {
          const float z = ks[j * ld + d] * expNeg(gi - gs[j * ld + d]);
          sq += dAqk[i * ldc + j] * z;
          sl += dT[i * ldc + j] * z;
        }
        const int rEnd = min(x0 + 16, c);
        for (int r = i; r < rEnd; ++r) {
          const float e = expNeg(gs[r * ld + d] - gi);
          sb += (dAqk[r * ldc + i] * qs[r * ld + d] + dT[r * ldc + i] * betas[r] * ks[r * ld + d]) *
                e;
        }
        aq[q] += sq;
        aL[q] += sl;
        db[q] += sb;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
        if (i >= c) continue;
        const float bi = betas[i], qi = qs[i * ld + d], ki = ks[i * ld + d];
        const int64_t qkAt = (at.row0 + i) * qkStride + at.qkCol + d;
        const int at2 = i * kd + d;
        atomicAdd(p.dqAcc + qkAt, p2[at2] + aq[q]);
        atomicAdd(p.dkAcc + qkAt, (p1[at2] + p0[at2]) + (bi * aL[q] + db[q]));
        dG[at2] += qi * aq[q] + bi * ki * aL[q] - ki * db[q];
        p0[at2] = ki * aL[q];  // summed into dbeta_i below
      }
    }
  }
  __syncthreads();
  // dg = reverse cumsum of dG within the chunk; the last row also gets
  // dG_C = e^{G_C} rowsum(S ⊙ dS) + sum_i key terms. One thread per (16-row segment s, d):
  // segment sums of dG and of the key terms into xs (dead now), then each segment's reverse scan
  // from the sums of the segments after it (fixed order).
  const int64_t gStride = a.valueHeads * a.keyDim;
  float* segG = xs;                      // [nb, K] (2 (C/16) K <= C (C+1) floats for K <= 128)
  float* segP = xs + (cMax / 16) * kd;   // [nb, K]
  for (int idx = threadIdx.x; idx < nb * kd; idx += blockDim.x) {
    const int sg = idx / kd, d = idx % kd;
    const int iEnd = min(16 * sg + 16, c);
    float sumG = 0.f, sumP = 0.f;
    for (int i = 16 * sg; i < iEnd; ++i) {
      sumG += dG[i * kd + d];
      sumP += ks[i * ld + d] * p1[i * kd + d];  // key terms k ⊙ e^{G_C - G} ⊙ (Vn dS^T)
    }
    segG[sg * kd + d] = sumG;
    segP[sg * kd + d] = sumP;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < nb * kd; idx += blockDim.x) {
    const int sg = idx / kd, d = idx % kd;
    float acc = expf(gs[(c - 1) * ld + d]) * p.sds[at.slot * kd + d];
    for (int t = 0; t < nb; ++t) acc += segP[t * kd + d];
    for (int t = nb - 1; t > sg; --t) acc += segG[t * kd + d];
    for (int i = min(16 * sg + 16, c) - 1; i >= 16 * sg; --i) {
      acc += dG[i * kd + d];
      p.dg[(at.row0 + i) * gStride + at.gCol + d] = acc;
    }
  }
  // dbeta_i = dbetas_i + sum_d p0[i, d]: one warp per row, lanes over d, fixed shuffle order.
  for (int i = warp; i < c; i += warps) {
    float acc = 0.f;
    for (int d = lane; d < kd; d += 32) acc += p0[i * kd + d];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) p.dbeta[(at.row0 + i) * a.valueHeads + hv] = dbetas[i] + acc;
  }
}

// The per-chunk backward on tensor cores (after launchBackwardProductsR3 on the same `in`); the
// caller checks kdaBwdMmaSupported(args).
inline cudaError_t launchChunkBackwardMma(cudaStream_t stream, const CoreArgs& args,
                                          const IntraBwdArgs& in) {
  const int64_t bytes = intraBwdSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_bwd_mma_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_mma_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
