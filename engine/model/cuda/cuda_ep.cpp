// The CUDA mover of the EP dispatcher and the CUDA experts stage over EP (see cuda_ep.h); the
// gather / scatter kernels are in cuda_ep_kernels.cu.
#include "model/cuda/cuda_ep.h"

#include <algorithm>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/transfer.h"

namespace moewb::engine::cuda {
namespace {

std::vector<int64_t> timesWidth(std::span<const int64_t> rows, int64_t width) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

}  // namespace

CudaEpMover::CudaEpMover(CudaContext& context, Communicator& comm)
    : m_context(context), m_comm(comm), m_exchangeStream(context.stream()) {}

CudaEpMover::~CudaEpMover() {
  for (cudaEvent_t event : m_events) cudaEventDestroy(event);
}

Result<CudaEpMover::Index> CudaEpMover::upload(const std::vector<int32_t>& values) {
  Tensor<int32_t> host({std::max<int64_t>(int64_t(values.size()), 1)});
  std::copy(values.begin(), values.end(), host.data());
  return toDevice(m_context, host, MemoryCategory::kActivations);
}

Result<CudaEpMover::Rows> CudaEpMover::newRows(int64_t rows, int64_t width, EpRowsUse use) {
  return m_context.newTensor<bf16>(
      {std::max<int64_t>(rows, 1), width},
      use == EpRowsUse::kSaved ? MemoryCategory::kActivations : MemoryCategory::kWorkspace);
}

Status CudaEpMover::exchange(const Rows& from, std::span<const int64_t> fromRows,
                             std::span<const int64_t> fromFirst, Rows& to,
                             std::span<const int64_t> toRows, std::span<const int64_t> toFirst) {
  const int64_t width = from.dim(1);
  return m_comm.allToAllVDevice(from.data(), timesWidth(fromRows, width),
                                timesWidth(fromFirst, width), from.numel(), to.data(),
                                timesWidth(toRows, width), timesWidth(toFirst, width), to.numel(),
                                CommDataType::kBf16, m_exchangeStream);
}

Status CudaEpMover::gather(const Rows& in, const Index& index, Rows& out, int64_t rows) {
  return gatherRowsBf16(m_context.stream(), in.data(), index.data(), out.data(), rows, in.dim(1));
}

Status CudaEpMover::scatter(const Rows& in, const Index& index, Rows& out, int64_t rows) {
  return scatterRowsBf16(m_context.stream(), in.data(), index.data(), out.data(), rows,
                         in.dim(1));
}

Status CudaEpMover::startRoundTrip(size_t chunks) {
  m_exchangeStream = m_context.stream();
  if (chunks > 1) {
    MOEWB_ASSIGN_OR_RETURN(m_exchangeStream, m_context.sideStream());
  }
  return exchangeAfterCompute();  // the rows to send (and the output's memory) are ready
}

Status CudaEpMover::exchangeAfterCompute() { return order(m_context.stream(), m_exchangeStream); }

Status CudaEpMover::computeAfterExchange() { return order(m_exchangeStream, m_context.stream()); }

Status CudaEpMover::order(cudaStream_t from, cudaStream_t to) {
  if (from == to) return Status::ok();
  cudaEvent_t event = nullptr;
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  m_events.push_back(event);
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, from));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(to, event, 0));
  return Status::ok();
}

Result<DeviceTensor<bf16>> epExpertsForwardCuda(CudaContext& context, Communicator& comm,
                                                const DeviceTensor<bf16>& xPerm,
                                                const DeviceTensor<int32_t>& offsets,
                                                const DeviceExpertWeights& weights,
                                                const GluParams& activation, EpSavedCuda& saved,
                                                CommTag* tag, int32_t chunks) {
  const int64_t ep = comm.worldSize(), numExperts = offsets.numel() - 1;
  const int64_t local = numExperts / std::max<int64_t>(ep, 1);
  if (local * ep != numExperts || weights.gate.dim(0) != local) {
    return invalidArgument("epExpertsForwardCuda: " + std::to_string(numExperts) +
                           " experts over " + std::to_string(ep) + " EP ranks need " +
                           std::to_string(local) + " local experts, the weights hold " +
                           std::to_string(weights.gate.dim(0)));
  }
  // The layer's one host synchronisation: the plan needs the offsets on the host.
  MOEWB_ASSIGN_OR_RETURN(Tensor<int32_t> offsetsHost, toHost(context, offsets));
  CudaEpMover mover(context, comm);
  EpDispatcher<CudaEpMover> dispatcher(mover, saved, tag);
  return dispatcher.forward(
      comm, std::span<const int32_t>(offsetsHost.data(), size_t(offsetsHost.numel())), chunks,
      xPerm, [&](EpChunkSaved<CudaEpMover>& chunk, DeviceTensor<bf16> xLocal) {
        chunk.xLocal = std::move(xLocal);
        return expertsForwardCuda(context, chunk.xLocal, chunk.localOffsets, weights,
                                  chunk.experts, activation);
      });
}

Result<DeviceTensor<bf16>> epExpertsBackwardCuda(CudaContext& context, Communicator& comm,
                                                 const DeviceTensor<bf16>& dYPerm,
                                                 const DeviceExpertWeights& weights,
                                                 const DeviceExpertGrads& grads,
                                                 const GluParams& activation, EpSavedCuda& saved,
                                                 CommTag* tag) {
  CudaEpMover mover(context, comm);
  EpDispatcher<CudaEpMover> dispatcher(mover, saved, tag);
  return dispatcher.backward(
      dYPerm, [&](EpChunkSaved<CudaEpMover>& chunk, DeviceTensor<bf16> dYLocal) {
        return expertsBackwardCuda(context, dYLocal, chunk.xLocal, chunk.localOffsets, weights,
                                   chunk.experts, grads, activation);
      });
}

}  // namespace moewb::engine::cuda
