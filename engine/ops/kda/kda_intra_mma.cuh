// The KDA intra-chunk forward with its matrix products on tensor cores (ENGINE-MATH §2.3 steps
// 1-4): a drop-in replacement of kda_intra_fwd_kernel (kda_chunk_kernels.cuh) with the same
// arguments, shared memory, outputs and workspace layouts. Shared by the engine
// (kda_chunk_cuda.cu) and bench/scratch/kda_chunk_02.cu.
//
// Needs chunk % 16 == 0, keyDim % 16 == 0, valueDim % 8 == 0 (kdaIntraMmaSupported, the same
// rule as kdaBwdMmaSupported); other shapes run kda_intra_fwd_kernel. One CTA (8 warps) per
// (chunk, b * HV + hv); warps own 16 x 8 output tiles of mma.sync m16n8k16 with fp32 operands
// split into bf16 hi + lo (hi·hi + hi·lo + lo·hi, fp32 accumulation, ~1e-5 relative).
//   Aqk, L off the diagonal, 16-token blocks J < I: with r the first row of I,
//     exp(G_i - G_j) = exp(G_i - G_r) exp(G_r - G_j) (both exponents <= 0), so
//     Aqk[I, J] = (q_I ⊙ e^{G_I - G_r}) (k_J ⊙ e^{G_r - G_J})^T and L[I, J] = beta_I ⊙ the
//     same with k_I: one product over K per block pair, factors applied while loading fragments.
//   Aqk, L on the 16 x 16 diagonal blocks: elementwise fp32 (exp(G_i - G_j), j <= i).
//   M = (I + L)^{-1}: forward substitution in fp32 (as kda_intra_fwd_kernel).
//   W = M Diag(beta) (k ⊙ e^G), U = M Diag(beta) v: block-triangular products over the chunk.
// Every exponent is clamped to <= 0 as well, so padded rows (G = 0) never produce inf.
#pragma once

#include "ops/kda/kda_bwd_mma.cuh"  // loadFragA / loadFragB / expNeg
#include "ops/kda/kda_chunk_kernels.cuh"
#include "ops/kda/kda_recurrent_mma.cuh"  // mma3

namespace moewb::engine::cuda::kda_detail {

// Shapes kda_intra_fwd_mma_kernel runs (the engine runs kda_intra_fwd_kernel for the others).
__host__ __device__ inline bool kdaIntraMmaSupported(const CoreArgs& a) {
  return kdaBwdMmaSupported(a);
}

// One CTA per (chunk, b * HV + hv); outputs as kda_intra_fwd_kernel.
__global__ void __launch_bounds__(kThreads)
    kda_intra_fwd_mma_kernel(CoreArgs a, const bf16* q, const bf16* k, const bf16* v,
                             const float* g, const float* beta, bool computeM, float* savedAqk,
                             float* savedM, float* wOut, float* uOut, float* qgOut,
                             float* kDecOut, float* eGCOut) {
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
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? beta[(at.row0 + i) * a.valueHeads + at.vCol / vd] : 0.f;
  }
  loadChunkQkG(a, at, q, k, g, nullptr, ks, gs);
  const int nb = (c + 15) / 16;  // 16-row blocks holding valid rows
  const int64_t savedBase = at.slot * cMax * cMax;
  const int64_t qkStride = a.heads * a.keyDim;
  const bf16* qc = q + at.row0 * qkStride + at.qkCol;  // row i of the chunk: qc[i * qkStride]
  if (computeM) {
    // Off-diagonal block pairs J < I < nb, two 16 x 8 tiles (column halves h) each.
    const int nPairs = nb * (nb - 1) / 2;
    for (int tile = warp; tile < 2 * nPairs; tile += warps) {
      int I = 1, J = tile >> 1;
      while (J >= I) {
        J -= I;
        ++I;
      }
      const int i0 = 16 * I, j0 = 16 * J + 8 * (tile & 1);
      float accA[4] = {0.f, 0.f, 0.f, 0.f}, accL[4] = {0.f, 0.f, 0.f, 0.f};
      for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        loadFragB(bh, bl, [&](int kk, int n) {
          const int j = j0 + n, d = k0 + kk;
          return ks[j * ld + d] * expNeg(gs[i0 * ld + d] - gs[j * ld + d]);
        });
        loadFragA(ah, al, [&](int m, int kk) {
          const int i = i0 + m, d = k0 + kk;
          return i < c ? __bfloat162float(qc[i * qkStride + d]) *
                             expNeg(gs[i * ld + d] - gs[i0 * ld + d])
                       : 0.f;
        });
        mma3(accA, ah, al, bh, bl);
        loadFragA(ah, al, [&](int m, int kk) {
          const int i = i0 + m, d = k0 + kk;
          return ks[i * ld + d] * expNeg(gs[i * ld + d] - gs[i0 * ld + d]);
        });
        mma3(accL, ah, al, bh, bl);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + g8 + 8 * (r >> 1), j = j0 + t2 + (r & 1);
        const bool in = i < c;
        savedAqk[savedBase + i * cMax + j] = in ? accA[r] : 0.f;
        ls[i * ldc + j] = in ? betas[i] * accL[r] : 0.f;
      }
    }
    // Zeros above the diagonal blocks and in padded rows.
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
      const int i = idx / cMax, j = idx % cMax;
      if ((j >> 4) < (i >> 4) && (i >> 4) < nb) continue;  // an MMA tile's element
      if (i < c && j <= i) continue;                       // a diagonal block's (below)
      savedAqk[savedBase + idx] = 0.f;
      ls[i * ldc + j] = 0.f;
    }
    // Diagonal blocks elementwise: pair p -> block p / 136, then (i, j <= i) within it.
    for (int pr = threadIdx.x; pr < nb * 136; pr += blockDim.x) {
      int r = pr % 136, il = 0;
      while (r > il) {
        r -= il + 1;
        ++il;
      }
      const int i = 16 * (pr / 136) + il, j = 16 * (pr / 136) + r;
      if (i >= c) continue;
      const bf16* qi = qc + i * qkStride;
      const float* ki = ks + i * ld;
      const float* kj = ks + j * ld;
      const float* gi = gs + i * ld;
      const float* gj = gs + j * ld;
      float aqk = 0.f, l = 0.f;
      for (int d = 0; d < kd; ++d) {
        const float z = kj[d] * expNeg(gi[d] - gj[d]);
        aqk += __bfloat162float(qi[d]) * z;
        l += ki[d] * z;
      }
      savedAqk[savedBase + i * cMax + j] = aqk;
      ls[i * ldc + j] = j < i ? betas[i] * l : 0.f;
    }
    __syncthreads();
    // Column j of M solves (I + L) x = e_j by forward substitution; one thread per column, four
    // partial sums (t mod 4) to shorten the dependent chain.
    for (int j = threadIdx.x; j < cMax; j += blockDim.x) {
      for (int i = 0; i < cMax; ++i) ms[i * ldc + j] = (i == j && i < c) ? 1.f : 0.f;
      for (int i = j + 1; i < c; ++i) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        int t = j;
        for (; t + 3 < i; t += 4) {
#pragma unroll
          for (int u = 0; u < 4; ++u) acc[u] += ls[i * ldc + t + u] * ms[(t + u) * ldc + j];
        }
        for (; t < i; ++t) acc[0] += ls[i * ldc + t] * ms[t * ldc + j];
        ms[i * ldc + j] = -((acc[0] + acc[1]) + (acc[2] + acc[3]));
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
  // readers of other rows of ks were before the barrier after the Aqk / L loops).
  const int64_t kBase = at.slot * cMax * kd;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    float qg = 0.f, kDec = 0.f, kg = 0.f;
    if (i < c) {
      const float gi = gs[i * ld + d];
      const float eG = expf(gi);
      qg = __bfloat162float(qc[i * qkStride + d]) * eG;
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
  // W = M Diag(beta) (k ⊙ e^G) [C, K] and U = M Diag(beta) v [C, V]; M[i, j] = 0 for j > i and
  // for rows / columns >= c, so row block mb reduces over column blocks kb <= mb, kb < nb.
  const int64_t vStride = a.valueHeads * a.valueDim;
  const int64_t vBase = at.slot * cMax * vd;
  const bf16* vc = v + at.row0 * vStride + at.vCol;
  const int nW = (cMax / 16) * (kd / 8), nTiles = nW + (cMax / 16) * (vd / 8);
  for (int tile = warp; tile < nTiles; tile += warps) {
    const bool isW = tile < nW;
    const int cols = isW ? kd : vd, t = isW ? tile : tile - nW;
    const int mb = t / (cols / 8), n0 = 8 * (t % (cols / 8));
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kbEnd = min(mb + 1, nb);
    for (int kb = 0; kb < kbEnd; ++kb) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      loadFragA(ah, al, [&](int m, int kk) { return ms[(16 * mb + m) * ldc + 16 * kb + kk]; });
      if (isW) {
        loadFragB(bh, bl, [&](int kk, int n) {
          const int j = 16 * kb + kk;
          return betas[j] * ks[j * ld + n0 + n];
        });
      } else {
        loadFragB(bh, bl, [&](int kk, int n) {
          const int j = 16 * kb + kk;
          return j < c ? betas[j] * __bfloat162float(vc[j * vStride + n0 + n]) : 0.f;
        });
      }
      mma3(acc, ah, al, bh, bl);
    }
    float* out = isW ? wOut + kBase : uOut + vBase;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 16 * mb + g8 + 8 * h;
      *reinterpret_cast<float2*>(out + i * cols + n0 + t2) =
          make_float2(acc[2 * h], acc[2 * h + 1]);
    }
  }
}

// The intra-chunk forward on tensor cores; the caller checks kdaIntraMmaSupported(args).
inline cudaError_t launchIntraForwardMma(cudaStream_t stream, const CoreArgs& args, const bf16* q,
                                         const bf16* k, const bf16* v, const float* g,
                                         const float* beta, bool computeM, float* savedAqk,
                                         float* savedM, float* w, float* u, float* qg,
                                         float* kDec, float* eGC) {
  const int64_t bytes = intraFwdSharedFloats(args.chunk, args.keyDim) * int64_t(sizeof(float));
  cudaError_t err = allowSharedBytes(kda_intra_fwd_mma_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_intra_fwd_mma_kernel<<<chunkGrid(args), kThreads, size_t(bytes), stream>>>(
      args, q, k, v, g, beta, computeM, savedAqk, savedM, w, u, qg, kDec, eGC);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
