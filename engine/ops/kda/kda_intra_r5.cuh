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
#pragma once

#include "ops/kda/kda_split_mma.cuh"    // SplitMat, fragA / fragB / fragBT, alignUp16
#include "ops/kda/kda_intra_mma.cuh"     // kdaIntraMmaSupported

namespace moewb::engine::cuda::kda_detail {

constexpr int kIntraR5Threads = 512;  // 16 warps, one CTA per SM

// Byte offsets of the round-5 shared buffers (16-byte aligned). Padded bf16 row strides
// ldk = K + 8, ldv = V + 8, ldcb = C + 8 (272 / 144-byte rows: conflict-free ldmatrix); fp32 G
// rows K + 2 and bf16 q / k rows K + 2 (pairs of d loaded at once, rows on distinct banks), fp32
// L / M rows C + 1 (round 2's strides).
struct IntraR5Layout {
  int ldk, ldv, ldcb, ldg, ldc, ldb;
  int64_t gs, qb, kb, ls, ms, betas, qF, kF, kB, mS, wB, uB, bytes;
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
  const int64_t region = at;  // phase 1: qF, kF, kB; phase 2: M, Wb, Ub (split pairs)
  l.qF = at;     at = alignUp16(at + 2 * c * l.ldk * 2);
  l.kF = at;     at = alignUp16(at + 2 * c * l.ldk * 2);
  l.kB = at;     at = alignUp16(at + 2 * kBRows * l.ldk * 2);
  const int64_t end1 = at;
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

// One CTA per (chunk, b * HV + hv); arguments and outputs as kda_intra_fwd_mma_kernel.
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
  const SplitMat mSs = splitAt(smemR5, Lay.mS, cMax, Lay.ldcb);
  const SplitMat wBs = splitAt(smemR5, Lay.wB, cMax, Lay.ldk);
  const SplitMat uBs = splitAt(smemR5, Lay.uB, cMax, Lay.ldv);
  const ChunkAt at = chunkAt(a, blockIdx.y, blockIdx.x);
  const int c = at.c;
  const int warp = int(threadIdx.x) >> 5, lane = int(threadIdx.x) & 31;
  const int warps = int(blockDim.x) >> 5, nThreads = int(blockDim.x);
  const int g8 = lane >> 2, t2 = (lane & 3) * 2;
  const int ldb = Lay.ldb;
  intraR5Stage(a, at, q, k, g, beta, qb, kb, ldb, gs, ld, betas);
  auto kf = [&](int i, int d) { return __bfloat162float(kb[i * ldb + d]); };
  auto qf = [&](int i, int d) { return __bfloat162float(qb[i * ldb + d]); };
  const int nb = (c + 15) / 16;  // 16-row blocks holding valid rows
  const int64_t savedBase = at.slot * cMax * cMax;
  if (computeM) {
    // ---- operands of the off-diagonal blocks, split once (round 2's values).
    for (int idx = 16 * kd + threadIdx.x; idx < nb * 16 * kd; idx += nThreads) {
      const int i = idx / kd, d = idx % kd, i0 = i & ~15;
      const float e = expNeg(gs[i * ld + d] - gs[i0 * ld + d]);
      qFs.put(i, d, i < c ? qf(i, d) * e : 0.f);
      kFs.put(i, d, kf(i, d) * e);
    }
    for (int I = 1; I < nb; ++I) {
      const int r = 16 * I, base = 8 * I * (I - 1);
      for (int idx = threadIdx.x; idx < r * kd; idx += nThreads) {
        const int j = idx / kd, d = idx % kd;
        kBs.put(base + j, d, kf(j, d) * expNeg(gs[r * ld + d] - gs[j * ld + d]));
      }
    }
    __syncthreads();
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
      for (int k0 = 0; k0 < kd; k0 += 16) {
        uint32_t ah[4], al[4], bh[2], bl[2];
        fragB(bh, bl, kBs, k0, bRow);
        fragA(ah, al, qFs, i0, k0);
        mma3(accA, ah, al, bh, bl);
        fragA(ah, al, kFs, i0, k0);
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
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {  // zeros, as round 2
      const int i = idx / cMax, j = idx % cMax;
      if ((j >> 4) < (i >> 4) && (i >> 4) < nb) continue;  // an MMA tile's element
      if (i < c && j <= i) continue;                       // a diagonal block's (below)
      savedAqk[savedBase + idx] = 0.f;
      ls[i * ldc + j] = 0.f;
    }
    for (int pr = threadIdx.x; pr < nb * 136; pr += nThreads) {
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
  } else {
    for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {
      ms[(idx / cMax) * ldc + idx % cMax] = savedM[savedBase + idx];
    }
  }
  // ---- threads < C: column j of M by forward substitution (round 2's loop); the others write
  // the decayed q / k and e^{G_C} and stage Wb = beta (k ⊙ e^G) and Ub = beta v, split.
  const int64_t kOut = at.slot * cMax * kd;
  if (computeM && int(threadIdx.x) < cMax) {
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
  } else {
    const int t0 = computeM ? int(threadIdx.x) - cMax : int(threadIdx.x);
    const int nT = computeM ? nThreads - cMax : nThreads;
    const bool oVec = ((reinterpret_cast<uintptr_t>(qgOut) |
                        reinterpret_cast<uintptr_t>(kDecOut)) & 15) == 0;
    for (int idx4 = t0; idx4 < cMax * kd / 4; idx4 += nT) {  // 4 consecutive d per item
      const int i = idx4 / (kd / 4), d0 = 4 * (idx4 % (kd / 4));
      float qg[4] = {0.f, 0.f, 0.f, 0.f}, kDec[4] = {0.f, 0.f, 0.f, 0.f};
      float kg[4] = {0.f, 0.f, 0.f, 0.f};
      if (i < c) {
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int d = d0 + u;
          const float gi = gs[i * ld + d];
          const float eG = expf(gi);
          qg[u] = qf(i, d) * eG;
          kg[u] = kf(i, d) * eG;
          kDec[u] = kf(i, d) * expf(gs[(c - 1) * ld + d] - gi);
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
#pragma unroll
      for (int u = 0; u < 4; ++u) wBs.put(i, d0 + u, betas[i] * kg[u]);
    }
    for (int d = t0; d < kd; d += nT) eGCOut[at.slot * kd + d] = expf(gs[(c - 1) * ld + d]);
    // Ub = beta v, 8 values (one 16-byte load) per item; rows >= c zero.
    const int64_t vStride = a.valueHeads * a.valueDim;
    const bf16* vc = v + at.row0 * vStride + at.vCol;
    const bool vVec = (reinterpret_cast<uintptr_t>(v) & 15) == 0;  // vd % 8 == 0
    for (int idx8 = t0; idx8 < cMax * vd / 8; idx8 += nT) {
      const int j = idx8 / (vd / 8), e0 = 8 * (idx8 % (vd / 8));
      float vals[8];
      if (j < c && vVec) {
        const uint4 raw = *reinterpret_cast<const uint4*>(vc + j * vStride + e0);
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
#pragma unroll
      for (int u = 0; u < 8; ++u) uBs.put(j, e0 + u, j < c ? betas[j] * vals[u] : 0.f);
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < cMax * cMax; idx += nThreads) {
    const int i = idx / cMax, j = idx % cMax;
    const float m = ms[i * ldc + j];
    if (computeM) savedM[savedBase + idx] = m;
    mSs.put(i, j, m);
  }
  __syncthreads();
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
}

// The intra-chunk forward, round 5; the caller checks kdaIntraR5Supported(args).
inline cudaError_t launchIntraForwardR5(cudaStream_t stream, const CoreArgs& args, const bf16* q,
                                        const bf16* k, const bf16* v, const float* g,
                                        const float* beta, bool computeM, float* savedAqk,
                                        float* savedM, float* w, float* u, float* qg,
                                        float* kDec, float* eGC) {
  const int64_t bytes = intraR5Layout(args.chunk, args.keyDim, args.valueDim).bytes;
  cudaError_t err = allowSharedBytes(kda_intra_fwd_r5_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_intra_fwd_r5_kernel<<<chunkGrid(args), kIntraR5Threads, size_t(bytes), stream>>>(
      args, q, k, v, g, beta, computeM, savedAqk, savedM, w, u, qg, kDec, eGC);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
