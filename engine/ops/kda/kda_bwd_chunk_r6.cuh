// Round 6 of the per-chunk KDA backward (bench/scratch/kda_chunk_07.md): round 5's kernel
// (kda_bwd_chunk_r5.cuh: same arguments, grid, outputs, scratch use and every phase before and
// after the pairwise sums) with the diagonal 16 x 16 blocks of the pairwise sums on tensor cores.
// Round 5 summed them elementwise in fp32 (17 + 17 dependent steps per lane and warp tile, an
// exp per step and column): 44 % of the kernel's cycles. Here, for warp tile (block X, key
// columns d0..d0+7), with r = the block's last valid row and x0 its first row:
//   daQ_i += e^{G_i - G_r} sum_j dAqk[i, j] kR[j, d],   kR[j, d] = k_j e^{G_r - G_j}
//   daL_i += e^{G_i - G_r} sum_j dL[i, j]   kR[j, d]
//   dB_j  += e^{G_x0 - G_j} sum_r (dAqk[r, j] qF[r, d] + dL[r, j] kbF[r, d])
// (qF = q e^{G - G_x0}, kbF = beta k e^{G - G_x0}: the operands the query-block sums already
// use; the strictly lower split dAqk / dL are the mask), i.e. the off-diagonal products with
// J = X / I = X and a row factor >= 1, here with the lo·lo product too (mma4); the j = i terms
// of dAqk (exponential factor 1) in fp32 as round 5 has them, since they cancel exactly in dG.
// Exact in real arithmetic; in floating point each term keeps the split products' ~1e-6 relative
// error as long as no operand underflows, which holds while the block's decay G_x0 - G_r <=
// kDiagMmaMaxDecay (e^-40 |k| stays a normal bf16 / fp32 product; no cancellation is amplified:
// each scaled term is bounded by |dA| |k|). A warp tile whose block decays more on any of its
// 8 columns (strong gates, e.g. g = -5 every step) runs round 5's elementwise fp32 loops instead
// (warp-uniform choice).
// The only other changes: kR's reference row is min(last row of the block, c - 1), so the partial
// last block of a chunk has a real anchor (round 5 clamped its exponents to 0 there; the
// off-diagonal sums never read that block's kR), and the split dAqk is staged with a zero
// diagonal (only the diagonal blocks read it; the fp32 copy keeps it).
// The order of adds differs from round 5 (tensor-core sums on the diagonal), so the outputs are
// not round 5's bits: bench/scratch/kda_chunk_07.cu checks both against the fp64 reference.
// Phase clock: round 6 stamps into round 5's slot of gKdaBwdClock (a run clocks one round).
#pragma once

#include "ops/kda/kda_bwd_chunk_r5.cuh"  // round 5's helpers, BwdR4Layout, fragments, the clock

namespace moewb::engine::cuda::kda_detail {

// Largest block decay G_x0 - G_r (any key column of a warp tile) the tensor-core diagonal takes.
inline constexpr float kDiagMmaMaxDecay = 40.f;

// Round 6 runs where round 5 runs.
inline bool kdaBwdChunkR6Supported(const CoreArgs& a) { return kdaBwdChunkR5Supported(a); }

// d += a b with split operands, lo·lo included (smallest product first; mma3 drops it, ≈ 2^-18
// relative per term): the diagonal blocks hold the largest pairwise terms (the least decayed),
// which round 5 summed in fp32, so they keep the fourth product for 4 MMAs per warp tile.
__device__ __forceinline__ void mma4(float (&d)[4], const uint32_t (&ah)[4],
                                     const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                     const uint32_t (&bl)[2]) {
  mmaBf16(d, al, bl);
  mma3(d, ah, al, bh, bl);
}

// The operands the tensor-core diagonal block reads (round 4's layout): split dAqk (its
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

// One CTA per (chunk, b * HV + hv); the maths and the outputs are kda_bwd_chunk_r5_kernel's, the
// diagonal blocks of the pairwise sums on tensor cores where the block's decay allows.
__global__ void __launch_bounds__(kBwdThreads, 1)
    kda_bwd_chunk_r6_kernel(CoreArgs a, IntraBwdArgs p) {
  extern __shared__ __align__(16) unsigned char smemR6[];
  MOEWB_KDA_BWD_STAMP(5, 0);
  const int kd = int(a.keyDim), vd = int(a.valueDim), cMax = int(a.chunk);
  const BwdR4Layout L = bwdR4Layout(cMax, kd, vd);
  const int ld = L.ldg, ldc = cMax + 1;
  float* gs = reinterpret_cast<float*>(smemR6 + L.gs);
  bf16* qb = reinterpret_cast<bf16*>(smemR6 + L.qb);
  bf16* kb = reinterpret_cast<bf16*>(smemR6 + L.kb);
  const SplitMat dWs = splitAt(smemR6, L.r1, cMax, L.ldk);   // then qF
  const SplitMat kEs = splitAt(smemR6, L.r2, cMax, L.ldk);   // then kbF
  const SplitMat dVs = splitAt(smemR6, L.r2, cMax, L.ldv);
  const SplitMat Ms = splitAt(smemR6, L.r3, cMax, L.ldcb);
  const SplitMat Xs = splitAt(smemR6, L.r3 + 2 * cMax * L.ldcb * 2, cMax, L.ldcb);
  const SplitMat kRs = splitAt(smemR6, L.r3, cMax, L.ldk);
  float* mF = reinterpret_cast<float*>(Xs.hi);  // [C, C] fp32 M until X is written
  float* dAd = reinterpret_cast<float*>(smemR6 + L.dAqkDiag);  // [C/16][16][17]
  const SplitMat dAs = splitAt(smemR6, L.dAqkS, cMax, L.ldcb);
  float* dT = reinterpret_cast<float*>(smemR6 + L.dT);
  const SplitMat dLs = splitAt(smemR6, L.dLS, cMax, L.ldcb);  // dM, then dL
  float* betas = reinterpret_cast<float*>(smemR6 + L.betas);
  float* dbetas = reinterpret_cast<float*>(smemR6 + L.dbetas);
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
    dAs.put(i, j, j < i ? aq : 0.f);  // the diagonal goes in fp32 (diagonalOnTensorCores)
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
  // ---- kR[j, d] = k_j e^{G_r - G_j}, r = last valid row of j's block (into the dead M / X).
  for (int idx = threadIdx.x; idx < cMax * kd; idx += blockDim.x) {
    const int j = idx / kd, d = idx % kd, r = min(j | 15, c - 1);
    kRs.put(j, d, kf(j, d) * expNeg(gs[r * ld + d] - gs[j * ld + d]));
  }
  __syncthreads();
  MOEWB_KDA_BWD_STAMP(5, 8);
  // ---- pairwise sums (round 2's tiles): daQ, daL over key blocks J < X, dB over query blocks
  // I > X on tensor cores; the diagonal blocks on tensor cores where their decay allows
  // (diagonalOnTensorCores), else elementwise in fp32 as round 5.
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
      if (!diagonalOnTensorCores(diagMma, gs, ld, x0, d0, c, aq, aL, db)) {
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

// The per-chunk backward, round 6 (after the backward products on the same `in`); the caller
// checks kdaBwdChunkR6Supported(args).
inline cudaError_t launchChunkBackwardR6(cudaStream_t stream, const CoreArgs& args,
                                         const IntraBwdArgs& in) {
  const int64_t bytes = bwdR4Layout(args.chunk, args.keyDim, args.valueDim).bytes;
  cudaError_t err = allowSharedBytes(kda_bwd_chunk_r6_kernel, bytes);
  if (err != cudaSuccess) return err;
  kda_bwd_chunk_r6_kernel<<<chunkGrid(args), kBwdThreads, size_t(bytes), stream>>>(args, in);
  return cudaGetLastError();
}

}  // namespace moewb::engine::cuda::kda_detail
