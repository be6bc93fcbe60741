// The reduction kernel of the virtual ranks on one GPU: one rank's output is the elementwise sum
// (or max) of n peers' device blocks, read directly from the peers' buffers, added in group-rank
// order (peer 0 first) so that every rank's result is bitwise identical and, for float32 and
// int64, bitwise equal to the in-process ranks' host loop. bf16 accumulates in fp32 and rounds
// once (to nearest even). Cost: one pass reading n * count elements and writing count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// Peers one reduction reads at most (the kernel takes their pointers as one launch argument).
constexpr int32_t kMaxReducePeers = 64;

// out [count] = reduce over r in [0, peerCount) of peers[r] [offset, offset + count), elements of
// `dtype`, queued on `stream`. peers: host array of peerCount device pointers (copied into the
// launch). out must not overlap any peer block. count 0 launches nothing. Errors:
// kInvalidArgument for peerCount outside [1, kMaxReducePeers] or count < 0; the launch error.
Status reducePeerBlocks(cudaStream_t stream, const void* const* peers, int32_t peerCount,
                        int64_t offset, int64_t count, CommDataType dtype, ReduceOp op, void* out);

}  // namespace moewb::engine
