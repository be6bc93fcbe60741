// The CPU mover of the EP dispatcher and the CPU experts stage over EP (see ep_dispatch.h).
#include "model/parallel/ep_dispatch.h"

#include <algorithm>

#include "model/parallel/collective_error.h"

namespace moewb::engine {
namespace {

std::vector<int64_t> timesWidth(std::span<const int64_t> rows, int64_t width) {
  std::vector<int64_t> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

// Copies row index[r] of `in` to row r of `out` (or row r to row index[r] when `scatter`).
void moveRows(const Tensor<float>& in, const Tensor<int32_t>& index, Tensor<float>& out,
              int64_t rows, bool scatter) {
  const int64_t width = in.dim(1);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = scatter ? r : index[r];
    const int64_t to = scatter ? index[r] : r;
    std::copy_n(in.data() + from * width, width, out.data() + to * width);
  }
}

}  // namespace

Result<CpuEpMover::Index> CpuEpMover::upload(const std::vector<int32_t>& values) {
  Index out({int64_t(values.size())});
  std::copy(values.begin(), values.end(), out.data());
  return out;
}

Result<CpuEpMover::Rows> CpuEpMover::newRows(int64_t rows, int64_t width, EpRowsUse /*use*/) {
  return Rows({rows, width});
}

Status CpuEpMover::exchange(const Rows& from, std::span<const int64_t> fromRows,
                            std::span<const int64_t> fromFirst, Rows& to,
                            std::span<const int64_t> toRows, std::span<const int64_t> toFirst) {
  const int64_t width = from.dim(1);
  return m_comm.allToAllV(std::span<const float>(from.data(), size_t(from.numel())),
                          timesWidth(fromRows, width), timesWidth(fromFirst, width),
                          std::span<float>(to.data(), size_t(to.numel())),
                          timesWidth(toRows, width), timesWidth(toFirst, width));
}

Status CpuEpMover::gather(const Rows& in, const Index& index, Rows& out, int64_t rows) {
  moveRows(in, index, out, rows, false);
  return Status::ok();
}

Status CpuEpMover::scatter(const Rows& in, const Index& index, Rows& out, int64_t rows) {
  moveRows(in, index, out, rows, true);
  return Status::ok();
}

Tensor<float> epExpertsForward(ThreadPool& pool, Communicator& comm, const Tensor<float>& xPerm,
                               const Tensor<int32_t>& offsets, const ExpertWeights<float>& weights,
                               const GluParams& activation, EpSaved& saved, CommTag* tag) {
  const int64_t ep = comm.worldSize(), e = offsets.numel() - 1;
  MOEWB_CHECK(e % ep == 0 && weights.gate.dim(0) == e / ep);
  CpuEpMover mover(comm);
  EpDispatcher<CpuEpMover> dispatcher(mover, saved, tag);
  Result<Tensor<float>> yPerm = dispatcher.forward(
      comm, std::span<const int32_t>(offsets.data(), size_t(offsets.numel())), 1, xPerm,
      [&](EpChunkSaved<CpuEpMover>& chunk, Tensor<float> xLocal) -> Result<Tensor<float>> {
        chunk.xLocal = std::move(xLocal);
        return expertsForward(pool, chunk.xLocal, chunk.localOffsets, weights, chunk.experts,
                              activation);
      });
  throwIfFailed(yPerm.status());
  return std::move(yPerm).value();
}

Tensor<float> epExpertsBackward(ThreadPool& pool, Communicator& comm, const Tensor<float>& dYPerm,
                                const ExpertWeights<float>& weights,
                                const ExpertGrads<float>& grads, const GluParams& activation,
                                EpSaved& saved, CommTag* tag) {
  CpuEpMover mover(comm);
  EpDispatcher<CpuEpMover> dispatcher(mover, saved, tag);
  Result<Tensor<float>> dXPerm = dispatcher.backward(
      dYPerm,
      [&](EpChunkSaved<CpuEpMover>& chunk, Tensor<float> dYLocal) -> Result<Tensor<float>> {
        return expertsBackward(pool, dYLocal, chunk.xLocal, chunk.localOffsets, weights,
                               chunk.experts, grads, activation);
      });
  throwIfFailed(dXPerm.status());
  return std::move(dXPerm).value();
}

}  // namespace moewb::engine
