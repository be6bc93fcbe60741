// The KDA short causal convolution + SiLU on the GPU (kda_cuda_kernels.h): forward, the input
// gradient and the per-split weight-gradient partials. Two kernel sets compute the same numbers:
// - vectorised (used when channels % 8 == 0 and every pointer is 16-byte aligned): a thread owns
//   8 consecutive channels and walks a run of rows in order, keeping the conv window in registers
//   (each input element read once per run), 16-byte loads and stores, no 64-bit division per
//   element. The first version (one element per thread, three int64 div/mod each) ran at 5-7% of
//   the H200's bandwidth on h200.toml's [16384, 2048] (bench/RESULTS.md).
// - scalar (any shape): one element per thread; the fallback and the reference the vectorised
//   kernels are tested against bitwise (KdaGateCudaTest).
// Per output element both sets add the same products in the same order (taps in order; weight
// gradient rows in order within a split), so their results are bitwise equal.
#include "runtime/cuda/cuda_check.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;          // channels per thread in the vectorised kernels (16 bytes)
constexpr int kRowsPerRun = 16;  // rows a thread walks in the forward and input-gradient kernels
constexpr int kDwThreads = 64;   // threads per block of the weight-gradient kernel

std::atomic<bool> g_vectorised{true};

__device__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// Gradient of SiLU at the stored pre-activation u.
__device__ float siluGrad(float dy, float u) {
  const float s = sigmoidf(u);
  return dy * s * (1.f + u * (1.f - s));
}

unsigned blocksFor(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }

// ---- scalar kernels (any shape) ----

__global__ void kda_conv_fwd_kernel(int64_t total, int64_t seqLen, int64_t channels, int width,
                                    const bf16* x, const bf16* w, bf16* y, bf16* pre) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / channels, c = i % channels, t = row % seqLen;
    float acc = 0.f;
    for (int j = 0; j < width; ++j) {
      const int64_t back = width - 1 - j;
      if (back > t) continue;
      acc += __bfloat162float(w[c * width + j]) * __bfloat162float(x[i - back * channels]);
    }
    pre[i] = __float2bfloat16(acc);
    y[i] = __float2bfloat16(acc * sigmoidf(acc));
  }
}

__global__ void kda_conv_bwd_kernel(int64_t total, int64_t seqLen, int64_t channels, int width,
                                    const bf16* dy, const bf16* w, const bf16* pre, bf16* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / channels, c = i % channels, t = row % seqLen;
    float acc = 0.f;
    for (int j = 0; j < width; ++j) {
      const int64_t ahead = width - 1 - j;  // the output this tap feeds is `ahead` tokens later
      if (t + ahead >= seqLen) continue;
      const int64_t at = i + ahead * channels;
      acc += __bfloat162float(w[c * width + j]) *
             siluGrad(__bfloat162float(dy[at]), __bfloat162float(pre[at]));
    }
    dx[i] = __float2bfloat16(acc);
  }
}

// grid (column blocks, splits): part[s, c * W + j] = sum over rows of split s of du[row, c] *
// x[row - (W - 1 - j), c].
__global__ void kda_conv_dw_kernel(int64_t n, int64_t seqLen, int64_t channels, int width,
                                   int64_t rowsPerSplit, const bf16* dy, const bf16* x,
                                   const bf16* pre, float* part) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= channels) return;
  const int64_t r0 = blockIdx.y * rowsPerSplit, r1 = min(n, r0 + rowsPerSplit);
  float acc[kKdaMaxConvWidth];
#pragma unroll
  for (int j = 0; j < kKdaMaxConvWidth; ++j) acc[j] = 0.f;
  for (int64_t row = r0; row < r1; ++row) {
    const int64_t t = row % seqLen, i = row * channels + c;
    const float du = siluGrad(__bfloat162float(dy[i]), __bfloat162float(pre[i]));
#pragma unroll
    for (int j = 0; j < kKdaMaxConvWidth; ++j) {
      const int64_t back = width - 1 - j;
      if (j < width && back <= t) acc[j] += du * __bfloat162float(x[i - back * channels]);
    }
  }
  float* out = part + blockIdx.y * channels * width + c * width;
#pragma unroll
  for (int j = 0; j < kKdaMaxConvWidth; ++j) {
    if (j < width) out[j] = acc[j];
  }
}

// ---- vectorised kernels (channels % 8 == 0, 16-byte aligned pointers) ----

struct Vec8 {
  float v[kVec];
};

__device__ __forceinline__ Vec8 load8(const bf16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Vec8 out;
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) {
    const float2 f = __bfloat1622float2(pairs[k]);
    out.v[2 * k] = f.x;
    out.v[2 * k + 1] = f.y;
  }
  return out;
}

__device__ __forceinline__ void store8(bf16* p, const Vec8& in) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int k = 0; k < kVec / 2; ++k) pairs[k] = __floats2bfloat162_rn(in.v[2 * k], in.v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

__device__ __forceinline__ Vec8 zero8() {
  Vec8 out;
#pragma unroll
  for (int k = 0; k < kVec; ++k) out.v[k] = 0.f;
  return out;
}

// The W taps of 8 channels: taps[j].v[k] = w[(c0 + k) * W + j].
template <int W>
__device__ __forceinline__ void loadTaps(const bf16* w, int64_t c0, Vec8 (&taps)[W]) {
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) taps[j].v[k] = __bfloat162float(w[(c0 + k) * W + j]);
  }
}

// win[j] = x[r0 - (W - 1 - j)] for the W - 1 rows before r0 (zero for rows before the sequence
// start: t is r0's position in its sequence).
template <int W>
__device__ __forceinline__ void loadWindowBehind(const bf16* x, int64_t r0, int64_t t,
                                                 int64_t channels, int64_t c0, Vec8 (&win)[W]) {
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    const int64_t back = W - 1 - j;
    win[j] = back <= t ? load8(x + (r0 - back) * channels + c0) : zero8();
  }
}

// grid (channel vectors / kThreads, row runs): thread = 8 channels x kRowsPerRun rows in order;
// win[j] holds x[row - (W - 1 - j)] (zero where that row is before the sequence start).
template <int W>
__global__ void __launch_bounds__(kThreads)
    kda_conv_fwd_vec_kernel(int64_t n, int64_t seqLen, int64_t channels, const bf16* __restrict__ x,
                            const bf16* __restrict__ w, bf16* __restrict__ y,
                            bf16* __restrict__ pre) {
  const int64_t c0 = (blockIdx.x * int64_t(kThreads) + threadIdx.x) * kVec;
  if (c0 >= channels) return;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerRun;
  const int64_t r1 = min(n, r0 + kRowsPerRun);
  Vec8 taps[W];
  loadTaps<W>(w, c0, taps);
  int64_t t = r0 % seqLen;
  Vec8 win[W];
  loadWindowBehind<W>(x, r0, t, channels, c0, win);
  for (int64_t row = r0; row < r1; ++row) {
    if (t == seqLen) t = 0;
    win[W - 1] = load8(x + row * channels + c0);
    Vec8 outPre, outY;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if (W - 1 - j <= t) acc += taps[j].v[k] * win[j].v[k];
      }
      outPre.v[k] = acc;
      outY.v[k] = acc * sigmoidf(acc);
    }
    store8(pre + row * channels + c0, outPre);
    store8(y + row * channels + c0, outY);
#pragma unroll
    for (int j = 0; j < W - 1; ++j) win[j] = win[j + 1];
    ++t;
  }
}

// du = SiLU'(pre) dy for 8 channels of one row.
__device__ __forceinline__ Vec8 loadDu(const bf16* dy, const bf16* pre, int64_t at) {
  const Vec8 g = load8(dy + at), u = load8(pre + at);
  Vec8 out;
#pragma unroll
  for (int k = 0; k < kVec; ++k) out.v[k] = siluGrad(g.v[k], u.v[k]);
  return out;
}

// grid as the forward. dx[row] = sum_j w[j] du[row + (W - 1 - j)] over taps inside the sequence;
// ahead[a] holds du[row + a] (loaded when that row exists; used only inside the sequence).
template <int W>
__global__ void __launch_bounds__(kThreads)
    kda_conv_bwd_vec_kernel(int64_t n, int64_t seqLen, int64_t channels,
                            const bf16* __restrict__ dy, const bf16* __restrict__ w,
                            const bf16* __restrict__ pre, bf16* __restrict__ dx) {
  const int64_t c0 = (blockIdx.x * int64_t(kThreads) + threadIdx.x) * kVec;
  if (c0 >= channels) return;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerRun;
  const int64_t r1 = min(n, r0 + kRowsPerRun);
  Vec8 taps[W];
  loadTaps<W>(w, c0, taps);
  int64_t t = r0 % seqLen;
  Vec8 ahead[W];
#pragma unroll
  for (int a = 0; a < W - 1; ++a) {
    ahead[a] = r0 + a < n ? loadDu(dy, pre, (r0 + a) * channels + c0) : zero8();
  }
  for (int64_t row = r0; row < r1; ++row) {
    if (t == seqLen) t = 0;
    const int64_t last = row + W - 1;
    ahead[W - 1] = last < n ? loadDu(dy, pre, last * channels + c0) : zero8();
    Vec8 out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float acc = 0.f;
#pragma unroll
      for (int j = 0; j < W; ++j) {
        if (t + (W - 1 - j) < seqLen) acc += taps[j].v[k] * ahead[W - 1 - j].v[k];
      }
      out.v[k] = acc;
    }
    store8(dx + row * channels + c0, out);
#pragma unroll
    for (int a = 0; a < W - 1; ++a) ahead[a] = ahead[a + 1];
    ++t;
  }
}

// grid (channel vectors / kDwThreads, splits): the scalar dw kernel's partials, 8 channels per
// thread, rows of the split in order; win[j] holds x[row - (W - 1 - j)].
template <int W>
__global__ void __launch_bounds__(kDwThreads)
    kda_conv_dw_vec_kernel(int64_t n, int64_t seqLen, int64_t channels, int64_t rowsPerSplit,
                           const bf16* __restrict__ dy, const bf16* __restrict__ x,
                           const bf16* __restrict__ pre, float* __restrict__ part) {
  const int64_t c0 = (blockIdx.x * int64_t(kDwThreads) + threadIdx.x) * kVec;
  if (c0 >= channels) return;
  const int64_t r0 = blockIdx.y * rowsPerSplit, r1 = min(n, r0 + rowsPerSplit);
  float acc[W][kVec];
#pragma unroll
  for (int j = 0; j < W; ++j) {
#pragma unroll
    for (int k = 0; k < kVec; ++k) acc[j][k] = 0.f;
  }
  int64_t t = r0 % seqLen;
  Vec8 win[W];
  loadWindowBehind<W>(x, r0, t, channels, c0, win);
  for (int64_t row = r0; row < r1; ++row) {
    if (t == seqLen) t = 0;
    const int64_t at = row * channels + c0;
    win[W - 1] = load8(x + at);
    const Vec8 du = loadDu(dy, pre, at);
#pragma unroll
    for (int j = 0; j < W; ++j) {
      if (W - 1 - j <= t) {
#pragma unroll
        for (int k = 0; k < kVec; ++k) acc[j][k] += du.v[k] * win[j].v[k];
      }
    }
#pragma unroll
    for (int j = 0; j < W - 1; ++j) win[j] = win[j + 1];
    ++t;
  }
  float* out = part + blockIdx.y * channels * W + c0 * W;
#pragma unroll
  for (int k = 0; k < kVec; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) out[k * W + j] = acc[j][k];
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

bool useVectorised(int64_t channels, std::initializer_list<const void*> pointers) {
  if (!g_vectorised.load(std::memory_order_relaxed) || channels % kVec != 0) return false;
  for (const void* p : pointers) {
    if (!aligned16(p)) return false;
  }
  return true;
}

// Calls f(std::integral_constant<int, W>) for the runtime width (1..kKdaMaxConvWidth).
template <typename F>
Status withWidth(int64_t width, F&& f) {
  switch (width) {
    case 1: return f(std::integral_constant<int, 1>());
    case 2: return f(std::integral_constant<int, 2>());
    case 3: return f(std::integral_constant<int, 3>());
    case 4: return f(std::integral_constant<int, 4>());
    case 5: return f(std::integral_constant<int, 5>());
    case 6: return f(std::integral_constant<int, 6>());
    case 7: return f(std::integral_constant<int, 7>());
    case 8: return f(std::integral_constant<int, 8>());
    default: return invalidArgument("KDA short conv width " + std::to_string(width));
  }
}
static_assert(kKdaMaxConvWidth == 8, "withWidth covers widths 1..8");

dim3 runGrid(int64_t n, int64_t channels) {
  return dim3(blocksFor(channels / kVec, kThreads), unsigned((n + kRowsPerRun - 1) / kRowsPerRun));
}

}  // namespace

void setKdaShortConvVectorised(bool on) { g_vectorised.store(on, std::memory_order_relaxed); }

Status launchKdaShortConvForward(cudaStream_t stream, int64_t batch, int64_t seqLen,
                                 int64_t channels, int64_t width, const bf16* x, const bf16* w,
                                 bf16* y, bf16* pre) {
  const int64_t n = batch * seqLen, total = n * channels;
  if (total == 0) return Status::ok();
  if (useVectorised(channels, {x, y, pre})) {
    return withWidth(width, [&](auto tag) -> Status {
      kda_conv_fwd_vec_kernel<decltype(tag)::value>
          <<<runGrid(n, channels), kThreads, 0, stream>>>(n, seqLen, channels, x, w, y, pre);
      MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
      return Status::ok();
    });
  }
  kda_conv_fwd_kernel<<<gridFor(total, kThreads), kThreads, 0, stream>>>(
      total, seqLen, channels, int(width), x, w, y, pre);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchKdaShortConvBackward(cudaStream_t stream, int64_t batch, int64_t seqLen,
                                  int64_t channels, int64_t width, const bf16* dy, const bf16* x,
                                  const bf16* w, const bf16* pre, bf16* dx, float* dw,
                                  float* part) {
  const int64_t n = batch * seqLen, total = n * channels;
  if (total == 0) return Status::ok();
  const int64_t splits = kdaSplits(n);
  if (useVectorised(channels, {dy, x, pre, dx})) {
    MOEWB_RETURN_IF_ERROR(withWidth(width, [&](auto tag) -> Status {
      constexpr int W = decltype(tag)::value;
      kda_conv_bwd_vec_kernel<W>
          <<<runGrid(n, channels), kThreads, 0, stream>>>(n, seqLen, channels, dy, w, pre, dx);
      MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
      const dim3 grid(blocksFor(channels / kVec, kDwThreads), unsigned(splits));
      kda_conv_dw_vec_kernel<W><<<grid, kDwThreads, 0, stream>>>(
          n, seqLen, channels, kdaRowsPerSplit(n), dy, x, pre, part);
      MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
      return Status::ok();
    }));
  } else {
    kda_conv_bwd_kernel<<<gridFor(total, kThreads), kThreads, 0, stream>>>(
        total, seqLen, channels, int(width), dy, w, pre, dx);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
    kda_conv_dw_kernel<<<dim3(blocksFor(channels, kThreads), unsigned(splits)), kThreads, 0,
                         stream>>>(n, seqLen, channels, int(width), kdaRowsPerSplit(n), dy, x, pre,
                                   part);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  const int64_t taps = channels * width;
  return launchKdaFoldMod(stream, part, splits, taps, taps, dw);
}

}  // namespace moewb::engine::cuda
