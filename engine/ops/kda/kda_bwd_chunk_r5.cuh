// Round 5 of the per-chunk KDA backward (bench/scratch/kda_chunk_06.md): round 4's kernel
// (kda_bwd_chunk_r4.cuh: same arguments, grid, outputs, scratch use, MMA sequence and order of
// every sum, so its outputs are expected bitwise round 4's) with the serial tails shortened and
// two of the ten barriers removed:
//  1. G = cumsum(g): one thread per key column loads its column from global memory into
//     registers (32 rows at a time) and adds in round 2's order, inside the staging phase. Round 4
//     staged g into shared memory, then after a barrier ran 64 dependent load-add-store steps.
//  2. dbeta column loop: the 64 column threads only run the sum chain (same order; loads
//     unrolled by 16); dM = dT Diag(beta) is split by all 512 threads (round 4: the same 64
//     threads did all 4096 splits; the fp32 dM it wrote back into dT was never read).
//  3. Reverse cumsum of dG: four lanes per key column (one 16-row segment each) trade segment
//     sums by shuffles instead of through shared memory and a barrier; each lane then adds in
//     round 2's order and reuses the dG values it loaded for its segment sum.
//  4. Diagonal 16 x 16 blocks of the pairwise sums (fp32, elementwise): lane g sums rows x0 + g
//     and x0 + 15 - g in one loop (17 steps on every lane for both the j <= i and the r >= i
//     sums, both of the lane's columns per step; round 4 ran one loop per element, 8, 8, 16 and
//     16 steps for a lane's four elements with on average half the lanes idle) and hands the
//     second row to its owner lane by shuffles; each element's sums keep round 4's expressions
//     and order, and the two columns share the dAqk / dL loads.
// Phases (barriers between): stage + G; inter-chunk terms; dT / dKg; dbeta, dM, dVn; dv / X;
// dL + q / beta k operands; k operand; pairwise sums; reverse cumsum + dbeta.
// Runs the round-4 shapes with chunk <= 64 (four 16-row segments per column).
#pragma once

#include "ops/kda/kda_bwd_chunk_r4.cuh"  // BwdR4Layout, SplitMat, fragments, the phase clock

namespace moewb::engine::cuda::kda_detail {

// Round 5 runs where round 4 runs and the chunk has at most four 16-row segments.
inline bool kdaBwdChunkR5Supported(const CoreArgs& a) {
  return kdaBwdChunkR4Supported(a) && a.chunk <= 64;
}

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

// The shared buffers the diagonal 16 x 16 blocks of the pairwise sums read (round 4's layout):
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
// z_j = k_j e^{G_j - G_i}, round 4's expressions and order. Lane g runs rows x0 + g and
// x0 + 15 - g in one loop (g + 1 and 16 - g steps: 17 on every lane, where round 4 ran one loop
// per element, 8 + 8 + 16 + 16 steps, half the lanes idle) and hands row x0 + 15 - g to its
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
      // Explicit fmas: round 4's compiled sums (sq += dAqk z -> fma); left to the compiler, the
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
// row of the block below c, round 4's expressions and order; rows x0 + g and x0 + 15 - g in one
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
      // Round 4's compiled expression: fma(dAqk, q_r, (dL beta_r) k_r), then fma(w, e, sb).
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

// One CTA per (chunk, b * HV + hv); the maths and the outputs are kda_bwd_chunk_r4_kernel's.
__global__ void __launch_bounds__(kBwdThreads, 1)
    kda_bwd_chunk_r5_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ __align__(16) unsigned char smemR5[];
  MOEWB_KDA_BWD_STAMP(5, 0);
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const BwdR4Layout L = bwdR4Layout(cMax, kd, vd);
  const int ld = L.ldg, ldc = cMax + 1;
  float* gs = reinterpret_cast<float*>(smemR5 + L.gs);
  bf16* qb = reinterpret_cast<bf16*>(smemR5 + L.qb);
  bf16* kb = reinterpret_cast<bf16*>(smemR5 + L.kb);
  const SplitMat dWs = splitAt(smemR5, L.r1, cMax, L.ldk);   // then qF
  const SplitMat kEs = splitAt(smemR5, L.r2, cMax, L.ldk);   // then kbF
  const SplitMat dVs = splitAt(smemR5, L.r2, cMax, L.ldv);
  const SplitMat Ms = splitAt(smemR5, L.r3, cMax, L.ldcb);
  const SplitMat Xs = splitAt(smemR5, L.r3 + 2 * cMax * L.ldcb * 2, cMax, L.ldcb);
  const SplitMat kRs = splitAt(smemR5, L.r3, cMax, L.ldk);
  float* mF = reinterpret_cast<float*>(Xs.hi);  // [C, C] fp32 M until X is written
  float* dAd = reinterpret_cast<float*>(smemR5 + L.dAqkDiag);  // [C/16][16][17]
  const SplitMat dAs = splitAt(smemR5, L.dAqkS, cMax, L.ldcb);
  float* dT = reinterpret_cast<float*>(smemR5 + L.dT);
  const SplitMat dLs = splitAt(smemR5, L.dLS, cMax, L.ldcb);  // dM, then dL
  float* betas = reinterpret_cast<float*>(smemR5 + L.betas);
  float* dbetas = reinterpret_cast<float*>(smemR5 + L.dbetas);
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
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
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
  MOEWB_KDA_BWD_STAMP(5, 1);
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
  MOEWB_KDA_BWD_STAMP(5, 3);
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
  MOEWB_KDA_BWD_STAMP(5, 4);
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
  MOEWB_KDA_BWD_STAMP(5, 5);
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
  MOEWB_KDA_BWD_STAMP(5, 6);
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
  MOEWB_KDA_BWD_STAMP(5, 7);
  // ---- kR[j, d] = k_j e^{G_r - G_j}, r = last row of j's block (into the dead M / X).
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int j = idx / kd, d = idx % kd, r = (j | 15);
    kRs.put(j, d, kf(j, d) * expNeg(gs[r * ld + d] - gs[j * ld + d]));
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(5, 8);
  // ---- pairwise sums (round 2's tiles and order): daQ, daL over key blocks J < X, dB over
  // query blocks I > X on tensor cores, diagonal blocks elementwise in fp32 (lane-balanced).
  {
    const DiagView diag{gs, qb, kb, dAd, dT, betas, ld, ldc, kd};
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
      diagonalRowSums(diag, x0, d0, c, aq, aL);
      diagonalColumnSums(diag, x0, d0, c, db);
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
  MOEWB_KDA_BWD_STAMP(5, 9);
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
  MOEWB_KDA_BWD_STAMP(5, 11);
#endif
}

// The per-chunk backward, round 5 (after the backward products on the same `in`); the caller
// checks kdaBwdChunkR5Supported(args).
inline cudaError_t launchChunkBackwardR5(cudaStream_t stream, const CoreArgs& args,
                                         const IntraBwdArgs& in) {
  const int64_t bytes = bwdR4Layout(args.chunk, args.keyDim, args.valueDim).bytes;
  cudaError_t err = allowSharedBytes(kda_bwd_chunk_r5_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_chunk_r5_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
