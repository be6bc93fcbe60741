// Launchers of the dense warm-up stage's flash kernels (dense_stage_cuda.cuh; contracts in
// dense_stage_cuda.h): argument checks, dispatch on the head dim, workspace carving, CUDA errors
// turned into Status.
#include "ops/sparse_attention/dense_stage_cuda.h"

#include <cmath>
#include <string>

#include "ops/sparse_attention/dense_stage_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

constexpr int64_t kMaxSeqLen = int64_t(65535) * dense_stage::kFwdM;

Status checkDims(const SparseAttentionDims& dims) {
  const bool ok = (dims.headDim == 64 || dims.headDim == 128) && dims.numHeads >= 1 &&
                  dims.numHeads <= kDenseStageMaxHeads && dims.kvHeads >= 1 &&
                  dims.numHeads % dims.kvHeads == 0 && dims.batch >= 0 && dims.seqLen >= 0 &&
                  dims.seqLen <= kMaxSeqLen && dims.batch <= 65535;
  if (!ok) {
    return invalidArgument("dense stage flash kernels: B=" + std::to_string(dims.batch) +
                           " T=" + std::to_string(dims.seqLen) + " H=" +
                           std::to_string(dims.numHeads) + " Hkv=" + std::to_string(dims.kvHeads) +
                           " dh=" + std::to_string(dims.headDim) +
                           " (accepted: dh 64 or 128, 1 <= H <= 128, Hkv | H, B <= 65535, T <= " +
                           std::to_string(kMaxSeqLen) + ")");
  }
  return Status::ok();
}

dense_stage::DenseStageParams baseParams(const SparseAttentionDims& dims) {
  dense_stage::DenseStageParams p{};
  p.seqLen = int(dims.seqLen);
  p.heads = int(dims.numHeads);
  p.kvHeads = int(dims.kvHeads);
  p.splits = dense_stage::denseStageSplits(int(dims.batch), int(dims.seqLen), p.heads, p.kvHeads);
  p.tokens = dims.tokens();
  p.scale = float(1.0 / std::sqrt(double(dims.headDim)));
  return p;
}

bool empty(const SparseAttentionDims& dims) { return dims.batch == 0 || dims.seqLen == 0; }

}  // namespace

bool denseStageFlashApplies(const SparseAttentionDims& dims) {
  return kDenseStageFlash && dims.stage == SparseStage::kDenseWarmup && checkDims(dims).isOk();
}

Status denseStageForwardCuda(cudaStream_t stream, const SparseAttentionDims& dims, const bf16* q,
                             const bf16* k, const bf16* v, const bf16* sink, float* lse,
                             float* sinkProbs, bf16* context) {
  MOEWB_RETURN_IF_ERROR(checkDims(dims));
  if (empty(dims)) return Status::ok();
  dense_stage::DenseStageParams p = baseParams(dims);
  p.q = q;
  p.k = k;
  p.v = v;
  p.sink = sink;
  p.o = context;
  p.lse = lse;
  p.sinkProbs = sinkProbs;
  const int batch = int(dims.batch);
  MOEWB_CUDA_RETURN_IF_ERROR(dims.headDim == 64
                                 ? dense_stage::launchDenseStageForward<64>(p, batch, stream)
                                 : dense_stage::launchDenseStageForward<128>(p, batch, stream));
  return Status::ok();
}

Status denseStageTargetCuda(cudaStream_t stream, const SparseAttentionDims& dims, const bf16* q,
                            const bf16* k, const float* lse, float* target) {
  MOEWB_RETURN_IF_ERROR(checkDims(dims));
  if (empty(dims)) return Status::ok();
  dense_stage::DenseStageParams p = baseParams(dims);
  p.q = q;
  p.k = k;
  p.lse = const_cast<float*>(lse);  // read only by the target kernel
  p.target = target;
  const int batch = int(dims.batch);
  MOEWB_CUDA_RETURN_IF_ERROR(dims.headDim == 64
                                 ? dense_stage::launchDenseStageTarget<64>(p, batch, stream)
                                 : dense_stage::launchDenseStageTarget<128>(p, batch, stream));
  return Status::ok();
}

int64_t denseStageBackwardWorkspaceFloats(const SparseAttentionDims& dims) {
  if (!checkDims(dims).isOk()) return 0;
  const int64_t n = dims.tokens();
  const int64_t splits = baseParams(dims).splits;
  // delta [B, H, T], sinkTerms [N, H], dkPart and dvPart [splits, N, Hkv*dh].
  return 2 * n * dims.numHeads + 2 * splits * n * dims.kvWidth();
}

Status denseStageBackwardCuda(cudaStream_t stream, const SparseAttentionDims& dims,
                              const bf16* dContext, const bf16* q, const bf16* k, const bf16* v,
                              const bf16* context, const float* lse, const float* sinkProbs,
                              float* workspace, bf16* dq, bf16* dk, bf16* dv, float* dSink) {
  MOEWB_RETURN_IF_ERROR(checkDims(dims));
  if (empty(dims)) return Status::ok();
  dense_stage::DenseStageParams p = baseParams(dims);
  const int64_t n = dims.tokens(), partFloats = int64_t(p.splits) * n * dims.kvWidth();
  p.q = q;
  p.k = k;
  p.v = v;
  p.o = const_cast<bf16*>(context);  // the backward kernels only read o, lse, sinkProbs
  p.lse = const_cast<float*>(lse);
  p.sinkProbs = const_cast<float*>(sinkProbs);
  p.dO = dContext;
  p.delta = workspace;
  p.sinkTerms = workspace + n * dims.numHeads;
  p.dkPart = p.sinkTerms + n * dims.numHeads;
  p.dvPart = p.dkPart + partFloats;
  p.dq = dq;
  p.dk = dk;
  p.dv = dv;
  p.dSink = dSink;
  const int batch = int(dims.batch);
  MOEWB_CUDA_RETURN_IF_ERROR(dims.headDim == 64
                                 ? dense_stage::launchDenseStageBackward<64>(p, batch, stream)
                                 : dense_stage::launchDenseStageBackward<128>(p, batch, stream));
  return Status::ok();
}

}  // namespace moewb::engine::cuda
