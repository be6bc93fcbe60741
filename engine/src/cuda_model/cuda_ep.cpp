// Expert parallelism on the GPU: count exchange, device all-to-all-v round trips and the local
// expert sort (see cuda_ep.h). The CPU twin is parallel/ep_dispatch.cpp.
#include "cuda_model/cuda_ep.h"

#include <algorithm>
#include <numeric>

#include "cuda/transfer.h"

namespace moewb::engine::cuda {
namespace {

void setPhase(CommTag* tag, const char* phase) {
  if (tag != nullptr) tag->phase = phase;
}

std::vector<int64_t> displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

std::vector<int64_t> timesWidth(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

// Sends `rows` blocks of `in` ([sum send, width]) and receives into `out` ([>= sum recv, width]).
Status exchangeRows(CudaContext& context, Communicator& comm, const DeviceTensor<bf16>& in,
                    const std::vector<int64_t>& sendRows, DeviceTensor<bf16>& out,
                    const std::vector<int64_t>& recvRows, int64_t width) {
  const std::vector<int64_t> sendCounts = timesWidth(sendRows, width);
  const std::vector<int64_t> recvCounts = timesWidth(recvRows, width);
  const std::vector<int64_t> sendDispls = displacements(sendCounts);
  const std::vector<int64_t> recvDispls = displacements(recvCounts);
  return comm.allToAllVDevice(in.data(), sendCounts, sendDispls, in.numel(), out.data(),
                              recvCounts, recvDispls, out.numel(), CommDataType::kBf16,
                              context.stream());
}

// Rows of [max(rows, 1), width] (a zero-row tensor would have no storage to point at).
Result<DeviceTensor<bf16>> rowBuffer(CudaContext& context, int64_t rows, int64_t width,
                                     MemoryCategory category) {
  return context.newTensor<bf16>({std::max<int64_t>(rows, 1), width}, category);
}

}  // namespace

Result<DeviceTensor<bf16>> epExpertsForwardCuda(CudaContext& context, Communicator& comm,
                                                const DeviceTensor<bf16>& xPerm,
                                                const DeviceTensor<int32_t>& offsets,
                                                const DeviceExpertWeights& weights,
                                                const GluParams& activation, EpSavedCuda& saved,
                                                CommTag* tag) {
  const int64_t ep = comm.worldSize(), width = xPerm.dim(1);
  const int64_t numExperts = offsets.numel() - 1, local = numExperts / ep;
  if (local * ep != numExperts || weights.gate.dim(0) != local) {
    return invalidArgument("epExpertsForwardCuda: " + std::to_string(numExperts) +
                           " experts over " + std::to_string(ep) + " EP ranks need " +
                           std::to_string(numExperts / std::max<int64_t>(ep, 1)) +
                           " local experts, the weights hold " +
                           std::to_string(weights.gate.dim(0)));
  }
  MOEWB_ASSIGN_OR_RETURN(Tensor<int32_t> offsetsHost, toHost(context, offsets));  // synchronises
  // Count exchange: [dest rank][local expert] rows this rank sends -> [source][local expert].
  std::vector<int64_t> sendCounts(static_cast<size_t>(numExperts));
  std::vector<int64_t> recvCounts(static_cast<size_t>(numExperts));
  for (int64_t e = 0; e < numExperts; ++e) {
    sendCounts[size_t(e)] = offsetsHost[e + 1] - offsetsHost[e];
  }
  setPhase(tag, "dispatch");
  MOEWB_RETURN_IF_ERROR(comm.allToAll(std::span<const int64_t>(sendCounts),
                                      std::span<int64_t>(recvCounts)));
  saved.sendRows.assign(size_t(ep), 0);
  saved.recvRows.assign(size_t(ep), 0);
  std::vector<int64_t> localOffsets(size_t(local + 1), 0);
  for (int64_t j = 0; j < ep; ++j) {
    for (int64_t e = 0; e < local; ++e) {
      saved.sendRows[size_t(j)] += sendCounts[size_t(j * local + e)];
      saved.recvRows[size_t(j)] += recvCounts[size_t(j * local + e)];
      localOffsets[size_t(e + 1)] += recvCounts[size_t(j * local + e)];
    }
  }
  for (int64_t e = 0; e < local; ++e) localOffsets[size_t(e + 1)] += localOffsets[size_t(e)];
  saved.localRows = localOffsets.back();
  // sortIndex[local row] = received row: received rows are [source][local expert] blocks.
  Tensor<int32_t> sortIndex({std::max<int64_t>(saved.localRows, 1)});
  Tensor<int32_t> localOffsetsHost({local + 1});
  for (int64_t e = 0; e <= local; ++e) localOffsetsHost[e] = int32_t(localOffsets[size_t(e)]);
  {
    std::vector<int64_t> next(localOffsets.begin(), localOffsets.end() - 1);  // [El] write cursor
    int64_t received = 0;
    for (int64_t s = 0; s < ep; ++s) {
      for (int64_t e = 0; e < local; ++e) {
        for (int64_t i = 0; i < recvCounts[size_t(s * local + e)]; ++i) {
          sortIndex[next[size_t(e)]++] = int32_t(received++);
        }
      }
    }
    if (saved.localRows == 0) sortIndex[0] = 0;
  }
  MOEWB_ASSIGN_OR_RETURN(saved.sortIndex,
                         toDevice(context, sortIndex, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(saved.localOffsets,
                         toDevice(context, localOffsetsHost, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> received,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(
      exchangeRows(context, comm, xPerm, saved.sendRows, received, saved.recvRows, width));
  MOEWB_ASSIGN_OR_RETURN(saved.xLocal,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(gatherRowsBf16(context.stream(), received.data(), saved.sortIndex.data(),
                                       saved.xLocal.data(), saved.localRows, width));
  received = DeviceTensor<bf16>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yLocal,
                         expertsForwardCuda(context, saved.xLocal, saved.localOffsets, weights,
                                            saved.experts, activation));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yReceived,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(scatterRowsBf16(context.stream(), yLocal.data(), saved.sortIndex.data(),
                                        yReceived.data(), saved.localRows, width));
  yLocal = DeviceTensor<bf16>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yPerm,
                         context.newTensor<bf16>({xPerm.dim(0), width},
                                                 MemoryCategory::kActivations));
  setPhase(tag, "combine");
  MOEWB_RETURN_IF_ERROR(
      exchangeRows(context, comm, yReceived, saved.recvRows, yPerm, saved.sendRows, width));
  setPhase(tag, "");
  return yPerm;
}

Result<DeviceTensor<bf16>> epExpertsBackwardCuda(CudaContext& context, Communicator& comm,
                                                 const DeviceTensor<bf16>& dYPerm,
                                                 const DeviceExpertWeights& weights,
                                                 const DeviceExpertGrads& grads,
                                                 const GluParams& activation, EpSavedCuda& saved,
                                                 CommTag* tag) {
  const int64_t width = dYPerm.dim(1);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dYReceived,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kWorkspace));
  setPhase(tag, "combine.bwd");
  MOEWB_RETURN_IF_ERROR(
      exchangeRows(context, comm, dYPerm, saved.sendRows, dYReceived, saved.recvRows, width));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dYLocal,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(gatherRowsBf16(context.stream(), dYReceived.data(),
                                       saved.sortIndex.data(), dYLocal.data(), saved.localRows,
                                       width));
  dYReceived = DeviceTensor<bf16>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dXLocal,
                         expertsBackwardCuda(context, dYLocal, saved.xLocal, saved.localOffsets,
                                             weights, saved.experts, grads, activation));
  dYLocal = DeviceTensor<bf16>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dXReceived,
                         rowBuffer(context, saved.localRows, width, MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(scatterRowsBf16(context.stream(), dXLocal.data(), saved.sortIndex.data(),
                                        dXReceived.data(), saved.localRows, width));
  dXLocal = DeviceTensor<bf16>();
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dXPerm,
                         context.newTensor<bf16>({dYPerm.dim(0), width},
                                                 MemoryCategory::kActivations));
  setPhase(tag, "dispatch.bwd");
  MOEWB_RETURN_IF_ERROR(
      exchangeRows(context, comm, dXReceived, saved.recvRows, dXPerm, saved.sendRows, width));
  setPhase(tag, "");
  saved = EpSavedCuda();
  return dXPerm;
}

}  // namespace moewb::engine::cuda
