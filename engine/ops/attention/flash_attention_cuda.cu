// Launchers of the dense causal flash attention kernels (flash_attention_cuda.cuh; design and
// costs there and in attention_cuda.h): argument checks, dispatch on the head dim, CUDA errors
// turned into Status.
#include "ops/attention/flash_attention_cuda.h"

#include <cmath>
#include <limits>
#include <string>

#include "ops/attention/flash_attention_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

Status checkDims(int64_t batch, int64_t seqLen, int64_t heads, int64_t headDim) {
  if (!flashAttentionSupports(headDim)) {
    return invalidArgument("flash attention: head dim " + std::to_string(headDim) +
                           " (accepted: 64, 128)");
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (batch < 0 || seqLen < 0 || heads < 0 || seqLen > kIntMax / 2 || batch * heads > kIntMax ||
      seqLen > int64_t(65535) * flash::kFwdM) {
    return invalidArgument("flash attention: B=" + std::to_string(batch) + " T=" +
                           std::to_string(seqLen) + " H=" + std::to_string(heads) +
                           " beyond the launch grid");
  }
  return Status::ok();
}

}  // namespace

bool flashAttentionSupports(int64_t headDim) { return headDim == 64 || headDim == 128; }

Status flashAttentionForward(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t heads,
                             int64_t headDim, const bf16* q, const bf16* k, const bf16* v,
                             float* lse, bf16* context) {
  MOEWB_RETURN_IF_ERROR(checkDims(batch, seqLen, heads, headDim));
  if (batch == 0 || seqLen == 0 || heads == 0) return Status::ok();
  const flash::FlashFwdParams p{q,       k,          v,
                                context, lse,        int(seqLen),
                                int(heads), float(1.0 / std::sqrt(double(headDim)))};
  const cudaError_t err = headDim == 64 ? flash::launchFlashForward<64>(p, int(batch), stream)
                                        : flash::launchFlashForward<128>(p, int(batch), stream);
  MOEWB_CUDA_RETURN_IF_ERROR(err);
  return Status::ok();
}

Status flashAttentionBackward(cudaStream_t stream, int64_t batch, int64_t seqLen, int64_t heads,
                              int64_t headDim, const bf16* dContext, const bf16* q, const bf16* k,
                              const bf16* v, const bf16* context, const float* lse, float* delta,
                              bf16* dq, bf16* dk, bf16* dv) {
  MOEWB_RETURN_IF_ERROR(checkDims(batch, seqLen, heads, headDim));
  if (batch == 0 || seqLen == 0 || heads == 0) return Status::ok();
  flash::FlashBwdParams p{};
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = context;
  p.dO = dContext;
  p.lse = lse;
  p.delta = delta;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.seqLen = int(seqLen);
  p.heads = int(heads);
  p.tokens = batch * seqLen;
  p.scale = float(1.0 / std::sqrt(double(headDim)));
  const cudaError_t err = headDim == 64 ? flash::launchFlashBackward<64>(p, int(batch), stream)
                                        : flash::launchFlashBackward<128>(p, int(batch), stream);
  MOEWB_CUDA_RETURN_IF_ERROR(err);
  return Status::ok();
}

}  // namespace moewb::engine::cuda
