// Result types of the parallel-run queries of TraceReader (world size > 1): the all-to-all
// traffic matrix of a step / layer / phase selection, the routed rows and expert load per rank,
// and collectives matched across their peers by (comm_group, seq, peers) with the spread of
// their start times (who arrived last, how long the others waited).
// Plain values; the queries and their costs are documented on TraceReader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/ids.h"

namespace moewb::storage {

// Which a2a_traffic / expert_load rows a parallel query sums.
struct ParallelFilter {
  std::optional<int64_t> step;   // one step; nullopt = all steps
  std::optional<int32_t> layer;  // one layer; nullopt = all layers
  std::string phase;             // a2a phase ("dispatch", ...); "" = all (traffic matrix only)
};

// What a parallel trace holds, for the GUI's selectors.
struct ParallelOverview {
  int32_t worldSize = 1;            // the first run's world_size (1 without a run row)
  std::vector<int64_t> steps;       // steps with collective rows, ascending
  std::vector<int32_t> layers;      // layers with a2a_traffic rows (first such step), ascending
  std::vector<std::string> phases;  // a2a phases of that step: dispatch, combine, combine.bwd,
                                    // dispatch.bwd (those present, in this order), then others
  std::vector<std::vector<int32_t>> epGroups;  // global ranks of each EP group, in group order
  bool hasParallelData() const { return !steps.empty(); }
};

// Summed all-to-all bytes between ranks: bytes[src * worldSize + dst], src-major. The diagonal
// holds rows that stayed on their rank (they never cross the wire, so the collective rows'
// bytes_sent / bytes_received leave them out).
struct A2aTrafficMatrix {
  int32_t worldSize = 0;        // W; ranks outside [0, W) are not in the matrix
  std::vector<int64_t> bytes;   // [W * W]
  int64_t rowsRead = 0;         // a2a_traffic rows summed (all of them, also out of range)
  int64_t outOfRangeBytes = 0;  // bytes of rows whose src or dst rank is outside [0, W)

  int64_t at(int32_t src, int32_t dst) const;   // 0 outside the matrix
  std::vector<int64_t> sentBySource() const;    // [W] row sums, diagonal included
  std::vector<int64_t> receivedByDest() const;  // [W] column sums, diagonal included
  int64_t totalBytes() const;                   // all cells
  int64_t crossRankBytes() const;               // all cells off the diagonal
};

// Routed rows and expert load of one rank over a filter's steps and layers. Experts live on the
// ranks of an EP group in group order (group rank g hosts experts [g * E / EP, (g+1) * E / EP)),
// so the rows rank s routes to expert e go to the rank of s's group that hosts e.
struct RankLoad {
  int32_t rank = 0;
  int32_t epGroup = 0;      // index into ParallelOverview::epGroups (-1: no EP group seen)
  int32_t firstExpert = 0;  // experts [firstExpert, firstExpert + expertCount) live here
  int32_t expertCount = 0;
  int64_t tokens = 0;          // sequence tokens the rank processed (step rows)
  int64_t routedRows = 0;      // (token, expert) assignments of its tokens (expert_load rows)
  int64_t droppedRows = 0;     // of those, dropped by capacity
  int64_t sentRows = 0;        // routedRows that go to experts on another rank
  int64_t receivedRows = 0;    // rows for its experts from every rank of its group (incl. its own)
  int64_t maxExpertRows = 0;   // the most rows one of its experts got
  double meanExpertRows = 0;   // mean rows over its experts
  int32_t hottestExpert = -1;  // global id of that expert (-1 without experts)
  double maxOverMean() const {
    return meanExpertRows > 0 ? double(maxExpertRows) / meanExpertRows : 0;
  }
};

// Routed rows per rank plus the [src, dst] rows matrix they come from.
struct RankLoads {
  int32_t worldSize = 0;            // W
  int32_t numExperts = 0;           // E (1 + the largest expert id read)
  std::vector<RankLoad> ranks;      // [W], by rank
  std::vector<int64_t> rowsMatrix;  // [W * W] rows src routed to experts on dst, src-major
};

// One peer's part of a collective.
struct CollectiveArrival {
  int32_t rank = 0;
  TrackId track;  // the rank's comm track (the slice starts at startNs)
  int64_t startNs = 0;
  int64_t durNs = 0;
  int64_t bytesSent = 0;
  int64_t bytesReceived = 0;
  bool ok = true;
  int64_t waitNs = 0;  // lastStartNs - startNs: how long it waited for the last peer
};

// One collective matched across its peers: the collective rows with equal (step, comm_group,
// seq, peers). Start-time spread: every peer waits for the last one to arrive.
struct MatchedCollective {
  int64_t step = -1;
  int32_t layer = -1;
  std::string op;  // of the first arrival; opMismatch when the peers disagree
  std::string commGroup;
  std::string phase;
  int64_t seq = 0;
  std::string peers;                        // "0,1,2,3" as stored
  std::vector<int32_t> peerRanks;           // peers parsed (empty when unreadable)
  std::vector<CollectiveArrival> arrivals;  // rows found, in peer order (then by rank)
  std::vector<int32_t> missingRanks;        // peers without a row
  bool opMismatch = false;
  bool ok = true;         // every arrival ok
  int64_t bytesSent = 0;  // summed over arrivals
  int64_t bytesReceived = 0;
  int64_t firstStartNs = 0;
  int64_t lastStartNs = 0;
  int64_t endNs = 0;        // latest end of any arrival
  int32_t lastRank = -1;    // the rank that arrived last (the lowest rank on ties)
  int64_t totalWaitNs = 0;  // sum of the arrivals' waitNs
  // lastStartNs - firstStartNs, clamped to the int64 range (times read from a file).
  int64_t skewNs() const {
    int64_t skew = 0;
    return __builtin_sub_overflow(lastStartNs, firstStartNs, &skew) ? INT64_MAX : skew;
  }
};

}  // namespace moewb::storage
