// Key selections on the GPU (see sparse_attention_cuda.h, selection.h).
// Top-k: one CTA per query row. Each key s <= t gets a unique 64-bit key
//   (order-preserving bits of the score) << 32 | (2^32 - 1 - s),
// so "larger key" is exactly topKRow's strict order (score descending, then position ascending).
// A radix select over 8 digits of 8 bits finds the k-th largest key (integer shared-memory
// histograms: deterministic), then a block scan writes the keys >= it in ascending position.
// Transpose: a stable radix sort (CUB) of (key token, query * W + slot) pairs, whose input is in
// query order, groups the entries by key in ascending query order; keyStart by binary search.
#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda {
namespace {

using namespace sparse_detail;

constexpr int kTopKThreads = 256;
constexpr int kRadixBins = 256;

__global__ void causal_selection_kernel(int64_t total, int64_t seqLen, int32_t* selected) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = (i / seqLen) % seqLen, s = i % seqLen;
    selected[i] = s <= t ? int32_t(s) : -1;
  }
}

__device__ __forceinline__ uint64_t selectionKey(float score, int64_t s) {
  uint32_t bits = __float_as_uint(__fadd_rn(score, 0.0f));  // -0 -> +0 (they compare equal)
  bits = (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
  return (uint64_t(bits) << 32) | uint64_t(0xffffffffu - uint32_t(s));
}

__global__ void topk_fwd_kernel(const float* scores, int64_t seqLen, int64_t width,
                                int32_t* selected) {
  __shared__ uint32_t hist[kRadixBins];
  __shared__ uint64_t prefixShared;
  __shared__ int64_t remainingShared;
  __shared__ int warpSums[32];
  const int64_t n = blockIdx.x, t = n % seqLen, count = t + 1;
  const float* row = scores + n * seqLen;
  int32_t* out = selected + n * width;
  if (count <= width) {
    for (int64_t s = threadIdx.x; s < width; s += blockDim.x) out[s] = s < count ? int32_t(s) : -1;
    return;
  }
  uint64_t prefix = 0, mask = 0;
  int64_t remaining = width;  // rank of the wanted key among those matching `prefix`
  for (int pass = 7; pass >= 0; --pass) {
    const int shift = pass * 8;
    for (int b = int(threadIdx.x); b < kRadixBins; b += blockDim.x) hist[b] = 0u;
    __syncthreads();
    for (int64_t s = threadIdx.x; s < count; s += blockDim.x) {
      const uint64_t key = selectionKey(row[s], s);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xffu], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;
      for (int b = kRadixBins - 1; b >= 0; --b) {
        if (above + int64_t(hist[b]) >= remaining || b == 0) {
          prefixShared = prefix | (uint64_t(b) << shift);
          remainingShared = remaining - above;
          break;
        }
        above += hist[b];
      }
    }
    __syncthreads();
    prefix = prefixShared;
    remaining = remainingShared;
    mask |= uint64_t(0xffu) << shift;
  }
  // prefix is now the width-th largest key: exactly `width` keys are >= it (keys are unique).
  int64_t written = 0;
  for (int64_t start = 0; start < count; start += blockDim.x) {
    const int64_t s = start + threadIdx.x;
    const int flag = s < count && selectionKey(row[s], s) >= prefix ? 1 : 0;
    int total = 0;
    const int offset = blockExclusiveScan(flag, total, warpSums);
    if (flag != 0 && written + offset < width) out[written + offset] = int32_t(s);
    written += total;
  }
}

__global__ void transpose_keys_kernel(const int32_t* selected, int64_t n, int64_t width,
                                      int64_t seqLen, uint32_t* keys, int32_t* values) {
  const int64_t total = n * width;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t q = i / width;
    const int32_t s = selected[i];
    keys[i] = s >= 0 ? uint32_t(q - q % seqLen + s) : uint32_t(n);
    values[i] = int32_t(i);
  }
}

// keyStart[m] = first position of sortedKeys holding a key >= m, m in [0, n].
__global__ void transpose_starts_kernel(const uint32_t* sortedKeys, int64_t total, int64_t n,
                                        int32_t* keyStart) {
  for (int64_t m = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; m <= n;
       m += int64_t(gridDim.x) * blockDim.x) {
    int64_t lo = 0, hi = total;
    while (lo < hi) {
      const int64_t mid = (lo + hi) / 2;
      if (int64_t(sortedKeys[mid]) < m) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    keyStart[m] = int32_t(lo);
  }
}

}  // namespace

Status causalSelectionCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, int32_t* selected) {
  const int64_t total = batch * seqLen * seqLen;
  if (total == 0) return Status::ok();
  causal_selection_kernel<<<gridFor(total), 256, 0, stream>>>(total, seqLen, selected);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status indexerTopKCuda(cudaStream_t stream, int64_t batch, int64_t seqLen, const float* scores,
                       int64_t topK, int32_t* selected) {
  if (topK < 1) return invalidArgument("sparse top_k must be >= 1, got " + std::to_string(topK));
  const int64_t n = batch * seqLen, width = topK < seqLen ? topK : seqLen;
  if (n == 0) return Status::ok();
  topk_fwd_kernel<<<unsigned(n), kTopKThreads, 0, stream>>>(scores, seqLen, width, selected);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

static int transposeSelectionEndBit(int64_t n) {
  int endBit = 1;
  while ((int64_t(1) << endBit) <= n) ++endBit;  // keys are in [0, n]
  return endBit;
}

Status transposeSelectionTempBytes(int64_t n, int64_t total, size_t& bytes) {
  bytes = 0;
  MOEWB_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(total), 0,
      transposeSelectionEndBit(n)));
  return Status::ok();
}

Status launchTransposeSelection(cudaStream_t stream, const int32_t* selected, int64_t n,
                                int64_t width, int64_t seqLen, const TransposeBuffers& b,
                                int32_t* keyStart, int32_t* entries) {
  const int64_t total = n * width;
  if (total == 0) return fillInt32(stream, keyStart, 0, n + 1);
  transpose_keys_kernel<<<gridFor(total), 256, 0, stream>>>(selected, n, width, seqLen, b.keys,
                                                            b.values);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  size_t tempBytes = b.tempBytes;
  MOEWB_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(b.temp, tempBytes, b.keys, b.sortedKeys, b.values, entries,
                                      int(total), 0, transposeSelectionEndBit(n), stream));
  transpose_starts_kernel<<<gridFor(n + 1), 256, 0, stream>>>(b.sortedKeys, total, n, keyStart);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
