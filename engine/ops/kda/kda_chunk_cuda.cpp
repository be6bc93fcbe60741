// Host side of the chunked KDA core on the GPU (kda_cuda.h): checks the dims, allocates the saved
// tensors and the workspaces from the context's allocator (stream-ordered, so they may be released
// while the kernels are still queued) and queues the kernels of kda_chunk_cuda.cu.
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

Status newWyTensors(CudaContext& context, const KdaCoreDims& dims, WyTensors& out) {
  const int64_t rows = paddedRows(dims);
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  MOEWB_ASSIGN_OR_RETURN(out.w, context.newTensor<float>({rows, dims.keyDim}, ws));
  MOEWB_ASSIGN_OR_RETURN(out.u, context.newTensor<float>({rows, dims.valueDim}, ws));
  MOEWB_ASSIGN_OR_RETURN(out.qg, context.newTensor<float>({rows, dims.keyDim}, ws));
  MOEWB_ASSIGN_OR_RETURN(out.kDec, context.newTensor<float>({rows, dims.keyDim}, ws));
  MOEWB_ASSIGN_OR_RETURN(out.eGC, context.newTensor<float>({rows / dims.chunk, dims.keyDim}, ws));
  return Status::ok();
}

}  // namespace

Status kdaChunkForwardCuda(CudaContext& context, const KdaCoreDims& dims, const bf16* q,
                           const bf16* k, const bf16* v, const float* g, const float* beta,
                           const float* initialState, bf16* o, float* finalState,
                           KdaChunkSavedCuda& saved) {
  MOEWB_RETURN_IF_ERROR(checkCoreDims(dims));
  const std::vector<int64_t> savedShape = {dims.batch * dims.valueHeads(),
                                           dims.numChunks() * dims.chunk, dims.chunk};
  MOEWB_ASSIGN_OR_RETURN(saved.aqk,
                         context.newTensor<float>(savedShape, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.m,
                         context.newTensor<float>(savedShape, MemoryCategory::kActivations));
  WyTensors work;
  MOEWB_RETURN_IF_ERROR(newWyTensors(context, dims, work));
  MOEWB_RETURN_IF_ERROR(launchKdaIntraForward(context.stream(), dims, q, k, v, g, beta, true,
                                              saved.aqk.data(), saved.m.data(), work.view()));
  return launchKdaRecurrentForward(context.stream(), dims, work.view(), saved.aqk.data(),
                                   initialState, nullptr, nullptr, o, finalState);
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
  WyTensors work;
  MOEWB_RETURN_IF_ERROR(newWyTensors(context, dims, work));
  // computeM = false only reads savedM, so dropping const is safe.
  MOEWB_RETURN_IF_ERROR(launchKdaIntraForward(stream, dims, q, k, v, g, beta, false, nullptr,
                                              const_cast<float*>(saved.m.data()), work.view()));
  const MemoryCategory ws = MemoryCategory::kWorkspace;
  const int64_t kd = dims.keyDim, vd = dims.valueDim;
  MOEWB_ASSIGN_OR_RETURN(auto states, context.newTensor<float>({slots, kd, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dStates, context.newTensor<float>({slots, kd, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto vn, context.newTensor<float>({rows, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dvn, context.newTensor<float>({rows, vd}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dG, context.newTensor<float>({rows, kd}, ws));
  const int64_t qkNumel = dims.tokens() * dims.numHeads * kd;
  MOEWB_ASSIGN_OR_RETURN(auto dqAcc, context.newTensor<float>({qkNumel}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto dkAcc, context.newTensor<float>({qkNumel}, ws));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, dqAcc.data(), 0.f, qkNumel));
  MOEWB_RETURN_IF_ERROR(fillFloat(stream, dkAcc.data(), 0.f, qkNumel));
  MOEWB_RETURN_IF_ERROR(launchKdaRecurrentForward(stream, dims, work.view(), saved.aqk.data(),
                                                  initialState, states.data(), vn.data(), nullptr,
                                                  nullptr));
  MOEWB_RETURN_IF_ERROR(launchKdaStateBackward(stream, dims, work.view(), saved.aqk.data(), dO,
                                               dFinalState, dStates.data(), dvn.data(),
                                               grads.dInitialState));
  // The products of the backward reuse W, q ⊙ e^G and k ⊙ e^{G_C - G} (all [R, K], not needed
  // after the state backward; same stream) for P0..P2.
  MOEWB_ASSIGN_OR_RETURN(auto p3, context.newTensor<float>({rows, dims.chunk}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto p4, context.newTensor<float>({rows, dims.chunk}, ws));
  MOEWB_ASSIGN_OR_RETURN(auto sds, context.newTensor<float>({slots, kd}, ws));
  const KdaChunkBackwardArgs in{q,           k,           v,          dO,        g,
                                beta,        saved.m.data(), states.data(), dStates.data(),
                                vn.data(),   dvn.data(),  dqAcc.data(), dkAcc.data(), dG.data(),
                                grads.dv,    grads.dg,    grads.dbeta,  work.w.data(),
                                work.qg.data(), work.kDec.data(), p3.data(), p4.data(),
                                sds.data()};
  MOEWB_RETURN_IF_ERROR(launchKdaChunkBackward(stream, dims, in));
  MOEWB_RETURN_IF_ERROR(castFloatToBf16(stream, dqAcc.data(), grads.dq, qkNumel));
  return castFloatToBf16(stream, dkAcc.data(), grads.dk, qkNumel);
}

}  // namespace moewb::engine::cuda
