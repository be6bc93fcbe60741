// The gated sparse attention layer on the GPU (see sparse_attention_cuda.h),
// sparse_attention_ref.cpp step for step: projections through linear_cuda.h (bf16, fp32
// accumulation), indexer, selection (causal in the dense warm-up stage, top-k of the indexer scores
// in the sparse stage), core, gate, output projection, and the indexer objective with its loss kept
// on the device. The dense stage's core runs on the flash kernels of dense_stage_cuda.h when
// denseStageFlashApplies(dims) (saved.probs then holds lse [B, H, T] and p* is recomputed from it);
// otherwise, and always in the sparse stage, through the gathered core over the selection.
#include <algorithm>
#include <string>
#include <vector>

#include "ops/linear/linear_cuda.h"
#include "ops/sparse_attention/dense_stage_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace moewb::engine::cuda {
namespace {

Status checkLayerDims(const SparseAttentionDims& dims) {
  if (dims.batch < 0 || dims.seqLen < 0 || dims.dModel < 1) {
    return invalidArgument("sparse attention dims: batch, seq_len >= 0 and d_model >= 1 needed");
  }
  if (dims.stage == SparseStage::kSparse && dims.topK < 1) {
    return invalidArgument("sparse.top_k must be >= 1 in the sparse stage, got " +
                           std::to_string(dims.topK));
  }
  return Status::ok();
}

// p*, the indexer's softmax over the selection, the KL and the weighted loss into `saved`.
Status indexerObjectiveForward(CudaContext& context, const SparseAttentionDims& dims,
                               SparseAttentionSavedCuda& saved) {
  const int64_t n = dims.tokens(), width = dims.selectionWidth();
  const auto act = MemoryCategory::kActivations, ws = MemoryCategory::kWorkspace;
  const IndexerDims indexerDims = dims.indexerDims();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> logits, context.newTensor<float>({n, width}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> klSum, context.newTensor<float>({1}, ws));
  MOEWB_ASSIGN_OR_RETURN(saved.indexerTarget, context.newTensor<float>({n, width}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.indexerProbs, context.newTensor<float>({n, width}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.indexerKl, context.newTensor<float>({1}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.indexerLoss, context.newTensor<float>({1}, act));
  MOEWB_RETURN_IF_ERROR(indexerLogitsCuda(context.stream(), indexerDims, saved.indexer.q.data(),
                                          saved.indexer.k.data(), saved.indexer.w.data(),
                                          saved.selected.data(), width, logits.data()));
  if (denseStageFlashApplies(dims)) {  // saved.probs holds lse [B, H, T]
    MOEWB_RETURN_IF_ERROR(denseStageTargetCuda(context.stream(), dims, saved.q.data(),
                                               saved.k.data(), saved.probs.data(),
                                               saved.indexerTarget.data()));
  } else {
    MOEWB_RETURN_IF_ERROR(indexerTargetFromProbsCuda(context.stream(), saved.probs.data(),
                                                     saved.selected.data(), n, dims.numHeads,
                                                     width, saved.indexerTarget.data()));
  }
  MOEWB_RETURN_IF_ERROR(indexerKlForwardCuda(context, logits.data(), saved.indexerTarget.data(),
                                             saved.selected.data(), n, width,
                                             saved.indexerProbs.data(), klSum.data()));
  return sparseIndexerLossCuda(context.stream(), klSum.data(), n, dims.indexerLossCoef,
                               saved.indexerKl.data(), saved.indexerLoss.data());
}

// The selection of dims.stage into saved.selected.
Status selectKeys(CudaContext& context, const SparseAttentionDims& dims,
                  SparseAttentionSavedCuda& saved) {
  const int64_t n = dims.tokens(), width = dims.selectionWidth();
  MOEWB_ASSIGN_OR_RETURN(saved.selected,
                         context.newTensor<int32_t>({n, width}, MemoryCategory::kActivations));
  if (dims.stage == SparseStage::kDenseWarmup) {
    return causalSelectionCuda(context.stream(), dims.batch, dims.seqLen, saved.selected.data());
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> scores,
                         context.newTensor<float>({n, dims.seqLen}, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(indexerScoresCuda(context.stream(), dims.indexerDims(),
                                          saved.indexer.q.data(), saved.indexer.k.data(),
                                          saved.indexer.w.data(), scores.data()));
  return indexerTopKCuda(context.stream(), dims.batch, dims.seqLen, scores.data(), dims.topK,
                         saved.selected.data());
}

}  // namespace

Status sparseAttentionForwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                  const bf16* x, const SparseAttentionWeightsCuda& weights,
                                  SparseAttentionSavedCuda& saved, bf16* y) {
  MOEWB_RETURN_IF_ERROR(checkLayerDims(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  const int64_t width = dims.selectionWidth();
  const auto act = MemoryCategory::kActivations;
  const bool flashPath = denseStageFlashApplies(dims);
  MOEWB_ASSIGN_OR_RETURN(saved.q, context.newTensor<bf16>({n, qw}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.k, context.newTensor<bf16>({n, kvw}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.v, context.newTensor<bf16>({n, kvw}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.gate, context.newTensor<bf16>({n, qw}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.context, context.newTensor<bf16>({n, qw}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.gated, context.newTensor<bf16>({n, qw}, act));
  // probs [N, H, W], or lse [B, H, T] on the dense stage's flash path.
  const std::vector<int64_t> probsShape =
      flashPath ? std::vector<int64_t>{dims.batch, dims.numHeads, dims.seqLen}
                : std::vector<int64_t>{n, dims.numHeads, width};
  MOEWB_ASSIGN_OR_RETURN(saved.probs, context.newTensor<float>(probsShape, act));
  MOEWB_ASSIGN_OR_RETURN(saved.sinkProbs, context.newTensor<float>({n, dims.numHeads}, act));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wq, saved.q.data(), n, d, qw));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wk, saved.k.data(), n, d, kvw));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wv, saved.v.data(), n, d, kvw));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, x, weights.wgate, saved.gate.data(), n, d, qw));
  MOEWB_RETURN_IF_ERROR(
      indexerForwardCuda(context, dims.indexerDims(), x, weights.indexer(), saved.indexer));
  MOEWB_RETURN_IF_ERROR(selectKeys(context, dims, saved));
  if (flashPath) {
    MOEWB_RETURN_IF_ERROR(denseStageForwardCuda(context.stream(), dims, saved.q.data(),
                                                saved.k.data(), saved.v.data(), weights.sink,
                                                saved.probs.data(), saved.sinkProbs.data(),
                                                saved.context.data()));
  } else {
    MOEWB_RETURN_IF_ERROR(sparseAttentionCoreForwardCuda(
        context.stream(), dims, saved.q.data(), saved.k.data(), saved.v.data(), weights.sink,
        saved.selected.data(), width, saved.probs.data(), saved.sinkProbs.data(),
        saved.context.data()));
  }
  MOEWB_RETURN_IF_ERROR(sparseGateForwardCuda(context.stream(), saved.gate.data(),
                                              saved.context.data(), n * qw, saved.gate.data(),
                                              saved.gated.data()));
  MOEWB_RETURN_IF_ERROR(linearForwardCuda(context, saved.gated.data(), weights.wo, y, n, qw, d));
  return indexerObjectiveForward(context, dims, saved);
}

Status sparseAttentionBackwardCuda(CudaContext& context, const SparseAttentionDims& dims,
                                   const bf16* dy, const bf16* x,
                                   const SparseAttentionWeightsCuda& weights,
                                   const SparseAttentionSavedCuda& saved,
                                   const SparseAttentionGradsCuda& grads, bf16* dx,
                                   bool accumulateDx) {
  MOEWB_RETURN_IF_ERROR(checkLayerDims(dims));
  const int64_t n = dims.tokens(), d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  const int64_t width = saved.selected.rank() == 2 ? saved.selected.dim(1) : 0;
  const auto ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dGated, context.newTensor<bf16>({n, qw}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dGatePre, context.newTensor<bf16>({n, qw}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dContext, context.newTensor<bf16>({n, qw}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dq, context.newTensor<bf16>({n, qw}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dk, context.newTensor<bf16>({n, kvw}, ws));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dv, context.newTensor<bf16>({n, kvw}, ws));
  MOEWB_RETURN_IF_ERROR(linearBackwardDataCuda(context, dy, weights.wo, dGated.data(), n, qw, d));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardWeightCuda(context, dy, saved.gated.data(), grads.wo, n, qw, d));
  MOEWB_RETURN_IF_ERROR(sparseGateBackwardCuda(context.stream(), dGated.data(),
                                               saved.context.data(), saved.gate.data(), n * qw,
                                               dGatePre.data(), dContext.data()));
  // The transposed selection: read by the gathered core's dk/dv and by the indexer backward.
  const bool flashPath = denseStageFlashApplies(dims);
  const bool indexerGrads = dims.indexerLossCoef != 0 && n > 0;
  SelectionTransposeCuda byKey;
  if (!flashPath || indexerGrads) {
    MOEWB_RETURN_IF_ERROR(
        transposeSelectionCuda(context, saved.selected.data(), n, width, dims.seqLen, byKey));
  }
  if (flashPath) {
    if (saved.probs.numel() != dims.batch * dims.numHeads * dims.seqLen) {
      return invalidArgument("sparse attention backward: saved state is not the dense stage's");
    }
    MOEWB_ASSIGN_OR_RETURN(
        DeviceTensor<float> workspace,
        context.newTensor<float>({denseStageBackwardWorkspaceFloats(dims)}, ws));
    MOEWB_RETURN_IF_ERROR(denseStageBackwardCuda(
        context.stream(), dims, dContext.data(), saved.q.data(), saved.k.data(), saved.v.data(),
        saved.context.data(), saved.probs.data(), saved.sinkProbs.data(), workspace.data(),
        dq.data(), dk.data(), dv.data(), grads.sink));
  } else {
    const SparseCoreSavedView core{saved.q.data(),       saved.k.data(),        saved.v.data(),
                                   saved.context.data(), saved.selected.data(), width,
                                   saved.probs.data(),   saved.sinkProbs.data()};
    MOEWB_RETURN_IF_ERROR(sparseAttentionCoreBackwardCuda(context, dims, dContext.data(), core,
                                                          byKey, dq.data(), dk.data(), dv.data(),
                                                          grads.sink));
  }
  MOEWB_RETURN_IF_ERROR(
      linearBackwardDataCuda(context, dq.data(), weights.wq, dx, n, d, qw, accumulateDx));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardDataCuda(context, dk.data(), weights.wk, dx, n, d, kvw, true));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardDataCuda(context, dv.data(), weights.wv, dx, n, d, kvw, true));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardDataCuda(context, dGatePre.data(), weights.wgate, dx, n, d, qw, true));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dq.data(), x, grads.wq, n, d, qw));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dk.data(), x, grads.wk, n, d, kvw));
  MOEWB_RETURN_IF_ERROR(linearBackwardWeightCuda(context, dv.data(), x, grads.wv, n, d, kvw));
  MOEWB_RETURN_IF_ERROR(
      linearBackwardWeightCuda(context, dGatePre.data(), x, grads.wgate, n, d, qw));
  if (indexerGrads) {
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> dLogits, context.newTensor<float>({n, width}, ws));
    MOEWB_RETURN_IF_ERROR(indexerKlBackwardCuda(
        context.stream(), saved.indexerProbs.data(), saved.indexerTarget.data(),
        saved.selected.data(), n, width, dims.indexerLossCoef / double(n), dLogits.data()));
    MOEWB_RETURN_IF_ERROR(indexerBackwardCuda(context, dims.indexerDims(), x, saved.indexer,
                                              saved.selected.data(), width, byKey, dLogits.data(),
                                              weights.indexer(), grads.indexer()));
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
