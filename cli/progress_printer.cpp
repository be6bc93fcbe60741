// ProgressPrinter: the live progress line of `moewb run` (see progress_printer.h).
#include "progress_printer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "moewb/base/units.h"

namespace moewb::cli {

ProgressPrinter::ProgressPrinter(int64_t plannedSteps)
    : m_plannedSteps(std::max<int64_t>(plannedSteps, 1)), m_tty(isatty(STDERR_FILENO) != 0) {}

void ProgressPrinter::onRunStart(const engine::RunStartEvent& event) {
  m_startNs = event.startNs;
  // Only a start-up long enough to wonder about (the GPU configs) gets its line.
  if (engine::startupTotalNs(event.startup) < kNsPerSecond) return;
  std::fprintf(stderr, "start-up %s\n", engine::describeStartup(event.startup).c_str());
}

void ProgressPrinter::onStep(const engine::StepEvent& event) {
  const double kSmoothing = 0.1;
  m_smoothedTokensPerSecond = m_smoothedTokensPerSecond == 0
                                  ? event.tokensPerSecond
                                  : (1 - kSmoothing) * m_smoothedTokensPerSecond +
                                        kSmoothing * event.tokensPerSecond;
  m_last = event;
  if (m_firstStep < 0) m_firstStep = event.step;
  draw(event, event.step + 1 >= m_plannedSteps);
}

void ProgressPrinter::draw(const engine::StepEvent& event, bool force) {
  int64_t nowNs = steadyNowNs();
  int64_t done = event.step + 1;
  if (m_tty && !force && nowNs - m_lastDrawNs < 100 * kNsPerMs) return;
  if (!m_tty && !force && done < m_nextLogStep) return;
  m_lastDrawNs = nowNs;
  m_nextLogStep = done + std::max<int64_t>(m_plannedSteps / 10, 1);

  double elapsedS = double(nowNs - m_startNs) / 1e9;
  int64_t doneHere = done - m_firstStep;
  double etaS = doneHere > 0 ? elapsedS / double(doneHere) * double(m_plannedSteps - done) : 0;
  const int kBarWidth = 24;
  int filled = int(double(kBarWidth) * double(done) / double(m_plannedSteps));
  std::string bar(size_t(std::clamp(filled, 0, kBarWidth)), '=');
  bar.resize(kBarWidth, ' ');
  // The committed count is read after the step's own rows were queued, so it may lag `done`.
  const std::string committed =
      m_committedSteps ? " (" + std::to_string(m_committedSteps()) + " committed)" : "";
  std::fprintf(stderr, "%sstep %lld/%lld%s [%s] loss %.4f  aux %.4f  %s tok/s  ETA %s%s",
               m_tty ? "\r" : "", (long long)done, (long long)m_plannedSteps, committed.c_str(),
               bar.c_str(),
               event.loss, event.auxLoss, formatCount(m_smoothedTokensPerSecond).c_str(),
               formatDurationNs(int64_t(etaS * 1e9)).c_str(), m_tty ? "\033[K" : "\n");
  std::fflush(stderr);
}

void ProgressPrinter::onRunEnd(const engine::RunEndEvent& event) {
  if (m_tty) std::fprintf(stderr, "\n");
  if (event.outcome == engine::RunOutcome::kStopped) {
    std::fprintf(stderr, "stopped after %lld steps\n", (long long)event.stepsDone);
  }
}

}  // namespace moewb::cli
