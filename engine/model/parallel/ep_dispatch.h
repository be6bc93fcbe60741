// Expert-parallel experts stage (ENGINE-MATH §5.9): the routed rows of this rank, already permuted
// expert-major by global expert id (so grouped by destination rank, then by local expert), travel
// to the ranks that own their experts and come back computed.
//
// Forward:  count exchange (all-to-all of [EP, E/EP] row counts) -> all-to-all-v of the rows ->
//           chunk sort [source rank][local expert] -> [local expert][source rank] -> grouped
//           experts -> inverse chunk sort -> all-to-all-v back (splits swapped).
// Backward: the mirror: the row gradients go to the expert owners the same way, the grouped
//           experts' backward accumulates the local experts' weight gradients, and the input-row
//           gradients come back.
// A rank may send or receive no rows for any expert or peer (empty groups are fine).
// Collectives run on `comm` (the EP group, group rank = expert shard); failures throw
// CollectiveError. `tag` (may be null) gets the phase of each all-to-all for the trace:
// "dispatch" / "combine" forward, "combine.bwd" (gradients to the experts) / "dispatch.bwd" back.
// Costs: 2 all-to-all-v of R x Dx floats each way plus one small count exchange; the chunk sorts
// copy each row once. Not thread-safe per EpSaved; deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model_parallel.h"
#include "ops/experts/experts.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// What the forward keeps for the backward.
struct EpSaved {
  std::vector<int64_t> recvCounts;  // [EP * El] rows from source s for local expert e, s-major
  std::vector<int64_t> sendRows;    // [EP] rows sent to each EP rank
  std::vector<int64_t> recvRows;    // [EP] rows received from each EP rank
  Tensor<int32_t> localOffsets;     // [El + 1] first local row of each local expert
  Tensor<float> xLocal;             // [Rl, Dx] received rows, sorted by local expert
  ExpertsSaved<float> experts;      // [Rl, F] x3
};

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
