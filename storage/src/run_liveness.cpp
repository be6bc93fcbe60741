// Run liveness from the writer's heartbeat (see moewb/storage/run_liveness.h).
#include "moewb/storage/run_liveness.h"

#include <charconv>

namespace moewb::storage {

namespace {

// "4 s", "3 min", "2 h", "5 days": the age rounded down to its largest unit.
std::string formatAge(int64_t ms) {
  const int64_t s = ms / 1000;
  if (s < 120) return std::to_string(s) + " s";
  if (s < 2 * 3600) return std::to_string(s / 60) + " min";
  if (s < 2 * 86400) return std::to_string(s / 3600) + " h";
  return std::to_string(s / 86400) + " days";
}

}  // namespace

RunLiveness runLiveness(const RunRow& run, const std::map<std::string, std::string>& meta,
                        int64_t nowUnixMs) {
  RunLiveness liveness;
  if (run.status != "running") {
    liveness.state = RunLiveness::State::kEnded;
    return liveness;
  }
  const auto it = meta.find(kMetaHeartbeatUnixMs);
  if (it == meta.end()) return liveness;
  int64_t heartbeat = 0;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), heartbeat);
  if (error != std::errc() || end != text.data() + text.size() || heartbeat < 0) return liveness;
  liveness.heartbeatAgeMs = nowUnixMs > heartbeat ? nowUnixMs - heartbeat : 0;
  liveness.state = liveness.heartbeatAgeMs > kHeartbeatStaleMs ? RunLiveness::State::kDead
                                                               : RunLiveness::State::kLive;
  return liveness;
}

std::string describeRunStatus(const RunRow& run, const std::map<std::string, std::string>& meta,
                              int64_t nowUnixMs) {
  const RunLiveness liveness = runLiveness(run, meta, nowUnixMs);
  switch (liveness.state) {
    case RunLiveness::State::kEnded:
      return run.status;
    case RunLiveness::State::kLive:
      return "running (last heartbeat " + formatAge(liveness.heartbeatAgeMs) + " ago)";
    case RunLiveness::State::kDead:
      return "ended without closing (writer died; last heartbeat " +
             formatAge(liveness.heartbeatAgeMs) + " ago)";
    case RunLiveness::State::kUnknown:
      break;
  }
  return "running (no heartbeat in this trace: cannot tell whether its writer is alive)";
}

}  // namespace moewb::storage
