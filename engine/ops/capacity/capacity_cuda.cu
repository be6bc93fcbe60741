// Capacity mask kernels over an unmasked dispatch plan (see capacity_cuda.h).

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "ops/capacity/capacity_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per permuted row r < R of the unmasked plan: keep its pair when its rank inside
// its expert is below the capacity.
__global__ void capacity_fwd_kernel(const int32_t* topExpert, const float* topWeight,
                                    const int32_t* rowToken, const int32_t* rowSlot,
                                    const int32_t* offsets, int32_t numExperts, int64_t maxRows,
                                    int32_t topK, int64_t capacity, bool byProbs, uint8_t* keep) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= maxRows || r >= offsets[numExperts]) return;
  const int64_t pair = int64_t(rowToken[r]) * topK + rowSlot[r];
  const int32_t expert = topExpert[pair];
  const int64_t begin = offsets[expert], end = offsets[expert + 1];
  int64_t rank = r - begin;
  if (byProbs && end - begin > capacity) {
    const float w = topWeight[pair];
    rank = 0;
    for (int64_t q = begin; q < end && rank < capacity; ++q) {
      const float other = topWeight[int64_t(rowToken[q]) * topK + rowSlot[q]];
      if (other > w || (other == w && q < r)) ++rank;
    }
  }
  keep[pair] = rank < capacity ? 1 : 0;
}

__global__ void capacity_dropped_kernel(const int32_t* counts, int32_t numExperts, int64_t capacity,
                                        int32_t* dropped) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= numExperts) return;
  const int64_t over = int64_t(counts[e]) - capacity;
  dropped[e] = over > 0 ? int32_t(over) : 0;
}

}  // namespace

Status capacityMaskLaunch(cudaStream_t stream, const int32_t* topExpert, const float* topWeight,
                          int64_t pairs, int32_t topK, int32_t numExperts, int64_t capacity,
                          bool byProbs, const int32_t* rowToken, const int32_t* rowSlot,
                          const int32_t* counts, const int32_t* offsets, uint8_t* keep,
                          int32_t* dropped) {
  if (pairs > 0) {
    // Pairs with an out-of-range expert get no row: dropped.
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(keep, 0, size_t(pairs), stream));
    capacity_fwd_kernel<<<unsigned((pairs + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
        topExpert, topWeight, rowToken, rowSlot, offsets, numExperts, pairs, topK, capacity,
        byProbs, keep);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  capacity_dropped_kernel<<<unsigned((numExperts + kThreads - 1) / kThreads), kThreads, 0,
                            stream>>>(counts, numExperts, capacity, dropped);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
