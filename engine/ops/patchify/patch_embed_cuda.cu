// Patch embedding kernels and launchers (see patch_embed_cuda.h).
#include <cuda_runtime.h>

#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gemm.h"
#include "moewb/base/check.h"
#include "ops/patchify/patch_embed_cuda.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kColTile = 32;  // dBias columns per block (one warp wide)
constexpr int kRowLanes = 8;  // row lanes per dBias block

// h[s T + i, j] = bf16(h + proj[s P + i, j] + bias[j]) over the B P d image elements.
__global__ void patch_embed_fwd_kernel(const float* __restrict__ proj,
                                       const bf16* __restrict__ bias, int64_t seqLen,
                                       int64_t patches, int64_t d, int64_t total,
                                       bf16* __restrict__ h) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / d, j = idx - row * d;
    const int64_t s = row / patches, i = row - s * patches;
    bf16* dst = h + (s * seqLen + i) * d + j;
    *dst = __float2bfloat16(__bfloat162float(*dst) + proj[idx] + __bfloat162float(bias[j]));
  }
}

// dProj[s P + i, j] = dh[s T + i, j] (the image rows, gathered).
__global__ void patch_embed_bwd_kernel(const bf16* __restrict__ dh, int64_t seqLen, int64_t patches,
                                       int64_t d, int64_t total, bf16* __restrict__ dProj) {
  for (int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = idx / d, j = idx - row * d;
    const int64_t s = row / patches, i = row - s * patches;
    dProj[idx] = dh[(s * seqLen + i) * d + j];
  }
}

// dBias[j] += sum over rows (lane order, then lanes in order) of dProj[row, j]. Block
// (kColTile, kRowLanes), grid ceil(d / kColTile).
__global__ void patch_embed_bias_kernel(const bf16* __restrict__ dProj, int64_t rows, int64_t d,
                                        float* __restrict__ dBias) {
  __shared__ float sums[kRowLanes][kColTile + 1];
  const int64_t col = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float acc = 0.0f;
  if (col < d) {
    for (int64_t row = threadIdx.y; row < rows; row += kRowLanes) {
      acc += __bfloat162float(dProj[row * d + col]);
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < d) {
    float total = 0.0f;
    for (int lane = 0; lane < kRowLanes; ++lane) total += sums[lane][threadIdx.x];
    dBias[col] += total;
  }
}

Status checkSizes(int64_t batch, int64_t seqLen, int64_t imagePatches, int64_t patchDim,
                  int64_t d) {
  if (batch < 0 || seqLen < 0 || imagePatches < 0 || patchDim < 1 || d < 0 ||
      imagePatches > seqLen) {
    return invalidArgument("patch embed: batch " + std::to_string(batch) + ", seq_len " +
                           std::to_string(seqLen) + ", image patches " +
                           std::to_string(imagePatches) + ", patch dim " +
                           std::to_string(patchDim) + ", d " + std::to_string(d) +
                           " (need sizes >= 0, patch dim >= 1 and image patches <= seq_len)");
  }
  return Status::ok();
}

}  // namespace

Status patchEmbedForwardCuda(CudaContext& context, const bf16* patches, const bf16* weight,
                             const bf16* bias, int64_t batch, int64_t seqLen, int64_t imagePatches,
                             int64_t patchDim, int64_t d, bf16* h) {
  MOEWB_RETURN_IF_ERROR(checkSizes(batch, seqLen, imagePatches, patchDim, d));
  const int64_t rows = batch * imagePatches, total = rows * d;
  if (total == 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> proj,
                         context.newTensor<float>({rows, d}, MemoryCategory::kWorkspace));
  // proj[rows, d] = patches[rows, patchDim] W[d, patchDim]^T.
  MOEWB_RETURN_IF_ERROR(gemm(context, rows, d, patchDim, 1.0f,
                             GemmOperand{patches, DType::kBf16, patchDim, false, 0},
                             GemmOperand{weight, DType::kBf16, patchDim, true, 0}, 0.0f,
                             GemmOutput{proj.data(), DType::kF32, d, 0}));
  patch_embed_fwd_kernel<<<gridFor(total), 256, 0, context.stream()>>>(proj.data(), bias, seqLen,
                                                                       imagePatches, d, total, h);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status patchEmbedBackwardCuda(CudaContext& context, const bf16* dh, const bf16* patches,
                              int64_t batch, int64_t seqLen, int64_t imagePatches, int64_t patchDim,
                              int64_t d, float* dWeight, float* dBias) {
  MOEWB_RETURN_IF_ERROR(checkSizes(batch, seqLen, imagePatches, patchDim, d));
  const int64_t rows = batch * imagePatches, total = rows * d;
  if (total == 0) return Status::ok();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dProj,
                         context.newTensor<bf16>({rows, d}, MemoryCategory::kWorkspace));
  patch_embed_bwd_kernel<<<gridFor(total), 256, 0, context.stream()>>>(dh, seqLen, imagePatches, d,
                                                                       total, dProj.data());
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  // dW[d, patchDim] += dProj[rows, d]^T patches[rows, patchDim].
  MOEWB_RETURN_IF_ERROR(gemm(context, d, patchDim, rows, 1.0f,
                             GemmOperand{dProj.data(), DType::kBf16, d, true, 0},
                             GemmOperand{patches, DType::kBf16, patchDim, false, 0}, 1.0f,
                             GemmOutput{dWeight, DType::kF32, patchDim, 0}));
  const unsigned colBlocks = unsigned((d + kColTile - 1) / kColTile);
  patch_embed_bias_kernel<<<colBlocks, dim3(kColTile, kRowLanes), 0, context.stream()>>>(
      dProj.data(), rows, d, dBias);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
