#include "model/cuda/device_timeline.h"

#include <cmath>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/units.h"

namespace moewb::engine::cuda {

const char* cachedPhaseSliceName(Phase phase, Pass pass) {
  // Every value a Phase byte can hold; passes other than kForward / kBackward name the slice
  // like kNone (phaseSliceName adds no suffix for them).
  constexpr size_t kPhases = 256, kPasses = 3;
  static const std::vector<std::string> names = [] {
    std::vector<std::string> table(kPhases * kPasses);
    for (size_t p = 0; p < kPhases; ++p) {
      for (size_t q = 0; q < kPasses; ++q) {
        table[p * kPasses + q] = phaseSliceName(Phase(p), Pass(q));
      }
    }
    return table;
  }();
  const size_t q = size_t(pass) < kPasses ? size_t(pass) : size_t(Pass::kNone);
  return names[size_t(phase) * kPasses + q].c_str();
}

DeviceTimeline::~DeviceTimeline() {
  for (cudaEvent_t event : m_pool) cudaEventDestroy(event);
  if (m_anchor != nullptr) cudaEventDestroy(m_anchor);
}

Status DeviceTimeline::begin(cudaStream_t stream, PhaseRecorder* recorder) {
  m_stream = stream;
  m_recorder = recorder;
  m_used = 0;
  m_closed.clear();
  if (!timing()) return Status::ok();
  if (m_anchor == nullptr) MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreate(&m_anchor));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  m_anchorNs = steadyNowNs();
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(m_anchor, stream));
  return Status::ok();
}

cudaEvent_t DeviceTimeline::mark() {
  if (!timing()) return nullptr;
  if (m_used == m_pool.size()) {
    cudaEvent_t event = nullptr;
    if (cudaEventCreate(&event) != cudaSuccess) return nullptr;  // untimed, still correct
    m_pool.push_back(event);
  }
  cudaEvent_t event = m_pool[m_used++];
  if (cudaEventRecord(event, m_stream) != cudaSuccess) return nullptr;
  return event;
}

void DeviceTimeline::close(Phase phase, Pass pass, int32_t layer, cudaEvent_t start,
                           cudaEvent_t end) {
  if (end != nullptr) m_closed.push_back({phase, pass, layer, start, end});
}

Status DeviceTimeline::flush() {
  if (!timing()) return Status::ok();
  auto offsetNs = [&](cudaEvent_t event, int64_t& ns) -> Status {
    float ms = 0;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, m_anchor, event));
    ns = m_anchorNs + int64_t(std::llround(double(ms) * 1e6));
    return Status::ok();
  };
  for (const Closed& c : m_closed) {
    int64_t startNs = 0, endNs = 0;
    MOEWB_RETURN_IF_ERROR(offsetNs(c.start, startNs));
    MOEWB_RETURN_IF_ERROR(offsetNs(c.end, endNs));
    m_recorder->record(c.phase, c.pass, c.layer, startNs, endNs);
  }
  m_closed.clear();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
