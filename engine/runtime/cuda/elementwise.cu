#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;

template <typename In, typename Out, typename F>
__global__ void map_kernel(const In* in, Out* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = f(in[i], out[i]);
  }
}

template <typename In, typename Out, typename F>
Status launchMap(cudaStream_t stream, const In* in, Out* out, int64_t n, F f) {
  if (n == 0) return Status::ok();
  map_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(in, out, n, f);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

template <typename T>
Status launchFill(cudaStream_t stream, T* out, T value, int64_t n) {
  if (n == 0) return Status::ok();
  fill_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(out, value, n);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

__global__ void add_bf16_kernel(const bf16* a, const bf16* b, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
  }
}

}  // namespace

Status castFloatToBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n) {
  return launchMap(stream, in, out, n, [] __device__(float x, bf16) { return __float2bfloat16(x); });
}

Status castBf16ToFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n) {
  return launchMap(stream, in, out, n, [] __device__(bf16 x, float) { return __bfloat162float(x); });
}

Status fillFloat(cudaStream_t stream, float* out, float value, int64_t n) {
  return launchFill(stream, out, value, n);
}

Status fillBf16(cudaStream_t stream, bf16* out, float value, int64_t n) {
  return launchFill(stream, out, __float2bfloat16(value), n);
}

Status fillInt32(cudaStream_t stream, int32_t* out, int32_t value, int64_t n) {
  return launchFill(stream, out, value, n);
}

Status accumulateFloat(cudaStream_t stream, const float* in, float scale, float* out, int64_t n) {
  return launchMap(stream, in, out, n,
                   [scale] __device__(float x, float acc) { return acc + scale * x; });
}

Status addBf16(cudaStream_t stream, const bf16* a, const bf16* b, bf16* out, int64_t n) {
  if (n == 0) return Status::ok();
  add_bf16_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(a, b, out, n);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status addFloatIntoBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n) {
  return launchMap(stream, in, out, n, [] __device__(float x, bf16 acc) {
    return __float2bfloat16(__bfloat162float(acc) + x);
  });
}

Status accumulateBf16IntoFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n) {
  return launchMap(stream, in, out, n,
                   [] __device__(bf16 x, float acc) { return acc + __bfloat162float(x); });
}

}  // namespace moewb::engine::cuda
