// Host side of the chunked KDA core on the GPU (kda_cuda.h): checks the dims, allocates the saved
// tensors and the workspaces from the context's allocator (stream-ordered, so they may be released
// while the kernels are still queued) and queues the kernels of kda_chunk_cuda.cu. With
// keepIntermediates the forward's workspace, entry states and Vn become saved activations and the
// backward skips its recompute of them (kda.keep_intermediates: memory for time).
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

Status checkCoreDims(const KdaCoreDims& dims) {
  if (dims.batch < 1 || dims.seqLen < 1 || dims.numHeads < 1 || dims.keyDim < 1 ||
      dims.valueDim < 1 || dims.chunk < 1 || dims.valueHeads() % dims.numHeads != 0 ||
      dims.keyDim > kKdaCudaMaxHeadDim || dims.valueDim > kKdaCudaMaxHeadDim ||
      dims.chunk > kKdaCudaMaxChunk) {
    return invalidArgument("kdaChunk*Cuda: unsupported dims (B=" + std::to_string(dims.batch) +
                           " T=" + std::to_string(dims.seqLen) + " K=" +
                           std::to_string(dims.keyDim) + " V=" + std::to_string(dims.valueDim) +
                           " C=" + std::to_string(dims.chunk) + "); need K, V <= 128, C <= 64");
  }
  return Status::ok();
}

// Owns the tensors behind a KdaWyWorkspace.
struct WyTensors {
  DeviceTensor<float> w, u, qg, kDec, eGC;
  KdaWyWorkspace view() { return {w.data(), u.data(), qg.data(), kDec.data(), eGC.data()}; }
};

// Padded chunk rows of all heads: B*HV*NC*C.
int64_t paddedRows(const KdaCoreDims& dims) {
  return dims.batch * dims.valueHeads() * dims.numChunks() * dims.chunk;
}

Status newWyTensors(CudaContext& context, const KdaCoreDims& dims, MemoryCategory category,
                    WyTensors& out) {
  const int64_t rows = paddedRows(dims);
  MOEWB_ASSIGN_OR_RETURN(out.w, context.newTensor<float>({rows, dims.keyDim}, category));
  MOEWB_ASSIGN_OR_RETURN(out.u, context.newTensor<float>({rows, dims.valueDim}, category));
  MOEWB_ASSIGN_OR_RETURN(out.qg, context.newTensor<float>({rows, dims.keyDim}, category));
  MOEWB_ASSIGN_OR_RETURN(out.kDec, context.newTensor<float>({rows, dims.keyDim}, category));
  MOEWB_ASSIGN_OR_RETURN(out.eGC,
                         context.newTensor<float>({rows / dims.chunk, dims.keyDim}, category));
  return Status::ok();
}

// The workspace view of the kept intermediates. The kernels given it only read it (the intra
// kernel, which writes a workspace, never gets this one), so dropping const is safe.
KdaWyWorkspace keptView(const KdaChunkSavedCuda& saved) {
  return {const_cast<float*>(saved.w.data()), const_cast<float*>(saved.u.data()),
          const_cast<float*>(saved.qg.data()), const_cast<float*>(saved.kDec.data()),
          const_cast<float*>(saved.eGC.data())};
}

Status checkKept(const KdaCoreDims& dims, const KdaChunkSavedCuda& saved) {
  const int64_t rows = paddedRows(dims), slots = rows / dims.chunk;
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  if (saved.w.numel() != rows * kd || saved.u.numel() != rows * vd ||
      saved.qg.numel() != rows * kd || saved.kDec.numel() != rows * kd ||
      saved.eGC.numel() != slots * kd || saved.states.numel() != slots * kd * vd ||
      saved.vn.numel() != rows * vd) {
    return invalidArgument("kdaChunkBackwardCuda: kept intermediates do not match the dims");
  }
  return Status::ok();
}

// What the backward reads from the forward's intra / recurrent pass: the workspace view, the
// entry states and Vn, and P0..P2 ([R, K] scratch of the products).
struct BackwardInputs {
  WyTensors work;                         // recomputed workspace, or only w, qg, kDec as scratch
  DeviceTensor<float> statesWork, vnWork;  // recomputed entry states and Vn (empty when kept)
  KdaWyWorkspace view;
  const float* states = nullptr;
  const float* vn = nullptr;
  float *p0 = nullptr, *p1 = nullptr, *p2 = nullptr;
};

// Kept: reads the saved tensors and allocates P0..P2. Otherwise recomputes W, U, q ⊙ e^G,
// k ⊙ e^{G_C - G}, e^{G_C} (intra kernel with the saved M), the entry states and Vn (forward
// recurrence), and P0..P2 reuse W, q ⊙ e^G and k ⊙ e^{G_C - G} (all [R, K], not needed after
// the state backward; same stream).
Status prepareBackwardInputs(CudaContext& context, const KdaCoreDims& dims, const bf16* q,
                             const bf16* k, const bf16* v, const float* g, const float* beta,
                             const float* initialState, const KdaChunkSavedCuda& saved,
                             BackwardInputs& out) {
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  const int64_t rows = paddedRows(dims), slots = rows / dims.chunk;
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  if (saved.keptIntermediates()) {
    MOEWB_RETURN_IF_ERROR(checkKept(dims, saved));
    MOEWB_ASSIGN_OR_RETURN(out.work.w, context.newTensor<float>({rows, kd}, ws));
    MOEWB_ASSIGN_OR_RETURN(out.work.qg, context.newTensor<float>({rows, kd}, ws));
    MOEWB_ASSIGN_OR_RETURN(out.work.kDec, context.newTensor<float>({rows, kd}, ws));
    out.view = keptView(saved);
    out.states = saved.states.data();
    out.vn = saved.vn.data();
  } else {
    MOEWB_RETURN_IF_ERROR(newWyTensors(context, dims, ws, out.work));
    out.view = out.work.view();
    // computeM = false only reads savedM, so dropping const is safe.
    MOEWB_RETURN_IF_ERROR(launchKdaIntraForward(context.stream(), dims, q, k, v, g, beta, false,
                                                nullptr, const_cast<float*>(saved.m.data()),
                                                out.view));
    MOEWB_ASSIGN_OR_RETURN(out.statesWork, context.newTensor<float>({slots, kd, vd}, ws));
    MOEWB_ASSIGN_OR_RETURN(out.vnWork, context.newTensor<float>({rows, vd}, ws));
    MOEWB_RETURN_IF_ERROR(launchKdaRecurrentForward(context.stream(), dims, out.view,
                                                    saved.aqk.data(), initialState,
                                                    out.statesWork.data(), out.vnWork.data(),
                                                    nullptr, nullptr));
    out.states = out.statesWork.data();
    out.vn = out.vnWork.data();
  }
  out.p0 = out.work.w.data();
  out.p1 = out.work.qg.data();
  out.p2 = out.work.kDec.data();
  return Status::ok();
}

}  // namespace

int64_t kdaKeptIntermediateBytes(const KdaCoreDims& dims) {
  const int64_t rows = paddedRows(dims), slots = rows / dims.chunk;
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  const int64_t floats = rows * (3 * kd + 2 * vd) + slots * kd * (1 + vd);
  return floats * int64_t(sizeof(float));
}

Status kdaChunkForwardCuda(CudaContext& context, const KdaCoreDims& dims, const bf16* q,
                           const bf16* k, const bf16* v, const float* g, const float* beta,
                           const float* initialState, bf16* o, float* finalState,
                           KdaChunkSavedCuda& saved, bool keepIntermediates) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  saved = KdaChunkSavedCuda();
  const std::vector<int64_t> savedShape = {dims.batch * dims.valueHeads(),
                                           dims.numChunks() * dims.chunk, dims.chunk};
  MOEWB_ASSIGN_OR_RETURN(saved.aqk,
                         context.newTensor<float>(savedShape, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.m,
                         context.newTensor<float>(savedShape, MemoryCategory::kActivations));
  if (!keepIntermediates) {
    WyTensors work;
    MOEWB_RETURN_IF_ERROR(newWyTensors(context, dims, MemoryCategory::kWorkspace, work));
    MOEWB_RETURN_IF_ERROR(launchKdaIntraForward(context.stream(), dims, q, k, v, g, beta, true,
                                                saved.aqk.data(), saved.m.data(), work.view()));
    return launchKdaRecurrentForward(context.stream(), dims, work.view(), saved.aqk.data(),
                                     initialState, nullptr, nullptr, o, finalState);
  }
  // Kept: the workspace is allocated as activations and moved into `saved`, and the recurrence
  // also writes the entry states and Vn (the same kernel, two more outputs: o is unchanged).
  const MemoryCategory act = MemoryCategory::kActivations;
  WyTensors kept;
  MOEWB_RETURN_IF_ERROR(newWyTensors(context, dims, act, kept));
  const int64_t rows = paddedRows(dims), slots = rows / dims.chunk;
  MOEWB_ASSIGN_OR_RETURN(saved.states,
                         context.newTensor<float>({slots, dims.keyDim, dims.valueDim}, act));
  MOEWB_ASSIGN_OR_RETURN(saved.vn, context.newTensor<float>({rows, dims.valueDim}, act));
  MOEWB_RETURN_IF_ERROR(launchKdaIntraForward(context.stream(), dims, q, k, v, g, beta, true,
                                              saved.aqk.data(), saved.m.data(), kept.view()));
  MOEWB_RETURN_IF_ERROR(launchKdaRecurrentForward(context.stream(), dims, kept.view(),
                                                  saved.aqk.data(), initialState,
                                                  saved.states.data(), saved.vn.data(), o,
                                                  finalState));
  saved.w = std::move(kept.w);
  saved.u = std::move(kept.u);
  saved.qg = std::move(kept.qg);
  saved.kDec = std::move(kept.kDec);
  saved.eGC = std::move(kept.eGC);
  return Status::ok();
}

Status kdaChunkBackwardCuda(CudaContext& context, const KdaCoreDims& dims, const bf16* dO,
                            const float* dFinalState, const bf16* q, const bf16* k, const bf16* v,
                            const float* g, const float* beta, const float* initialState,
                            const KdaChunkSavedCuda& saved, const KdaCoreGradsCuda& grads) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  const int64_t rows = paddedRows(dims), slots = rows / dims.chunk;
  if (saved.aqk.numel() != rows * dims.chunk || saved.m.numel() != rows * dims.chunk) {
    return invalidArgument("kdaChunkBackwardCuda: saved Aqk / M do not match the dims");
  }
  const cudaStream_t stream = context.stream();
  BackwardInputs fwd;
  MOEWB_RETURN_IF_ERROR(
      prepareBackwardInputs(context, dims, q, k, v, g, beta, initialState, saved, fwd));
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  MOEWB_ASSIGN_OR_RETURN(auto dStates, context.newTensor<float>({slots, kd, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dvn, context.newTensor<float>({rows, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dG, context.newTensor<float>({rows, kd}, ws));
  const int64_t qkNumel = dims.tokens() * dims.numHeads * kd;
  MOEWB_ASSIGN_OR_RETURN(auto dqAcc, context.newTensor<float>({qkNumel}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dkAcc, context.newTensor<float>({qkNumel}, ws));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, dqAcc.data(), 0.f, qkNumel));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, dkAcc.data(), 0.f, qkNumel));
  MOEWB_RETURN_IF_ERROR(launchKdaStateBackward(stream, dims, fwd.view, saved.aqk.data(), dO,
                                               dFinalState, dStates.data(), dvn.data(),
                                               grads.dInitialState));
  MOEWB_ASSIGN_OR_RETURN(auto p3, context.newTensor<float>({rows, dims.chunk}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto p4, context.newTensor<float>({rows, dims.chunk}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto sds, context.newTensor<float>({slots, kd}, ws));
  const KdaChunkBackwardArgs in{q,          k,           v,            dO,
                                g,          beta,        saved.m.data(), fwd.states,
                                dStates.data(), fwd.vn,  dvn.data(),   dqAcc.data(),
                                dkAcc.data(), dG.data(), grads.dv,     grads.dg,
                                grads.dbeta, fwd.p0,     fwd.p1,       fwd.p2,
                                p3.data(),  p4.data(),   sds.data()};
  MOEWB_RETURN_IF_ERROR(launchKdaChunkBackward(stream, dims, in));
  MOEWB_RETURN_IF_ERROR(castFloatToBf16(stream, dqAcc.data(), grads.dq, qkNumel));
  return castFloatToBf16(stream, dkAcc.data(), grads.dk, qkNumel);
}

}  // namespace moewb::engine::cuda
