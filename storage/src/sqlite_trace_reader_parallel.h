// Helpers shared by the reader's parallel-run queries (sqlite_trace_reader_parallel.cpp: overview,
// traffic matrix, matched collectives; sqlite_trace_reader_rank_loads.cpp: routed rows per rank).
// All are O(input) and pure apart from binding statement parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/storage/parallel_queries.h"
#include "sqlite_util.h"

namespace moewb::storage::detail {

// Expert ids at or beyond this are left out of the per-rank loads (no [W, E] buffer is built).
inline constexpr int64_t kMaxExperts = 1 << 16;

// "0,1,2" -> {0, 1, 2}; empty when any part is not a rank in [0, kMaxWorldSize).
std::vector<int32_t> parsePeers(const std::string& text);

// WHERE clause of the step / layer / phase filter (bound in that order from index 1 by
// bindFilter); withPhase adds the phase (a2a_traffic has one, expert_load not).
std::string filterClause(const ParallelFilter& filter, bool withPhase);
Status bindFilter(Statement& q, const ParallelFilter& filter, bool withPhase);

}  // namespace moewb::storage::detail
