// EpPlan: where every routed row of one rank goes in one expert-parallel round trip, and in what
// order the rows that reach this rank are handed to its local experts (ENGINE-MATH §5.9, steps
// 2-4). It is the backend-neutral part of the EP dispatcher (model/moe/ep_dispatcher.h): plain
// host vectors, computed once per layer and forward, read by both data movers (CPU and CUDA) and
// kept for the backward, which travels the same splits the other way.
//
// Inputs: this rank's dispatch offsets [E + 1] (rows permuted expert-major by global expert id,
// so grouped by destination EP rank j = e / El, then by local expert e % El) and the counts the
// count exchange brought back: recvCounts [EP * El], source-major, rows that source rank s routes
// to this rank's local expert e at [s * El + e]. Chunks: the El local experts are cut into C
// contiguous chunks, [c El / C, (c + 1) El / C); each makes its own all-to-all round trip so one
// chunk's exchange can overlap another's experts (C = 1: one round trip of every row).
// Per chunk, the plan holds the all-to-all splits (rows and first rows on both sides; the
// received side packed in source-rank order), the local offsets the grouped experts read, and the
// sort [source rank][local expert] -> [local expert][source rank] as a gather index.
//
// Operations: epSendCounts (offsets -> rows per global expert), buildEpPlan (pure, deterministic,
// O(EP El + rows) time and memory), exchangeEpPlan (the count exchange, a small host all-to-all
// on the EP communicator, then buildEpPlan). A rank may send nothing, receive nothing, and any
// local expert may receive no rows; the splits and offsets then hold zeros.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// One chunk of local experts [firstExpert, endExpert) and its round trip.
struct EpChunkPlan {
  int64_t firstExpert = 0;            // first local expert of the chunk
  int64_t endExpert = 0;              // one past its last local expert
  std::vector<int64_t> sendFirstRow;  // [EP] first row of the block for rank j in the permuted rows
  std::vector<int64_t> sendRows;      // [EP] rows sent to rank j
  std::vector<int64_t> recvFirstRow;  // [EP] first row of the block from rank s, received buffer
  std::vector<int64_t> recvRows;      // [EP] rows received from rank s
  int64_t localRows = 0;              // Rl: rows received in this chunk (sum of recvRows)
  std::vector<int32_t> localOffsets;  // [El + 1] first local row per local expert (others empty)
  std::vector<int32_t> sortIndex;     // [Rl] received row that local row r reads
};

// The whole plan of one rank for one layer's round trips (forward and backward).
struct EpPlan {
  int64_t ranks = 0;                // EP: ranks of the EP group
  int64_t localExperts = 0;         // El = E / EP experts per rank
  std::vector<int64_t> sendCounts;  // [EP * El] rows to rank j's local expert e at [j * El + e]
  std::vector<int64_t> recvCounts;  // [EP * El] rows from rank s for local expert e, [s * El + e]
  std::vector<EpChunkPlan> chunks;  // [C] in local-expert order
};

// Rows per global expert, offsets[e + 1] - offsets[e]: [E] from offsets [E + 1].
std::vector<int64_t> epSendCounts(std::span<const int32_t> offsets);

// The plan from this rank's offsets [E + 1] and the exchanged recvCounts [E] (source-major) for
// `ranks` EP ranks cut into `chunks` chunks. Errors (kInvalidArgument, naming the value and what
// is accepted): E not a positive multiple of ranks, chunks outside 1..El, offsets not starting at
// 0 or decreasing, recvCounts of the wrong length or negative. Thread-safe (pure).
Result<EpPlan> buildEpPlan(std::span<const int32_t> offsets, std::span<const int64_t> recvCounts,
                           int64_t ranks, int32_t chunks);

// The count exchange (a host all-to-all of [EP, El] int64 on `comm`, the EP group; collective:
// every rank of the group calls it) and then buildEpPlan. Checks E against comm.worldSize() and
// `chunks` before the collective, so a bad argument fails before any peer waits. Errors: those
// of buildEpPlan, the communicator's (a missing peer: kCancelled naming it). Blocks the calling
// thread until every rank has called it.
Result<EpPlan> exchangeEpPlan(Communicator& comm, std::span<const int32_t> offsets,
                              int32_t chunks);

}  // namespace moewb::engine
