// PhaseRecorder and ScopedPhase: how the model and trainer time their phases and report them to
// the EventSink as PhaseEvents. A ScopedPhase reads the steady clock when it opens and emits one
// PhaseEvent when it closes, so events arrive in order of their end time (a pass range such as
// kForward arrives after the phases it contains). With a null recorder or a null sink nothing is
// timed or emitted. Costs: two clock reads and one virtual call per phase.
#pragma once

#include <cstdint>

#include "moewb/engine/event_sink.h"

namespace moewb::engine {

class PhaseRecorder {
 public:
  // `sink` may be null (then enabled() is false); `step` tags every event.
  PhaseRecorder(EventSink* sink, int64_t step) : m_sink(sink), m_step(step) {}

  bool enabled() const { return m_sink != nullptr; }
  void record(Phase phase, Pass pass, int32_t layer, int64_t startNs, int64_t endNs);

 private:
  EventSink* m_sink;
  int64_t m_step;
};

class ScopedPhase {
 public:
  // `recorder` may be null. layer = -1 for whole-model phases.
  ScopedPhase(PhaseRecorder* recorder, Phase phase, Pass pass, int32_t layer);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  PhaseRecorder* m_recorder;
  Phase m_phase;
  Pass m_pass;
  int32_t m_layer;
  int64_t m_startNs = 0;
};

}  // namespace moewb::engine
