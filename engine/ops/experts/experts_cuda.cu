// Grouped GLU experts on the tensor cores (see experts_cuda.h): the launchers dispatch to the
// mma.sync pipeline (experts_mma_cuda.cu: grouped_gemm_v2_cuda.cuh, or round 1's
// grouped_gemm_cuda.cuh) when D % 8 == 0, F % 8 == 0 and every pointer (the fp32 gradients
// included) is 16-byte aligned; otherwise to the WMMA fallback here (one tile kernel per stage,
// scalar loads), each a single launch over all experts, group sizes read from the device offsets.
// Allocation and checks are in experts_cuda.cpp.
#include <mma.h>

#include <cstdint>
#include <initializer_list>

#include "runtime/cuda/cuda_check.h"
#include "ops/experts/experts_cuda_kernels.h"
#include "ops/experts/glu_activation_cuda.cuh"

namespace moewb::engine::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kTileM = 64;        // output rows per CTA
constexpr int kTileN = 64;        // output columns per CTA
constexpr int kTileK = 32;        // reduction step
constexpr int kThreads = 128;     // 4 warps, 2 x 2 warp tiles of 32 x 32
constexpr int kLdA = kTileK + 8;  // bf16 row stride of the A tile [M][K] (multiple of 8)
constexpr int kLdB = kTileN + 8;  // bf16 row stride of the B tile [K][N]
constexpr int kLdC = kTileN + 4;  // fp32 row stride of the staged accumulators [M][N]
constexpr int kTileABytes = kTileM * kLdA * 2;
constexpr int kTileBBytes = kTileK * kLdB * 2;
constexpr int kTileCBytes = kTileM * kLdC * 4;
// Operand tiles (A + two B) and the staged accumulators (two C) share one buffer.
constexpr int kOperandBytes = kTileABytes + 2 * kTileBBytes;
constexpr int kSmemBytes = 2 * kTileCBytes > kOperandBytes ? 2 * kTileCBytes : kOperandBytes;
static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
static_assert(kTileABytes % 128 == 0 && kTileBBytes % 128 == 0 && kTileCBytes % 128 == 0,
              "fragment pointers stay 32-byte aligned");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// A matrix of rows read through an optional index and scaled by an optional per-row weight
// (rounded back to bf16, exactly like a materialised scaled copy).
struct RowSource {
  const bf16* data = nullptr;  // [rows, ld]
  int64_t ld = 0;
  const int32_t* index = nullptr;  // logical row r reads data row index[r] (null: r)
  const float* scale = nullptr;    // logical row r times scale[r] (null: 1)

  __device__ __forceinline__ bf16 at(int64_t r, int64_t c) const {
    const int64_t src = index != nullptr ? int64_t(index[r]) : r;
    const bf16 v = data[src * ld + c];
    if (scale == nullptr) return v;
    return __float2bfloat16(scale[r] * __bfloat162float(v));
  }
};

struct Smem {
  bf16* a;      // [kTileM][kLdA]
  bf16* b[2];   // [kTileK][kLdB]
  float* c[2];  // [kTileM][kLdC] (aliases a / b: use after the main loop)
};

__device__ __forceinline__ Smem carve(unsigned char* raw) {
  Smem s;
  s.a = reinterpret_cast<bf16*>(raw);
  s.b[0] = reinterpret_cast<bf16*>(raw + kTileABytes);
  s.b[1] = reinterpret_cast<bf16*>(raw + kTileABytes + kTileBBytes);
  s.c[0] = reinterpret_cast<float*>(raw);
  s.c[1] = reinterpret_cast<float*>(raw + kTileCBytes);
  return s;
}

__device__ __forceinline__ bf16 zeroBf16() {
  return __float2bfloat16(0.0f);
}

// Tile loaders: one bf16 per access, so any D, F and alignment work (the shapes the mma.sync
// kernels of experts_mma_cuda.cu do not take).
// A[m][k] = src(rowBegin + m, k0 + k) for rows < rowEnd and k < kEnd, else 0.
__device__ void loadRowsMK(bf16* tile, const RowSource& src, int64_t rowBegin, int64_t rowEnd,
                           int64_t k0, int64_t kEnd) {
  for (int i = threadIdx.x; i < kTileM * kTileK; i += kThreads) {
    const int m = i / kTileK, k = i % kTileK;
    const int64_t r = rowBegin + m, col = k0 + k;
    tile[m * kLdA + k] = r < rowEnd && col < kEnd ? src.at(r, col) : zeroBf16();
  }
}

// B[k][n] = w[(n0 + n) ld + k0 + k] (weight stored [N, K]: y = x W^T).
__device__ void loadWeightNK(bf16* tile, const bf16* w, int64_t ld, int64_t n0, int64_t nEnd,
                             int64_t k0, int64_t kEnd) {
  for (int i = threadIdx.x; i < kTileN * kTileK; i += kThreads) {
    const int n = i / kTileK, k = i % kTileK;
    const int64_t row = n0 + n, col = k0 + k;
    tile[k * kLdB + n] = row < nEnd && col < kEnd ? w[row * ld + col] : zeroBf16();
  }
}

// B[k][n] = w[(k0 + k) ld + n0 + n] (weight stored [K, N]: dx = dy W).
__device__ void loadWeightKN(bf16* tile, const bf16* w, int64_t ld, int64_t k0, int64_t kEnd,
                             int64_t n0, int64_t nEnd) {
  for (int i = threadIdx.x; i < kTileK * kTileN; i += kThreads) {
    const int k = i / kTileN, n = i % kTileN;
    const int64_t row = k0 + k, col = n0 + n;
    tile[k * kLdB + n] = row < kEnd && col < nEnd ? w[row * ld + col] : zeroBf16();
  }
}

// Weight gradients: A[m][k] = src(rowBegin + r0 + k, m0 + m) (the transposed row block).
__device__ void loadRowsKM(bf16* tile, const RowSource& src, int64_t rowBegin, int64_t rowEnd,
                           int64_t r0, int64_t m0, int64_t mEnd) {
  for (int i = threadIdx.x; i < kTileK * kTileM; i += kThreads) {
    const int k = i / kTileM, m = i % kTileM;
    const int64_t r = rowBegin + r0 + k, col = m0 + m;
    tile[m * kLdA + k] = r < rowEnd && col < mEnd ? src.at(r, col) : zeroBf16();
  }
}

// Weight gradients: B[k][n] = src(rowBegin + r0 + k, n0 + n).
__device__ void loadRowsKN(bf16* tile, const RowSource& src, int64_t rowBegin, int64_t rowEnd,
                           int64_t r0, int64_t n0, int64_t nEnd) {
  for (int i = threadIdx.x; i < kTileK * kTileN; i += kThreads) {
    const int k = i / kTileN, n = i % kTileN;
    const int64_t r = rowBegin + r0 + k, col = n0 + n;
    tile[k * kLdB + n] = r < rowEnd && col < nEnd ? src.at(r, col) : zeroBf16();
  }
}

template <int NB>
__device__ __forceinline__ void zeroAcc(FragC (&acc)[NB][2][2]) {
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[b][i][j], 0.0f);
}

// acc[b] += A B[b] over one kTileK step, this warp's 32 x 32 sub-tile.
template <int NB>
__device__ __forceinline__ void mmaStep(const Smem& s, FragC (&acc)[NB][2][2]) {
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
  for (int kk = 0; kk < kTileK; kk += 16) {
    FragA a[2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
      wmma::load_matrix_sync(a[i], s.a + (wm * 32 + i * 16) * kLdA + kk, kLdA);
#pragma unroll
    for (int b = 0; b < NB; ++b) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        FragB fb;
        wmma::load_matrix_sync(fb, s.b[b] + kk * kLdB + wn * 32 + j * 16, kLdB);
#pragma unroll
        for (int i = 0; i < 2; ++i) wmma::mma_sync(acc[b][i][j], a[i], fb, acc[b][i][j]);
      }
    }
  }
}

// Stages the accumulators into s.c[b] (the caller synchronised after the last mmaStep).
template <int NB>
__device__ __forceinline__ void storeAcc(const Smem& s, FragC (&acc)[NB][2][2]) {
  const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
#pragma unroll
  for (int b = 0; b < NB; ++b)
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        wmma::store_matrix_sync(s.c[b] + (wm * 32 + i * 16) * kLdC + wn * 32 + j * 16, acc[b][i][j],
                                kLdC, wmma::mem_row_major);
      }
}

// Row tile of this CTA from the device schedule: false when the CTA is past the last tile.
struct RowTile {
  int expert;
  int64_t begin;
  int64_t end;
};

__device__ __forceinline__ bool findRowTile(const int32_t* offsets, const int32_t* tileStart,
                                            int numExperts, RowTile& tile) {
  const int slot = int(blockIdx.x);
  if (slot >= tileStart[numExperts]) return false;
  int lo = 0, hi = numExperts;  // largest e with tileStart[e] <= slot
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (tileStart[mid] <= slot) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  tile.expert = lo;
  tile.begin = int64_t(offsets[lo]) + int64_t(slot - tileStart[lo]) * kTileM;
  const int64_t end = tile.begin + kTileM;
  tile.end = end < offsets[lo + 1] ? end : int64_t(offsets[lo + 1]);
  return true;
}

// tileStart[e] = sum_{e' < e} ceil(count_e' / kTileM); one thread.
__global__ void experts_schedule_kernel(const int32_t* offsets, int numExperts,
                                        int32_t* tileStart) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t running = 0;
  for (int e = 0; e < numExperts; ++e) {
    tileStart[e] = running;
    running += (offsets[e + 1] - offsets[e] + kTileM - 1) / kTileM;
  }
  tileStart[numExperts] = running;
}

// g = x Wg^T, u = x Wu^T, h = glu(g, u) for one (row tile, F column tile).
__global__ void experts_fwd_kernel(RowSource x, const bf16* gate, const bf16* up, int64_t d,
                                   int64_t f, const int32_t* offsets, const int32_t* tileStart,
                                   int numExperts, GluDeviceParams glu, bf16* gatePre, bf16* upPre,
                                   bf16* hidden) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, tile)) return;
  const Smem s = carve(raw);
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  const bf16* wg = gate + int64_t(tile.expert) * f * d;
  const bf16* wu = up + int64_t(tile.expert) * f * d;
  FragC acc[2][2][2];
  zeroAcc<2>(acc);
  for (int64_t k0 = 0; k0 < d; k0 += kTileK) {
    loadRowsMK(s.a, x, tile.begin, tile.end, k0, d);
    loadWeightNK(s.b[0], wg, d, n0, f, k0, d);
    loadWeightNK(s.b[1], wu, d, n0, f, k0, d);
    __syncthreads();
    mmaStep<2>(s, acc);
    __syncthreads();
  }
  storeAcc<2>(s, acc);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN, n = i % kTileN;
    const int64_t r = tile.begin + m, col = n0 + n;
    if (r >= tile.end || col >= f) continue;
    const float g = s.c[0][m * kLdC + n], u = s.c[1][m * kLdC + n];
    gatePre[r * f + col] = __float2bfloat16(g);
    upPre[r * f + col] = __float2bfloat16(u);
    hidden[r * f + col] = __float2bfloat16(gluForwardDevice(glu, g, u));
  }
}

// y = h Wd^T (times rowWeight[r]) for one (row tile, D column tile).
__global__ void experts_fwd_down_kernel(RowSource h, const bf16* down, int64_t d, int64_t f,
                                        const int32_t* offsets, const int32_t* tileStart,
                                        int numExperts, const float* rowWeight, bf16* y) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, tile)) return;
  const Smem s = carve(raw);
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  const bf16* wd = down + int64_t(tile.expert) * d * f;
  FragC acc[1][2][2];
  zeroAcc<1>(acc);
  for (int64_t k0 = 0; k0 < f; k0 += kTileK) {
    loadRowsMK(s.a, h, tile.begin, tile.end, k0, f);
    loadWeightNK(s.b[0], wd, f, n0, d, k0, f);
    __syncthreads();
    mmaStep<1>(s, acc);
    __syncthreads();
  }
  storeAcc<1>(s, acc);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN, n = i % kTileN;
    const int64_t r = tile.begin + m, col = n0 + n;
    if (r >= tile.end || col >= d) continue;
    const float v = s.c[0][m * kLdC + n];
    y[r * d + col] = __float2bfloat16(rowWeight != nullptr ? rowWeight[r] * v : v);
  }
}

// dh = dY Wd, then (dg, du) = glu backward at the saved (g, u); one (row tile, F column tile).
__global__ void experts_bwd_dh_kernel(RowSource dY, const bf16* down, int64_t d, int64_t f,
                                      const int32_t* offsets, const int32_t* tileStart,
                                      int numExperts, GluDeviceParams glu, const bf16* gatePre,
                                      const bf16* upPre, bf16* dGate, bf16* dUp) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, tile)) return;
  const Smem s = carve(raw);
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  const bf16* wd = down + int64_t(tile.expert) * d * f;
  FragC acc[1][2][2];
  zeroAcc<1>(acc);
  for (int64_t k0 = 0; k0 < d; k0 += kTileK) {
    loadRowsMK(s.a, dY, tile.begin, tile.end, k0, d);
    loadWeightKN(s.b[0], wd, f, k0, d, n0, f);
    __syncthreads();
    mmaStep<1>(s, acc);
    __syncthreads();
  }
  storeAcc<1>(s, acc);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN, n = i % kTileN;
    const int64_t r = tile.begin + m, col = n0 + n;
    if (r >= tile.end || col >= f) continue;
    const int64_t at = r * f + col;
    float dg, du;
    gluBackwardDevice(glu, __bfloat162float(gatePre[at]), __bfloat162float(upPre[at]),
                      s.c[0][m * kLdC + n], dg, du);
    dGate[at] = __float2bfloat16(dg);
    dUp[at] = __float2bfloat16(du);
  }
}

// dx = dg Wg + du Wu (one accumulator) for one (row tile, D column tile).
__global__ void experts_bwd_dx_kernel(RowSource dGate, RowSource dUp, const bf16* gate,
                                      const bf16* up, int64_t d, int64_t f, const int32_t* offsets,
                                      const int32_t* tileStart, int numExperts, bf16* dx) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, tile)) return;
  const Smem s = carve(raw);
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  FragC acc[1][2][2];
  zeroAcc<1>(acc);
  for (int part = 0; part < 2; ++part) {
    RowSource src;
    src.data = part == 0 ? dGate.data : dUp.data;
    src.ld = f;
    const bf16* w = (part == 0 ? gate : up) + int64_t(tile.expert) * f * d;
    for (int64_t k0 = 0; k0 < f; k0 += kTileK) {
      loadRowsMK(s.a, src, tile.begin, tile.end, k0, f);
      loadWeightKN(s.b[0], w, d, k0, f, n0, d);
      __syncthreads();
      mmaStep<1>(s, acc);
      __syncthreads();
    }
  }
  storeAcc<1>(s, acc);
  __syncthreads();
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN, n = i % kTileN;
    const int64_t r = tile.begin + m, col = n0 + n;
    if (r >= tile.end || col >= d) continue;
    dx[r * d + col] = __float2bfloat16(s.c[0][m * kLdC + n]);
  }
}

// dRowWeight[r] = <dy[token(r)], bf16(h_r Wd^T)>: each CTA sweeps every D column tile of its row
// tile, so the dot runs in a fixed order.
__global__ void experts_bwd_rowweight_kernel(RowSource h, const bf16* down, int64_t d, int64_t f,
                                             const int32_t* offsets, const int32_t* tileStart,
                                             int numExperts, const bf16* dy,
                                             const int32_t* outputIndex, float* dRowWeight) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  RowTile tile;
  if (!findRowTile(offsets, tileStart, numExperts, tile)) return;
  const Smem s = carve(raw);
  const bf16* wd = down + int64_t(tile.expert) * d * f;
  const int m = threadIdx.x;  // threads < kTileM own one row's dot
  const int64_t r = tile.begin + m;
  const bool ownsRow = m < kTileM && r < tile.end;
  const bf16* g = ownsRow ? dy + int64_t(outputIndex[r]) * d : nullptr;
  float dot = 0.0f;
  for (int64_t n0 = 0; n0 < d; n0 += kTileN) {
    FragC acc[1][2][2];
    zeroAcc<1>(acc);
    for (int64_t k0 = 0; k0 < f; k0 += kTileK) {
      loadRowsMK(s.a, h, tile.begin, tile.end, k0, f);
      loadWeightNK(s.b[0], wd, f, n0, d, k0, f);
      __syncthreads();
      mmaStep<1>(s, acc);
      __syncthreads();
    }
    storeAcc<1>(s, acc);
    __syncthreads();
    if (ownsRow) {
      for (int n = 0; n < kTileN && n0 + n < d; ++n) {
        const float yv = __bfloat162float(__float2bfloat16(s.c[0][m * kLdC + n]));
        dot += __bfloat162float(g[n0 + n]) * yv;
      }
    }
    __syncthreads();
  }
  if (ownsRow) dRowWeight[r] = dot;
}

// grad[e] += A_e^T B_e over expert e's rows: grid (N tiles, M tiles, experts).
__global__ void experts_wgrad_kernel(RowSource a, RowSource b, int64_t mSize, int64_t nSize,
                                     const int32_t* offsets, float* grad) {
  __shared__ __align__(128) unsigned char raw[kSmemBytes];
  const int e = int(blockIdx.z);
  const int64_t rowBegin = offsets[e], rowEnd = offsets[e + 1];
  if (rowEnd <= rowBegin) return;
  const Smem s = carve(raw);
  const int64_t m0 = int64_t(blockIdx.y) * kTileM, n0 = int64_t(blockIdx.x) * kTileN;
  FragC acc[1][2][2];
  zeroAcc<1>(acc);
  for (int64_t r0 = 0; r0 < rowEnd - rowBegin; r0 += kTileK) {
    loadRowsKM(s.a, a, rowBegin, rowEnd, r0, m0, mSize);
    loadRowsKN(s.b[0], b, rowBegin, rowEnd, r0, n0, nSize);
    __syncthreads();
    mmaStep<1>(s, acc);
    __syncthreads();
  }
  storeAcc<1>(s, acc);
  __syncthreads();
  float* out = grad + int64_t(e) * mSize * nSize;
  for (int i = threadIdx.x; i < kTileM * kTileN; i += kThreads) {
    const int m = i / kTileN, n = i % kTileN;
    const int64_t row = m0 + m, col = n0 + n;
    if (row >= mSize || col >= nSize) continue;
    out[row * nSize + col] += s.c[0][m * kLdC + n];
  }
}

unsigned tilesFor(int64_t extent, int64_t tile) {
  const int64_t tiles = (extent + tile - 1) / tile;
  return unsigned(tiles > 0 ? tiles : 1);
}

// Upper bound of the row tiles over all experts: sum_e ceil(c_e / 64) <= R / 64 + E.
unsigned rowTileSlots(const ExpertsLaunchShape& shape) {
  return unsigned(shape.maxRows / kTileM + shape.experts);
}

Status launchSchedule(cudaStream_t stream, const int32_t* offsets, int64_t experts,
                      int32_t* tileStart) {
  experts_schedule_kernel<<<1, 32, 0, stream>>>(offsets, int(experts), tileStart);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status forwardImpl(cudaStream_t stream, const ExpertsLaunchShape& shape,
                   const ExpertsForwardArgs& args, const GluParams& activation) {
  const int64_t d = shape.d, f = shape.f;
  MOEWB_RETURN_IF_ERROR(launchSchedule(stream, args.offsets, shape.experts, args.tileStart));
  const int numExperts = int(shape.experts);
  const RowSource xs{args.x, d, args.gatherIndex, nullptr};
  experts_fwd_kernel<<<dim3(rowTileSlots(shape), tilesFor(f, kTileN)), kThreads, 0, stream>>>(
      xs, args.gate, args.up, d, f, args.offsets, args.tileStart, numExperts,
      gluDeviceParams(activation), args.gatePre, args.upPre, args.hidden);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  if (args.y == nullptr) return Status::ok();  // gate + up only (recompute)
  const RowSource hs{args.hidden, f, nullptr, nullptr};
  experts_fwd_down_kernel
      <<<dim3(rowTileSlots(shape), tilesFor(d, kTileN)), kThreads, 0, stream>>>(
          hs, args.down, d, f, args.offsets, args.tileStart, numExperts, args.rowWeight, args.y);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status backwardImpl(cudaStream_t stream, const ExpertsLaunchShape& shape,
                    const ExpertsBackwardArgs& args, const GluParams& activation) {
  const int64_t d = shape.d, f = shape.f;
  MOEWB_RETURN_IF_ERROR(launchSchedule(stream, args.offsets, shape.experts, args.tileStart));
  const int numExperts = int(shape.experts);
  const bool weighted = args.rowWeight != nullptr;
  // Gradient of the unweighted output rows: dY, or bf16(w_r dy[token(r)]) with the folded combine.
  const RowSource dYOut{args.dY, d, weighted ? args.outputIndex : nullptr, args.rowWeight};
  const RowSource hs{args.hidden, f, nullptr, nullptr};
  const RowSource xs{args.x, d, args.gatherIndex, nullptr};
  const RowSource dgs{args.dGate, f, nullptr, nullptr};
  const RowSource dus{args.dUp, f, nullptr, nullptr};
  const unsigned slots = rowTileSlots(shape);
  if (weighted) {
    experts_bwd_rowweight_kernel
        <<<slots, kThreads, 0, stream>>>(hs, args.down, d, f, args.offsets, args.tileStart,
                                         numExperts, args.dY, args.outputIndex, args.dRowWeight);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  experts_bwd_dh_kernel<<<dim3(slots, tilesFor(f, kTileN)), kThreads, 0, stream>>>(
      dYOut, args.down, d, f, args.offsets, args.tileStart, numExperts, gluDeviceParams(activation),
      args.gatePre, args.upPre, args.dGate, args.dUp);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  experts_bwd_dx_kernel<<<dim3(slots, tilesFor(d, kTileN)), kThreads, 0, stream>>>(
      dgs, dus, args.gate, args.up, d, f, args.offsets, args.tileStart, numExperts, args.dx);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  const unsigned experts = unsigned(shape.experts);
  // dWd [E, D, F] += dYOut^T h;  dWg / dWu [E, F, D] += dg^T x / du^T x.
  experts_wgrad_kernel
      <<<dim3(tilesFor(f, kTileN), tilesFor(d, kTileM), experts), kThreads, 0, stream>>>(
          dYOut, hs, d, f, args.offsets, args.gradDown);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  experts_wgrad_kernel
      <<<dim3(tilesFor(d, kTileN), tilesFor(f, kTileM), experts), kThreads, 0, stream>>>(
          dgs, xs, f, d, args.offsets, args.gradGate);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  experts_wgrad_kernel
      <<<dim3(tilesFor(d, kTileN), tilesFor(f, kTileM), experts), kThreads, 0, stream>>>(
          dus, xs, f, d, args.offsets, args.gradUp);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// 16-byte accesses need every row stride a multiple of 8 elements and every base 16-byte aligned.
bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

bool vectorizable(const ExpertsLaunchShape& shape, std::initializer_list<const void*> pointers) {
  if (shape.d % 8 != 0 || shape.f % 8 != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && !aligned16(p)) return false;
  }
  return true;
}

}  // namespace

Status expertsForwardLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                            const ExpertsForwardArgs& args, const GluParams& activation) {
  if (shape.maxRows == 0 || shape.d == 0 || shape.f == 0) return Status::ok();
  if (vectorizable(shape, {args.x, args.gate, args.up, args.down, args.gatePre, args.upPre,
                           args.hidden, args.y})) {
    return expertsForwardMmaLaunch(stream, shape, args, activation);
  }
  return forwardImpl(stream, shape, args, activation);
}

Status expertsBackwardLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                             const ExpertsBackwardArgs& args, const GluParams& activation) {
  if (shape.maxRows == 0 || shape.d == 0 || shape.f == 0) return Status::ok();
  if (vectorizable(shape, {args.dY, args.x, args.gate, args.up, args.down, args.gatePre,
                           args.upPre, args.hidden, args.dGate, args.dUp, args.dx,
                           args.dYWeighted, args.gradGate, args.gradUp, args.gradDown}) &&
      (args.rowWeight == nullptr ||
       (args.dYWeighted != nullptr && args.rowWeightPartial != nullptr))) {
    return expertsBackwardMmaLaunch(stream, shape, args, activation);
  }
  return backwardImpl(stream, shape, args, activation);
}

}  // namespace moewb::engine::cuda
