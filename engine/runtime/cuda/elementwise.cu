#include <cstdint>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPack = 8;  // elements per thread in the vector kernels (16-byte bf16 accesses)

// Eight elements moved with 16-byte accesses (one for bf16, two for 4-byte types).
template <typename T>
struct alignas(16) Pack8 {
  T v[kPack];
};

// True when every pointer is 16-byte aligned (the vector kernels' Pack8 accesses).
template <typename... P>
bool aligned16(const P*... pointers) {
  return ((reinterpret_cast<uintptr_t>(pointers) % 16 == 0) && ...);
}

// out[i] = f(in[i], out[i]) one element a thread (any alignment; the vector kernels' tails).
template <bool kReadsOut, typename In, typename Out, typename F>
__global__ void map_kernel(const In* in, Out* out, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = f(in[i], kReadsOut ? out[i] : Out{});
  }
}

// The same over `packs` packs of 8 (in and out 16-byte aligned); `out` is read only when F
// uses it (kReadsOut), so a cast writes its output without reading it first.
template <bool kReadsOut, typename In, typename Out, typename F>
__global__ void map_pack_kernel(const In* in, Out* out, int64_t packs, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Pack8<In> a = reinterpret_cast<const Pack8<In>*>(in)[i];
    Pack8<Out> o{};
    if constexpr (kReadsOut) o = reinterpret_cast<const Pack8<Out>*>(out)[i];
#pragma unroll
    for (int j = 0; j < kPack; ++j) o.v[j] = f(a.v[j], o.v[j]);
    reinterpret_cast<Pack8<Out>*>(out)[i] = o;
  }
}

// out[i] = f(in[i], out[i]) for i < n: packs of 8 when both pointers are 16-byte aligned, the
// tail (and unaligned arrays) one element a thread. Per element the same f, so the same bits.
template <bool kReadsOut, typename In, typename Out, typename F>
Status launchMap(cudaStream_t stream, const In* in, Out* out, int64_t n, F f) {
  if (n == 0) return Status::ok();
  const int64_t packs = aligned16(in, out) ? n / kPack : 0;
  if (packs > 0) {
    map_pack_kernel<kReadsOut><<<gridFor(packs, kThreads), kThreads, 0, stream>>>(in, out, packs,
                                                                                f);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  const int64_t done = packs * kPack;
  if (done < n) {
    map_kernel<kReadsOut><<<gridFor(n - done, kThreads), kThreads, 0, stream>>>(
        in + done, out + done, n - done, f);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
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
__global__ void fill_pack_kernel(T* out, T value, int64_t packs) {
  Pack8<T> p;
#pragma unroll
  for (int j = 0; j < kPack; ++j) p.v[j] = value;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    reinterpret_cast<Pack8<T>*>(out)[i] = p;
  }
}

template <typename T>
Status launchFill(cudaStream_t stream, T* out, T value, int64_t n) {
  if (n == 0) return Status::ok();
  const int64_t packs = aligned16(out) ? n / kPack : 0;
  if (packs > 0) {
    fill_pack_kernel<<<gridFor(packs, kThreads), kThreads, 0, stream>>>(out, value, packs);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  const int64_t done = packs * kPack;
  if (done < n) {
    fill_kernel<<<gridFor(n - done, kThreads), kThreads, 0, stream>>>(out + done, value,
                                                                      n - done);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return Status::ok();
}

__device__ __forceinline__ bf16 addBf16Element(bf16 a, bf16 b) {
  return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}

__global__ void add_bf16_kernel(const bf16* a, const bf16* b, bf16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = addBf16Element(a[i], b[i]);
  }
}

__global__ void add_bf16_pack_kernel(const bf16* a, const bf16* b, bf16* out, int64_t packs) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < packs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const Pack8<bf16> x = reinterpret_cast<const Pack8<bf16>*>(a)[i];
    const Pack8<bf16> y = reinterpret_cast<const Pack8<bf16>*>(b)[i];
    Pack8<bf16> o;
#pragma unroll
    for (int j = 0; j < kPack; ++j) o.v[j] = addBf16Element(x.v[j], y.v[j]);
    reinterpret_cast<Pack8<bf16>*>(out)[i] = o;
  }
}

}  // namespace

Status castFloatToBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n) {
  return launchMap<false>(stream, in, out, n,
                          [] __device__(float x, bf16) { return __float2bfloat16(x); });
}

Status castBf16ToFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n) {
  return launchMap<false>(stream, in, out, n,
                          [] __device__(bf16 x, float) { return __bfloat162float(x); });
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
  return launchMap<true>(stream, in, out, n,
                         [scale] __device__(float x, float acc) { return acc + scale * x; });
}

Status addBf16(cudaStream_t stream, const bf16* a, const bf16* b, bf16* out, int64_t n) {
  if (n == 0) return Status::ok();
  const int64_t packs = aligned16(a, b, out) ? n / kPack : 0;
  if (packs > 0) {
    add_bf16_pack_kernel<<<gridFor(packs, kThreads), kThreads, 0, stream>>>(a, b, out, packs);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  const int64_t done = packs * kPack;
  if (done < n) {
    add_bf16_kernel<<<gridFor(n - done, kThreads), kThreads, 0, stream>>>(a + done, b + done,
                                                                         out + done, n - done);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return Status::ok();
}

Status addFloatIntoBf16(cudaStream_t stream, const float* in, bf16* out, int64_t n) {
  return launchMap<true>(stream, in, out, n, [] __device__(float x, bf16 acc) {
    return __float2bfloat16(__bfloat162float(acc) + x);
  });
}

Status accumulateBf16IntoFloat(cudaStream_t stream, const bf16* in, float* out, int64_t n) {
  return launchMap<true>(stream, in, out, n,
                         [] __device__(bf16 x, float acc) { return acc + __bfloat162float(x); });
}

}  // namespace moewb::engine::cuda
