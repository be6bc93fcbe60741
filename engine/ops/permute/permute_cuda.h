// MoE dispatch on the GPU (ENGINE-MATH §5.9): the routing plan built entirely on the device and
// the row gather (permute) with its backward. Mirrors ops/permute/permute.h.
//
// buildDispatchCuda turns topExpert[N, k] (and the optional capacity keep mask) into the same
// plan as the CPU buildDispatch, bit for bit: rows ordered expert-major and, within an expert, by
// flattened (token, slot) index (stable by token). Steps, all on the stream, no host sync:
//   1. per chunk of kChunkPairs pairs, a shared-memory histogram of kept pairs per expert;
//   2. one block scans the chunk histograms per expert (chunk bases), totals them into counts
//      and scans the counts into offsets [E + 1] (offsets[E] = R, the real row count);
//   3. per chunk, one warp walks its pairs in order 32 at a time; __match_any_sync gives each
//      pair its rank among same-expert pairs of the round, so row = offsets[e] + chunk base +
//      running count + rank, exactly the CPU counting sort's cursor.
// Buffers are sized by the upper bound N k; only the first R rows of rowToken / rowSlot (and of
// every [N k, D] row matrix downstream) are defined, and R lives on the device in offsets[E].
// permuteForwardCuda gathers x rows into that order; permuteBackwardCuda sums each token's kept
// row gradients in slot order (0..k-1) in fp32 and rounds once (deterministic, no atomics).
// Costs: plan O(N k + E * chunks) work, 3 launches; gather / scatter O(N k D) bytes, one launch
// each, grid sized by N k with rows >= R exiting early.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

struct DeviceDispatch {
  int64_t numTokens = 0;           // N
  int64_t topK = 0;                // k
  int64_t numExperts = 0;          // E
  DeviceTensor<int32_t> counts;    // [E] kept rows per expert
  DeviceTensor<int32_t> offsets;   // [E + 1] first permuted row of each expert; offsets[E] = R
  DeviceTensor<int32_t> rowToken;  // [N k] source token of permuted row r (r < R defined)
  DeviceTensor<int32_t> rowSlot;   // [N k] which of its token's k choices row r is (r < R)
  DeviceTensor<int32_t> slotRow;   // [N, k] permuted row of (token, slot), -1 if dropped
  // Upper bound of R (every buffer of permuted rows is sized by it).
  int64_t maxRows() const { return numTokens * topK; }
};

// Builds the plan from topExpert[N, k] (ids in [0, numExperts), distinct within a row). `keep`
// ([N, k], 1 = kept, 0 = dropped by capacity) may be null: everything is kept. Allocates the
// plan (kActivations) and a chunk-histogram workspace. Errors: kInvalidArgument (shapes,
// N k >= 2^31), kResourceExhausted, kInternal. Expert ids out of range are a caller bug (the
// kernels skip such pairs: they get slotRow = -1 and no row).
Result<DeviceDispatch> buildDispatchCuda(CudaContext& context,
                                         const DeviceTensor<int32_t>& topExpert /*[N, k]*/,
                                         int64_t numExperts,
                                         const DeviceTensor<uint8_t>* keep = nullptr /*[N, k]*/);

// xPerm[r] = x[rowToken[r]] for r < R. xPerm is [N k, D] (preallocated; rows >= R untouched).
Status permuteForwardCuda(CudaContext& context, const DeviceTensor<bf16>& x /*[N, D]*/,
                          const DeviceDispatch& plan, DeviceTensor<bf16>& xPerm /*[N k, D]*/);

// dx[t] = sum over kept slots j (in slot order) of dXPerm[slotRow[t, j]], accumulated in fp32;
// 0 for a token with no kept slot. dx is [N, D] (preallocated, fully written).
Status permuteBackwardCuda(CudaContext& context, const DeviceTensor<bf16>& dXPerm /*[N k, D]*/,
                           const DeviceDispatch& plan, DeviceTensor<bf16>& dx /*[N, D]*/);

}  // namespace moewb::engine::cuda
