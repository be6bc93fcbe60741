// AdamW, gradient-norm, clip-factor and scaling kernels (see adamw_cuda.h).
#include <cmath>

#include "runtime/cuda/cuda_check.h"
#include "ops/adamw/adamw_cuda.h"
#include "ops/adamw/adamw_cuda_kernels.h"
#include "ops/adamw/multi_tensor_adamw.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kNormElementsPerBlock = 8192;  // target work per norm block
constexpr int64_t kNormMaxBlocks = 1024;         // per buffer
constexpr int kFinishThreads = 512;

struct AdamWFactors {
  float b1, b2, oneMinusB1, oneMinusB2, lr, eps, decayFactor, correction1, correction2;
};

// One element's AdamW update (adamw.h); returns the new parameter value. Every operation is an
// explicitly rounded intrinsic, so the compiler cannot contract some of them into FMAs in one
// kernel and not in another: the per-tensor and multi-tensor kernels agree bitwise.
__device__ __forceinline__ float adamwElement(float& param, float grad, float& m, float& v,
                                              const AdamWFactors& f, float decayFactor) {
  const float mi = __fadd_rn(__fmul_rn(f.b1, m), __fmul_rn(f.oneMinusB1, grad));
  const float vi = __fadd_rn(__fmul_rn(f.b2, v), __fmul_rn(__fmul_rn(f.oneMinusB2, grad), grad));
  m = mi;
  v = vi;
  const float denominator = __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, f.correction2)), f.eps);
  const float update = __fdiv_rn(__fmul_rn(f.lr, __fdiv_rn(mi, f.correction1)), denominator);
  param = __fsub_rn(__fmul_rn(param, decayFactor), update);
  return param;
}

__global__ void adamw_fwd_kernel(float* param, const float* __restrict__ grad, float* m, float* v,
                                 bf16* paramBf16, int64_t n, AdamWFactors f,
                                 const float* __restrict__ gradScale) {
  const float scale = gradScale != nullptr ? *gradScale : 1.0f;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float p =
        adamwElement(param[i], __fmul_rn(grad[i], scale), m[i], v[i], f, f.decayFactor);
    if (paramBf16 != nullptr) paramBf16[i] = __float2bfloat16(p);
  }
}

// True when every pointer of tensor t is aligned for 16-byte (fp32 x 4) and 8-byte (bf16 x 4)
// accesses at element `begin` (a multiple of 4 in every chunk).
__device__ __forceinline__ bool vectorisable(const MultiTensorEntry& t, int64_t begin) {
  const uintptr_t f32 = reinterpret_cast<uintptr_t>(t.param + begin) |
                        reinterpret_cast<uintptr_t>(t.grad + begin) |
                        reinterpret_cast<uintptr_t>(t.m + begin) |
                        reinterpret_cast<uintptr_t>(t.v + begin);
  const uintptr_t b16 =
      t.paramBf16 != nullptr ? reinterpret_cast<uintptr_t>(t.paramBf16 + begin) : 0;
  return (begin % 4) == 0 && (f32 & 15) == 0 && (b16 & 7) == 0;
}

// Block b updates chunk b; f.decayFactor applies to tensors with decay, 1 to the others. Aligned
// chunks move 4 elements per thread and access (16-byte loads and stores: the scalar loop reached
// about half of HBM bandwidth on h200.toml); every element gets the same arithmetic either way.
__global__ void multi_tensor_adamw_kernel(const MultiTensorEntry* __restrict__ tensors,
                                          const MultiTensorChunk* __restrict__ chunks,
                                          AdamWFactors f, const float* __restrict__ gradScale) {
  const MultiTensorChunk chunk = chunks[blockIdx.x];
  const MultiTensorEntry t = tensors[chunk.tensor];
  const float scale = gradScale != nullptr ? *gradScale : 1.0f;
  const float decayFactor = t.decay != 0 ? f.decayFactor : 1.0f;
  int64_t scalarBegin = chunk.begin;
  if (vectorisable(t, chunk.begin)) {
    const int64_t quads = (chunk.end - chunk.begin) / 4;
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      const int64_t i = chunk.begin + 4 * q;
      float4 p = *reinterpret_cast<const float4*>(t.param + i);
      const float4 g = *reinterpret_cast<const float4*>(t.grad + i);
      float4 m = *reinterpret_cast<const float4*>(t.m + i);
      float4 v = *reinterpret_cast<const float4*>(t.v + i);
      adamwElement(p.x, __fmul_rn(g.x, scale), m.x, v.x, f, decayFactor);
      adamwElement(p.y, __fmul_rn(g.y, scale), m.y, v.y, f, decayFactor);
      adamwElement(p.z, __fmul_rn(g.z, scale), m.z, v.z, f, decayFactor);
      adamwElement(p.w, __fmul_rn(g.w, scale), m.w, v.w, f, decayFactor);
      *reinterpret_cast<float4*>(t.param + i) = p;
      *reinterpret_cast<float4*>(t.m + i) = m;
      *reinterpret_cast<float4*>(t.v + i) = v;
      if (t.paramBf16 != nullptr) {
        uint2 packed;
        *reinterpret_cast<__nv_bfloat162*>(&packed.x) = __floats2bfloat162_rn(p.x, p.y);
        *reinterpret_cast<__nv_bfloat162*>(&packed.y) = __floats2bfloat162_rn(p.z, p.w);
        *reinterpret_cast<uint2*>(t.paramBf16 + i) = packed;
      }
    }
    scalarBegin = chunk.begin + 4 * quads;
  }
  for (int64_t i = scalarBegin + threadIdx.x; i < chunk.end; i += blockDim.x) {
    const float p =
        adamwElement(t.param[i], __fmul_rn(t.grad[i], scale), t.m[i], t.v[i], f, decayFactor);
    if (t.paramBf16 != nullptr) t.paramBf16[i] = __float2bfloat16(p);
  }
}

// Sums `value` over the block (kThreads threads) in a fixed tree; the total is in thread 0.
__device__ double blockSum(double value) {
  __shared__ double sums[kThreads];
  sums[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  return sums[0];
}

// partial[b] = sum of grad^2 over chunk b.
__global__ void multi_tensor_norm_partial_kernel(const MultiTensorEntry* __restrict__ tensors,
                                                 const MultiTensorChunk* __restrict__ chunks,
                                                 double* __restrict__ partial) {
  const MultiTensorChunk chunk = chunks[blockIdx.x];
  const float* grad = tensors[chunk.tensor].grad;
  double sum = 0.0;
  for (int64_t i = chunk.begin + threadIdx.x; i < chunk.end; i += kThreads) {
    const double g = double(grad[i]);
    sum += g * g;
  }
  const double total = blockSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void multi_tensor_zero_kernel(const MultiTensorEntry* __restrict__ tensors,
                                         const MultiTensorChunk* __restrict__ chunks) {
  const MultiTensorChunk chunk = chunks[blockIdx.x];
  float* grad = tensors[chunk.tensor].grad;
  int64_t scalarBegin = chunk.begin;
  if ((reinterpret_cast<uintptr_t>(grad + chunk.begin) & 15) == 0) {
    const int64_t quads = (chunk.end - chunk.begin) / 4;
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      *reinterpret_cast<float4*>(grad + chunk.begin + 4 * q) = zero;
    }
    scalarBegin = chunk.begin + 4 * quads;
  }
  for (int64_t i = scalarBegin + threadIdx.x; i < chunk.end; i += blockDim.x) grad[i] = 0.0f;
}

// Block b sums grad^2 over its grid-stride share of [0, n) and writes partial[b].
__global__ void grad_norm_partial_kernel(const float* __restrict__ grad, int64_t n,
                                         double* __restrict__ partial) {
  double sum = 0.0;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * kThreads) {
    const double g = double(grad[i]);
    sum += g * g;
  }
  const double total = blockSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void grad_norm_finish_kernel(const double* __restrict__ partial, int64_t count,
                                        double* __restrict__ norm) {
  __shared__ double sums[kFinishThreads];
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kFinishThreads) sum += partial[i];
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kFinishThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) sums[threadIdx.x] += sums[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) norm[0] = sqrt(sums[0]);
}

__global__ void grad_clip_scale_kernel(const double* __restrict__ norm, double gradClip,
                                       float* __restrict__ scale) {
  const double value = norm[0];
  scale[0] = (gradClip > 0.0 && value > gradClip) ? float(gradClip / (value + 1e-6)) : 1.0f;
}

__global__ void grad_scale_kernel(float* __restrict__ grad, int64_t n,
                                  const float* __restrict__ scale) {
  const float s = *scale;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    grad[i] *= s;
  }
}

AdamWFactors adamwFactors(const AdamWHyper& hyper) {
  AdamWFactors f;
  f.b1 = float(hyper.beta1);
  f.b2 = float(hyper.beta2);
  f.oneMinusB1 = 1.0f - f.b1;  // as the reference: (T(1) - b1) in fp32
  f.oneMinusB2 = 1.0f - f.b2;
  f.lr = float(hyper.lr);
  f.eps = float(hyper.eps);
  f.decayFactor = float(1.0 - hyper.lr * hyper.weightDecay);
  f.correction1 = float(1.0 - std::pow(hyper.beta1, double(hyper.step)));
  f.correction2 = float(1.0 - std::pow(hyper.beta2, double(hyper.step)));
  return f;
}

}  // namespace

Status adamwUpdateCuda(cudaStream_t stream, float* param, const float* grad, float* m, float* v,
                       bf16* paramBf16, int64_t n, const AdamWHyper& hyper, bool decay,
                       const float* gradScale) {
  if (n <= 0) return Status::ok();
  AdamWFactors f = adamwFactors(hyper);
  if (!decay) f.decayFactor = 1.0f;
  adamw_fwd_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(param, grad, m, v, paramBf16, n,
                                                                  f, gradScale);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status multiTensorAdamWCuda(cudaStream_t stream, const MultiTensorPlan& plan,
                            const AdamWHyper& hyper, const float* gradScale) {
  if (plan.chunkCount() == 0) return Status::ok();
  multi_tensor_adamw_kernel<<<unsigned(plan.chunkCount()), kThreads, 0, stream>>>(
      static_cast<const MultiTensorEntry*>(plan.deviceTensors()),
      static_cast<const MultiTensorChunk*>(plan.deviceChunks()), adamwFactors(hyper), gradScale);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status multiTensorGradNormCuda(cudaStream_t stream, MultiTensorPlan& plan, double* norm) {
  if (plan.chunkCount() > 0) {
    multi_tensor_norm_partial_kernel<<<unsigned(plan.chunkCount()), kThreads, 0, stream>>>(
        static_cast<const MultiTensorEntry*>(plan.deviceTensors()),
        static_cast<const MultiTensorChunk*>(plan.deviceChunks()), plan.devicePartials());
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  return gradNormFinish(stream, plan.devicePartials(), plan.chunkCount(), norm);
}

Status multiTensorZeroGradsCuda(cudaStream_t stream, const MultiTensorPlan& plan) {
  if (plan.chunkCount() == 0) return Status::ok();
  multi_tensor_zero_kernel<<<unsigned(plan.chunkCount()), kThreads, 0, stream>>>(
      static_cast<const MultiTensorEntry*>(plan.deviceTensors()),
      static_cast<const MultiTensorChunk*>(plan.deviceChunks()));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

int64_t gradNormBlocks(int64_t n) {
  if (n <= 0) return 0;
  const int64_t blocks = (n + kNormElementsPerBlock - 1) / kNormElementsPerBlock;
  return blocks < kNormMaxBlocks ? blocks : kNormMaxBlocks;
}

Status gradNormPartials(cudaStream_t stream, const float* grad, int64_t n, double* partial) {
  const int64_t blocks = gradNormBlocks(n);
  if (blocks == 0) return Status::ok();
  grad_norm_partial_kernel<<<unsigned(blocks), kThreads, 0, stream>>>(grad, n, partial);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status gradNormFinish(cudaStream_t stream, const double* partial, int64_t count, double* norm) {
  grad_norm_finish_kernel<<<1, kFinishThreads, 0, stream>>>(partial, count, norm);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status gradClipScaleCuda(cudaStream_t stream, const double* norm, double gradClip, float* scale) {
  grad_clip_scale_kernel<<<1, 1, 0, stream>>>(norm, gradClip, scale);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status scaleGradsCuda(cudaStream_t stream, float* grad, int64_t n, const float* scale) {
  if (n <= 0) return Status::ok();
  grad_scale_kernel<<<gridFor(n, kThreads), kThreads, 0, stream>>>(grad, n, scale);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
