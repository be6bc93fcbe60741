// Flight recorder: triggers, the window of steps a firing writes, and the row-holding writer
// (see the header).
#include "gpu/flight_recorder.h"

#include <algorithm>
#include <cstdio>
#include <type_traits>

namespace moewb::profiler::gpu {

namespace {

std::string format(const char* pattern, double a, double b) {
  char text[96];
  std::snprintf(text, sizeof text, pattern, a, b);
  return text;
}

}  // namespace

void FlightTriggers::addExpertLoad(const engine::ExpertLoadEvent& event) {
  if (m_triggers.expertLoad <= 0 || event.tokensPerExpert.empty()) return;
  int64_t total = 0, most = 0;
  for (int64_t tokens : event.tokensPerExpert) {
    total += tokens;
    most = std::max(most, tokens);
  }
  if (total <= 0) return;
  const double ratio = double(most) * double(event.tokensPerExpert.size()) / double(total);
  if (ratio > m_worstLoad) {
    m_worstLoad = ratio;
    m_worstLayer = event.layer;
  }
}

std::optional<TriggerFiring> FlightTriggers::endStep(const engine::StepEvent& event) {
  std::string reason;
  auto add = [&](const std::string& part) { reason += (reason.empty() ? "" : "; ") + part; };
  if (m_triggers.expertLoad > 0 && m_worstLoad > m_triggers.expertLoad) {
    add(format("expert max/mean load %.2f > %g", m_worstLoad, m_triggers.expertLoad) +
        " in layer " + std::to_string(m_worstLayer));
  }
  const double stepMs = double(event.endNs - event.startNs) / 1e6;
  if (m_triggers.stepMs > 0 && stepMs > m_triggers.stepMs) {
    add(format("step time %.3f ms > %g ms", stepMs, m_triggers.stepMs));
  }
  const double gib = double(event.peakBytes) / double(int64_t(1) << 30);
  if (m_triggers.memoryGiB > 0 && gib > m_triggers.memoryGiB) {
    add(format("peak device memory %.3f GiB > %g GiB", gib, m_triggers.memoryGiB));
  }
  m_worstLoad = 0;
  m_worstLayer = -1;
  if (reason.empty()) return std::nullopt;
  if (event.step < m_quietUntilStep) {
    ++m_suppressed;
    return std::nullopt;
  }
  m_quietUntilStep = event.step + 1 + m_triggers.cooldownSteps;
  return TriggerFiring{event.step, "step " + std::to_string(event.step) + ": " + reason};
}

std::pair<int64_t, int64_t> FlightWindow::onFiring(int64_t step) {
  const int64_t first = std::max(step - m_steps + 1, m_writtenThrough + 1);
  m_writtenThrough = std::max(m_writtenThrough, step);
  return {first, step};
}

void FlightRecorderWriter::hold(int64_t step, Held&& row) {
  if (step < 0) {
    ++m_rowsDiscarded;
    return;
  }
  m_held[step].push_back(std::move(row));
  ++m_heldRows;
}

void FlightRecorderWriter::write(const Held& row) {
  std::visit(
      [this](const auto& r) {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, Slice>) {
          m_writer->addSlice(r.slice);
        } else if constexpr (std::is_same_v<T, WithDetail<storage::GpuKernelRow>>) {
          m_writer->addGpuKernel(r.slice, r.detail);
        } else if constexpr (std::is_same_v<T, WithDetail<storage::GpuMemcpyRow>>) {
          m_writer->addGpuMemcpy(r.slice, r.detail);
        } else if constexpr (std::is_same_v<T, WithDetail<storage::GpuMemsetRow>>) {
          m_writer->addGpuMemset(r.slice, r.detail);
        } else if constexpr (std::is_same_v<T, WithDetail<storage::GpuSyncRow>>) {
          m_writer->addGpuSync(r.slice, r.detail);
        } else if constexpr (std::is_same_v<T, WithDetail<storage::CudaApiRow>>) {
          m_writer->addCudaApi(r.slice, r.detail);
        } else {
          m_writer->addGpuMemory(r);
        }
      },
      row);
}

int64_t FlightRecorderWriter::writeSteps(int64_t first, int64_t last) {
  int64_t steps = 0;
  for (auto it = m_held.lower_bound(first); it != m_held.end() && it->first <= last;) {
    for (const Held& row : it->second) write(row);
    m_rowsWritten += int64_t(it->second.size());
    m_heldRows -= int64_t(it->second.size());
    ++steps;
    it = m_held.erase(it);
  }
  return steps;
}

void FlightRecorderWriter::dropBefore(int64_t step) {
  for (auto it = m_held.begin(); it != m_held.end() && it->first < step;) {
    m_rowsDiscarded += int64_t(it->second.size());
    m_heldRows -= int64_t(it->second.size());
    it = m_held.erase(it);
  }
}

void FlightRecorderWriter::addSlice(const storage::SliceRow& slice) {
  hold(slice.step, Slice{slice});
}
void FlightRecorderWriter::addGpuKernel(const storage::SliceRow& s,
                                        const storage::GpuKernelRow& r) {
  hold(s.step, WithDetail<storage::GpuKernelRow>{s, r});
}
void FlightRecorderWriter::addGpuMemcpy(const storage::SliceRow& s,
                                        const storage::GpuMemcpyRow& r) {
  hold(s.step, WithDetail<storage::GpuMemcpyRow>{s, r});
}
void FlightRecorderWriter::addGpuMemset(const storage::SliceRow& s,
                                        const storage::GpuMemsetRow& r) {
  hold(s.step, WithDetail<storage::GpuMemsetRow>{s, r});
}
void FlightRecorderWriter::addGpuSync(const storage::SliceRow& s, const storage::GpuSyncRow& r) {
  hold(s.step, WithDetail<storage::GpuSyncRow>{s, r});
}
void FlightRecorderWriter::addCudaApi(const storage::SliceRow& s, const storage::CudaApiRow& r) {
  hold(s.step, WithDetail<storage::CudaApiRow>{s, r});
}
void FlightRecorderWriter::addGpuMemory(const storage::GpuMemoryRow& row) {
  hold(row.step, Held{row});
}

}  // namespace moewb::profiler::gpu
