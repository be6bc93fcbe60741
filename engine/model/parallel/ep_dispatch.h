// The CPU side of the expert-parallel dispatcher (model/moe/ep_dispatcher.h, ENGINE-MATH §5.9):
// CpuEpMover moves fp32 rows (Tensor<float>) with the host communicator's all-to-all-v and sorts
// them with row copies; epExpertsForward / epExpertsBackward are the experts stage of the CPU
// MoE layer over EP: the dispatcher's round trip with the local grouped experts (ops/experts) in
// the middle, always in one chunk (nothing to overlap on the host).
//
// Forward:  count exchange -> all-to-all-v of the rows -> sort [source rank][local expert] ->
//           [local expert][source rank] -> grouped experts -> inverse sort -> all-to-all-v back.
// Backward: the mirror: the row gradients go to the expert owners the same way, the grouped
//           experts' backward accumulates the local experts' weight gradients, and the input-row
//           gradients come back.
// A rank may send or receive no rows for any expert or peer (empty groups are fine).
// Collectives run on `comm` (the EP group, group rank = expert shard); failures throw
// CollectiveError (the model's stages return no Status). `tag` (may be null) gets the phase of
// each all-to-all for the trace (see ep_dispatcher.h). Costs: 2 all-to-all-v of R x Dx floats
// each way plus one small count exchange; the sorts copy each row once. Not thread-safe per
// EpSaved; deterministic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model_parallel.h"
#include "model/moe/ep_dispatcher.h"
#include "ops/experts/experts.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// The dispatcher's data mover on the host (see EpMover in ep_dispatcher.h): every call is
// synchronous, the stream orderings are no-ops. Not thread-safe; one per round trip.
class CpuEpMover {
 public:
  using Rows = Tensor<float>;             // [rows, width]
  using Index = Tensor<int32_t>;          // [n]
  using ExpertsSaved = engine::ExpertsSaved<float>;

  explicit CpuEpMover(Communicator& comm) : m_comm(comm) {}

  // The plan's vector as a tensor [values.size()].
  Result<Index> upload(const std::vector<int32_t>& values);
  // Zeros [rows, width].
  Result<Rows> newRows(int64_t rows, int64_t width, EpRowsUse use);
  static int64_t rowCount(const Rows& rows) { return rows.dim(0); }
  static int64_t rowWidth(const Rows& rows) { return rows.dim(1); }
  // All-to-all-v of rows on the host communicator (collective). Errors: the communicator's.
  Status exchange(const Rows& from, std::span<const int64_t> fromRows,
                  std::span<const int64_t> fromFirst, Rows& to, std::span<const int64_t> toRows,
                  std::span<const int64_t> toFirst);
  // out[r] = in[index[r]] / out[index[r]] = in[r] for r < rows.
  Status gather(const Rows& in, const Index& index, Rows& out, int64_t rows);
  Status scatter(const Rows& in, const Index& index, Rows& out, int64_t rows);
  Status startRoundTrip(size_t /*chunks*/) { return Status::ok(); }
  Status exchangeAfterCompute() { return Status::ok(); }
  Status computeAfterExchange() { return Status::ok(); }

 private:
  Communicator& m_comm;
};

// What the forward keeps for the backward: the plan and each chunk's rows and activations.
using EpSaved = EpDispatchSaved<CpuEpMover>;

// yPerm[R, Dx] of this rank's rows xPerm[R, Dx] (expert-major by global expert; `offsets` [E + 1]
// of the global dispatch plan). `weights` hold the El = E / EP local experts of group rank
// comm.rank(): [El, F, Dx] / [El, Dx, F].
Tensor<float> epExpertsForward(ThreadPool& pool, Communicator& comm, const Tensor<float>& xPerm,
                               const Tensor<int32_t>& offsets, const ExpertWeights<float>& weights,
                               const GluParams& activation, EpSaved& saved, CommTag* tag);

// dXPerm[R, Dx] from dYPerm[R, Dx]; adds the local experts' weight gradients into `grads`.
// Must follow epExpertsForward with the same `saved`; releases its activations.
Tensor<float> epExpertsBackward(ThreadPool& pool, Communicator& comm, const Tensor<float>& dYPerm,
                                const ExpertWeights<float>& weights,
                                const ExpertGrads<float>& grads, const GluParams& activation,
                                EpSaved& saved, CommTag* tag);

}  // namespace moewb::engine
