// The per-chunk KDA backward on tensor cores with operands split once (ENGINE-MATH §2.5, the part
// after the products of kda_bwd_products_r3_kernel): kda_bwd_chunk_kernel, a drop-in replacement of
// kda_bwd_mma_kernel (kda_bwd_mma.cuh, round 2) with the same arguments, grid, outputs and scratch
// use. One kernel, two versions of its pairwise phase (a template choice; everything else is one
// code path):
//  - round 5 (bench/scratch/kda_chunk_06.md; kTensorCoreDiagonal false): the diagonal 16 x 16
//    blocks of the pairwise sums elementwise in fp32. Same MMA sequence and order of every sum as
//    round 2, so its outputs are round 2's bits (rounds 4 and 5 were checked bitwise against it).
//  - round 6 (bench/scratch/kda_chunk_07.md; kTensorCoreDiagonal true, the default): those
//    diagonal blocks on tensor cores (diagonalOnTensorCores) where the block's decay allows, else
//    round 5's fp32 loops (warp-uniform, per warp tile). Other bits than round 5's.
// How it differs from round 2 (round 4, bench/scratch/kda_chunk_04.md, then round 5):
//  1. Every tensor-core operand is split into bf16 hi / lo once, when produced or staged, and kept
//     in shared memory (SplitMat, kda_split_mma.cuh); fragments come from ldmatrix, the .trans
//     form for the transposed operands (M^T, dW^T, dVn^T, dAqk^T, dL^T, the [tokens, keys] B
//     operands of the pairwise sums), so one copy serves both orientations.
//  2. The exp-scaled pairwise operands (k_j e^{G_r - G_j}, q_i e^{G_i - G_i0},
//     beta_i k_i e^{G_i - G_i0}: one reference row per 16-token block, exponent <= 0) are built
//     once per element. q / k stay bf16 (exact inputs); dAqk is fp32 only on its diagonal blocks.
//  3. Global read-after-write chains (p0..p2, dGWork) are loaded into registers first, a batch at
//     a time; the sums are unchanged.
//  4. Serial tails: G = cumsum(g) by one thread per key column from global memory while staging;
//     the dbeta column loop only sums (dM = dT Diag(beta) split by all threads); the reverse
//     cumsum of dG has four lanes per key column trading segment sums by shuffles; the fp32
//     diagonal blocks run two rows per lane (17 steps on every lane). Each keeps round 2's order.
// One CTA (16 warps) per (chunk, b * HV + hv) and per SM: 230,656 bytes of shared memory at
// C = 64, K = V = 128 (BwdChunkLayout). Phases (barriers between): stage + G; inter-chunk terms;
// dT / dKg; dbeta, dM, dVn; dv / X; dL + q / beta k operands; k operand; pairwise sums; reverse
// cumsum + dbeta. Shapes: kdaBwdChunkSupported (chunk <= 64, multiples of 16; keyDim of 16,
// valueDim of 8; the buffers fit one SM).
//
// Round 6's diagonal blocks, for warp tile (block X, key columns d0..d0+7), r = the block's last
// valid row, x0 its first row:
//   daQ_i += e^{G_i - G_r} sum_j dAqk[i, j] kR[j, d],   kR[j, d] = k_j e^{G_r - G_j}
//   daL_i += e^{G_i - G_r} sum_j dL[i, j]   kR[j, d]
//   dB_j  += e^{G_x0 - G_j} sum_r (dAqk[r, j] qF[r, d] + dL[r, j] kbF[r, d])
// (the strictly lower split dAqk / dL are the mask), the lo·lo product included (mma4); the j = i
// terms of dAqk in fp32 as round 5 has them, since they cancel exactly in dG. Each term keeps the
// split products' ~1e-6 relative error while no operand underflows, which holds while the block's
// decay G_x0 - G_r <= kDiagMmaMaxDecay; a warp tile whose block decays more on any of its 8
// columns (strong gates, e.g. g = -5 every step) runs round 5's loops. Round 6 anchors kR of a
// chunk's partial last block at its last valid row (round 5 clamps the exponents to 0 there; the
// off-diagonal sums never read that block's kR) and stages the split dAqk with a zero diagonal.
#pragma once

#include "ops/kda/kda_split_mma.cuh"  // SplitMat, ldmatrix fragments, alignUp16, mma3

namespace moewb::engine::cuda::kda_detail {

// Byte offsets of the shared buffers (all 16-byte aligned). Padded bf16 row strides:
// ldk = K + 8, ldv = V + 8, ldc = C + 8; fp32 G rows K + 1 (round 2's stride).
struct BwdChunkLayout {
  int ldk, ldv, ldcb, ldg;
  int64_t gs, qb, kb, r1, r2, r3, dAqkDiag, dAqkS, dT, dLS, betas, dbetas, bytes;
};

__host__ __device__ inline BwdChunkLayout bwdChunkLayout(int64_t c, int64_t kd, int64_t vd) {
  BwdChunkLayout l;
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
  l.r1 = at;        at = alignUp16(at + splitK);                  // dW, then qF
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

// Shapes the kernel runs: those of kda_bwd_mma_kernel (kdaBwdMmaSupported) whose buffers fit one
// SM's shared memory (227 KB) and whose chunk has at most four 16-row segments (the reverse
// cumsum's four lanes per key column); others run kda_bwd_mma_kernel or kda_bwd_kernel.
inline bool kdaBwdChunkSupported(const CoreArgs& a) {
  return kdaBwdMmaSupported(a) &&
         bwdChunkLayout(a.chunk, a.keyDim, a.valueDim).bytes <= 232448 && a.chunk <= 64;
}

// Per-phase clock (bench/scratch/kda_chunk_06.cu; off in the engine): with
// MOEWB_KDA_BWD_PHASE_CLOCK defined, thread 0 of CTAs (1..kBwdClockCtas, gridDim.y / 2) writes
// clock64() after each barrier into gKdaBwdClock[cta][stamp]; stamp 0 is the start.
#if defined(MOEWB_KDA_BWD_PHASE_CLOCK)
inline constexpr int kBwdClockCtas = 8, kBwdClockStamps = 12;
__device__ long long gKdaBwdClock[kBwdClockCtas][kBwdClockStamps];
#define MOEWB_KDA_BWD_STAMP(n)                                                        \
  do {                                                                                \
    if (threadIdx.x == 0 && blockIdx.y == gridDim.y / 2 && blockIdx.x >= 1 &&         \
        blockIdx.x <= unsigned(kBwdClockCtas)) {                                      \
      gKdaBwdClock[blockIdx.x - 1][n] = clock64();                                    \
    }                                                                                 \
  } while (0)
#else
#define MOEWB_KDA_BWD_STAMP(n) \
  do {                         \
  } while (0)
#endif

// gs[i, d] = g_0 + ... + g_i (column d of the chunk, rows >= c zero), summed in round 2's order
// from global memory, 32 rows per batch of independent loads.
__device__ __forceinline__ void cumsumGColumn(const CoreArgs& a, const IntraBwdArgs& p,
                                              const ChunkAt& at, int c, int d, float* gs,
                                              int ld) {
  const int cMax = int(a.chunk);
  const int64_t gStride = a.valueHeads * a.keyDim;
  const float* col = p.g + at.row0 * gStride + at.gCol + d;
  float acc = 0.f;
  for (int i0 = 0; i0 < cMax; i0 += 32) {
    float v[32];
#pragma unroll
    for (int u = 0; u < 32; ++u) v[u] = i0 + u < c ? col[(i0 + u) * gStride] : 0.f;
#pragma unroll
    for (int u = 0; u < 32; ++u) {
      const int i = i0 + u;
      if (i < c) {
        acc += v[u];
        gs[i * ld + d] = acc;
      } else if (i < cMax) {
        gs[i * ld + d] = 0.f;
      }
    }
  }
}

// dg for key column d (called by all 32 lanes of a warp; lanes 4t..4t+3 own one column, lane
// & 3 its 16-row segment): segment sums of dG and k ⊙ P1, traded by shuffles, then the reverse
// cumsum from e^{G_last} sds + sum_t segP_t + sum_{t > own} segG_t, round 2's order throughout.
__device__ __forceinline__ void reverseCumsumColumn(const CoreArgs& a, const IntraBwdArgs& p,
                                                    const ChunkAt& at, int c, int nb, int d,
                                                    const float* gs, int ld, const bf16* kb,
                                                    const float* dG, const float* p1) {
  const int kd = int(a.keyDim), lane = int(threadIdx.x) & 31, sg = lane & 3;
  const bool live = d < kd && sg < nb;
  const int iEnd = min(16 * sg + 16, c);
  float sumG = 0.f, sumP = 0.f, vG[16], vP[16];
#pragma unroll
  for (int u = 0; u < 16; ++u) {
    const int i = 16 * sg + u;
    vG[u] = live && i < iEnd ? dG[i * kd + d] : 0.f;
    vP[u] = live && i < iEnd ? p1[i * kd + d] : 0.f;
  }
  if (live) {
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      if (16 * sg + u >= iEnd) break;
      sumG += vG[u];
      sumP += __bfloat162float(kb[(16 * sg + u) * kd + d]) * vP[u];
    }
  }
  float segG[4], segP[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    segG[t] = __shfl_sync(0xffffffffu, sumG, (lane & ~3) | t);
    segP[t] = __shfl_sync(0xffffffffu, sumP, (lane & ~3) | t);
  }
  if (!live) return;
  const int64_t gStride = a.valueHeads * a.keyDim;
  float acc = __fmul_rn(expf(gs[(c - 1) * ld + d]), p.sds[at.slot * kd + d]);
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    if (t < nb) acc += segP[t];
  }
#pragma unroll
  for (int t = 3; t >= 0; --t) {
    if (t < nb && t > sg) acc += segG[t];
  }
#pragma unroll
  for (int u = 15; u >= 0; --u) {
    const int i = 16 * sg + u;
    if (i >= iEnd) continue;
    acc += vG[u];
    p.dg[(at.row0 + i) * gStride + at.gCol + d] = acc;
  }
}

// The shared buffers the diagonal 16 x 16 blocks of the pairwise sums read (BwdChunkLayout):
// G fp32 [C, ld], q / k bf16 [C, K], dAqk's diagonal blocks [C/16][16][17], dL fp32 [C, ldc].
struct DiagView {
  const float* gs;
  const bf16* qb;
  const bf16* kb;
  const float* dAd;
  const float* dL;
  const float* betas;
  int ld, ldc, kd;
  __device__ float g(int i, int d) const { return gs[i * ld + d]; }
  __device__ float k(int i, int d) const { return __bfloat162float(kb[i * kd + d]); }
  __device__ float q(int i, int d) const { return __bfloat162float(qb[i * kd + d]); }
  __device__ float a(int i, int j) const {
    return dAd[(i >> 4) * 272 + (i & 15) * 17 + (j & 15)];
  }
  __device__ float l(int i, int j) const { return dL[i * ldc + j]; }
};

// Diagonal-block sums over the key rows j <= i, added to the lane's fragment elements of aq / aL
// (rows x0 + g for q = 0, 1 and x0 + g + 8 for q = 2, 3; columns d0 + t2 + (q & 1); rows >= c
// untouched): sq_i = sum_{j = x0..i} dAqk[i, j] z_j, sl_i = sum_j dL[i, j] z_j with
// z_j = k_j e^{G_j - G_i}, round 2's expressions and order. Lane g runs rows x0 + g and
// x0 + 15 - g in one loop (g + 1 and 16 - g steps: 17 on every lane, where one loop per element
// would run 8 + 8 + 16 + 16 steps, half the lanes idle) and hands row x0 + 15 - g to its
// owner, lane ^ 28 (g -> 7 - g), by shuffles. Called by all 32 lanes.
__device__ __forceinline__ void diagonalRowSums(const DiagView& v, int x0, int d0, int c,
                                                float (&aq)[4], float (&aL)[4]) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  const int ia = x0 + g, ib = x0 + 15 - g;
  const int tripA = ia < c ? g + 1 : 0, tripB = ib < c ? 16 - g : 0;
  float gA[2], gB[2], sqA[2] = {0.f, 0.f}, slA[2] = {0.f, 0.f};
  float sqB[2] = {0.f, 0.f}, slB[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    gA[h] = v.g(ia, d0 + t2 + h);
    gB[h] = v.g(ib, d0 + t2 + h);
  }
  for (int s = 0; s < tripA + tripB; ++s) {
    const bool inA = s < tripA;
    const int i = inA ? ia : ib, j = x0 + (inA ? s : s - tripA);
    const float pa = v.a(i, j), pl = v.l(i, j);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = d0 + t2 + h;
      const float z = v.k(j, d) * expNeg((inA ? gA[h] : gB[h]) - v.g(j, d));
      // Explicit fmas: round 2's compiled sums (sq += dAqk z -> fma); left to the compiler, the
      // product pa z shared by both branches was hoisted and added unfused.
      if (inA) {
        sqA[h] = __fmaf_rn(pa, z, sqA[h]);
        slA[h] = __fmaf_rn(pl, z, slA[h]);
      } else {
        sqB[h] = __fmaf_rn(pa, z, sqB[h]);
        slB[h] = __fmaf_rn(pl, z, slB[h]);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float rq = __shfl_xor_sync(0xffffffffu, sqB[h], 28);
    const float rl = __shfl_xor_sync(0xffffffffu, slB[h], 28);
    if (ia < c) {
      aq[h] += sqA[h];
      aL[h] += slA[h];
    }
    if (ia + 8 < c) {
      aq[2 + h] += rq;
      aL[2 + h] += rl;
    }
  }
}

// Diagonal-block sums over the query rows r >= i, added to db (layout as diagonalRowSums):
// sb_i = sum_{r = i..end} (dAqk[r, i] q_r + dL[r, i] beta_r k_r) e^{G_i - G_r}, end = the last
// row of the block below c, round 2's expressions and order; rows x0 + g and x0 + 15 - g in one
// loop (16 - g and g + 1 steps), the second handed to lane ^ 28.
__device__ __forceinline__ void diagonalColumnSums(const DiagView& v, int x0, int d0, int c,
                                                   float (&db)[4]) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  const int ia = x0 + g, ib = x0 + 15 - g, rEnd = min(x0 + 16, c);
  const int tripA = ia < c ? rEnd - ia : 0, tripB = ib < c ? rEnd - ib : 0;
  float gA[2], gB[2], sbA[2] = {0.f, 0.f}, sbB[2] = {0.f, 0.f};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    gA[h] = v.g(ia, d0 + t2 + h);
    gB[h] = v.g(ib, d0 + t2 + h);
  }
  for (int s = 0; s < tripA + tripB; ++s) {
    const bool inA = s < tripA;
    const int i = inA ? ia : ib, r = i + (inA ? s : s - tripA);
    const float pa = v.a(r, i), pl = v.l(r, i), br = v.betas[r];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int d = d0 + t2 + h;
      const float e = expNeg(v.g(r, d) - (inA ? gA[h] : gB[h]));
      // Round 2's compiled expression: fma(dAqk, q_r, (dL beta_r) k_r), then fma(w, e, sb).
      const float w = __fmaf_rn(pa, v.q(r, d), __fmul_rn(__fmul_rn(pl, br), v.k(r, d)));
      if (inA) {
        sbA[h] = __fmaf_rn(w, e, sbA[h]);
      } else {
        sbB[h] = __fmaf_rn(w, e, sbB[h]);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float rb = __shfl_xor_sync(0xffffffffu, sbB[h], 28);
    if (ia < c) db[h] += sbA[h];
    if (ia + 8 < c) db[2 + h] += rb;
  }
}

// The operands the tensor-core diagonal block reads (BwdChunkLayout): split dAqk (its
// diagonal zeroed, see diagonalOnTensorCores), dL, kR, qF, kbF; fp32 dAqk's diagonal blocks
// [C/16][16][17] and bf16 q / k [C, K] for the j = i terms.
struct DiagMmaView {
  SplitMat dA, dL, kR, qF, kbF;
  const float* dAd;
  const bf16* qb;
  const bf16* kb;
  int kd;
};

// The diagonal 16 x 16 block of warp tile (X, d0) on tensor cores (see the file comment), added
// to the lane's fragment elements (rows x0 + g and x0 + g + 8, columns d0 + t2 + (q & 1)).
// The j = i terms (dAqk[i, i] k_i in daQ_i, dAqk[i, i] q_i in dB_i; dL has none) are added in
// fp32 with the exponential factor 1, as round 5 has them, not through the MMAs (the split dAqk
// holds a zero diagonal): they cancel exactly in dG_i = q_i daQ_i - k_i dB_i + ..., and through
// the two split products and the two factored exps each would carry ~1e-6 relative error, which
// that cancellation leaves standing against a dG that can be far smaller (strong gates: 45x
// round 5's dg error on such a block; kda_chunk_07.md §5).
// Returns false, touching nothing, when some column of the tile decays more than
// kDiagMmaMaxDecay over the block's valid rows (warp-uniform). Called by all 32 lanes.
__device__ __forceinline__ bool diagonalOnTensorCores(const DiagMmaView& m, const float* gs,
                                                      int ld, int x0, int d0, int c,
                                                      float (&aq)[4], float (&aL)[4],
                                                      float (&db)[4]) {
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  const int r = min(x0 + 15, c - 1);
  float gx[2], gr[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    gx[h] = gs[x0 * ld + d0 + t2 + h];
    gr[h] = gs[r * ld + d0 + t2 + h];
  }
  const bool inRange = gx[0] - gr[0] <= kDiagMmaMaxDecay && gx[1] - gr[1] <= kDiagMmaMaxDecay;
  if (!__all_sync(0xffffffffu, inRange)) return false;
  float tq[4] = {0.f, 0.f, 0.f, 0.f}, tl[4] = {0.f, 0.f, 0.f, 0.f};
  float tb[4] = {0.f, 0.f, 0.f, 0.f};
  {
    uint32_t ah[4], al[4], bh[2], bl[2];
    fragBT(bh, bl, m.kR, x0, d0);
    fragA(ah, al, m.dA, x0, x0);
    mma4(tq, ah, al, bh, bl);
    fragA(ah, al, m.dL, x0, x0);
    mma4(tl, ah, al, bh, bl);
    fragAT(ah, al, m.dA, x0, x0);
    fragBT(bh, bl, m.qF, x0, d0);
    mma4(tb, ah, al, bh, bl);
    fragAT(ah, al, m.dL, x0, x0);
    fragBT(bh, bl, m.kbF, x0, d0);
    mma4(tb, ah, al, bh, bl);
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int i = x0 + g + 8 * (q >> 1), h = q & 1;
    const int d = d0 + t2 + h;
    const float gi = gs[i * ld + d];
    // Rows >= c (G = 0, q = k = dAqk = 0) are never written; the clamp keeps their factors finite.
    const float rowF = __expf(fminf(gi - gr[h], kDiagMmaMaxDecay));
    const float colF = __expf(fminf(gx[h] - gi, kDiagMmaMaxDecay));
    const float aii = m.dAd[(i >> 4) * 272 + (i & 15) * 17 + (i & 15)];
    const float ki = __bfloat162float(m.kb[i * m.kd + d]);
    const float qi = __bfloat162float(m.qb[i * m.kd + d]);
    aq[q] += __fmaf_rn(aii, ki, rowF * tq[q]);
    aL[q] += rowF * tl[q];
    db[q] += __fmaf_rn(aii, qi, colF * tb[q]);
  }
  return true;
}

// One CTA per (chunk, b * HV + hv); the maths and the outputs are kda_bwd_mma_kernel's. The
// pairwise sums' diagonal blocks elementwise in fp32 (kTensorCoreDiagonal false: round 5, the
// bits of kda_bwd_mma_kernel) or on tensor cores where the block's decay allows (true: round 6).
template <bool kTensorCoreDiagonal>
__global__ void __launch_bounds__(kBwdThreads, 1)
    kda_bwd_chunk_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ __align__(16) unsigned char smemBwd[];
  MOEWB_KDA_BWD_STAMP(0);
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const BwdChunkLayout L = bwdChunkLayout(cMax, kd, vd);
  const int ld = L.ldg, ldc = cMax + 1;
  float* gs = reinterpret_cast<float*>(smemBwd + L.gs);
  bf16* qb = reinterpret_cast<bf16*>(smemBwd + L.qb);
  bf16* kb = reinterpret_cast<bf16*>(smemBwd + L.kb);
  const SplitMat dWs = splitAt(smemBwd, L.r1, cMax, L.ldk);   // then qF
  const SplitMat kEs = splitAt(smemBwd, L.r2, cMax, L.ldk);   // then kbF
  const SplitMat dVs = splitAt(smemBwd, L.r2, cMax, L.ldv);
  const SplitMat Ms = splitAt(smemBwd, L.r3, cMax, L.ldcb);
  const SplitMat Xs = splitAt(smemBwd, L.r3 + 2 * cMax * L.ldcb * 2, cMax, L.ldcb);
  const SplitMat kRs = splitAt(smemBwd, L.r3, cMax, L.ldk);
  float* mF = reinterpret_cast<float*>(Xs.hi);  // [C, C] fp32 M until X is written
  float* dAd = reinterpret_cast<float*>(smemBwd + L.dAqkDiag);  // [C/16][16][17]
  const SplitMat dAs = splitAt(smemBwd, L.dAqkS, cMax, L.ldcb);
  float* dT = reinterpret_cast<float*>(smemBwd + L.dT);
  const SplitMat dLs = splitAt(smemBwd, L.dLS, cMax, L.ldcb);  // dM, then dL
  float* betas = reinterpret_cast<float*>(smemBwd + L.betas);
  float* dbetas = reinterpret_cast<float*>(smemBwd + L.dbetas);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int64_t hv = at.vCol / vd;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5;
  const int g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t vBase = at.slot * cMax * vd, kBase = at.slot * cMax * kd;
  const int64_t cBase = at.slot * cMax * cMax;
  const int64_t oStride = a.valueHeads * a.valueDim, qkStride = a.heads * a.keyDim;
  const float* dvn = p.dvn + vBase;
  float* dG = p.dGWork + kBase;
  float* p0 = p.p0 + kBase;
  float* p1 = p.p1 + kBase;
  float* p2 = p.p2 + kBase;
  auto kf = [&](int i, int d) { return __bfloat162float(kb[i * kd + d]); };
  auto qf = [&](int i, int d) { return __bfloat162float(qb[i * kd + d]); };
  auto diagAt = [](int i, int j) { return (i >> 4) * 272 + (i & 15) * 17 + (j & 15); };
  // ---- stage: beta, q, k, M, dAqk, dT = dVn v^T (lower triangle); G = cumsum(g) by one thread
  // per key column straight from global memory (rows >= c zero), round 2's order of adds.
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? p.beta[(at.row0 + i) * a.valueHeads + hv] : 0.f;
  }
  for (int d = int(threadIdx.x); d < kd; d += blockDim.x) cumsumGColumn(a, p, at, c, d, gs, ld);
  // Threads past the cumsum's (when there are) stage q, k, M, dAqk and dT: 16-byte loads, a
  // batch of items loaded before any is stored (the same values as one element at a time).
  const int sT0 = int(blockDim.x) > 2 * kd ? int(threadIdx.x) - kd : int(threadIdx.x);
  const int sNT = int(blockDim.x) > 2 * kd ? int(blockDim.x) - kd : int(blockDim.x);
  const bool qkVec = ((reinterpret_cast<uintptr_t>(p.q) | reinterpret_cast<uintptr_t>(p.k)) &
                      15) == 0;  // kd % 16 == 0: rows and head columns keep 16-byte alignment
  const bool mVec = ((reinterpret_cast<uintptr_t>(p.savedM) | reinterpret_cast<uintptr_t>(p.p3) |
                      reinterpret_cast<uintptr_t>(p.p4)) & 15) == 0;  // cMax % 16 == 0
  auto stageM = [&](int idx, float mv, float a3, float a4) {
    const int i = idx / cMax, j = idx % cMax;
    const bool in = i < c && j <= i;
    Ms.put(i, j, mv);
    mF[idx] = mv;
    const float aq = in ? a3 : 0.f;
    // Round 6 stages a zero diagonal: its j = i terms go in fp32 (diagonalOnTensorCores).
    dAs.put(i, j, kTensorCoreDiagonal ? (j < i ? aq : 0.f) : aq);
    if ((i >> 4) == (j >> 4)) dAd[diagAt(i, j)] = aq;
    dT[i * ldc + j] = in ? a4 : 0.f;
  };
  if (sT0 >= 0 && qkVec) {
    const int per = kd / 8, total = cMax * per;  // 8 bf16 (16 bytes) per item
    for (int base = sT0; base < total; base += 2 * sNT) {
      uint4 qv[2], kv[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * sNT, i = item / per, d0 = 8 * (item % per);
        qv[u] = kv[u] = make_uint4(0, 0, 0, 0);
        if (item < total && i < c) {
          const int64_t at0 = (at.row0 + i) * qkStride + at.qkCol + d0;
          qv[u] = *reinterpret_cast<const uint4*>(p.q + at0);
          kv[u] = *reinterpret_cast<const uint4*>(p.k + at0);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * sNT;
        if (item >= total) break;
        *reinterpret_cast<uint4*>(qb + 8 * item) = qv[u];  // qb / kb rows of kd: item * 8
        *reinterpret_cast<uint4*>(kb + 8 * item) = kv[u];
      }
    }
  } else if (sT0 >= 0) {
    for (int idx = sT0; idx < cMax * kd; idx += sNT) {
      const int i = idx / kd, d = idx % kd;
      bf16 qv = __float2bfloat16(0.f), kv = qv;
      if (i < c) {
        const int64_t row = at.row0 + i;
        qv = p.q[row * qkStride + at.qkCol + d];
        kv = p.k[row * qkStride + at.qkCol + d];
      }
      qb[idx] = qv;
      kb[idx] = kv;
    }
  }
  if (sT0 >= 0 && mVec) {
    const int total = cMax * cMax / 4;  // 4 consecutive j per item
    for (int base = sT0; base < total; base += 2 * sNT) {
      float4 mv[2], a3[2], a4[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * sNT;
        mv[u] = a3[u] = a4[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (item < total) {  // [R, C] buffers: every slot's rows exist, so no bound on i
          mv[u] = *reinterpret_cast<const float4*>(p.savedM + cBase + 4 * item);
          a3[u] = *reinterpret_cast<const float4*>(p.p3 + cBase + 4 * item);
          a4[u] = *reinterpret_cast<const float4*>(p.p4 + cBase + 4 * item);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * sNT;
        if (item >= total) break;
        stageM(4 * item, mv[u].x, a3[u].x, a4[u].x);
        stageM(4 * item + 1, mv[u].y, a3[u].y, a4[u].y);
        stageM(4 * item + 2, mv[u].z, a3[u].z, a4[u].z);
        stageM(4 * item + 3, mv[u].w, a3[u].w, a4[u].w);
      }
    }
  } else if (sT0 >= 0) {
    for (int idx = sT0; idx < cMax * cMax; idx += sNT) {
      stageM(idx, p.savedM[cBase + idx], p.p3[cBase + idx], p.p4[cBase + idx]);
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(1);
  // ---- inter-chunk terms (as round 2), dW and kE = k ⊙ e^G split once.
  const int nThreads = int(blockDim.x);
  // One element's terms (round 2's expressions): kE and dW split, the updated p2 / p1 / dG.
  auto interChunk = [&](int i, int d, float sq, float skd, float sw, float& kE, float& dW,
                        float& o2, float& o1, float& oG) {
    const float ki = kf(i, d), gi = gs[i * ld + d];
    kE = ki * expNeg(gi);
    dW = o2 = o1 = oG = 0.f;  // rows >= c: dW zero, p2 / p1 / dG not written
    if (i >= c) return;
    const float eG = expf(gi), eR = expf(gs[(c - 1) * ld + d] - gi);
    dW = -sw;
    o2 = sq * eG;
    o1 = skd * eR;
    oG = qf(i, d) * eG * sq - ki * eR * skd;
  };
  const bool pVec = ((reinterpret_cast<uintptr_t>(p0) | reinterpret_cast<uintptr_t>(p1) |
                      reinterpret_cast<uintptr_t>(p2) | reinterpret_cast<uintptr_t>(dG)) &
                     15) == 0;  // kd % 16 == 0: every row starts 16-byte aligned
  if (pVec) {  // 4 consecutive d per item, 16-byte loads and stores, two items per batch
    const int per = kd / 4, total = cMax * per;
    for (int base = threadIdx.x; base < total; base += 2 * nThreads) {
      float4 pre[2][3];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * nThreads, idx = 4 * item;
        const bool live = item < total && item / per < c;
        const float4 z = make_float4(0.f, 0.f, 0.f, 0.f);
        pre[u][0] = live ? *reinterpret_cast<const float4*>(p0 + idx) : z;
        pre[u][1] = live ? *reinterpret_cast<const float4*>(p1 + idx) : z;
        pre[u][2] = live ? *reinterpret_cast<const float4*>(p2 + idx) : z;
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int item = base + u * nThreads, idx = 4 * item;
        if (item >= total) break;
        const int i = item / per, d0 = 4 * (item % per);
        const float sq[4] = {pre[u][0].x, pre[u][0].y, pre[u][0].z, pre[u][0].w};
        const float skd[4] = {pre[u][1].x, pre[u][1].y, pre[u][1].z, pre[u][1].w};
        const float sw[4] = {pre[u][2].x, pre[u][2].y, pre[u][2].z, pre[u][2].w};
        float kE[4], dW[4], o2[4], o1[4], oG[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          interChunk(i, d0 + e, sq[e], skd[e], sw[e], kE[e], dW[e], o2[e], o1[e], oG[e]);
        }
        kEs.put2(i, d0, kE[0], kE[1]);
        kEs.put2(i, d0 + 2, kE[2], kE[3]);
        dWs.put2(i, d0, dW[0], dW[1]);
        dWs.put2(i, d0 + 2, dW[2], dW[3]);
        if (i < c) {
          *reinterpret_cast<float4*>(p2 + idx) = make_float4(o2[0], o2[1], o2[2], o2[3]);
          *reinterpret_cast<float4*>(p1 + idx) = make_float4(o1[0], o1[1], o1[2], o1[3]);
          *reinterpret_cast<float4*>(dG + idx) = make_float4(oG[0], oG[1], oG[2], oG[3]);
        }
      }
    }
  }
  for (int base = threadIdx.x; !pVec && base < cMax * kd; base += 4 * nThreads) {
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
      float kE, dW, o2, o1, oG;
      interChunk(i, d, pre[u][0], pre[u][1], pre[u][2], kE, dW, o2, o1, oG);
      kEs.put(i, d, kE);
      dWs.put(i, d, dW);
      if (i < c) {
        p2[idx] = o2;
        p1[idx] = o1;
        dG[idx] = oG;
      }
    }
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(3);
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
  MOEWB_KDA_BWD_STAMP(4);
  // ---- dbeta_j = sum_i dT[i, j] M[i, j] (one thread per column, round 2's order; the chain
  // reads only); dM = dT Diag(beta) split by all threads (the fp32 dM round 2 wrote back into dT
  // is never read: dL overwrites dT); dVn staged split.
  for (int j = threadIdx.x; j < cMax; j += blockDim.x) {
    float acc = 0.f;
#pragma unroll 16
    for (int i = 0; i < cMax; ++i) {
      if (j < c && i >= j && i < c) acc += dT[i * ldc + j] * mF[i * cMax + j];
    }
    if (j < c) dbetas[j] = acc;
  }
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += blockDim.x) {
    const int i = idx / cMax, j = idx % cMax;
    const bool in = j < c && i >= j && i < c;
    dLs.put(i, j, in ? dT[i * ldc + j] * betas[j] : 0.f);
  }
  for (int idx = threadIdx.x; idx < cMax * vd; idx += blockDim.x) {
    const int i = idx / vd, e = idx % vd;
    dVs.put(i, e, i < c ? dvn[idx] : 0.f);
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(5);
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
  MOEWB_KDA_BWD_STAMP(6);
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
  MOEWB_KDA_BWD_STAMP(7);
  // ---- kR[j, d] = k_j e^{G_r - G_j}, r = last row of j's block (into the dead M / X); round 6
  // anchors the partial last block at its last valid row (its diagonal block reads that kR).
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int j = idx / kd, d = idx % kd;
    const int r = kTensorCoreDiagonal ? min(j | 15, c - 1) : (j | 15);
    kRs.put(j, d, kf(j, d) * expNeg(gs[r * ld + d] - gs[j * ld + d]));
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(8);
  // ---- pairwise sums (round 2's tiles and order): daQ, daL over key blocks J < X, dB over
  // query blocks I > X on tensor cores; the diagonal blocks elementwise in fp32 (lane-balanced),
  // or with kTensorCoreDiagonal on tensor cores where their decay allows (diagonalOnTensorCores).
  {
    const DiagView diag{gs, qb, kb, dAd, dT, betas, ld, ldc, kd};
    const DiagMmaView diagMma{dAs, dLs, kRs, qFs, kbFs, dAd, qb, kb, kd};
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
      if (!kTensorCoreDiagonal || !diagonalOnTensorCores(diagMma, gs, ld, x0, d0, c, aq, aL, db)) {
        diagonalRowSums(diag, x0, d0, c, aq, aL);
        diagonalColumnSums(diag, x0, d0, c, db);
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
  MOEWB_KDA_BWD_STAMP(9);
  // ---- dg = reverse cumsum of dG (+ dG_C on the last row) and dbeta, round 2's order: four
  // lanes per key column (one 16-row segment each) trade their segment sums by shuffles.
  for (int dBase = 0; dBase < kd; dBase += nThreads / 4) {
    reverseCumsumColumn(a, p, at, c, nb, dBase + (int(threadIdx.x) >> 2), gs, ld, kb, dG, p1);
  }
  for (int i = warp; i < c; i += warps) {
    float acc = 0.f;
    for (int d = lane; d < kd; d += 32) acc += p0[i * kd + d];
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) p.dbeta[(at.row0 + i) * a.valueHeads + hv] = dbetas[i] + acc;
  }
#if defined(MOEWB_KDA_BWD_PHASE_CLOCK)
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(11);
#endif
}

// The per-chunk backward (after the backward products on the same `in`): round 6 (the diagonal
// blocks on tensor cores where their decay allows) when tensorCoreDiagonal, else round 5. The
// caller checks kdaBwdChunkSupported(args). Queues the kernel on `stream`; returns the attribute
// or launch error.
inline cudaError_t launchChunkBackwardSplit(cudaStream_t stream, const CoreArgs& args,
                                            const IntraBwdArgs& in, bool tensorCoreDiagonal) {
  const int64_t bytes = bwdChunkLayout(args.chunk, args.keyDim, args.valueDim).bytes;
  const auto kernel = tensorCoreDiagonal ? kda_bwd_chunk_kernel<true> : kda_bwd_chunk_kernel<false>;
  cudaError_t err = allowSharedBytes(kernel, bytes);
  if (err != cudaSuccess) return err;
  kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
