// Expert parallelism on the GPU (ENGINE-MATH §5.9; the CPU twin is parallel/ep_dispatch.h): this
// rank's routed rows, permuted expert-major by global expert id (so grouped by destination EP
// rank, then by local expert), travel to the ranks that own their experts through device
// all-to-all-v, are computed there by the grouped experts and come back.
//
// Forward:  plan offsets -> host (one synchronisation per layer: the all-to-all needs its sizes
//           on the host, as in Megatron-Core's all-to-all dispatcher) -> count exchange (host
//           all-to-all of [EP, E/EP] row counts) -> all-to-all-v of the bf16 rows -> sort
//           [source rank][local expert] -> [local expert][source rank] (one gather kernel) ->
//           grouped experts -> inverse sort -> all-to-all-v back (splits swapped).
// Backward: the mirror: row gradients go to the expert owners, the grouped experts' backward adds
//           the local experts' weight gradients, and the input-row gradients come back.
// Any rank may send or receive no rows for any expert or peer. Collectives run on `comm` (the EP
// group; group rank = expert shard). `tag` (may be null) names the phase of each all-to-all for
// the trace: "dispatch" / "combine" forward, "combine.bwd" / "dispatch.bwd" backward.
// Errors: the communicator's (a missing peer: kCancelled naming it), kResourceExhausted, kInternal.
// Costs: 2 all-to-all-v of R x Dx bf16 each way (C of each with overlap) plus one small count
// exchange; the sorts copy each row once. Not thread-safe per EpSavedCuda; deterministic.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "runtime/cuda/cuda_context.h"
#include "model/cpu/model_parallel.h"
#include "ops/experts/experts_cuda.h"

namespace moewb::engine::cuda {

// One chunk of local experts [firstExpert, endExpert) (all El of them without overlap): what its
// round trip sends and receives, and what its experts keep for the backward.
struct EpChunkCuda {
  std::vector<int64_t> sendRows;       // [EP] rows to each EP rank
  std::vector<int64_t> sendFirstRow;   // [EP] first row of the block for each rank in xPerm
  std::vector<int64_t> recvRows;       // [EP] rows from each EP rank
  int64_t localRows = 0;               // rows received (sum of recvRows)
  DeviceTensor<int32_t> localOffsets;  // [El + 1]; experts outside the chunk are empty
  DeviceTensor<int32_t> sortIndex;     // [max(Rl, 1)] received row read by local row r
  DeviceTensor<bf16> xLocal;           // [max(Rl, 1), Dx] received rows, expert-major
  DeviceExpertsSaved experts;
};

// What the forward keeps for the backward.
struct EpSavedCuda {
  std::vector<EpChunkCuda> chunks;  // [C]
};

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
