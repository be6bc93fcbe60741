// Row types of the trace store (schema v1, see schema.cpp for the SQL). These plain structs are
// what the writer accepts and the reader returns; one struct per table, fields named like the
// columns, units in the names. Strings are stored interned in the `string` table and appear here
// as std::string.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/ids.h"

namespace moewb::storage {

struct RunRow {
  RunId id;                   // assigned by the writer
  std::string name;
  std::string configToml;     // full validated config
  std::string backend;        // "cpu", "cuda"
  int32_t worldSize = 1;
  int64_t startNs = 0;        // steady clock, same domain as slices
  int64_t startUnixNs = 0;    // wall clock at start
  int64_t endNs = 0;          // 0 while running
  std::string status;         // "running", "completed", "stopped", "failed"
  std::string message;        // failure message
};

struct TrackRow {
  TrackId id;                 // assigned by the writer
  std::string name;           // "trainer thread", "memory", "stream 7"
  std::string kind;           // "thread", "counter", "stream", "comm"
  int32_t rank = 0;
  int64_t threadId = 0;       // OS thread or stream id
};

// Category values used by the writer and the viewers.
inline constexpr const char* kCategoryStep = "step";
inline constexpr const char* kCategoryPhase = "phase";
inline constexpr const char* kCategoryCollective = "collective";
// Track kind of a rank's device-memory timeline (memory_event rows).
inline constexpr const char* kTrackKindMemory = "memory";

struct SliceRow {
  SliceId id;                 // assigned by the store
  TrackId track;
  int64_t startNs = 0;
  int64_t durNs = 0;
  std::string name;           // "attention.fwd"
  std::string category;       // "step", "phase", later "kernel", "memcpy", ...
  int64_t step = -1;          // -1 when not inside a step
  int32_t layer = -1;         // -1 when not about one layer
  int64_t correlationId = 0;  // 0 = none
  int32_t depth = 0;          // nesting level on its track
};

struct CounterRow {
  TrackId track;              // a track of kind "counter"
  std::string name;           // "memory.activations_bytes"
  int64_t tsNs = 0;
  double value = 0;
};

// One allocation or free of a device memory pool (memory_event table). Rows of one track are
// added in time order; inUseBytes is the category's total after the event, so a timeline is read
// straight from the rows (no running sum).
struct MemoryEventRow {
  TrackId track;              // a track of kind kTrackKindMemory ("device memory" of a rank)
  int64_t tsNs = 0;           // steady clock
  int64_t step = -1;          // step the event happened in, -1 = none
  bool isAllocation = true;   // false: a free
  int64_t bytes = 0;          // block size, bytes
  int64_t address = 0;        // device address as stored (bit pattern of the uint64), 0 = baseline
  std::string category;       // "weights", "grads", "optimizer", "activations", "workspace"
  int64_t inUseBytes = 0;     // bytes in use in the category after the event
};

struct StepRow {
  RunId run;
  int32_t rank = 0;
  int64_t step = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  double loss = 0;
  double auxLoss = 0;
  int64_t tokens = 0;
  double tokensPerSecond = 0;
  int64_t peakBytes = 0;
  double gradNorm = 0;
  double lr = 0;
};

struct ExpertLoadRow {
  int64_t step = 0;
  int32_t layer = 0;
  int32_t expert = 0;
  int32_t rank = 0;
  int64_t tokens = 0;         // (token, expert) assignments routed to this expert
  int64_t dropped = 0;        // assignments dropped by capacity
  double bias = 0;            // router bias (aux-loss-free balancing), 0 when unused
};

// One row of the all-to-all traffic matrix of an EP layer, step and phase.
struct A2aTrafficRow {
  int64_t step = 0;
  int32_t layer = 0;
  int32_t srcRank = 0;
  int32_t dstRank = 0;
  int64_t bytes = 0;          // bytes src sent to dst (src == dst: rows that stayed local)
  std::string phase;          // "dispatch", "combine", "combine.bwd", "dispatch.bwd"
};

// The details of one collective of one rank (its slice is on `track` at `startNs`).
struct CollectiveRow {
  TrackId track;
  int64_t startNs = 0;
  int64_t durNs = 0;
  int64_t step = -1;
  int32_t layer = -1;
  int32_t rank = 0;
  std::string op;             // "all_to_all_v", "all_gather", ...
  std::string commGroup;      // "world", "ep", "expert_dp", "fsdp", "replicate"
  std::string phase;          // EP all-to-all phase, "" otherwise
  int64_t seq = 0;            // per-group sequence number
  int64_t bytesSent = 0;
  int64_t bytesReceived = 0;
  std::string peers;          // "0,1,2,3": global ranks in group order
  bool ok = true;
};

struct ConfigChangeRow {
  int64_t step = 0;           // first step that uses the new value
  int64_t tsNs = 0;
  std::string key;            // "moe.top_k"
  std::string oldValue;
  std::string newValue;
  std::string source;         // "cli", "gui", "tuner"
};

struct StatRow {
  std::string name;           // "cupti_dropped_records"
  std::string severity;       // "info", "warning", "error", "data_loss"
  int64_t value = 0;
  std::string description;
};

}  // namespace moewb::storage
