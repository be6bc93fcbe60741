#include "cuda_model/device_timeline.h"

#include <cmath>

#include "cuda/cuda_check.h"
#include "moewb/base/units.h"

namespace moewb::engine::cuda {

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
