// PhaseRecorder / ScopedPhase implementation (see phase_recorder.h).
#include "runtime/phase_recorder.h"

#include "moewb/base/units.h"

namespace moewb::engine {

void PhaseRecorder::record(Phase phase, Pass pass, int32_t layer, int64_t startNs, int64_t endNs) {
  if (m_sink == nullptr) return;
  PhaseEvent event;
  event.step = m_step;
  event.layer = layer;
  event.phase = phase;
  event.pass = pass;
  event.startNs = startNs;
  event.endNs = endNs;
  m_sink->onPhase(event);
}

ScopedPhase::ScopedPhase(PhaseRecorder* recorder, Phase phase, Pass pass, int32_t layer)
    : m_recorder(recorder != nullptr && recorder->enabled() ? recorder : nullptr),
      m_phase(phase),
      m_pass(pass),
      m_layer(layer) {
  if (m_recorder != nullptr) m_startNs = steadyNowNs();
}

ScopedPhase::~ScopedPhase() {
  if (m_recorder != nullptr) m_recorder->record(m_phase, m_pass, m_layer, m_startNs, steadyNowNs());
}

}  // namespace moewb::engine
