// DevicePhase: a traced phase of the CUDA backend: the host PhaseEvent (ScopedPhase) and an NVTX
// range of the same name ("experts.fwd") around the kernels the phase queues, so Nsight Systems
// and our CUPTI capture attribute device work to the engine's phases.
#pragma once

#include <optional>
#include <string>

#include "cuda/nvtx_range.h"
#include "trace/phase_recorder.h"

namespace moewb::engine::cuda {

class DevicePhase {
 public:
  DevicePhase(PhaseRecorder* recorder, Phase phase, Pass pass, int32_t layer)
      : m_name(phaseSliceName(phase, pass)), m_nvtx(m_name.c_str()),
        m_scope(recorder, phase, pass, layer) {}

 private:
  std::string m_name;
  NvtxRange m_nvtx;
  ScopedPhase m_scope;
};

}  // namespace moewb::engine::cuda
