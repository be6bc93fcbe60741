// runTrial: one traced short training run, measured from its step events (see trial_runner.h).
#include "moewb/tuner/trial_runner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>

#include "moewb/run/training_run.h"

namespace moewb::tuner {
namespace {

// Collects the step events of every rank (ranks call from their own threads).
class StepCollector final : public engine::EventSink {
 public:
  struct Step {
    int64_t startNs = INT64_MAX;
    int64_t endNs = 0;
    int64_t tokens = 0;
    int64_t peakBytes = 0;
    double lossSum = 0;
    double gradNorm = 0;
    int32_t ranks = 0;
  };

  void onRunStart(const engine::RunStartEvent&) override {}
  void onPhase(const engine::PhaseEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onRunEnd(const engine::RunEndEvent&) override {}
  void onStep(const engine::StepEvent& e) override {
    std::lock_guard<std::mutex> lock(m_mutex);
    Step& s = m_steps[e.step];
    s.startNs = std::min(s.startNs, e.startNs);
    s.endNs = std::max(s.endNs, e.endNs);
    s.tokens += e.tokens;
    s.peakBytes = std::max(s.peakBytes, e.peakBytes);
    s.lossSum += e.loss;
    s.gradNorm = std::max(s.gradNorm, e.gradNorm);  // global: equal on every rank
    s.ranks++;
  }

  std::map<int64_t, Step> steps() const {
    std::lock_guard<std::mutex> lock(m_mutex);
    return m_steps;
  }

 private:
  mutable std::mutex m_mutex;
  std::map<int64_t, Step> m_steps;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Result<TrialRecord> runTrial(const engine::ValidConfig& config, int64_t steps,
                             const std::string& tracePath) {
  TrialRecord trial;
  trial.startedAt = utcNow();
  trial.tracePath = tracePath;
  StepCollector collector;
  run::TrainingRunOptions options;
  options.outPath = tracePath;
  options.overwrite = true;
  options.steps = steps;
  MOEWB_ASSIGN_OR_RETURN(auto run, run::TrainingRun::create(config, options, &collector));
  trial.device = run->deviceDescription();
  MOEWB_ASSIGN_OR_RETURN(run::RunSummary summary, run->run());
  run.reset();  // closes the trace before the study records it
  trial.endedAt = utcNow();
  const auto byStep = collector.steps();
  if (byStep.empty()) return internalError("the trial's run finished without a step");
  std::vector<double> times;
  int64_t tokens = 0;
  for (const auto& [step, s] : byStep) {
    const double ms = double(s.endNs - s.startNs) / 1e6;
    trial.stepMs.push_back(ms);
    trial.losses.push_back(s.lossSum / std::max(1, s.ranks));
    trial.gradNorms.push_back(s.gradNorm);
    trial.peakBytes = std::max(trial.peakBytes, s.peakBytes);
    if (step > 0 || byStep.size() == 1) {
      times.push_back(ms);
      tokens = s.tokens;
    }
  }
  trial.steps = int64_t(byStep.size());
  trial.stepTimeMs = median(times);
  trial.tokensPerSecond = trial.stepTimeMs > 0 ? double(tokens) * 1e3 / trial.stepTimeMs : 0;
  trial.finalLoss = trial.losses.back();
  (void)summary;
  return trial;
}

}  // namespace moewb::tuner
