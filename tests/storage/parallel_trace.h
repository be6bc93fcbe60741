// writeParallelTrace: a real trace of a parallel run for the reader and GUI tests. The CPU engine
// trains a tiny model (2 softmax-attention layers, d_model 16, 8 experts top-2, dropless,
// 8 sequences of 8 tokens per step, one thread per rank) on `worldSize` in-process ranks with
// expert parallelism `ep` and FSDP over the rest, traced by run::TrainingRun into one file:
// every rank's steps, expert loads, comm-track slices, collective rows and a2a_traffic rows.
// Takes well under a second for a few steps.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/status.h"

namespace moewb::testing {

// Model width of the trace: an all-to-all row is kParallelTraceDModel fp32 values.
inline constexpr int32_t kParallelTraceDModel = 16;
inline constexpr int32_t kParallelTraceExperts = 8;
inline constexpr int32_t kParallelTraceLayers = 2;

// Writes (overwrites) `path` with `steps` steps on `worldSize` ranks (1 = a one-rank run).
// Errors: the config's or the run's Status.
Status writeParallelTrace(const std::string& path, int32_t worldSize, int32_t ep, int64_t steps);

}  // namespace moewb::testing
