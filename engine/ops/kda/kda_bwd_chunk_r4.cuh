// Round 4 of the per-chunk KDA backward (bench/scratch/kda_chunk_04.md): a drop-in replacement of
// kda_bwd_mma_kernel (kda_bwd_mma.cuh, round 2) with the same arguments, grid, outputs and
// scratch use, and the same MMA sequence per output element (same hi / lo values, same k order,
// same mma3 order), so its outputs are bitwise those of round 2. What changes is where the
// fragments come from:
//  1. "Split once": every tensor-core operand is split into bf16 hi = bf16(x), lo = bf16(x - hi)
//     ONCE, when it is produced or staged, and kept in shared memory as two row-major bf16
//     matrices (rows padded by 8 elements: 16-byte rows for ldmatrix, conflict-free). Round 2
//     re-split each fragment in every warp that read it (scalar fp32 loads + exps + cvt per use).
//  2. Fragments come from ldmatrix (x4 for A, x2 for B), the .trans form where the product needs
//     the transposed operand (M^T, dW^T, dVn^T, dAqk^T, dL^T, and the [tokens, keys] B operands
//     of the pairwise sums), so one copy serves both orientations.
//  3. The exp-scaled pairwise operands (k_j e^{G_r - G_j}, q_i e^{G_i - G_i0},
//     beta_i k_i e^{G_i - G_i0}: one reference row per 16-token block, exponent <= 0) are
//     computed once per element instead of once per (element, warp tile that reads it).
//  4. q / k are kept as bf16 (they are bf16 inputs: exact), dAqk in fp32 only on the diagonal
//     16 x 16 blocks (the only fp32 reads left), the fp32 M of the dbeta column loop in the
//     buffer X is written to later: 230,656 bytes at C = 64, K = V = 128.
//  5. Global read-after-write chains (p0..p2, dGWork read then written, round 2 serialised one
//     L2 round trip per element because the compiler cannot reorder a load past a store that
//     may alias) are loaded into registers first, a batch at a time; the sums are unchanged.
// Still one CTA (16 warps) per SM: shared memory (230 KB) and registers both allow only one.
// Phases (barriers between): stage + cumsum G; inter-chunk terms (dW, kE = k ⊙ e^G split);
// dT += dW kE^T and dKg = (M Diag β)^T dW; dbeta / dM column loop + dVn staged split;
// dv = (M Diag β)^T dVn and X = M^T dM; dL = -strict_tril(X M^T) + q / βk operands staged;
// k operand staged; pairwise sums + atomics; reverse cumsum of dG and dbeta (as round 2).
#pragma once

#include "ops/kda/kda_bwd_mma.cuh"  // expNeg, mma3, kda_bwd_mma_kernel's conventions

namespace moewb::engine::cuda::kda_detail {

// When true (and kdaBwdChunkR4Supported) the engine runs kda_bwd_chunk_r4_kernel, else round 2.
inline constexpr bool kKdaBwdChunkRound4 = true;

// Byte offsets of the round-4 shared buffers (all 16-byte aligned). Padded bf16 row strides:
// ldk = K + 8, ldv = V + 8, ldc = C + 8; fp32 G rows K + 1 (round 2's stride).
struct BwdR4Layout {
  int ldk, ldv, ldcb, ldg;
  int64_t gs, qb, kb, r1, r2, r3, dAqkDiag, dAqkS, dT, dLS, betas, dbetas, bytes;
};

__host__ __device__ inline int64_t alignUp16(int64_t x) { return (x + 15) / 16 * 16; }

__host__ __device__ inline BwdR4Layout bwdR4Layout(int64_t c, int64_t kd, int64_t vd) {
  BwdR4Layout l;
  l.ldk = int(kd + 8);
  l.ldv = int(vd + 8);
  l.ldcb = int(c + 8);
  l.ldg = int(kd + 1);
  const int64_t splitK = 2 * c * l.ldk * 2, splitV = 2 * c * l.ldv * 2;
  const int64_t splitC = 2 * c * l.ldcb * 2;
  int64_t at = 0;
  l.gs = at;        at = alignUp16(at + c * l.ldg * 4);           // G fp32 [C, K+1]
  l.qb = at;        at = alignUp16(at + c * kd * 2);              // q bf16 [C, K]
  l.kb = at;        at = alignUp16(at + c * kd * 2);              // k bf16 [C, K]
  l.r1 = at;        at = alignUp16(at + splitK);                  // dW, then qF, then seg sums
  l.r2 = at;        at = alignUp16(at + (splitK > splitV ? splitK : splitV));  // kE, dVn, kbF
  l.r3 = at;        at = alignUp16(at + (2 * splitC > splitK ? 2 * splitC : splitK));  // M, X; kR
  l.dAqkDiag = at;  at = alignUp16(at + (c / 16) * 16 * 17 * 4);  // fp32 diagonal blocks
  l.dAqkS = at;     at = alignUp16(at + splitC);                  // dAqk hi / lo
  l.dT = at;        at = alignUp16(at + c * (c + 1) * 4);         // dT -> dM -> dL fp32
  l.dLS = at;       at = alignUp16(at + splitC);                  // dM, then dL hi / lo
  l.betas = at;     at = alignUp16(at + c * 4);
  l.dbetas = at;    at = alignUp16(at + c * 4);
  l.bytes = at;
  return l;
}

// Shapes round 4 runs: those of round 2 whose buffers fit one SM's shared memory (227 KB).
inline bool kdaBwdChunkR4Supported(const CoreArgs& a) {
  return kdaBwdMmaSupported(a) && bwdR4Layout(a.chunk, a.keyDim, a.valueDim).bytes <= 232448;
}

// A row-major matrix split into two bf16 matrices with the same padded row stride.
struct SplitMat {
  bf16* hi;
  bf16* lo;
  int ld;
  __device__ void put(int r, int col, float x) const {
    const bf16 h = __float2bfloat16_rn(x);
    hi[r * ld + col] = h;
    lo[r * ld + col] = __float2bfloat16_rn(x - __bfloat162float(h));
  }
};

__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldsm2(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smemAddr(p)));
}
__device__ __forceinline__ void ldsm2t(uint32_t (&r)[2], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(smemAddr(p)));
}

// A fragment (16 x 16) A[m][k] = S[m0 + m][k0 + k].
__device__ __forceinline__ void fragA(uint32_t (&h)[4], uint32_t (&l)[4], const SplitMat& s,
                                      int m0, int k0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (m0 + (lane & 15)) * s.ld + k0 + (lane >> 4) * 8;
  ldsm4(h, s.hi + off);
  ldsm4(l, s.lo + off);
}
// A fragment A[m][k] = S[k0 + k][m0 + m] (the transpose of the stored matrix).
__device__ __forceinline__ void fragAT(uint32_t (&h)[4], uint32_t (&l)[4], const SplitMat& s,
                                       int m0, int k0) {
  const int lane = int(threadIdx.x) & 31, q = lane >> 3;
  const int off = (k0 + (q >> 1) * 8 + (lane & 7)) * s.ld + m0 + (q & 1) * 8;
  ldsm4t(h, s.hi + off);
  ldsm4t(l, s.lo + off);
}
// B fragment (16 x 8) B[k][n] = S[n0 + n][k0 + k].
__device__ __forceinline__ void fragB(uint32_t (&h)[2], uint32_t (&l)[2], const SplitMat& s,
                                      int k0, int n0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (n0 + (lane & 7)) * s.ld + k0 + ((lane >> 3) & 1) * 8;
  ldsm2(h, s.hi + off);
  ldsm2(l, s.lo + off);
}
// B fragment B[k][n] = S[k0 + k][n0 + n].
__device__ __forceinline__ void fragBT(uint32_t (&h)[2], uint32_t (&l)[2], const SplitMat& s,
                                       int k0, int n0) {
  const int lane = int(threadIdx.x) & 31;
  const int off = (k0 + (lane & 15)) * s.ld + n0;
  ldsm2t(h, s.hi + off);
  ldsm2t(l, s.lo + off);
}

__device__ __forceinline__ SplitMat splitAt(unsigned char* base, int64_t off, int rows, int ld) {
  bf16* hi = reinterpret_cast<bf16*>(base + off);
  return {hi, hi + rows * ld, ld};
}

// Per-phase clock (bench/scratch/kda_chunk_06.cu; off in the engine): with
// MOEWB_KDA_BWD_PHASE_CLOCK defined, thread 0 of CTAs (1..kBwdClockCtas, gridDim.y / 2) writes
// clock64() after each barrier into gKdaBwdClock[round - 4][cta][stamp]; stamp 0 is the start.
#if defined(MOEWB_KDA_BWD_PHASE_CLOCK)
inline constexpr int kBwdClockCtas = 8, kBwdClockStamps = 12;
__device__ long long gKdaBwdClock[2][kBwdClockCtas][kBwdClockStamps];
#define MOEWB_KDA_BWD_STAMP(round, n)                                                  \
  do {                                                                                 \
    if (threadIdx.x == 0 && blockIdx.y == gridDim.y / 2 && blockIdx.x >= 1 &&          \
        blockIdx.x <= unsigned(kBwdClockCtas)) {                                       \
      gKdaBwdClock[(round) - 4][blockIdx.x - 1][n] = clock64();                        \
    }                                                                                  \
  } while (0)
#else
#define MOEWB_KDA_BWD_STAMP(round, n) \
  do {                                \
  } while (0)
#endif

// One CTA per (chunk, b * HV + hv); the maths and the outputs are kda_bwd_mma_kernel's.
__global__ void __launch_bounds__(kBwdThreads, 1)
    kda_bwd_chunk_r4_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ __align__(16) unsigned char smemR4[];
  MOEWB_KDA_BWD_STAMP(4, 0);
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const BwdR4Layout L = bwdR4Layout(cMax, kd, vd);
  const int ld = L.ldg, ldc = cMax + 1;
  float* gs = reinterpret_cast<float*>(smemR4 + L.gs);
  bf16* qb = reinterpret_cast<bf16*>(smemR4 + L.qb);
  bf16* kb = reinterpret_cast<bf16*>(smemR4 + L.kb);
  const SplitMat dWs = splitAt(smemR4, L.r1, cMax, L.ldk);   // then qF
  const SplitMat kEs = splitAt(smemR4, L.r2, cMax, L.ldk);   // then kbF
  const SplitMat dVs = splitAt(smemR4, L.r2, cMax, L.ldv);
  const SplitMat Ms = splitAt(smemR4, L.r3, cMax, L.ldcb);
  const SplitMat Xs = splitAt(smemR4, L.r3 + 2 * cMax * L.ldcb * 2, cMax, L.ldcb);
  const SplitMat kRs = splitAt(smemR4, L.r3, cMax, L.ldk);
  float* mF = reinterpret_cast<float*>(Xs.hi);  // [C, C] fp32 M until X is written
  float* dAd = reinterpret_cast<float*>(smemR4 + L.dAqkDiag);  // [C/16][16][17]
  const SplitMat dAs = splitAt(smemR4, L.dAqkS, cMax, L.ldcb);
  float* dT = reinterpret_cast<float*>(smemR4 + L.dT);
  const SplitMat dLs = splitAt(smemR4, L.dLS, cMax, L.ldcb);  // dM, then dL
  float* betas = reinterpret_cast<float*>(smemR4 + L.betas);
  float* dbetas = reinterpret_cast<float*>(smemR4 + L.dbetas);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int64_t hv = at.vCol / vd;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t vBase = at.slot * cMax * vd, kBase = at.slot * cMax * kd;
  const int64_t cBase = at.slot * cMax * cMax;
  const int64_t oStride = a.valueHeads * a.valueDim, qkStride = a.heads * a.keyDim;
  const int64_t gStride = a.valueHeads * a.keyDim;
  const float* dvn = p.dvn + vBase;
  float* dG = p.dGWork + kBase;
  float* p0 = p.p0 + kBase;
  float* p1 = p.p1 + kBase;
  float* p2 = p.p2 + kBase;
  auto kf = [&](int i, int d) { return __bfloat162float(kb[i * kd + d]); };
  auto qf = [&](int i, int d) { return __bfloat162float(qb[i * kd + d]); };
  auto diagAt = [](int i, int j) { return (i >> 4) * 272 + (i & 15) * 17 + (j & 15); };
  // ---- stage: beta, q, k, raw g (rows >= c zero), M, dAqk, dT = dVn v^T (lower triangle).
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? p.beta[(at.row0 + i) * a.valueHeads + hv] : 0.f;
  }
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd;
    bf16 qv = __float2bfloat16(0.f), kv = qv;
    float gv = 0.f;
    if (i < c) {
      const int64_t row = at.row0 + i;
      qv = p.q[row * qkStride + at.qkCol + d];
      kv = p.k[row * qkStride + at.qkCol + d];
      gv = p.g[row * gStride + at.gCol + d];
    }
    qb[idx] = qv;
    kb[idx] = kv;
    gs[i * ld + d] = gv;
  }
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    const bool in = i < c && j <= i;
    const float mv = p.savedM[cBase + idx];
    Ms.put(i, j, mv);
    mF[idx] = mv;
    const float aq = in ? p.p3[cBase + idx] : 0.f;
    dAs.put(i, j, aq);
    if ((i >> 4) == (j >> 4)) dAd[diagAt(i, j)] = aq;
    dT[i * ldc + j] = in ? p.p4[cBase + idx] : 0.f;
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 1);
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {  // G = cumsum(g), round 2's order
    float acc = 0.f;
    for (int i = 0; i < c; ++i) {
      acc += gs[i * ld + d];
      gs[i * ld + d] = acc;
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 2);
  // ---- inter-chunk terms (as round 2), dW and kE = k ⊙ e^G split once.
  const int nThreads = int(blockDim.x);
  for (int base = threadIdx.x; base < cMax * kd; base += 4 * nThreads) {
    float pre[4][3];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * nThreads;
      const bool live = idx < cMax * kd && idx / kd < c;
      pre[u][0] = live ? p0[idx] : 0.f;
      pre[u][1] = live ? p1[idx] : 0.f;
      pre[u][2] = live ? p2[idx] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int idx = base + u * nThreads;
      if (idx >= cMax * kd) break;
      const int i = idx / kd, d = idx % kd;
      const float ki = kf(i, d), gi = gs[i * ld + d];
      kEs.put(i, d, ki * expNeg(gi));
      if (i >= c) {
        dWs.put(i, d, 0.f);
        continue;
      }
      const float sq = pre[u][0], skd = pre[u][1], sw = pre[u][2];
      const float eG = expf(gi), eR = expf(gs[(c - 1) * ld + d] - gi);
      dWs.put(i, d, -sw);
      p2[idx] = sq * eG;
      p1[idx] = skd * eR;
      dG[idx] = qf(i, d) * eG * sq - ki * eR * skd;
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 3);
  const int nb = (c + 15) / 16;
  // ---- dT += dW kE^T (lower block tiles); dKg = (M Diag(beta))^T dW.
  {
    const int nTiles = nb * (cMax / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (cMax / 8), nt = tile % (cMax / 8);
      if (nt > 2 * mb + 1) continue;
      const int i0 = 16 * mb, j0 = 8 * nt;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        fragA(ah, al, dWs, i0, k0);
        fragB(bh, bl, kEs, k0, j0);
        mma3(acc, ah, al, bh, bl);
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + g + 8 * (r >> 1), j = j0 + t2 + (r & 1);
        if (i < c && j <= i) dT[i * ldc + j] += acc[r];
      }
    }
  }
  {
    const int nTiles = nb * (kd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (kd / 8), d0 = 8 * (tile % (kd / 8));
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int kbk = mb; kbk < nb; ++kbk) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        fragAT(ah, al, Ms, 16 * mb, 16 * kbk);
        fragBT(bh, bl, dWs, 16 * kbk, d0);
        mma3(acc, ah, al, bh, bl);
      }
      float dGold[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 16 * mb + g + 8 * (r >> 1), d = d0 + t2 + (r & 1);
        dGold[r] = j < c ? dG[j * kd + d] : 0.f;
      }
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int j = 16 * mb + g + 8 * (r >> 1), d = d0 + t2 + (r & 1);
        if (j >= c) continue;
        const float eG = expf(gs[j * ld + d]);
        const float dKg = acc[r] * betas[j];
        p0[j * kd + d] = dKg * eG;
        dG[j * kd + d] = dGold[r] + kf(j, d) * eG * dKg;
      }
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 4);
  // ---- dbeta_j = sum_i dT[i, j] M[i, j]; dM = dT Diag(beta) (split); dVn staged split.
  for (int j = threadIdx.x; j < cMax; j += blockDim.x) {
    float acc = 0.f;
#pragma unroll 8
    for (int i = 0; i < cMax; ++i) {
      float dm = 0.f;
      if (j < c && i >= j && i < c) {
        acc += dT[i * ldc + j] * mF[i * cMax + j];
        dm = dT[i * ldc + j] * betas[j];
        dT[i * ldc + j] = dm;
      }
      dLs.put(i, j, dm);
    }
    if (j < c) dbetas[j] = acc;
  }
  for (int idx = threadIdx.x; idx < cMax * vd; idx += blockDim.x) {
    const int i = idx / vd, e = idx % vd;
    dVs.put(i, e, i < c ? dvn[idx] : 0.f);
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 5);
  // ---- dv = (M Diag(beta))^T dVn; X = M^T dM (split).
  {
    const int nTiles = nb * (vd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int mb = tile / (vd / 8), e0 = 8 * (tile % (vd / 8));
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int kbk = mb; kbk < nb; ++kbk) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        fragAT(ah, al, Ms, 16 * mb, 16 * kbk);
        fragBT(bh, bl, dVs, 16 * kbk, e0);
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
  for (int tile = warp; tile < (cMax / 16) * (cMax / 8); tile += warps) {
    const int mb = tile / (cMax / 8), j0 = 8 * (tile % (cMax / 8));
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int kbk = mb; kbk < nb; ++kbk) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      fragAT(ah, al, Ms, 16 * mb, 16 * kbk);
      fragBT(bh, bl, dLs, 16 * kbk, j0);
      mma3(acc, ah, al, bh, bl);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) Xs.put(16 * mb + g + 8 * (r >> 1), j0 + t2 + (r & 1), acc[r]);
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 6);
  // ---- dL = -strict_tril(X M^T) (fp32 into dT, split into dLs); q / beta k operands:
  // qF[i, d] = q_i e^{G_i - G_i0}, kbF[i, d] = beta_i k_i e^{G_i - G_i0}, i0 = first row of
  // i's 16-row block (into the dead dW / dVn buffers).
  for (int tile = warp; tile < (cMax / 16) * (cMax / 8); tile += warps) {
    const int mb = tile / (cMax / 8), j0 = 8 * (tile % (cMax / 8));
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kbEnd = min(j0 / 16 + 1, nb);
    for (int kbk = 0; kbk < kbEnd; ++kbk) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      fragA(ah, al, Xs, 16 * mb, 16 * kbk);
      fragB(bh, bl, Ms, 16 * kbk, j0);
      mma3(acc, ah, al, bh, bl);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 16 * mb + g + 8 * (r >> 1), j = j0 + t2 + (r & 1);
      const float v = (i < c && j < i) ? -acc[r] : 0.f;
      dT[i * ldc + j] = v;
      dLs.put(i, j, v);
    }
  }
  const SplitMat qFs = dWs, kbFs = kEs;
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int i = idx / kd, d = idx % kd, i0 = i & ~15;
    const float e = expNeg(gs[i * ld + d] - gs[i0 * ld + d]);
    qFs.put(i, d, qf(i, d) * e);
    kbFs.put(i, d, betas[i] * kf(i, d) * e);
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 7);
  // ---- kR[j, d] = k_j e^{G_r - G_j}, r = last row of j's block (into the dead M / X).
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int j = idx / kd, d = idx % kd, r = (j | 15);
    kRs.put(j, d, kf(j, d) * expNeg(gs[r * ld + d] - gs[j * ld + d]));
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 8);
  // ---- pairwise sums (round 2's tiles and order): daQ, daL over key blocks J < X, dB over
  // query blocks I > X on tensor cores, diagonal blocks elementwise in fp32.
  {
    const int nTiles = nb * (kd / 8);
    for (int tile = warp; tile < nTiles; tile += warps) {
      const int X = tile / (kd / 8), d0 = 8 * (tile % (kd / 8));
      const int x0 = 16 * X;
      float aq[4] = {0.f, 0.f, 0.f, 0.f}, aL[4] = {0.f, 0.f, 0.f, 0.f};
      float db[4] = {0.f, 0.f, 0.f, 0.f};
      float pre[4][4];  // p2, p1, p0, dG of the tile's elements (loaded early: global latency)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = x0 + g + 8 * (q >> 1), at2 = i * kd + d0 + t2 + (q & 1);
        const bool live = i < c;
        pre[q][0] = live ? p2[at2] : 0.f;
        pre[q][1] = live ? p1[at2] : 0.f;
        pre[q][2] = live ? p0[at2] : 0.f;
        pre[q][3] = live ? dG[at2] : 0.f;
      }
      for (int J = 0; J < X; ++J) {
        const int j0 = 16 * J, r = j0 + 15;
        uint32_t bh[2], bl[2], ah[4], al[4];
        fragBT(bh, bl, kRs, j0, d0);
        float tq[4] = {0.f, 0.f, 0.f, 0.f}, tl[4] = {0.f, 0.f, 0.f, 0.f};
        fragA(ah, al, dAs, x0, j0);
        mma3(tq, ah, al, bh, bl);
        fragA(ah, al, dLs, x0, j0);
        mma3(tl, ah, al, bh, bl);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
          const float f = expNeg(gs[i * ld + d] - gs[r * ld + d]);
          aq[q] += f * tq[q];
          aL[q] += f * tl[q];
        }
      }
      for (int I = X + 1; I < nb; ++I) {
        const int i0 = 16 * I;
        uint32_t bh[2], bl[2], ah[4], al[4];
        float tb[4] = {0.f, 0.f, 0.f, 0.f};
        fragAT(ah, al, dAs, x0, i0);
        fragBT(bh, bl, qFs, i0, d0);
        mma3(tb, ah, al, bh, bl);
        fragAT(ah, al, dLs, x0, i0);
        fragBT(bh, bl, kbFs, i0, d0);
        mma3(tb, ah, al, bh, bl);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int j = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
          db[q] += expNeg(gs[i0 * ld + d] - gs[j * ld + d]) * tb[q];
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
        if (i >= c) continue;
        const float gi = gs[i * ld + d];
        float sq = 0.f, sl = 0.f, sb = 0.f;
        for (int j = x0; j <= i; ++j) {
          const float z = kf(j, d) * expNeg(gi - gs[j * ld + d]);
          sq += dAd[diagAt(i, j)] * z;
          sl += dT[i * ldc + j] * z;
        }
        const int rEnd = min(x0 + 16, c);
        for (int r = i; r < rEnd; ++r) {
          const float e = expNeg(gs[r * ld + d] - gi);
          sb += (dAd[diagAt(r, i)] * qf(r, d) + dT[r * ldc + i] * betas[r] * kf(r, d)) * e;
        }
        aq[q] += sq;
        aL[q] += sl;
        db[q] += sb;
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int i = x0 + g + 8 * (q >> 1), d = d0 + t2 + (q & 1);
        if (i >= c) continue;
        const float bi = betas[i], qi = qf(i, d), ki = kf(i, d);
        const int64_t qkAt = (at.row0 + i) * qkStride + at.qkCol + d;
        const int at2 = i * kd + d;
        atomicAdd(p.dqAcc + qkAt, pre[q][0] + aq[q]);
        atomicAdd(p.dkAcc + qkAt, (pre[q][1] + pre[q][2]) + (bi * aL[q] + db[q]));
        dG[at2] = pre[q][3] + (qi * aq[q] + bi * ki * aL[q] - ki * db[q]);
        p0[at2] = ki * aL[q];  // summed into dbeta_i below
      }
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 9);
  // ---- dg = reverse cumsum of dG (+ dG_C on the last row) and dbeta: round 2's code and order.
  float* segG = reinterpret_cast<float*>(smemR4 + L.r1);  // [nb, K] (dead qF)
  float* segP = segG + (cMax / 16) * kd;                   // [nb, K]
  for (int idx = threadIdx.x; idx < nb * kd; idx += blockDim.x) {
    const int sg = idx / kd, d = idx % kd;
    const int iEnd = min(16 * sg + 16, c);
    float sumG = 0.f, sumP = 0.f, vG[16], vP[16];
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      const int i = 16 * sg + u;
      vG[u] = i < iEnd ? dG[i * kd + d] : 0.f;
      vP[u] = i < iEnd ? p1[i * kd + d] : 0.f;
    }
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      if (16 * sg + u >= iEnd) break;
      sumG += vG[u];
      sumP += kf(16 * sg + u, d) * vP[u];
    }
    segG[sg * kd + d] = sumG;
    segP[sg * kd + d] = sumP;
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 10);
  for (int idx = threadIdx.x; idx < nb * kd; idx += blockDim.x) {
    const int sg = idx / kd, d = idx % kd;
    float acc = expf(gs[(c - 1) * ld + d]) * p.sds[at.slot * kd + d];
    for (int t = 0; t < nb; ++t) acc += segP[t * kd + d];
    for (int t = nb - 1; t > sg; --t) acc += segG[t * kd + d];
    const int iEnd = min(16 * sg + 16, c);
    float vG[16];
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      const int i = 16 * sg + u;
      vG[u] = i < iEnd ? dG[i * kd + d] : 0.f;
    }
#pragma unroll
    for (int u = 15; u >= 0; --u) {
      const int i = 16 * sg + u;
      if (i >= iEnd) continue;
      acc += vG[u];
      p.dg[(at.row0 + i) * gStride + at.gCol + d] = acc;
    }
  }
  for (int i = warp; i < c; i += warps) {
    float acc = 0.f;
    for (int d = lane; d < kd; d += 32) acc += p0[i * kd + d];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) p.dbeta[(at.row0 + i) * a.valueHeads + hv] = dbetas[i] + acc;
  }
#if defined(MOEWB_KDA_BWD_PHASE_CLOCK)
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(4, 11);
#endif
}

// The per-chunk backward, round 4 (after the backward products on the same `in`); the caller
// checks kdaBwdChunkR4Supported(args).
inline cudaError_t launchChunkBackwardR4(cudaStream_t stream, const CoreArgs& args,
                                         const IntraBwdArgs& in) {
  const int64_t bytes = bwdR4Layout(args.chunk, args.keyDim, args.valueDim).bytes;
  cudaError_t err = allowSharedBytes(kda_bwd_chunk_r4_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_chunk_r4_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
