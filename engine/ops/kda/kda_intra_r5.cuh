// Round 5 of the KDA intra-chunk forward (bench/scratch/kda_chunk_05.md): a drop-in replacement of
// kda_intra_fwd_mma_kernel (kda_intra_mma.cuh, round 2) with the same arguments, grid, outputs
// and workspace layouts, and the same arithmetic per output element (same operand values, same
// k order, same mma3 order, same fp32 loops), so its outputs are expected bitwise equal to round
// 2's. Used both for the forward (computeM) and for the backward's recompute (M read back).
// What changes is where the operands come from and who works when:
//  1. "Split once" (kda_split_mma.cuh): every tensor-core operand is computed and split
//     into bf16 hi / lo ONCE, while staged, into padded row-major bf16 pairs (SplitMat), and the
//     fragments come from ldmatrix:
//       qF[i, d] = q_i e^{G_i - G_i0},  kF[i, d] = k_i e^{G_i - G_i0}   (A of Aqk / L, i0 = first
//                                                                         row of i's 16-block)
//       kB_I[j, d] = k_j e^{G_r - G_j}, r = 16 I, j < r                (B of the block row I:
//                                                                         one copy per I)
//       M (hi / lo), Wb[j, d] = beta_j (k_j e^{G_j}), Ub[j, e] = beta_j v_j   (W / U products)
//     Round 2 rebuilt each fragment per warp tile with scalar fp32 loads, an exp per element and
//     a split (the A rows of block I once per column tile, the B rows once per query block).
//  2. q / k staged as bf16 (exact), q, k, g, v read with 16-byte loads, a batch's loads issued
//     before its stores; round 2 read q from global memory inside the diagonal-block and fragment
//     loops (2-byte, row-scattered loads). The diagonal loop reads two d per shared load (bf16
//     pairs, float2 of G), still summing d in order; q ⊙ e^G and k ⊙ e^{G_C - G} go out as float4.
//  3. 16 warps, one CTA per SM (221 KB of shared memory at C = 64, K = V = 128): the 12 off-
//     diagonal warp tiles run on the top 12 warps while the others start the diagonal blocks;
//     during the triangular solve (64 threads, round 2's order) the other 448 threads write
//     q ⊙ e^G, k ⊙ e^{G_C - G}, e^{G_C} and stage the W / U operands, which round 2 did after it.
// Unchanged: the tiles and the MMA sequence per output element, the diagonal 16 x 16 blocks in
// fp32 (elementwise, d in order), the solve (one thread per column, four partial sums), every
// exponent clamped to <= 0 (padded rows have G = 0), the zero fill of padded rows / columns.
// Supported shapes: kdaIntraMmaSupported (chunk, keyDim multiples of 16, valueDim of 8) whose
// buffers fit one SM (kdaIntraR5Supported); others keep round 2 / round 1.
// Round 8 (bench/scratch/kda_chunk_08.md; the kernel's kRound8 template choice, other bits): the
// diagonal blocks on tensor cores where their decay allows and M solved by blocks (see the
// "Round 8" section below). Both rounds stage the split operands two key columns per store with
// a warp per row and load v ahead of the q / k writes (the same values as before).
#pragma once

#include "ops/kda/kda_split_mma.cuh"    // SplitMat, fragA / fragB / fragBT, alignUp16
#include "ops/kda/kda_intra_mma.cuh"     // kdaIntraMmaSupported

namespace moewb::engine::cuda::kda_detail {

constexpr int kIntraR5Threads = 512;  // 16 warps, one CTA per SM

// Per-phase clock (bench/scratch/kda_chunk_08.cu; off in the engine): with
// MOEWB_KDA_INTRA_PHASE_CLOCK defined, thread 0 of CTAs (1..kIntraClockCtas, gridDim.y / 2) writes
// clock64() after each barrier into gKdaIntraClock[cta][stamp]; stamp 0 is the start, stamps 4, 5
// and 8 are round 8's only; 11 and 12 (no barrier) are thread 0 after its column of the solve and
// thread C (the first writer) after its writes.
#if defined(MOEWB_KDA_INTRA_PHASE_CLOCK)
inline constexpr int kIntraClockCtas = 8, kIntraClockStamps = 13;
__device__ long long gKdaIntraClock[kIntraClockCtas][kIntraClockStamps];
#define MOEWB_KDA_INTRA_STAMP(n) MOEWB_KDA_INTRA_STAMP_BY(n, 0)
#define MOEWB_KDA_INTRA_STAMP_BY(n, thread)                                           \
  do {                                                                                \
    if (threadIdx.x == (thread) && blockIdx.y == gridDim.y / 2 && blockIdx.x >= 1 &&  \
        blockIdx.x <= unsigned(kIntraClockCtas)) {                                    \
      gKdaIntraClock[blockIdx.x - 1][n] = clock64();                                  \
    }                                                                                 \
  } while (0)
#else
#define MOEWB_KDA_INTRA_STAMP(n) \
  do {                           \
  } while (0)
#define MOEWB_KDA_INTRA_STAMP_BY(n, thread) \
  do {                                      \
  } while (0)
#endif

// Byte offsets of the round-5 shared buffers (16-byte aligned). Padded bf16 row strides
// ldk = K + 8, ldv = V + 8, ldcb = C + 8 (272 / 144-byte rows: conflict-free ldmatrix); fp32 G
// rows K + 2 and bf16 q / k rows K + 2 (pairs of d loaded at once, rows on distinct banks), fp32
// L / M rows C + 1 (round 2's strides).
struct IntraR5Layout {
  int ldk, ldv, ldcb, ldg, ldc, ldb;
  int64_t gs, qb, kb, ls, ms, betas, flags, qF, kF, kB, kR, mS, wB, uB, bytes;
};

__host__ __device__ inline IntraR5Layout intraR5Layout(int64_t c, int64_t kd, int64_t vd) {
  IntraR5Layout l;
  l.ldk = int(kd + 8);
  l.ldv = int(vd + 8);
  l.ldcb = int(c + 8);
  l.ldg = int(kd + 2);  // even: float2 loads of G in the diagonal loop
  l.ldc = int(c + 1);
  l.ldb = int(kd + 2);  // bf16 q / k rows of K / 2 + 1 words: distinct rows, distinct banks
  const int64_t nbMax = c / 16, kBRows = 16 * nbMax * (nbMax - 1) / 2;
  int64_t at = 0;
  l.gs = at;     at = alignUp16(at + c * l.ldg * 4);   // G fp32 [C, K+2]
  l.qb = at;     at = alignUp16(at + c * l.ldb * 2);  // q bf16 [C, K+2]
  l.kb = at;     at = alignUp16(at + c * l.ldb * 2);  // k bf16 [C, K+2]
  l.ls = at;     at = alignUp16(at + c * l.ldc * 4);   // L fp32 [C, C+1]
  l.ms = at;     at = alignUp16(at + c * l.ldc * 4);   // M fp32 [C, C+1]
  l.betas = at;  at = alignUp16(at + c * 4);
  l.flags = at;  at = alignUp16(at + (c / 16) * 4);  // round 8: a diagonal block's decay > 40
  const int64_t region = at;  // phase 1: qF, kF, kB; phase 2: M, Wb, Ub (split pairs)
  l.qF = at;     at = alignUp16(at + 2 * c * l.ldk * 2);
  l.kF = at;     at = alignUp16(at + 2 * c * l.ldk * 2);
  l.kB = at;     at = alignUp16(at + 2 * kBRows * l.ldk * 2);
  l.kR = l.kB;   // round 8, after the off-diagonal tiles: kR [C, K+8] split (C <= 16 + kBRows)
  const int64_t kREnd = alignUp16(l.kR + 2 * c * l.ldk * 2);
  const int64_t end1 = at > kREnd ? at : kREnd;
  at = region;
  l.mS = at;     at = alignUp16(at + 2 * c * l.ldcb * 2);
  l.wB = at;     at = alignUp16(at + 2 * c * l.ldk * 2);
  l.uB = at;     at = alignUp16(at + 2 * c * l.ldv * 2);
  l.bytes = end1 > at ? end1 : at;
  return l;
}

// Shapes round 5 runs: those of round 2 whose buffers fit one SM's shared memory (227 KB).
inline bool kdaIntraR5Supported(const CoreArgs& a) {
  return kdaIntraMmaSupported(a) && a.chunk < kIntraR5Threads &&
         intraR5Layout(a.chunk, a.keyDim, a.valueDim).bytes <= 232448;
}

// Stages beta, q and k (bf16) and raw g of one chunk (rows >= c zero), 16-byte global loads when
// the rows are 16-byte aligned; then G = cumsum(g) in round 2's order (a batch of 16 rows loaded
// before its sums are stored). Ends with a barrier.
__device__ inline void intraR5Stage(const CoreArgs& a, const ChunkAt& at, const bf16* q,
                                    const bf16* k, const float* g, const float* beta, bf16* qb,
                                    bf16* kb, int ldb, float* gs, int ldg, float* betas) {
  const int kd = int(a.keyDim), cMax = int(a.chunk), c = at.c;
  const int64_t qkStride = a.heads * a.keyDim, gStride = a.valueHeads * a.keyDim;
  for (int i = threadIdx.x; i < cMax; i += blockDim.x) {
    betas[i] = i < c ? beta[(at.row0 + i) * a.valueHeads + at.gCol / kd] : 0.f;
  }
  const bool vec = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                     reinterpret_cast<uintptr_t>(g)) & 15) == 0;
  if (vec) {  // kd % 16 == 0, so every row start is 16-byte aligned too
    const int per = kd / 8, total = cMax * per;  // 8 elements (one uint4 of q / k) per item
    const int nT = int(blockDim.x);
    for (int base = threadIdx.x; base < total; base += 2 * nT) {
      uint4 qv[2], kv[2];
      float4 g0[2], g1[2];
#pragma unroll
      for (int u = 0; u < 2; ++u) {  // the batch's loads before any store
        const int idx = base + u * nT, i = idx / per, d0 = 8 * (idx % per);
        qv[u] = kv[u] = make_uint4(0, 0, 0, 0);
        g0[u] = g1[u] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (idx < total && i < c) {
          const int64_t row = at.row0 + i;
          qv[u] = *reinterpret_cast<const uint4*>(q + row * qkStride + at.qkCol + d0);
          kv[u] = *reinterpret_cast<const uint4*>(k + row * qkStride + at.qkCol + d0);
          const float* gp = g + row * gStride + at.gCol + d0;
          g0[u] = *reinterpret_cast<const float4*>(gp);
          g1[u] = *reinterpret_cast<const float4*>(gp + 4);
        }
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int idx = base + u * nT, i = idx / per, d0 = 8 * (idx % per);
        if (idx >= total) break;
        uint32_t* qw = reinterpret_cast<uint32_t*>(qb + i * ldb + d0);  // 4-byte aligned rows
        uint32_t* kw = reinterpret_cast<uint32_t*>(kb + i * ldb + d0);
        qw[0] = qv[u].x; qw[1] = qv[u].y; qw[2] = qv[u].z; qw[3] = qv[u].w;
        kw[0] = kv[u].x; kw[1] = kv[u].y; kw[2] = kv[u].z; kw[3] = kv[u].w;
        float2* gd = reinterpret_cast<float2*>(gs + i * ldg + d0);  // 8-byte aligned (ldg even)
        gd[0] = make_float2(g0[u].x, g0[u].y);
        gd[1] = make_float2(g0[u].z, g0[u].w);
        gd[2] = make_float2(g1[u].x, g1[u].y);
        gd[3] = make_float2(g1[u].z, g1[u].w);
      }
    }
  } else {
    for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
      const int i = idx / kd, d = idx % kd;
      bf16 qv = __float2bfloat16(0.f), kv = qv;
      float gv = 0.f;
      if (i < c) {
        const int64_t row = at.row0 + i;
        qv = q[row * qkStride + at.qkCol + d];
        kv = k[row * qkStride + at.qkCol + d];
        gv = g[row * gStride + at.gCol + d];
      }
      qb[i * ldb + d] = qv;
      kb[i * ldb + d] = kv;
      gs[i * ldg + d] = gv;
    }
  }
  __syncthreads();
  MOEWB_KDA_INTRA_STAMP(1);
  for (int d = threadIdx.x; d < kd; d += blockDim.x) {  // loadChunkQkG's sums, 16 loads at once
    float acc = 0.f;
    for (int i0 = 0; i0 < c; i0 += 16) {
      float x[16];
#pragma unroll
      for (int u = 0; u < 16; ++u) x[u] = i0 + u < c ? gs[(i0 + u) * ldg + d] : 0.f;
#pragma unroll
      for (int u = 0; u < 16; ++u) {
        if (i0 + u >= c) break;
        acc += x[u];
        gs[(i0 + u) * ldg + d] = acc;
      }
    }
  }
  __syncthreads();
}

// The off-diagonal blocks' operands, split once (round 2's values): rows i in [row0, 16 nb) of
// qF = q_i e^{G_i - G_i0} (0 for i >= c) and kF = k_i e^{G_i - G_i0} (i0 = 16 (i / 16)), and
// kB_I[j] = k_j e^{G_16I - G_j} for j < 16 I, 1 <= I < nb (at row 8 I (I - 1)). A warp per row,
// two key columns per lane and store (kd, ld, ldb even; no division in the loops).
__device__ inline void intraSplitOperands(const SplitMat& qF, const SplitMat& kF,
                                          const SplitMat& kB, const bf16* qb, const bf16* kb,
                                          int ldb, const float* gs, int ld, int kd, int c, int nb,
                                          int row0) {
  const int warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  const int lane = int(threadIdx.x) & 31;
  auto pair = [](const bf16* p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
  };
  for (int i = row0 + warp; i < 16 * nb; i += warps) {
    const int i0 = i & ~15;
    for (int d = 2 * lane; d < kd; d += 64) {
      const float2 gi = *reinterpret_cast<const float2*>(gs + i * ld + d);
      const float2 g0 = *reinterpret_cast<const float2*>(gs + i0 * ld + d);
      const float e0 = expNeg(gi.x - g0.x), e1 = expNeg(gi.y - g0.y);
      const float2 q2 = pair(qb + i * ldb + d), k2 = pair(kb + i * ldb + d);
      qF.put2(i, d, i < c ? q2.x * e0 : 0.f, i < c ? q2.y * e1 : 0.f);
      kF.put2(i, d, k2.x * e0, k2.y * e1);
    }
  }
  const int kBRows = 8 * nb * (nb - 1);  // block rows 1 .. nb - 1 of 16 I rows each
  for (int row = warp; row < kBRows; row += warps) {
    int I = 1;
    while (8 * I * (I + 1) <= row) ++I;  // block row I holds rows [8 I (I - 1), 8 I (I + 1))
    const int j = row - 8 * I * (I - 1), r = 16 * I;
    for (int d = 2 * lane; d < kd; d += 64) {
      const float2 gr = *reinterpret_cast<const float2*>(gs + r * ld + d);
      const float2 gj = *reinterpret_cast<const float2*>(gs + j * ld + d);
      const float2 k2 = pair(kb + j * ldb + d);
      kB.put2(row, d, k2.x * expNeg(gr.x - gj.x), k2.y * expNeg(gr.y - gj.y));
    }
  }
}

// A 16 x 8 tile of the pairwise products over the key columns: accA += qF[a0 .. a0+16)
// B[b0 .. b0+8)^T and accL += kF[a0 .. a0+16) B[b0 .. b0+8)^T (split operands; kAllFour: mma4,
// else mma3). Called by all 32 lanes of a warp.
template <bool kAllFour>
__device__ __forceinline__ void qkTile(const SplitMat& qF, const SplitMat& kF, const SplitMat& b,
                                       int a0, int b0, int kd, float (&accA)[4],
                                       float (&accL)[4]) {
  for (int k0 = 0; k0 < kd; k0 += 16) {
    uint32_t ah[4], al[4], bh[2], bl[2];
    fragB(bh, bl, b, k0, b0);
    fragA(ah, al, qF, a0, k0);
    if constexpr (kAllFour) mma4(accA, ah, al, bh, bl); else mma3(accA, ah, al, bh, bl);
    fragA(ah, al, kF, a0, k0);
    if constexpr (kAllFour) mma4(accL, ah, al, bh, bl); else mma3(accL, ah, al, bh, bl);
  }
}

// ---- Round 8 (bench/scratch/kda_chunk_08.md). Round 5 summed the 544 pairs (i >= j) of the
// four diagonal 16 x 16 blocks elementwise, an exp per (pair, d): 70 k exps and ~1.4 k
// instructions per pair, the kernel's largest issue cost; and solved M one column per thread
// over all C rows (a 2 k-FMA dependent chain on thread 0). Round 8 takes the diagonal blocks
// through the anchor x0 (their first row), as the off-diagonal blocks:
//   Aqk[i, j] = sum_d qF[i, d] kR[j, d],  L[i, j] = beta_i sum_d kF[i, d] kR[j, d],
//   qF = q_i e^{G_i - G_x0}, kF = k_i e^{G_i - G_x0} (<= 1: round 5's A operands),
//   kR = k_j e^{G_x0 - G_j} (>= |k_j|),
// with split operands and all four products (mma4) where the block decays at most
// kDiagMmaMaxDecay on every key column (kR <= e^40 |k|; else the block keeps round 5's loop);
// and M by blocks: the four 16 x 16 diagonal inverses (one thread per column, <= 15 rows), then
// M_IJ = -M_II sum_{J <= K < I} L_IK M_KJ block row by block row on all threads.

// kR[j, d] = k_j e^{G_x0 - G_j} (x0 = 16 (j / 16); rows >= c zero), split into the kR buffer;
// flags[X] = 1 when some key column of block X decays more than kDiagMmaMaxDecay over its valid
// rows (flags were zeroed before the previous barrier).
__device__ inline void intraR8BuildKR(const SplitMat& kR, int* flags, const bf16* kb, int ldb,
                                      const float* gs, int ld, int kd, int c, int nb) {
  const int warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  const int lane = int(threadIdx.x) & 31;
  for (int j = warp; j < 16 * nb; j += warps) {
    const int x0 = j & ~15;
    bool over = false;
    for (int d = 2 * lane; d < kd; d += 64) {
      const float2 gx = *reinterpret_cast<const float2*>(gs + x0 * ld + d);
      const float2 gj = *reinterpret_cast<const float2*>(gs + j * ld + d);
      const float decay0 = gx.x - gj.x, decay1 = gx.y - gj.y;  // >= 0: G does not increase
      over = over || decay0 > kDiagMmaMaxDecay || decay1 > kDiagMmaMaxDecay;
      const float2 k2 =
          __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kb + j * ldb + d));
      kR.put2(j, d, j < c ? k2.x * __expf(fminf(decay0, kDiagMmaMaxDecay)) : 0.f,
              j < c ? k2.y * __expf(fminf(decay1, kDiagMmaMaxDecay)) : 0.f);
    }
    if (j < c && __any_sync(0xffffffffu, over) && lane == 0) flags[j >> 4] = 1;
  }
}

// The diagonal blocks whose flag is clear, on tensor cores: two 16 x 8 warp tiles per block;
// writes Aqk[i, j] and L[i, j] = beta_i (kF kR^T)[i, j] (0 on the diagonal) for i < c, j <= i.
__device__ inline void intraR8DiagonalTiles(const SplitMat& kR, const SplitMat& qF,
                                            const SplitMat& kF, const int* flags,
                                            const float* betas, float* aqk, float* ls, int ldc,
                                            int cMax, int kd, int c, int nb) {
  const int warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  const int lane = int(threadIdx.x) & 31, g8 = lane >> 2, t2 = (lane & 3) * 2;
  for (int tile = warp; tile < 2 * nb; tile += warps) {
    const int x0 = 16 * (tile >> 1), j0 = x0 + 8 * (tile & 1);
    if (flags[tile >> 1] != 0) continue;
    float accA[4] = {0.f, 0.f, 0.f, 0.f}, accL[4] = {0.f, 0.f, 0.f, 0.f};
    qkTile<true>(qF, kF, kR, x0, j0, kd, accA, accL);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = x0 + g8 + 8 * (r >> 1), j = j0 + t2 + (r & 1);
      if (i >= c || j > i) continue;  // the zero fill writes those
      aqk[i * cMax + j] = accA[r];
      ls[i * ldc + j] = j < i ? betas[i] * accL[r] : 0.f;
    }
  }
}

// Column j of M's rows 0 .. end of j's 16-row block: zero above the block, the block's part of
// (I + L_XX)^-1 by forward substitution (rows >= c zero), the column kept in registers (the
// loops are unrolled over the block's 16 rows; terms above the diagonal multiply zeros).
__device__ inline void intraR8SolveDiagonalBlock(const float* ls, float* ms, int ldc, int cMax,
                                                 int c, int j) {
  const int x0 = j & ~15, jl = j - x0;
  float col[16];
#pragma unroll
  for (int s = 0; s < 16; ++s) col[s] = (s == jl && x0 + s < c) ? 1.f : 0.f;
#pragma unroll
  for (int il = 1; il < 16; ++il) {
    const float* row = ls + (x0 + il) * ldc + x0;
    float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
    for (int s = 0; s < il; ++s) {
      if (s & 1) {
        acc1 += row[s] * col[s];
      } else {
        acc0 += row[s] * col[s];
      }
    }
    if (il > jl && x0 + il < c) col[il] = -(acc0 + acc1);
  }
  for (int i = 0; i < x0; ++i) ms[i * ldc + j] = 0.f;
#pragma unroll
  for (int s = 0; s < 16; ++s) {
    if (x0 + s < cMax) ms[(x0 + s) * ldc + j] = col[s];
  }
}

// M below its diagonal blocks, block row r0 = 16 I at a time (rows above final), on tensor
// cores: for each 8-column tile j0 of columns < r0 (one warp), T = L[r0 .. r0+16, 16 J .. r0)
// M[16 J .. r0, j0 .. j0+8) (J = j0 / 16: M is zero above its diagonal), then
// M[r0 .., j0 ..] = -M_II T with M's diagonal block M_II; split operands, all four products
// (mma4: the fp32 representation error of the operands, ~2^-17, is the only loss). T goes
// through the warp's own 16 x 8 slice of tS (16 (cMax - 16) floats). Called by every thread
// after the diagonal blocks are solved (and a barrier); ends with a barrier.
__device__ inline void intraR8MergeBlocks(const float* ls, float* ms, int ldc, float* tS,
                                          int cMax) {
  const int warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  const int lane = int(threadIdx.x) & 31, g = lane >> 2, q2 = 2 * (lane & 3);
  for (int r0 = 16; r0 < cMax; r0 += 16) {
    for (int tile = warp; tile < r0 / 8; tile += warps) {
      const int j0 = 8 * tile;
      uint32_t ah[4], al[4], bh[2], bl[2];
      float t[4] = {0.f, 0.f, 0.f, 0.f};
      for (int k0 = j0 & ~15; k0 < r0; k0 += 16) {
        loadFragA(ah, al, [&](int m, int k) { return ls[(r0 + m) * ldc + k0 + k]; });
        loadFragB(bh, bl, [&](int k, int n) { return ms[(k0 + k) * ldc + j0 + n]; });
        mma4(t, ah, al, bh, bl);
      }
      float* tw = tS + tile * 128;  // T's tile, row-major [16, 8]
      tw[g * 8 + q2] = t[0];
      tw[g * 8 + q2 + 1] = t[1];
      tw[(g + 8) * 8 + q2] = t[2];
      tw[(g + 8) * 8 + q2 + 1] = t[3];
      __syncwarp();
      float m[4] = {0.f, 0.f, 0.f, 0.f};
      loadFragA(ah, al, [&](int m, int k) { return ms[(r0 + m) * ldc + r0 + k]; });
      loadFragB(bh, bl, [&](int k, int n) { return tw[k * 8 + n]; });
      mma4(m, ah, al, bh, bl);
      ms[(r0 + g) * ldc + j0 + q2] = -m[0];
      ms[(r0 + g) * ldc + j0 + q2 + 1] = -m[1];
      ms[(r0 + g + 8) * ldc + j0 + q2] = -m[2];
      ms[(r0 + g + 8) * ldc + j0 + q2 + 1] = -m[3];
    }
    __syncthreads();
  }
}

// One CTA per (chunk, b * HV + hv); arguments and outputs as kda_intra_fwd_mma_kernel.
// kRound8: the diagonal blocks on tensor cores where their decay allows and the solve by blocks
// (see intraR8DiagonalBlocks and intraR8SolveBlocks); false is round 5 (round 2's bits).
template <bool kRound8>
__global__ void __launch_bounds__(kIntraR5Threads, 1)
    kda_intra_fwd_r5_kernel(CoreArgs a, const bf16* q, const bf16* k, const bf16* v,
                            const float* g, const float* beta, bool computeM, float* savedAqk,
                            float* savedM, float* wOut, float* uOut, float* qgOut,
                            float* kDecOut, float* eGCOut) {
  extern __shared__ __align__(16) unsigned char smemR5[];
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const IntraR5Layout Lay = intraR5Layout(cMax, kd, vd);
  const int ld = Lay.ldg, ldc = Lay.ldc;
  float* gs = reinterpret_cast<float*>(smemR5 + Lay.gs);
  bf16* qb = reinterpret_cast<bf16*>(smemR5 + Lay.qb);
  bf16* kb = reinterpret_cast<bf16*>(smemR5 + Lay.kb);
  float* ls = reinterpret_cast<float*>(smemR5 + Lay.ls);
  float* ms = reinterpret_cast<float*>(smemR5 + Lay.ms);
  float* betas = reinterpret_cast<float*>(smemR5 + Lay.betas);
  const SplitMat qFs = splitAt(smemR5, Lay.qF, cMax, Lay.ldk);
  const SplitMat kFs = splitAt(smemR5, Lay.kF, cMax, Lay.ldk);
  const int kBRows = 16 * (cMax / 16) * (cMax / 16 - 1) / 2;
  const SplitMat kBs = splitAt(smemR5, Lay.kB, kBRows, Lay.ldk);  // block row I at 8 I (I - 1)
  const SplitMat kRs = splitAt(smemR5, Lay.kR, cMax, Lay.ldk);      // round 8, after the tiles
  int* flags = reinterpret_cast<int*>(smemR5 + Lay.flags);
  const SplitMat mSs = splitAt(smemR5, Lay.mS, cMax, Lay.ldcb);
  const SplitMat wBs = splitAt(smemR5, Lay.wB, cMax, Lay.ldk);
  const SplitMat uBs = splitAt(smemR5, Lay.uB, cMax, Lay.ldv);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5, nThreads = int(blockDim.x);
  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
  const int ldb = Lay.ldb;
  MOEWB_KDA_INTRA_STAMP(0);
  intraR5Stage(a, at, q, k, g, beta, qb, kb, ldb, gs, ld, betas);
  const int nb = (c + 15) / 16;  // 16-row blocks holding valid rows
  const int64_t savedBase = at.slot * cMax * cMax;
  MOEWB_KDA_INTRA_STAMP(2);
  if (computeM) {
    // ---- operands of the off-diagonal blocks, split once (round 2's values); round 8 also
    // block 0's rows (A of its diagonal block) and zeroes the decay flags.
    if (kRound8 && int(threadIdx.x) < cMax / 16) flags[threadIdx.x] = 0;
    intraSplitOperands(qFs, kFs, kBs, qb, kb, ldb, gs, ld, kd, c, nb, kRound8 ? 0 : 16);
    __syncthreads();
    MOEWB_KDA_INTRA_STAMP(3);
    // ---- off-diagonal block pairs J < I < nb, two 16 x 8 tiles each, on the top warps; the
    // diagonal blocks elementwise (round 2's loop) on every thread after its tiles.
    const int nPairs = nb * (nb - 1) / 2;
    for (int tile = warps - 1 - warp; tile < 2 * nPairs; tile += warps) {
      int I = 1, J = tile >> 1;
      while (J >= I) {
        J -= I;
        ++I;
      }
      const int i0 = 16 * I, j0 = 16 * J + 8 * (tile & 1), bRow = 8 * I * (I - 1) + j0;
      float accA[4] = {0.f, 0.f, 0.f, 0.f}, accL[4] = {0.f, 0.f, 0.f, 0.f};
      qkTile<false>(qFs, kFs, kBs, i0, bRow, kd, accA, accL);
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = i0 + g8 + 8 * (r >> 1), j = j0 + t2 + (r & 1);
        const bool in = i < c;
        savedAqk[savedBase + i * cMax + j] = in ? accA[r] : 0.f;
        ls[i * ldc + j] = in ? betas[i] * accL[r] : 0.f;
      }
    }
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {  // zeros, as round 2
      const int i = idx / cMax, j = idx % cMax;
      if ((j >> 4) < (i >> 4) && (i >> 4) < nb) continue;  // an MMA tile's element
      if (i < c && j <= i) continue;                       // a diagonal block's (below)
      savedAqk[savedBase + idx] = 0.f;
      ls[i * ldc + j] = 0.f;
    }
    if constexpr (kRound8) {
      __syncthreads();  // the off-diagonal tiles are done with kB: kR takes its place
      MOEWB_KDA_INTRA_STAMP(4);
      intraR8BuildKR(kRs, flags, kb, ldb, gs, ld, kd, c, nb);
      __syncthreads();
      MOEWB_KDA_INTRA_STAMP(5);
      intraR8DiagonalTiles(kRs, qFs, kFs, flags, betas, savedAqk + savedBase, ls, ldc, cMax,
                           kd, c, nb);
    }
    for (int pr = threadIdx.x; pr < nb * 136; pr += nThreads) {
      if (kRound8 && flags[pr / 136] == 0) continue;  // its block ran on tensor cores
      int r = pr % 136, il = 0;
      while (r > il) {
        r -= il + 1;
        ++il;
      }
      const int i = 16 * (pr / 136) + il, j = 16 * (pr / 136) + r;
      if (i >= c) continue;
      const bf16* qi = qb + i * ldb;
      const bf16* ki = kb + i * ldb;
      const bf16* kj = kb + j * ldb;
      const float* gi = gs + i * ld;
      const float* gj = gs + j * ld;
      float aqk = 0.f, l = 0.f;
      for (int d = 0; d < kd; d += 2) {  // d in order, two per load (kd is even)
        const float2 gi2 = *reinterpret_cast<const float2*>(gi + d);
        const float2 gj2 = *reinterpret_cast<const float2*>(gj + d);
        const float2 q2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(qi + d));
        const float2 ki2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(ki + d));
        const float2 kj2 = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(kj + d));
        const float z0 = kj2.x * expNeg(gi2.x - gj2.x);
        aqk += q2.x * z0;
        l += ki2.x * z0;
        const float z1 = kj2.y * expNeg(gi2.y - gj2.y);
        aqk += q2.y * z1;
        l += ki2.y * z1;
      }
      savedAqk[savedBase + i * cMax + j] = aqk;
      ls[i * ldc + j] = j < i ? betas[i] * l : 0.f;
    }
    __syncthreads();
    MOEWB_KDA_INTRA_STAMP(6);
  } else {
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {
      ms[(idx / cMax) * ldc + idx % cMax] = savedM[savedBase + idx];
    }
  }
  // ---- threads < C: column j of M by forward substitution (round 2's loop); the others write
  // the decayed q / k and e^{G_C} and stage Wb = beta (k ⊙ e^G) and Ub = beta v, split.
  const int64_t kOut = at.slot * cMax * kd;
  if (kRound8 && computeM && int(threadIdx.x) < cMax) {
    intraR8SolveDiagonalBlock(ls, ms, ldc, cMax, c, int(threadIdx.x));
    MOEWB_KDA_INTRA_STAMP_BY(11, 0);
  }
  if (!kRound8 && computeM && int(threadIdx.x) < cMax) {
    const int j = int(threadIdx.x);
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
    MOEWB_KDA_INTRA_STAMP_BY(11, 0);
  } else {
    // Round 5's solve keeps threads < C busy throughout; round 8's column solve is short, so
    // they take their share of the writes after it.
    const bool solving = !kRound8 && computeM;
    const int t0 = solving ? int(threadIdx.x) - cMax : int(threadIdx.x);
    const int nT = solving ? nThreads - cMax : nThreads;
    // The first kVEarly items' v rows are loaded before the q / k work, so their latency
    // overlaps it (round 5 loaded each inside the Ub loop).
    const int64_t vStride = a.valueHeads * a.valueDim;
    const bf16* vc = v + at.row0 * vStride + at.vCol;
    const bool vVec = (reinterpret_cast<uintptr_t>(v) & 15) == 0;  // vd % 8 == 0
    constexpr int kVEarly = 3;
    uint4 vEarly[kVEarly];
#pragma unroll
    for (int u = 0; u < kVEarly; ++u) {
      const int idx8 = t0 + u * nT, j = idx8 / (vd / 8), e0 = 8 * (idx8 % (vd / 8));
      vEarly[u] = make_uint4(0, 0, 0, 0);
      if (vVec && idx8 < cMax * vd / 8 && j < c) {
        vEarly[u] = *reinterpret_cast<const uint4*>(vc + j * vStride + e0);
      }
    }
    const bool oVec = ((reinterpret_cast<uintptr_t>(qgOut) |
                        reinterpret_cast<uintptr_t>(kDecOut)) & 15) == 0;
    for (int idx4 = t0; idx4 < cMax * kd / 4; idx4 += nT) {  // 4 consecutive d per item
      const int i = idx4 / (kd / 4), d0 = 4 * (idx4 % (kd / 4));
      float qg[4] = {0.f, 0.f, 0.f, 0.f}, kDec[4] = {0.f, 0.f, 0.f, 0.f};
      float kg[4] = {0.f, 0.f, 0.f, 0.f};
      if (i < c) {  // pairs of d per shared load (rows of ldg / ldb: 8- / 4-byte aligned)
        float gi[4], gc[4], qv[4], kv[4];
        for (int h = 0; h < 4; h += 2) {
          const float2 g2 = *reinterpret_cast<const float2*>(gs + i * ld + d0 + h);
          const float2 c2 = *reinterpret_cast<const float2*>(gs + (c - 1) * ld + d0 + h);
          const float2 q2 = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(qb + i * ldb + d0 + h));
          const float2 k2 = __bfloat1622float2(
              *reinterpret_cast<const __nv_bfloat162*>(kb + i * ldb + d0 + h));
          gi[h] = g2.x, gi[h + 1] = g2.y, gc[h] = c2.x, gc[h + 1] = c2.y;
          qv[h] = q2.x, qv[h + 1] = q2.y, kv[h] = k2.x, kv[h + 1] = k2.y;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float eG = expf(gi[u]);
          qg[u] = qv[u] * eG;
          kg[u] = kv[u] * eG;
          kDec[u] = kv[u] * expf(gc[u] - gi[u]);
        }
      }
      float* qgAt = qgOut + kOut + i * kd + d0;
      float* kDecAt = kDecOut + kOut + i * kd + d0;
      if (oVec) {
        *reinterpret_cast<float4*>(qgAt) = make_float4(qg[0], qg[1], qg[2], qg[3]);
        *reinterpret_cast<float4*>(kDecAt) = make_float4(kDec[0], kDec[1], kDec[2], kDec[3]);
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          qgAt[u] = qg[u];
          kDecAt[u] = kDec[u];
        }
      }
      const float b = betas[i];
      wBs.put2(i, d0, b * kg[0], b * kg[1]);
      wBs.put2(i, d0 + 2, b * kg[2], b * kg[3]);
    }
    for (int d = t0; d < kd; d += nT) eGCOut[at.slot * kd + d] = expf(gs[(c - 1) * ld + d]);
    // Ub = beta v, 8 values (one 16-byte load) per item; rows >= c zero.
    int early = 0;
    for (int idx8 = t0; idx8 < cMax * vd / 8; idx8 += nT, ++early) {
      const int j = idx8 / (vd / 8), e0 = 8 * (idx8 % (vd / 8));
      float vals[8];
      if (j < c && vVec) {
        uint4 raw;
        if (early < kVEarly) {
#pragma unroll
          for (int u = 0; u < kVEarly; ++u) {
            if (u == early) raw = vEarly[u];  // registers, not a local-memory index
          }
        } else {
          raw = *reinterpret_cast<const uint4*>(vc + j * vStride + e0);
        }
        const __nv_bfloat162* h2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float2 f = __bfloat1622float2(h2[u]);
          vals[2 * u] = f.x;
          vals[2 * u + 1] = f.y;
        }
      } else {
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          vals[u] = j < c ? __bfloat162float(vc[j * vStride + e0 + u]) : 0.f;
        }
      }
      const float b = j < c ? betas[j] : 0.f;
#pragma unroll
      for (int u = 0; u < 8; u += 2) uBs.put2(j, e0 + u, b * vals[u], b * vals[u + 1]);
    }
    MOEWB_KDA_INTRA_STAMP_BY(12, kRound8 ? 32 : cMax);
  }
  __syncthreads();
  MOEWB_KDA_INTRA_STAMP(7);
  if constexpr (kRound8) {
    if (computeM) intraR8MergeBlocks(ls, ms, ldc, reinterpret_cast<float*>(smemR5 + Lay.mS), cMax);
    MOEWB_KDA_INTRA_STAMP(8);
  }
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {
    const int i = idx / cMax, j = idx % cMax;
    const float m = ms[i * ldc + j];
    if (computeM) savedM[savedBase + idx] = m;
    mSs.put(i, j, m);
  }
  __syncthreads();
  MOEWB_KDA_INTRA_STAMP(9);
  // ---- W = M Diag(beta) (k ⊙ e^G) [C, K], U = M Diag(beta) v [C, V]: round 2's tiles and order.
  const int64_t vBase = at.slot * cMax * vd;
  const int nW = (cMax / 16) * (kd / 8), nTiles = nW + (cMax / 16) * (vd / 8);
  for (int tile = warp; tile < nTiles; tile += warps) {
    const bool isW = tile < nW;
    const int cols = isW ? kd : vd, t = isW ? tile : tile - nW;
    const int mb = t / (cols / 8), n0 = 8 * (t % (cols / 8));
    const SplitMat bS{isW ? wBs.hi : uBs.hi, isW ? wBs.lo : uBs.lo, isW ? wBs.ld : uBs.ld};
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    const int kbEnd = min(mb + 1, nb);
    for (int kbk = 0; kbk < kbEnd; ++kbk) {
      uint32_t ah[4], al[4], bh[2], bl[2];
      fragA(ah, al, mSs, 16 * mb, 16 * kbk);
      fragBT(bh, bl, bS, 16 * kbk, n0);
      mma3(acc, ah, al, bh, bl);
    }
    float* out = isW ? wOut + kOut : uOut + vBase;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = 16 * mb + g8 + 8 * h;
      *reinterpret_cast<float2*>(out + i * cols + n0 + t2) =
          make_float2(acc[2 * h], acc[2 * h + 1]);
    }
  }
#if defined(MOEWB_KDA_INTRA_PHASE_CLOCK)
  __syncthreads();
  MOEWB_KDA_INTRA_STAMP(10);
#endif
}

// The intra-chunk forward with round 5's or round 8's kernel; the caller checks
// kdaIntraR5Supported(args).
template <bool kRound8>
inline cudaError_t launchIntraForwardRound(cudaStream_t stream, const CoreArgs& args,
                                           const bf16* q, const bf16* k, const bf16* v,
                                           const float* g, const float* beta, bool computeM,
                                           float* savedAqk, float* savedM, float* w, float* u,
                                           float* qg, float* kDec, float* eGC) {
  const int64_t bytes = intraR5Layout(args.chunk, args.keyDim, args.valueDim).bytes;
  cudaError_t err = allowSharedBytes(kda_intra_fwd_r5_kernel<kRound8>, bytes);
  if (err != cudaSuccess) return err;
  kda_intra_fwd_r5_kernel<kRound8><<<chunkGrid(args), kIntraR5Threads, size_t(bytes), stream>>>(
      args, q, k, v, g, beta, computeM, savedAqk, savedM, w, u, qg, kDec, eGC);
  return cudaGetLastError();
}

// The intra-chunk forward, round 5 (round 2's bits); the caller checks kdaIntraR5Supported.
inline cudaError_t launchIntraForwardR5(cudaStream_t stream, const CoreArgs& args, const bf16* q,
                                        const bf16* k, const bf16* v, const float* g,
                                        const float* beta, bool computeM, float* savedAqk,
                                        float* savedM, float* w, float* u, float* qg,
                                        float* kDec, float* eGC) {
  return launchIntraForwardRound<false>(stream, args, q, k, v, g, beta, computeM, savedAqk,
                                        savedM, w, u, qg, kDec, eGC);
}

// The intra-chunk forward, round 8 (other bits than round 5's: tensor-core diagonal blocks, the
// solve by blocks); the caller checks kdaIntraR5Supported.
inline cudaError_t launchIntraForwardR8(cudaStream_t stream, const CoreArgs& args, const bf16* q,
                                        const bf16* k, const bf16* v, const float* g,
                                        const float* beta, bool computeM, float* savedAqk,
                                        float* savedM, float* w, float* u, float* qg,
                                        float* kDec, float* eGC) {
  return launchIntraForwardRound<true>(stream, args, q, k, v, g, beta, computeM, savedAqk,
                                       savedM, w, u, qg, kDec, eGC);
}

}  // namespace moewb::engine::cuda::kda_detail
