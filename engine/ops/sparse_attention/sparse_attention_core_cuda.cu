// Sparse softmax attention with sink over a selection on the GPU (see sparse_attention_cuda.h,
// sparse_attention_core_ref.cpp), forward and backward, and the indexer target p*.
// Forward (sparse_attention_core_fwd.cuh): tensor cores for dh in {64, 128} (one CTA per query
// token and 16 heads, gathered 64-key blocks), otherwise one warp per (query token, head).
// Backward (sparse_attention_core_bwd.cuh): phase 1 per query token (delta, dz parked in a
// workspace, dq; on tensor cores likewise for dh in {64, 128}); phase 2 dk, dv without atomics,
// for dh in {64, 128} on tensor cores per (64-key block, query span) with fp32 partials added
// in span order (kKeyBwdPath), otherwise one warp per (key token, kv head) over the transposed
// selection; phase 3 one CTA per head sums the sink terms in row order. Everything is
// deterministic.
#include <cmath>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda_kernels.h"
#include "ops/sparse_attention/sparse_attention_core_bwd.cuh"
#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"
#include "ops/sparse_attention/sparse_attention_cuda_util.cuh"

namespace moewb::engine::cuda {
namespace {

using namespace sparse_detail;

// Phase 2 (dk, dv) of the backward: kMmaSplit (query spans, sparse_attention_key_bwd_split.cuh);
// KeyBwdPath::kMma selects round 1's one-CTA-per-key-block kernel.
constexpr KeyBwdPath kKeyBwdPath = KeyBwdPath::kMmaSplit;

constexpr int kWarpsPerBlock = kCoreWarpsPerBlock;
constexpr int kWarpThreads = kCoreWarpThreads;

CoreShape coreShape(const SparseAttentionDims& dims, int64_t width) {
  return makeCoreShape(dims.seqLen, width, int(dims.numHeads), int(dims.kvHeads),
                       int(dims.headDim));
}

// p*[r, slot] = sum_h probs[r, h, slot] / (sum over valid slots), 0 on padding. One warp per row.
__global__ void indexer_target_fwd_kernel(const float* probs, const int32_t* selected, int64_t n,
                                          int64_t heads, int64_t width, float* target) {
  const int64_t r = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  float partial = 0.0f;
  for (int64_t slot = lane; slot < width; slot += 32) {
    if (selected[r * width + slot] < 0) continue;
    float value = 0.0f;
    for (int64_t h = 0; h < heads; ++h) value += probs[(r * heads + h) * width + slot];
    target[r * width + slot] = value;
    partial += value;
  }
  const float inv = 1.0f / warpSum(partial);
  for (int64_t slot = lane; slot < width; slot += 32) {
    const int64_t i = r * width + slot;
    target[i] = selected[i] >= 0 ? target[i] * inv : 0.0f;
  }
}

__global__ void sparse_gate_fwd_kernel(const bf16* gatePre, const bf16* context, int64_t n,
                                       bf16* gate, bf16* gated) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(gatePre[i]);
    const float g = a >= 0.0f ? 1.0f / (1.0f + expf(-a)) : expf(a) / (1.0f + expf(a));
    gate[i] = __float2bfloat16(g);
    gated[i] = __float2bfloat16(__bfloat162float(context[i]) * g);
  }
}

__global__ void sparse_gate_bwd_kernel(const bf16* dGated, const bf16* context, const bf16* gate,
                                       int64_t n, bf16* dGatePre, bf16* dContext) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float dg = __bfloat162float(dGated[i]), g = __bfloat162float(gate[i]);
    dGatePre[i] = __float2bfloat16(dg * __bfloat162float(context[i]) * g * (1.0f - g));
    dContext[i] = __float2bfloat16(dg * g);
  }
}

__global__ void sparse_indexer_loss_kernel(const float* klSum, int64_t tokens, float coef,
                                           float* kl, float* loss) {
  const float mean = tokens > 0 ? float(double(klSum[0]) / double(tokens)) : 0.0f;
  kl[0] = mean;
  loss[0] = coef * mean;
}

unsigned warpBlocks(int64_t items) {
  return unsigned((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

Status checkCoreDims(const SparseAttentionDims& dims) {
  if (dims.numHeads < 1 || dims.kvHeads < 1 || dims.numHeads % dims.kvHeads != 0) {
    return invalidArgument("sparse attention needs kv_heads (" + std::to_string(dims.kvHeads) +
                           ") to divide heads (" + std::to_string(dims.numHeads) + ")");
  }
  if (dims.headDim < 1 || dims.headDim > kSparseCudaMaxHeadDim) {
    return invalidArgument("sparse attention head_dim " + std::to_string(dims.headDim) +
                           " is outside the CUDA kernels' range [1, " +
                           std::to_string(kSparseCudaMaxHeadDim) + "]");
  }
  return Status::ok();
}

}  // namespace

Status sparseAttentionCoreForwardCuda(cudaStream_t stream, const SparseAttentionDims& dims,
                                      const bf16* q, const bf16* k, const bf16* v, const bf16* sink,
                                      const int32_t* selected, int64_t width, float* probs,
                                      float* sinkProbs, bf16* context) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  const int64_t n = dims.tokens();
  if (n == 0) return Status::ok();
  if (width >= (int64_t(1) << 31)) {
    return invalidArgument("sparse attention selection width " + std::to_string(width) +
                           " is beyond the CUDA kernels' int32 slots");
  }
  const CoreShape shape = coreShape(dims, width);
  if (sparseFwdMmaSupported(shape.hd)) {
    MOEWB_CUDA_RETURN_IF_ERROR(launchSparseFwdMma(stream, q, k, v, sink, selected,
                                                  int(dims.batch), shape, probs, sinkProbs,
                                                  context));
  } else {
    MOEWB_CUDA_RETURN_IF_ERROR(launchSparseFwdWarp(stream, q, k, v, sink, selected, n, shape,
                                                   probs, sinkProbs, context));
  }
  return Status::ok();
}

int64_t sparseKeyBwdPartialFloats(const SparseAttentionDims& dims) {
  const bool tc = dims.headDim == 64 || dims.headDim == 128;
  if (kKeyBwdPath != KeyBwdPath::kMmaSplit || !tc || dims.tokens() == 0) return 0;
  return keyBwdPartialFloats(dims.tokens(), dims.seqLen, dims.kvHeads * dims.headDim);
}

Status launchSparseCoreBackward(cudaStream_t stream, const SparseAttentionDims& dims,
                                const bf16* dContext, const SparseCoreSavedView& saved,
                                const int32_t* keyStart, const int32_t* entries, float* dz,
                                float* sinkTerms, float* keyPartials, bf16* dq, bf16* dk,
                                bf16* dv, float* dSink) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  if (dims.tokens() == 0) return Status::ok();
  if (saved.width >= (int64_t(1) << 31)) {
    return invalidArgument("sparse attention selection width " + std::to_string(saved.width) +
                           " is beyond the CUDA kernels' int32 slots");
  }
  const CoreBwdArgs args{dContext,       saved.q,     saved.k,         saved.v,   saved.context,
                         saved.selected, saved.probs, saved.sinkProbs, keyStart,  entries,
                         dz,             sinkTerms,   dq,              dk,        dv,
                         dSink,          keyPartials};
  MOEWB_CUDA_RETURN_IF_ERROR(launchSparseBwd(stream, int(dims.batch),
                                             coreShape(dims, saved.width), args, true,
                                             kKeyBwdPath));
  return Status::ok();
}

Status indexerTargetFromProbsCuda(cudaStream_t stream, const float* probs, const int32_t* selected,
                                  int64_t n, int64_t heads, int64_t width, float* target) {
  if (n == 0 || width == 0) return Status::ok();
  indexer_target_fwd_kernel<<<warpBlocks(n), kWarpThreads, 0, stream>>>(probs, selected, n, heads,
                                                                        width, target);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseGateForwardCuda(cudaStream_t stream, const bf16* gatePre, const bf16* context,
                             int64_t n, bf16* gate, bf16* gated) {
  if (n == 0) return Status::ok();
  sparse_gate_fwd_kernel<<<gridFor(n), 256, 0, stream>>>(gatePre, context, n, gate, gated);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseGateBackwardCuda(cudaStream_t stream, const bf16* dGated, const bf16* context,
                              const bf16* gate, int64_t n, bf16* dGatePre, bf16* dContext) {
  if (n == 0) return Status::ok();
  sparse_gate_bwd_kernel<<<gridFor(n), 256, 0, stream>>>(dGated, context, gate, n, dGatePre,
                                                         dContext);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status sparseIndexerLossCuda(cudaStream_t stream, const float* klSum, int64_t tokens, double coef,
                             float* kl, float* loss) {
  sparse_indexer_loss_kernel<<<1, 1, 0, stream>>>(klSum, tokens, float(coef), kl, loss);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
