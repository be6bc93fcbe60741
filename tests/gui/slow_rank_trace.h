// writeSlowRankTrace: a 4-rank trace written row by row with storage::TraceWriter in which one
// rank is made slower in some steps, for the Step breakdown's slowest-rank view. The engine has
// no knob that slows one rank, so the rows are written here, shaped like a parallel run's host
// rows: per rank a "trainer thread" track and a "comm" track; per step and rank a step slice and
// step row, attention.fwd (0.3 ms at +0.1 ms), experts.fwd (0.8 ms + the rank's extra, at
// +0.5 ms), an all_to_all_v collective slice (0.2 ms right after the experts) and the optimizer
// pass (0.3 ms, ending 0.05 ms before the step's end). Every rank starts step s at the same time.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/status.h"

namespace moewb::gui::testing {

inline constexpr int32_t kSlowRankWorld = 4;
inline constexpr int64_t kSlowRankSteps = 4;
inline constexpr int64_t kSlowRankBaseNs = 2'000'000;   // a step of a rank without extra
inline constexpr int64_t kSlowRankExpertsNs = 800'000;  // experts.fwd without extra

// The extra experts time of `rank` in `step`: step 1 rank 2 +1.5 ms; step 2 rank 3 +0.8 ms;
// step 3 ranks 1 and 2 +0.3 ms each (a tie); none otherwise (step 0: all ranks equal).
int64_t slowRankExtraNs(int64_t step, int32_t rank);
// The rank the slowest view must pick in `step` (ties: the lowest rank).
int32_t slowRankExpected(int64_t step);

// Writes (overwrites) `path`. Errors: the writer's.
Status writeSlowRankTrace(const std::string& path);

}  // namespace moewb::gui::testing
