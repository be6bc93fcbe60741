// The precision gate's comparison (see trial_runner.h).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "moewb/tuner/trial_runner.h"

namespace moewb::tuner {
namespace {

// "" when within `tol`, else the finding for `what` at `step`.
std::string compare(const char* what, int64_t step, double ref, double got, double tol) {
  const double rel = std::fabs(got - ref) / std::max(std::fabs(ref), 1e-12);
  if (std::isfinite(got) && std::isfinite(ref) && rel <= tol) return "";
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "step %lld %s %.9g vs reference %.9g (relative difference %.3g, "
                "tolerance %.3g)",
                static_cast<long long>(step), what, got, ref, rel, tol);
  return buf;
}

}  // namespace

GateTolerance gateToleranceFor(const engine::RunConfig& config, GateTolerance tolerance) {
  const bool cpu = config.run.backend == "cpu";
  if (tolerance.lossRel < 0) tolerance.lossRel = cpu ? 1e-5 : 1e-3;
  if (tolerance.gradNormRel < 0) tolerance.gradNormRel = cpu ? 1e-4 : 1e-2;
  return tolerance;
}

std::string precisionFinding(const TrialRecord& reference, const TrialRecord& candidate,
                             const GateTolerance& tolerance) {
  const size_t n =
      std::min({size_t(std::max<int64_t>(0, tolerance.steps)), reference.losses.size(),
                candidate.losses.size(), reference.gradNorms.size(), candidate.gradNorms.size()});
  if (n == 0) return "no steps to compare with the reference";
  for (size_t i = 0; i < n; ++i) {
    std::string f =
        compare("loss", int64_t(i), reference.losses[i], candidate.losses[i], tolerance.lossRel);
    if (f.empty()) {
      f = compare("gradient norm", int64_t(i), reference.gradNorms[i], candidate.gradNorms[i],
                  tolerance.gradNormRel);
    }
    if (!f.empty()) return f;
  }
  return "";
}

}  // namespace moewb::tuner
