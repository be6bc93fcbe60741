// The CUDA side of the expert-parallel dispatcher (model/moe/ep_dispatcher.h, ENGINE-MATH §5.9;
// the CPU side is model/parallel/ep_dispatch.h): CudaEpMover moves bf16 rows
// (DeviceTensor<bf16>) with the communicator's device all-to-all-v and sorts them with one gather
// / scatter kernel; epExpertsForwardCuda / epExpertsBackwardCuda are the experts stage of the
// CUDA MoE layer over EP: the dispatcher's round trip with the grouped experts
// (ops/experts/experts_cuda.h) in the middle.
//
// Host synchronisation: the forward reads the dispatch offsets back once per layer, right before
// the dispatcher's plan (the count exchange and the all-to-all sizes live on the host, as in
// Megatron-Core's all-to-all dispatcher); nothing else waits for the device.
// Streams: with one chunk everything runs on the context's stream S. With C > 1 chunks the
// all-to-alls run on the side stream K and the sorts and experts on S:
//   S: [xPerm ready] ----------> wait d0: experts 0 -> c0 | wait d1: experts 1 -> c1 | ...
//   K: wait -> dispatch 0 -> d0, dispatch 1 -> d1, ... -> wait c0: combine 0, wait c1: combine 1
// and S waits for K's last combine before the result is used. Buffers K touches stay alive until
// then (the allocator is ordered on S only).
// Any rank may send or receive no rows for any expert or peer. Collectives run on `comm` (the EP
// group; group rank = expert shard); `tag` (may be null) names the phase of each all-to-all for
// the trace (ep_dispatcher.h). Errors: the communicator's (a missing peer: kCancelled naming
// it), kInvalidArgument, kResourceExhausted, kInternal. Costs: 2 all-to-all-v of R x Dx bf16
// each way (C of each with overlap) plus one small count exchange; the sorts copy each row once.
// Not thread-safe per EpSavedCuda; deterministic.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/model_parallel.h"
#include "model/moe/ep_dispatcher.h"
#include "ops/experts/experts_cuda.h"
#include "runtime/cuda/cuda_context.h"

namespace moewb::engine::cuda {

// The dispatcher's data mover on one rank's GPU (see EpMover in ep_dispatcher.h). Exchanges run
// on the context's stream, or on its side stream when a round trip has more than one chunk;
// the orderings between the two are events, destroyed with the mover (CUDA releases them once
// reached). Buffers of zero rows hold one row (a zero-row tensor has no storage to point at).
// Not thread-safe; one per round trip.
class CudaEpMover {
 public:
  using Rows = DeviceTensor<bf16>;      // [max(rows, 1), width]
  using Index = DeviceTensor<int32_t>;  // [max(n, 1)]
  using ExpertsSaved = DeviceExpertsSaved;

  CudaEpMover(CudaContext& context, Communicator& comm);
  ~CudaEpMover();
  CudaEpMover(const CudaEpMover&) = delete;
  CudaEpMover& operator=(const CudaEpMover&) = delete;

  // The plan's vector on the device (an empty one as one 0). Errors: kResourceExhausted,
  // kInternal.
  Result<Index> upload(const std::vector<int32_t>& values);
  // Uninitialised rows; kSaved counts as activations, kScratch as workspace.
  Result<Rows> newRows(int64_t rows, int64_t width, EpRowsUse use);
  static int64_t rowCount(const Rows& rows) { return rows.dim(0); }
  static int64_t rowWidth(const Rows& rows) { return rows.dim(1); }
  // Device all-to-all-v of bf16 rows on the exchange stream. Errors: the communicator's.
  Status exchange(const Rows& from, std::span<const int64_t> fromRows,
                  std::span<const int64_t> fromFirst, Rows& to, std::span<const int64_t> toRows,
                  std::span<const int64_t> toFirst);
  // Row gather / scatter on the context's stream.
  Status gather(const Rows& in, const Index& index, Rows& out, int64_t rows);
  Status scatter(const Rows& in, const Index& index, Rows& out, int64_t rows);
  // The side stream for chunks > 1 (the context's stream otherwise), ordered after S's work.
  Status startRoundTrip(size_t chunks);
  Status exchangeAfterCompute();  // K waits for S
  Status computeAfterExchange();  // S waits for K

 private:
  // Records an event on `from` and makes `to` wait for it (no-op when the streams are equal).
  Status order(cudaStream_t from, cudaStream_t to);

  CudaContext& m_context;
  Communicator& m_comm;
  cudaStream_t m_exchangeStream = nullptr;
  std::vector<cudaEvent_t> m_events;
};

// What the forward keeps for the backward: the plan and each chunk's rows and activations.
using EpSavedCuda = EpDispatchSaved<CudaEpMover>;

// yPerm [N k, Dx] (rows < R = offsets[E]) of this rank's rows xPerm [N k, Dx]; `offsets` is the
// global dispatch plan's [E + 1]; `weights` hold the El = E / EP experts of group rank
// comm.rank() ([El, F, Dx] / [El, Dx, F]). Overlap: with `chunks` = C > 1 the local experts are
// cut into C chunks and each chunk makes its own round trip, the all-to-alls on the context's side
// stream, so the all-to-all of one chunk runs while the experts of another compute (each expert's
// rows and their order are the same as with C = 1, so the results are bitwise equal).
// 1 <= C <= El.
Result<DeviceTensor<bf16>> epExpertsForwardCuda(CudaContext& context, Communicator& comm,
                                                const DeviceTensor<bf16>& xPerm,
                                                const DeviceTensor<int32_t>& offsets,
                                                const DeviceExpertWeights& weights,
                                                const GluParams& activation, EpSavedCuda& saved,
                                                CommTag* tag, int32_t chunks = 1);

// dXPerm [N k, Dx] from dYPerm [N k, Dx]; adds the local experts' weight gradients into `grads`.
// Follows epExpertsForwardCuda with the same `saved` (and its chunks) and releases it.
Result<DeviceTensor<bf16>> epExpertsBackwardCuda(CudaContext& context, Communicator& comm,
                                                 const DeviceTensor<bf16>& dYPerm,
                                                 const DeviceExpertWeights& weights,
                                                 const DeviceExpertGrads& grads,
                                                 const GluParams& activation, EpSavedCuda& saved,
                                                 CommTag* tag);

// out[r, :] = in[index[r], :] for r < rows (bf16 rows of `width`).
Status gatherRowsBf16(cudaStream_t stream, const bf16* in, const int32_t* index, bf16* out,
                      int64_t rows, int64_t width);
// out[index[r], :] = in[r, :] for r < rows (index a permutation).
Status scatterRowsBf16(cudaStream_t stream, const bf16* in, const int32_t* index, bf16* out,
                       int64_t rows, int64_t width);

}  // namespace moewb::engine::cuda
