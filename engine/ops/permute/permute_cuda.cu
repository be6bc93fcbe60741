// Device dispatch plan (chunk histograms -> scan -> warp-ranked placement) and the row gather /
// per-token row sum (see permute_cuda.h).
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "ops/permute/permute_cuda.h"
#include "ops/permute/permute_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kChunkPairs = 1024;   // (token, slot) pairs per plan chunk
constexpr int kHistThreads = 256;   // threads of the histogram kernel
constexpr int kScanThreads = 1024;  // threads of the one-block scan kernel
constexpr int kRowsPerBlock = 8;    // warps (rows / tokens) per block of the row kernels

__device__ __forceinline__ bool pairKeptDevice(const int32_t* topExpert, const uint8_t* keep,
                                               int64_t i, int32_t numExperts, int32_t& expert) {
  expert = topExpert[i];
  if (expert < 0 || expert >= numExperts) return false;
  return keep == nullptr || keep[i] != 0;
}

// chunkCounts[c, e] = kept pairs of expert e in chunk c.
__global__ void dispatch_hist_kernel(const int32_t* topExpert, const uint8_t* keep, int64_t pairs,
                                     int32_t numExperts, int32_t* chunkCounts) {
  extern __shared__ int32_t hist[];  // [E]
  for (int e = threadIdx.x; e < numExperts; e += blockDim.x) hist[e] = 0;
  __syncthreads();
  const int64_t begin = int64_t(blockIdx.x) * kChunkPairs;
  const int64_t end = begin + kChunkPairs < pairs ? begin + kChunkPairs : pairs;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    int32_t expert;
    if (pairKeptDevice(topExpert, keep, i, numExperts, expert)) atomicAdd(&hist[expert], 1);
  }
  __syncthreads();
  int32_t* out = chunkCounts + int64_t(blockIdx.x) * numExperts;
  for (int e = threadIdx.x; e < numExperts; e += blockDim.x) out[e] = hist[e];
}

// One block: chunkCounts[c, e] becomes the exclusive prefix over chunks (the chunk's base inside
// expert e), counts[e] the total, offsets the exclusive scan of counts (offsets[E] = R).
__global__ void dispatch_scan_kernel(int32_t* chunkCounts, int64_t chunks, int32_t numExperts,
                                     int32_t* counts, int32_t* offsets) {
  for (int e = threadIdx.x; e < numExperts; e += blockDim.x) {
    int32_t running = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const int32_t v = chunkCounts[c * numExperts + e];
      chunkCounts[c * numExperts + e] = running;
      running += v;
    }
    counts[e] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t running = 0;
    for (int e = 0; e < numExperts; ++e) {
      offsets[e] = running;
      running += counts[e];
    }
    offsets[numExperts] = running;
  }
}

// One warp per chunk: places the chunk's pairs in flattened order (see the header).
__global__ void dispatch_place_kernel(const int32_t* topExpert, const uint8_t* keep, int64_t pairs,
                                      int32_t topK, int32_t numExperts, const int32_t* chunkBase,
                                      const int32_t* offsets, int32_t* rowToken, int32_t* rowSlot,
                                      int32_t* slotRow) {
  extern __shared__ int32_t running[];  // [E] rows already placed per expert in this chunk
  const int lane = threadIdx.x;
  for (int e = lane; e < numExperts; e += 32) running[e] = 0;
  __syncwarp();
  const int64_t begin = int64_t(blockIdx.x) * kChunkPairs;
  const int32_t* base = chunkBase + int64_t(blockIdx.x) * numExperts;
  for (int round = 0; round < kChunkPairs / 32; ++round) {
    const int64_t i = begin + round * 32 + lane;
    const bool valid = i < pairs;
    int32_t expert = -1;
    const bool kept = valid && pairKeptDevice(topExpert, keep, i, numExperts, expert);
    const int32_t key = kept ? expert : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, key);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (kept) {
      const int32_t row = offsets[expert] + base[expert] + running[expert] + rank;
      rowToken[row] = int32_t(i / topK);
      rowSlot[row] = int32_t(i % topK);
      slotRow[i] = row;
    } else if (valid) {
      slotRow[i] = -1;
    }
    __syncwarp();
    if (kept && __ffs(peers) - 1 == lane) running[expert] += __popc(peers);
    __syncwarp();
  }
}

// 8 bf16 (16 bytes) moved as one access.
struct alignas(16) Bf16x8 {
  bf16 v[8];
};

// xPerm[r] = x[rowToken[r]], one warp per row; V = 8 uses 16-byte accesses (D % 8 == 0).
template <int V>
__global__ void permute_fwd_kernel(const bf16* x, const int32_t* rowToken, const int32_t* offsets,
                                   int32_t numExperts, int64_t maxRows, int64_t d, bf16* xPerm) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= maxRows || r >= offsets[numExperts]) return;
  const bf16* src = x + int64_t(rowToken[r]) * d;
  bf16* dst = xPerm + r * d;
  if constexpr (V == 8) {
    for (int64_t c = lane * 8; c < d; c += 32 * 8) {
      *reinterpret_cast<Bf16x8*>(dst + c) = *reinterpret_cast<const Bf16x8*>(src + c);
    }
  } else {
    for (int64_t c = lane; c < d; c += 32) dst[c] = src[c];
  }
}

// dx[t] = sum_j dXPerm[slotRow[t, j]] over kept slots in slot order, fp32; one warp per token.
template <int V>
__global__ void permute_bwd_kernel(const bf16* dXPerm, const int32_t* slotRow, int64_t n,
                                   int32_t topK, int64_t d, bf16* dx) {
  const int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= n) return;
  const int32_t* rows = slotRow + t * topK;
  for (int64_t c = lane * V; c < d; c += 32 * V) {
    float acc[V];
#pragma unroll
    for (int q = 0; q < V; ++q) acc[q] = 0.0f;
    for (int j = 0; j < topK; ++j) {
      const int32_t row = rows[j];
      if (row < 0) continue;
      const bf16* src = dXPerm + int64_t(row) * d + c;
      if constexpr (V == 8) {
        const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(src);
#pragma unroll
        for (int q = 0; q < 8; ++q) acc[q] += __bfloat162float(v.v[q]);
      } else {
        acc[0] += __bfloat162float(src[0]);
      }
    }
    if constexpr (V == 8) {
      Bf16x8 out;
#pragma unroll
      for (int q = 0; q < 8; ++q) out.v[q] = __float2bfloat16(acc[q]);
      *reinterpret_cast<Bf16x8*>(dx + t * d + c) = out;
    } else {
      dx[t * d + c] = __float2bfloat16(acc[0]);
    }
  }
}

unsigned blocksFor(int64_t items, int64_t perBlock) {
  const int64_t blocks = (items + perBlock - 1) / perBlock;
  return unsigned(blocks > 0 ? blocks : 1);
}

}  // namespace

int64_t dispatchPlanChunks(int64_t pairs) {
  return (pairs + kChunkPairs - 1) / kChunkPairs;
}

Status dispatchPlanLaunch(cudaStream_t stream, const int32_t* topExpert, const uint8_t* keep,
                          int64_t pairs, int32_t topK, int32_t numExperts, int32_t* chunkCounts,
                          int32_t* counts, int32_t* offsets, int32_t* rowToken, int32_t* rowSlot,
                          int32_t* slotRow) {
  const int64_t chunks = dispatchPlanChunks(pairs);
  if (chunks == 0) {  // no pairs: empty plan, offsets all 0
    MOEWB_RETURN_IF_ERROR(fillInt32(stream, counts, 0, numExperts));
    return fillInt32(stream, offsets, 0, int64_t(numExperts) + 1);
  }
  const size_t histBytes = size_t(numExperts) * sizeof(int32_t);
  dispatch_hist_kernel<<<unsigned(chunks), kHistThreads, histBytes, stream>>>(
      topExpert, keep, pairs, numExperts, chunkCounts);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  dispatch_scan_kernel<<<1, kScanThreads, 0, stream>>>(chunkCounts, chunks, numExperts, counts,
                                                       offsets);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  dispatch_place_kernel<<<unsigned(chunks), 32, histBytes, stream>>>(
      topExpert, keep, pairs, topK, numExperts, chunkCounts, offsets, rowToken, rowSlot, slotRow);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status permuteForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x,
                          const DeviceDispatch& plan, DeviceTensor<bf16>& xPerm) {
  const int64_t maxRows = plan.maxRows();
  if (x.rank() != 2 || x.dim(0) != plan.numTokens || xPerm.rank() != 2 || xPerm.dim(0) < maxRows ||
      xPerm.dim(1) != x.dim(1)) {
    return invalidArgument("permuteForwardCuda: x " + x.shapeString() + ", xPerm " +
                           xPerm.shapeString() + " for N = " + std::to_string(plan.numTokens) +
                           ", k = " + std::to_string(plan.topK));
  }
  const int64_t d = x.dim(1);
  if (maxRows == 0 || d == 0) return Status::ok();
  const unsigned blocks = blocksFor(maxRows, kRowsPerBlock);
  const int32_t e = int32_t(plan.numExperts);
  if (d % 8 == 0) {
    permute_fwd_kernel<8><<<blocks, kRowsPerBlock * 32, 0, context.stream()>>>(
        x.data(), plan.rowToken.data(), plan.offsets.data(), e, maxRows, d, xPerm.data());
  } else {
    permute_fwd_kernel<1><<<blocks, kRowsPerBlock * 32, 0, context.stream()>>>(
        x.data(), plan.rowToken.data(), plan.offsets.data(), e, maxRows, d, xPerm.data());
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status permuteBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dXPerm,
                           const DeviceDispatch& plan, DeviceTensor<bf16>& dx) {
  const int64_t n = plan.numTokens;
  if (dXPerm.rank() != 2 || dXPerm.dim(0) < plan.maxRows() || dx.rank() != 2 || dx.dim(0) != n ||
      dx.dim(1) != dXPerm.dim(1)) {
    return invalidArgument("permuteBackwardCuda: dXPerm " + dXPerm.shapeString() + ", dx " +
                           dx.shapeString() + " for N = " + std::to_string(n) +
                           ", k = " + std::to_string(plan.topK));
  }
  const int64_t d = dx.dim(1);
  if (n == 0 || d == 0) return Status::ok();
  const unsigned blocks = blocksFor(n, kRowsPerBlock);
  if (d % 8 == 0) {
    permute_bwd_kernel<8><<<blocks, kRowsPerBlock * 32, 0, context.stream()>>>(
        dXPerm.data(), plan.slotRow.data(), n, int32_t(plan.topK), d, dx.data());
  } else {
    permute_bwd_kernel<1><<<blocks, kRowsPerBlock * 32, 0, context.stream()>>>(
        dXPerm.data(), plan.slotRow.data(), n, int32_t(plan.topK), d, dx.data());
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
