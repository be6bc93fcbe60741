// ProgressPrinter: an EventSink that draws the `moewb run` progress line on stderr: step, loss,
// tokens/s and ETA. On a terminal the line is redrawn in place (at most ~10 times a second); when
// stderr is not a terminal (CI logs) it prints one line per ~10% of the run instead.
#pragma once

#include <cstdint>

#include "moewb/engine/event_sink.h"

namespace moewb::cli {

class ProgressPrinter final : public engine::EventSink {
 public:
  explicit ProgressPrinter(int64_t plannedSteps);

  void onRunStart(const engine::RunStartEvent& event) override;
  void onPhase(const engine::PhaseEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onStep(const engine::StepEvent& event) override;
  void onRunEnd(const engine::RunEndEvent& event) override;

 private:
  void draw(const engine::StepEvent& event, bool force);

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
