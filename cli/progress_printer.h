// ProgressPrinter: an EventSink that draws the `moewb run` progress line on stderr: step, the
// steps committed to the trace (what a kill would keep), loss, tokens/s and ETA. On a terminal
// the line is redrawn in place (at most ~10 times a second); when stderr is not a terminal (CI
// logs) it prints one line per ~10% of the run instead.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "moewb/engine/event_sink.h"

namespace moewb::cli {

class ProgressPrinter final : public engine::EventSink {
 public:
  explicit ProgressPrinter(int64_t plannedSteps);

  // Where the line reads the steps committed to the trace (run::TrainingRun::committedSteps);
  // called on the training thread at each draw. Unset: the line shows computed steps only.
  void setCommittedSteps(std::function<int64_t()> committedSteps) {
    m_committedSteps = std::move(committedSteps);
  }

  void onRunStart(const engine::RunStartEvent& event) override;
  void onPhase(const engine::PhaseEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onStep(const engine::StepEvent& event) override;
  void onRunEnd(const engine::RunEndEvent& event) override;

 private:
  void draw(const engine::StepEvent& event, bool force);

  std::function<int64_t()> m_committedSteps;
  int64_t m_plannedSteps;
  bool m_tty;
  int64_t m_startNs = 0;
  int64_t m_lastDrawNs = 0;
  int64_t m_nextLogStep = 0;
  int64_t m_firstStep = -1;  // first step of this invocation (> 0 when resumed)
  double m_smoothedTokensPerSecond = 0;
  engine::StepEvent m_last;
};

}  // namespace moewb::cli
