// Embedding gather / scatter-add kernels (see embedding_cuda.h).
#include <cstdint>
#include <limits>
#include <string>

#include <cub/cub.cuh>

#include "runtime/cuda/cuda_check.h"
#include "ops/embedding/embedding_cuda.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 128;
// Grid rows per launch slice (gridDim.x limit is 2^31-1, but keep launches modest).
constexpr int64_t kMaxRowsPerLaunch = int64_t(1) << 30;

// One block per token row. `vectorized`: d % 8 == 0 and 16-byte aligned pointers, so each thread
// moves 8 bf16 at a time.
__global__ void embedding_fwd_kernel(const int32_t* __restrict__ tokens,
                                     const bf16* __restrict__ table, bf16* __restrict__ out,
                                     int64_t rowBegin, int64_t vocab, int64_t d, bool vectorized) {
  const int64_t row = rowBegin + blockIdx.x;
  const int32_t token = tokens[row];
  const bool valid = token >= 0 && int64_t(token) < vocab;
  bf16* dst = out + row * d;
  if (vectorized) {
    const int64_t chunks = d / 8;
    uint4* dst4 = reinterpret_cast<uint4*>(dst);
    const uint4* src4 =
        valid ? reinterpret_cast<const uint4*>(table + int64_t(token) * d) : nullptr;
    for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
      dst4[c] = valid ? src4[c] : make_uint4(0u, 0u, 0u, 0u);
    }
    return;
  }
  const bf16* src = valid ? table + int64_t(token) * d : nullptr;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    dst[j] = valid ? src[j] : __float2bfloat16(0.0f);
  }
}

// Sort keys for the backward: the token id, or `vocab` for ids outside [0, vocab) (they sort last
// and receive nothing); values: the row's position.
__global__ void embedding_bwd_keys_kernel(const int32_t* __restrict__ tokens, int64_t n,
                                          int32_t vocab, int32_t* __restrict__ keys,
                                          int32_t* __restrict__ positions) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t token = tokens[i];
  keys[i] = token >= 0 && token < vocab ? token : vocab;
  positions[i] = int32_t(i);
}

// Block (x = sorted row, y = column slab): the block whose sorted row starts a run of one token
// adds the run's gradient rows into that token's table row, in position order (the sort is
// stable), one fp32 add at a time starting from the row's current value: the CPU reference's
// order, and one writer per table element. Other blocks return at once. The run's keys and
// positions are read kLookahead rows ahead so the row loads overlap; the adds stay in order.
constexpr int kBwdThreads = 128;
constexpr int kBwdColumnsPerThread = 2;
constexpr int kBwdColumnsPerBlock = kBwdThreads * kBwdColumnsPerThread;
constexpr int kLookahead = 4;

__global__ void embedding_bwd_runs_kernel(const int32_t* __restrict__ sortedKeys,
                                          const int32_t* __restrict__ sortedPositions,
                                          const bf16* __restrict__ dOut,
                                          float* __restrict__ dTable, int64_t rowBegin, int64_t n,
                                          int32_t vocab, int64_t d) {
  const int64_t first = rowBegin + blockIdx.x;
  const int32_t key = sortedKeys[first];
  if (key == vocab || (first > 0 && sortedKeys[first - 1] == key)) return;
  int64_t column[kBwdColumnsPerThread];
  float acc[kBwdColumnsPerThread];
  float* dst = dTable + int64_t(key) * d;
#pragma unroll
  for (int c = 0; c < kBwdColumnsPerThread; ++c) {
    column[c] = int64_t(blockIdx.y) * kBwdColumnsPerBlock + c * kBwdThreads + threadIdx.x;
    acc[c] = column[c] < d ? dst[column[c]] : 0.0f;
  }
  for (int64_t r = first; r < n && sortedKeys[r] == key; r += kLookahead) {
    float v[kLookahead][kBwdColumnsPerThread];
    bool inRun[kLookahead];
#pragma unroll
    for (int j = 0; j < kLookahead; ++j) {
      inRun[j] = r + j < n && sortedKeys[r + j] == key;
      const bf16* src = dOut + int64_t(inRun[j] ? sortedPositions[r + j] : 0) * d;
#pragma unroll
      for (int c = 0; c < kBwdColumnsPerThread; ++c) {
        v[j][c] = inRun[j] && column[c] < d ? __bfloat162float(src[column[c]]) : 0.0f;
      }
    }
#pragma unroll
    for (int j = 0; j < kLookahead; ++j) {
#pragma unroll
      for (int c = 0; c < kBwdColumnsPerThread; ++c) {
        if (inRun[j]) acc[c] += v[j][c];
      }
    }
  }
#pragma unroll
  for (int c = 0; c < kBwdColumnsPerThread; ++c) {
    if (column[c] < d) dst[column[c]] = acc[c];
  }
}

// Bits the sort needs for keys in [0, vocab].
int sortEndBit(int32_t vocab) {
  int bits = 1;
  while ((int64_t(1) << bits) <= int64_t(vocab)) ++bits;
  return bits;
}

bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace

Status embeddingForwardCuda(cudaStream_t stream, const int32_t* tokens, int64_t n,
                            const bf16* table, int64_t vocab, int64_t d, bf16* out) {
  if (n <= 0 || d <= 0) return Status::ok();
  const bool vectorized = d % 8 == 0 && aligned16(table) && aligned16(out);
  for (int64_t begin = 0; begin < n; begin += kMaxRowsPerLaunch) {
    const int64_t rows = n - begin < kMaxRowsPerLaunch ? n - begin : kMaxRowsPerLaunch;
    embedding_fwd_kernel<<<unsigned(rows), kThreads, 0, stream>>>(tokens, table, out, begin, vocab,
                                                                  d, vectorized);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return Status::ok();
}

Status embeddingBackwardCuda(CudaContext& context, const int32_t* tokens, int64_t n,
                             const bf16* dOut, int64_t vocab, int64_t d, float* dTable) {
  if (n <= 0 || d <= 0) return Status::ok();
  if (n > std::numeric_limits<int32_t>::max() - 1 || vocab >= std::numeric_limits<int32_t>::max()) {
    return invalidArgument("embedding backward: " + std::to_string(n) + " rows and a vocabulary of " +
                           std::to_string(vocab) + " must each stay below 2^31 - 1");
  }
  cudaStream_t stream = context.stream();
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> keys, context.newTensor<int32_t>({2 * n}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> positions,
                         context.newTensor<int32_t>({2 * n}, ws));
  const int endBit = sortEndBit(int32_t(vocab));
  size_t tempBytes = 0;
  MOEWB_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      nullptr, tempBytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), int(n), 0, endBit));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<uint8_t> temp,
                         context.newTensor<uint8_t>({int64_t(tempBytes) + 1}, ws));
  int32_t* sortedKeys = keys.data() + n;
  int32_t* sortedPositions = positions.data() + n;
  embedding_bwd_keys_kernel<<<gridFor(n), 256, 0, stream>>>(tokens, n, int32_t(vocab),
                                                             keys.data(), positions.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  MOEWB_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      temp.data(), tempBytes, keys.data(), sortedKeys, positions.data(), sortedPositions, int(n), 0,
      endBit, stream));
  const unsigned slabs = unsigned((d + kBwdColumnsPerBlock - 1) / kBwdColumnsPerBlock);
  for (int64_t begin = 0; begin < n; begin += kMaxRowsPerLaunch) {
    const int64_t rows = n - begin < kMaxRowsPerLaunch ? n - begin : kMaxRowsPerLaunch;
    embedding_bwd_runs_kernel<<<dim3(unsigned(rows), slabs), kBwdThreads, 0, stream>>>(
        sortedKeys, sortedPositions, dOut, dTable, begin, n, int32_t(vocab), d);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
