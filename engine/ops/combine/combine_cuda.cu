// Weighted combine, its backward, the sum-only combine and the [N, k] <-> [R] maps on the GPU
// (see combine_cuda.h). One warp per token; 16-byte accesses when D % 8 == 0.
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "ops/combine/combine_cuda.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kTokensPerBlock = 8;  // warps per block, one token each
constexpr int kThreads = kTokensPerBlock * 32;

struct alignas(16) Bf16x8 {
  bf16 v[8];
};

template <int V>
__device__ __forceinline__ void loadVec(const bf16* p, float* out) {
  if constexpr (V == 8) {
    const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
    for (int q = 0; q < 8; ++q) out[q] = __bfloat162float(v.v[q]);
  } else {
    out[0] = __bfloat162float(p[0]);
  }
}

template <int V>
__device__ __forceinline__ void storeVec(bf16* p, const float* in) {
  if constexpr (V == 8) {
    Bf16x8 v;
#pragma unroll
    for (int q = 0; q < 8; ++q) v.v[q] = __float2bfloat16(in[q]);
    *reinterpret_cast<Bf16x8*>(p) = v;
  } else {
    p[0] = __float2bfloat16(in[0]);
  }
}

// y[t] = sum_j w_j rows[slotRow(t, j)]; w = 1 when topWeight is null.
template <int V>
__global__ void combine_fwd_kernel(const bf16* rows, const float* topWeight, const int32_t* slotRow,
                                   int64_t n, int32_t topK, int64_t d, bf16* y) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= n) return;
  for (int64_t c = lane * V; c < d; c += 32 * V) {
    float acc[V], v[V];
#pragma unroll
    for (int q = 0; q < V; ++q) acc[q] = 0.0f;
    for (int j = 0; j < topK; ++j) {
      const int32_t row = slotRow[t * topK + j];
      if (row < 0) continue;
      loadVec<V>(rows + int64_t(row) * d + c, v);
      const float w = topWeight != nullptr ? topWeight[t * topK + j] : 1.0f;
#pragma unroll
      for (int q = 0; q < V; ++q) acc[q] += topWeight != nullptr ? w * v[q] : v[q];
    }
    storeVec<V>(y + t * d + c, acc);
  }
}

// dYPerm[row] = w dy[t]; dTopWeight[t, j] = <dy[t], yPerm[row]> (warp tree reduction).
template <int V>
__global__ void combine_bwd_kernel(const bf16* dy, const bf16* yPerm, const float* topWeight,
                                   const int32_t* slotRow, int64_t n, int32_t topK, int64_t d,
                                   bf16* dYPerm, float* dTopWeight) {
  const int64_t t = int64_t(blockIdx.x) * kTokensPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= n) return;
  for (int j = 0; j < topK; ++j) {
    const int32_t row = slotRow[t * topK + j];
    if (row < 0) {
      if (lane == 0) dTopWeight[t * topK + j] = 0.0f;
      continue;
    }
    const float w = topWeight[t * topK + j];
    float dot = 0.0f, g[V], yv[V], out[V];
    for (int64_t c = lane * V; c < d; c += 32 * V) {
      loadVec<V>(dy + t * d + c, g);
      loadVec<V>(yPerm + int64_t(row) * d + c, yv);
#pragma unroll
      for (int q = 0; q < V; ++q) {
        out[q] = w * g[q];
        dot += g[q] * yv[q];
      }
      storeVec<V>(dYPerm + int64_t(row) * d + c, out);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
    if (lane == 0) dTopWeight[t * topK + j] = dot;
  }
}

__global__ void slots_to_rows_kernel(const float* perSlot, const int32_t* rowToken,
                                     const int32_t* rowSlot, const int32_t* offsets,
                                     int32_t numExperts, int64_t maxRows, int32_t topK,
                                     float* out) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= maxRows || r >= offsets[numExperts]) return;
  out[r] = perSlot[int64_t(rowToken[r]) * topK + rowSlot[r]];
}

__global__ void rows_to_slots_kernel(const float* perRow, const int32_t* slotRow, int64_t pairs,
                                     float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= pairs) return;
  const int32_t row = slotRow[i];
  out[i] = row >= 0 ? perRow[row] : 0.0f;
}

unsigned blocksFor(int64_t items, int64_t perBlock) {
  const int64_t blocks = (items + perBlock - 1) / perBlock;
  return unsigned(blocks > 0 ? blocks : 1);
}

Status checkRows(const char* op, const DeviceTensor<bf16>& rows, const DeviceTensor<bf16>& y,
                 const DeviceDispatch& plan) {
  if (rows.rank() != 2 || rows.dim(0) < plan.maxRows() || y.rank() != 2 ||
      y.dim(0) != plan.numTokens || y.dim(1) != rows.dim(1)) {
    return invalidArgument(std::string(op) + ": rows " + rows.shapeString() + ", tokens " +
                           y.shapeString() + " for N = " + std::to_string(plan.numTokens) +
                           ", k = " + std::to_string(plan.topK));
  }
  return Status::ok();
}

Status launchCombine(CudaContext& context, const DeviceTensor<bf16>& rows, const float* weight,
                     const DeviceDispatch& plan, DeviceTensor<bf16>& y) {
  const int64_t n = plan.numTokens, d = y.dim(1);
  if (n == 0 || d == 0) return Status::ok();
  const unsigned blocks = blocksFor(n, kTokensPerBlock);
  const int32_t k = int32_t(plan.topK);
  if (d % 8 == 0) {
    combine_fwd_kernel<8><<<blocks, kThreads, 0, context.stream()>>>(
        rows.data(), weight, plan.slotRow.data(), n, k, d, y.data());
  } else {
    combine_fwd_kernel<1><<<blocks, kThreads, 0, context.stream()>>>(
        rows.data(), weight, plan.slotRow.data(), n, k, d, y.data());
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

Status combineForwardCuda(CudaContext& context, const DeviceTensor<bf16>& yPerm,
                          const DeviceTensor<float>& topWeight, const DeviceDispatch& plan,
                          DeviceTensor<bf16>& y) {
  MOEWB_RETURN_IF_ERROR(checkRows("combineForwardCuda", yPerm, y, plan));
  if (topWeight.numel() != plan.maxRows()) {
    return invalidArgument("combineForwardCuda: topWeight " + topWeight.shapeString());
  }
  return launchCombine(context, yPerm, topWeight.data(), plan, y);
}

Status combineSumForwardCuda(CudaContext& context, const DeviceTensor<bf16>& yPermWeighted,
                             const DeviceDispatch& plan, DeviceTensor<bf16>& y) {
  MOEWB_RETURN_IF_ERROR(checkRows("combineSumForwardCuda", yPermWeighted, y, plan));
  return launchCombine(context, yPermWeighted, nullptr, plan, y);
}

Status combineBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dy,
                           const DeviceTensor<bf16>& yPerm, const DeviceTensor<float>& topWeight,
                           const DeviceDispatch& plan, DeviceTensor<bf16>& dYPerm,
                           DeviceTensor<float>& dTopWeight) {
  MOEWB_RETURN_IF_ERROR(checkRows("combineBackwardCuda", yPerm, dy, plan));
  MOEWB_RETURN_IF_ERROR(checkRows("combineBackwardCuda", dYPerm, dy, plan));
  if (topWeight.numel() != plan.maxRows() || dTopWeight.numel() != plan.maxRows()) {
    return invalidArgument("combineBackwardCuda: topWeight " + topWeight.shapeString() +
                           ", dTopWeight " + dTopWeight.shapeString());
  }
  const int64_t n = plan.numTokens, d = dy.dim(1);
  if (n == 0) return Status::ok();
  const unsigned blocks = blocksFor(n, kTokensPerBlock);
  const int32_t k = int32_t(plan.topK);
  if (d % 8 == 0) {
    combine_bwd_kernel<8><<<blocks, kThreads, 0, context.stream()>>>(
        dy.data(), yPerm.data(), topWeight.data(), plan.slotRow.data(), n, k, d, dYPerm.data(),
        dTopWeight.data());
  } else {
    combine_bwd_kernel<1><<<blocks, kThreads, 0, context.stream()>>>(
        dy.data(), yPerm.data(), topWeight.data(), plan.slotRow.data(), n, k, d, dYPerm.data(),
        dTopWeight.data());
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status slotsToRowsCuda(CudaContext& context, const DeviceTensor<float>& perSlot,
                       const DeviceDispatch& plan, DeviceTensor<float>& out) {
  const int64_t maxRows = plan.maxRows();
  if (perSlot.numel() != maxRows || out.numel() < maxRows) {
    return invalidArgument("slotsToRowsCuda: perSlot " + perSlot.shapeString() + ", out " +
                           out.shapeString());
  }
  if (maxRows == 0) return Status::ok();
  slots_to_rows_kernel<<<blocksFor(maxRows, 256), 256, 0, context.stream()>>>(
      perSlot.data(), plan.rowToken.data(), plan.rowSlot.data(), plan.offsets.data(),
      int32_t(plan.numExperts), maxRows, int32_t(plan.topK), out.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status rowsToSlotsCuda(CudaContext& context, const DeviceTensor<float>& perRow,
                       const DeviceDispatch& plan, DeviceTensor<float>& out) {
  const int64_t pairs = plan.maxRows();
  if (perRow.numel() < pairs || out.numel() != pairs) {
    return invalidArgument("rowsToSlotsCuda: perRow " + perRow.shapeString() + ", out " +
                           out.shapeString());
  }
  if (pairs == 0) return Status::ok();
  rows_to_slots_kernel<<<blocksFor(pairs, 256), 256, 0, context.stream()>>>(
      perRow.data(), plan.slotRow.data(), pairs, out.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
