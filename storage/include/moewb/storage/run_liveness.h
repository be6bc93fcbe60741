// Run liveness: whether a run that a trace still records as "running" has a live writer, told
// from the heartbeat its writer leaves in the meta table (heartbeat_unix_ms, wall-clock ms,
// updated at every commit and every kHeartbeatPeriodMs while idle; see trace_writer.h).
// A heartbeat older than kHeartbeatStaleMs means the process ended without closing the file
// (SIGKILL, a crash, a lost machine): the status will never change. Traces written before the
// heartbeat existed have none; they are "running" with the liveness unknown.
// Used by `moewb info` and the workbench's status line. Pure functions, O(1).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "moewb/storage/rows.h"

namespace moewb::storage {

// The meta key of the heartbeat: wall-clock milliseconds since the Unix epoch, as text.
inline constexpr const char* kMetaHeartbeatUnixMs = "heartbeat_unix_ms";
// How often an idle writer refreshes the heartbeat.
inline constexpr int64_t kHeartbeatPeriodMs = 5'000;
// A "running" trace whose heartbeat is older than this has lost its writer (6 idle periods: room
// for a slow commit on a busy disk).
inline constexpr int64_t kHeartbeatStaleMs = 30'000;

struct RunLiveness {
  enum class State {
    kEnded,    // status is not "running": completed, stopped or failed
    kLive,     // running, heartbeat at most kHeartbeatStaleMs old
    kDead,     // running, heartbeat older: the writer died without closing the file
    kUnknown,  // running, no (readable) heartbeat: a trace from an older writer
  };
  State state = State::kUnknown;
  int64_t heartbeatAgeMs = -1;  // now - heartbeat (>= 0; 0 when the clock went back), -1 if none
};

// The liveness of `run` given the trace's meta table and the reader's wall clock `nowUnixMs`.
// A heartbeat that is not a decimal number counts as none.
RunLiveness runLiveness(const RunRow& run, const std::map<std::string, std::string>& meta,
                        int64_t nowUnixMs);

// The run's status for people: "completed", "stopped", "failed", "running (last heartbeat 3 s
// ago)", "ended without closing (writer died; last heartbeat 2 min ago)", or "running (no
// heartbeat in this trace: cannot tell whether its writer is alive)".
std::string describeRunStatus(const RunRow& run, const std::map<std::string, std::string>& meta,
                              int64_t nowUnixMs);

}  // namespace moewb::storage
