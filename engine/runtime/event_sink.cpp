// Stable names and timeline depths of engine phases (they are stored in traces, so never rename).
#include "moewb/engine/event_sink.h"

#include "moewb/base/units.h"

namespace moewb::engine {

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kEmbedding: return "embedding";
    case Phase::kAttention: return "attention";
    case Phase::kRouter: return "router";
    case Phase::kPermute: return "permute";
    case Phase::kExperts: return "experts";
    case Phase::kCombine: return "combine";
    case Phase::kLoss: return "loss";
    case Phase::kKda: return "kda";
    case Phase::kSparseAttention: return "sparse_attention";
  }
  return "unknown";
}

int32_t phaseDepth(Phase phase) {
  switch (phase) {
    case Phase::kForward:
    case Phase::kBackward:
    case Phase::kOptimizer:
      return 1;
    default:
      return 2;
  }
}

std::string phaseSliceName(Phase phase, Pass pass) {
  std::string name = phaseName(phase);
  if (phaseDepth(phase) == 1) return name;
  if (pass == Pass::kForward) return name + ".fwd";
  if (pass == Pass::kBackward) return name + ".bwd";
  return name;
}

int64_t startupTotalNs(const std::vector<StartupPhase>& phases) {
  int64_t totalNs = 0;
  for (const StartupPhase& phase : phases) totalNs += phase.ns;
  return totalNs;
}

std::string describeStartup(const std::vector<StartupPhase>& phases) {
  if (phases.empty()) return "";
  std::string parts;
  for (const StartupPhase& phase : phases) {
    parts += (parts.empty() ? "" : ", ") + phase.name + " " + formatDurationNs(phase.ns);
  }
  return formatDurationNs(startupTotalNs(phases)) + ": " + parts;
}

}  // namespace moewb::engine
