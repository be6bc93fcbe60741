// Embedding gather / scatter-add kernels (see embedding_cuda.h).
#include <cstdint>

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

__global__ void embedding_bwd_kernel(const int32_t* __restrict__ tokens,
                                     const bf16* __restrict__ dOut, float* __restrict__ dTable,
                                     int64_t rowBegin, int64_t vocab, int64_t d) {
  const int64_t row = rowBegin + blockIdx.x;
  const int32_t token = tokens[row];
  if (token < 0 || int64_t(token) >= vocab) return;
  const bf16* src = dOut + row * d;
  float* dst = dTable + int64_t(token) * d;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    atomicAdd(dst + j, __bfloat162float(src[j]));
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

Status embeddingBackwardCuda(cudaStream_t stream, const int32_t* tokens, int64_t n,
                             const bf16* dOut, int64_t vocab, int64_t d, float* dTable) {
  if (n <= 0 || d <= 0) return Status::ok();
  for (int64_t begin = 0; begin < n; begin += kMaxRowsPerLaunch) {
    const int64_t rows = n - begin < kMaxRowsPerLaunch ? n - begin : kMaxRowsPerLaunch;
    embedding_bwd_kernel<<<unsigned(rows), kThreads, 0, stream>>>(tokens, dOut, dTable, begin,
                                                                  vocab, d);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
