// Expert parallelism on the GPU: count exchange, per-chunk device all-to-all-v round trips and
// the local expert sort (see cuda_ep.h). The CPU twin is parallel/ep_dispatch.cpp.
//
// Streams: with one chunk everything runs on the context's stream. With C > 1 chunks the
// all-to-alls run on the side stream K and the sorts and experts on the main stream S:
//   S: [xPerm ready] ----------> wait d0: experts 0 -> c0 | wait d1: experts 1 -> c1 | ...
//   K: wait -> dispatch 0 -> d0, dispatch 1 -> d1, ... -> wait c0: combine 0, wait c1: combine 1
// and S waits for K's last combine before the result is used. Buffers K touches stay alive until
// then (the allocator is ordered on S only).
#include "model/cuda/cuda_ep.h"

#include <algorithm>
#include <numeric>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/transfer.h"

namespace moewb::engine::cuda {
namespace {

void setPhase(CommTag* tag, const char* phase) {
  if (tag != nullptr) tag->phase = phase;
}

std::vector<int64_t> timesWidth(const std::vector<int64_t>& rows, int64_t width) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

// Displacements of blocks packed one after another.
std::vector<int64_t> packed(const std::vector<int64_t>& counts) {
  std::vector<int64_t> displs(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

// Rows of [max(rows, 1), width] (a zero-row tensor would have no storage to point at).
Result<DeviceTensor<bf16>> rowBuffer(CudaContext& context, int64_t rows, int64_t width,
                                     MemoryCategory category) {
  return context.newTensor<bf16>({std::max<int64_t>(rows, 1), width}, category);
}

// The chunk's rows between this rank's permuted buffer (blocks at sendFirstRow, one per rank)
// and the packed received buffer, one direction or the other.
Status exchangeChunk(Communicator& comm, const EpChunkCuda& chunk, const DeviceTensor<bf16>& from,
                     DeviceTensor<bf16>& to, int64_t width, bool toExperts, cudaStream_t stream) {
  const std::vector<int64_t> outer = timesWidth(chunk.sendRows, width);
  const std::vector<int64_t> outerDispls = timesWidth(chunk.sendFirstRow, width);
  const std::vector<int64_t> inner = timesWidth(chunk.recvRows, width);
  const std::vector<int64_t> innerDispls = packed(inner);
  if (toExperts) {
    return comm.allToAllVDevice(from.data(), outer, outerDispls, from.numel(), to.data(), inner,
                                innerDispls, to.numel(), CommDataType::kBf16, stream);
  }
  return comm.allToAllVDevice(from.data(), inner, innerDispls, from.numel(), to.data(), outer,
                              outerDispls, to.numel(), CommDataType::kBf16, stream);
}

// Events ordering the two streams; destroyed with the set (CUDA releases them once reached).
class EventSet {
 public:
  ~EventSet() {
    for (cudaEvent_t e : m_events) cudaEventDestroy(e);
  }
  // Records a new event on `from` and makes `to` wait for it (no-op when the streams are equal).
  Status order(cudaStream_t from, cudaStream_t to) {
    if (from == to) return Status::ok();
    cudaEvent_t event = nullptr;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    m_events.push_back(event);
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(event, from));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(to, event, 0));
    return Status::ok();
  }

 private:
  std::vector<cudaEvent_t> m_events;
};

// Plans chunk [first, end) of the El local experts from the global plan's offsets [E + 1] and the
// exchanged counts [EP * El] (source-major): sizes, the local sort and the local offsets.
Status planChunk(CudaContext& context, const Tensor<int32_t>& offsets,
                 const std::vector<int64_t>& recvCounts, int64_t ep, int64_t local, int64_t first,
                 int64_t end, EpChunkCuda& chunk) {
  chunk.sendRows.assign(size_t(ep), 0);
  chunk.sendFirstRow.assign(size_t(ep), 0);
  chunk.recvRows.assign(size_t(ep), 0);
  std::vector<int64_t> localOffsets(size_t(local + 1), 0);
  for (int64_t j = 0; j < ep; ++j) {
    chunk.sendFirstRow[size_t(j)] = offsets[j * local + first];
    chunk.sendRows[size_t(j)] = offsets[j * local + end] - offsets[j * local + first];
    for (int64_t e = first; e < end; ++e) {
      chunk.recvRows[size_t(j)] += recvCounts[size_t(j * local + e)];
      localOffsets[size_t(e + 1)] += recvCounts[size_t(j * local + e)];
    }
  }
  for (int64_t e = 0; e < local; ++e) localOffsets[size_t(e + 1)] += localOffsets[size_t(e)];
  chunk.localRows = localOffsets.back();
  // sortIndex[local row] = received row: received rows are [source][local expert] blocks.
  Tensor<int32_t> sortIndex({std::max<int64_t>(chunk.localRows, 1)});
  Tensor<int32_t> offsetsHost({local + 1});
  for (int64_t e = 0; e <= local; ++e) offsetsHost[e] = int32_t(localOffsets[size_t(e)]);
  std::vector<int64_t> next(localOffsets.begin(), localOffsets.end() - 1);  // [El] write cursor
  int64_t received = 0;
  for (int64_t s = 0; s < ep; ++s) {
    for (int64_t e = first; e < end; ++e) {
      for (int64_t i = 0; i < recvCounts[size_t(s * local + e)]; ++i) {
        sortIndex[next[size_t(e)]++] = int32_t(received++);
      }
    }
  }
  if (chunk.localRows == 0) sortIndex[0] = 0;
  MOEWB_ASSIGN_OR_RETURN(chunk.sortIndex,
                         toDevice(context, sortIndex, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(chunk.localOffsets,
                         toDevice(context, offsetsHost, MemoryCategory::kActivations));
  return Status::ok();
}

}  // namespace

Result<DeviceTensor<bf16>> epExpertsForwardCuda(CudaContext& context, Communicator& comm,
                                                const DeviceTensor<bf16>& xPerm,
                                                const DeviceTensor<int32_t>& offsets,
                                                const DeviceExpertWeights& weights,
                                                const GluParams& activation, EpSavedCuda& saved,
                                                CommTag* tag, int32_t chunks) {
  const int64_t ep = comm.worldSize(), width = xPerm.dim(1);
  const int64_t numExperts = offsets.numel() - 1, local = numExperts / ep;
  if (local * ep != numExperts || weights.gate.dim(0) != local) {
    return invalidArgument("epExpertsForwardCuda: " + std::to_string(numExperts) +
                           " experts over " + std::to_string(ep) + " EP ranks need " +
                           std::to_string(numExperts / std::max<int64_t>(ep, 1)) +
                           " local experts, the weights hold " +
                           std::to_string(weights.gate.dim(0)));
  }
  if (chunks < 1 || chunks > local) {
    return invalidArgument("epExpertsForwardCuda: " + std::to_string(chunks) +
                           " all-to-all chunks; accepted: 1.." + std::to_string(local) +
                           " (the local experts)");
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
  saved.chunks.clear();
  saved.chunks.resize(static_cast<size_t>(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    MOEWB_RETURN_IF_ERROR(planChunk(context, offsetsHost, recvCounts, ep, local,
                                    c * local / chunks, (c + 1) * local / chunks,
                                    saved.chunks[size_t(c)]));
  }
  const cudaStream_t main = context.stream();
  cudaStream_t side = main;
  if (chunks > 1) {
    MOEWB_ASSIGN_OR_RETURN(side, context.sideStream());
  }
  EventSet events;
  std::vector<DeviceTensor<bf16>> received(static_cast<size_t>(chunks));
  std::vector<DeviceTensor<bf16>> returned(static_cast<size_t>(chunks));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yPerm,
                         context.newTensor<bf16>({xPerm.dim(0), width},
                                                 MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(events.order(main, side));  // xPerm (and yPerm's memory) ready
  for (size_t c = 0; c < size_t(chunks); ++c) {
    EpChunkCuda& chunk = saved.chunks[c];
    MOEWB_ASSIGN_OR_RETURN(received[c], rowBuffer(context, chunk.localRows, width,
                                                  MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_RETURN(returned[c], rowBuffer(context, chunk.localRows, width,
                                                  MemoryCategory::kWorkspace));
    MOEWB_RETURN_IF_ERROR(exchangeChunk(comm, chunk, xPerm, received[c], width, true, side));
  }
  for (size_t c = 0; c < size_t(chunks); ++c) {
    EpChunkCuda& chunk = saved.chunks[c];
    MOEWB_RETURN_IF_ERROR(events.order(side, main));  // chunk c (and those before) arrived
    MOEWB_ASSIGN_OR_RETURN(chunk.xLocal, rowBuffer(context, chunk.localRows, width,
                                                   MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(gatherRowsBf16(main, received[c].data(), chunk.sortIndex.data(),
                                         chunk.xLocal.data(), chunk.localRows, width));
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yLocal,
                           expertsForwardCuda(context, chunk.xLocal, chunk.localOffsets, weights,
                                              chunk.experts, activation));
    MOEWB_RETURN_IF_ERROR(scatterRowsBf16(main, yLocal.data(), chunk.sortIndex.data(),
                                          returned[c].data(), chunk.localRows, width));
    MOEWB_RETURN_IF_ERROR(events.order(main, side));  // chunk c computed
    setPhase(tag, "combine");
    MOEWB_RETURN_IF_ERROR(exchangeChunk(comm, chunk, returned[c], yPerm, width, false, side));
  }
  MOEWB_RETURN_IF_ERROR(events.order(side, main));  // every chunk back; buffers free after this
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
  const size_t chunks = saved.chunks.size();
  const cudaStream_t main = context.stream();
  cudaStream_t side = main;
  if (chunks > 1) {
    MOEWB_ASSIGN_OR_RETURN(side, context.sideStream());
  }
  EventSet events;
  std::vector<DeviceTensor<bf16>> received(chunks);
  std::vector<DeviceTensor<bf16>> returned(chunks);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dXPerm,
                         context.newTensor<bf16>({dYPerm.dim(0), width},
                                                 MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(events.order(main, side));  // dYPerm (and dXPerm's memory) ready
  setPhase(tag, "combine.bwd");
  for (size_t c = 0; c < chunks; ++c) {
    EpChunkCuda& chunk = saved.chunks[c];
    MOEWB_ASSIGN_OR_RETURN(received[c], rowBuffer(context, chunk.localRows, width,
                                                  MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_RETURN(returned[c], rowBuffer(context, chunk.localRows, width,
                                                  MemoryCategory::kWorkspace));
    MOEWB_RETURN_IF_ERROR(exchangeChunk(comm, chunk, dYPerm, received[c], width, true, side));
  }
  for (size_t c = 0; c < chunks; ++c) {
    EpChunkCuda& chunk = saved.chunks[c];
    MOEWB_RETURN_IF_ERROR(events.order(side, main));  // chunk c's row gradients arrived
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dYLocal, rowBuffer(context, chunk.localRows, width,
                                                                 MemoryCategory::kWorkspace));
    MOEWB_RETURN_IF_ERROR(gatherRowsBf16(main, received[c].data(), chunk.sortIndex.data(),
                                         dYLocal.data(), chunk.localRows, width));
    MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dXLocal,
                           expertsBackwardCuda(context, dYLocal, chunk.xLocal, chunk.localOffsets,
                                               weights, chunk.experts, grads, activation));
    MOEWB_RETURN_IF_ERROR(scatterRowsBf16(main, dXLocal.data(), chunk.sortIndex.data(),
                                          returned[c].data(), chunk.localRows, width));
    MOEWB_RETURN_IF_ERROR(events.order(main, side));  // chunk c's input gradients ready
    setPhase(tag, "dispatch.bwd");
    MOEWB_RETURN_IF_ERROR(exchangeChunk(comm, chunk, returned[c], dXPerm, width, false, side));
  }
  MOEWB_RETURN_IF_ERROR(events.order(side, main));
  setPhase(tag, "");
  saved = EpSavedCuda();
  return dXPerm;
}

}  // namespace moewb::engine::cuda
