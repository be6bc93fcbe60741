// ActivityParser: one CUPTI activity buffer -> plain records (gpu/gpu_records.h), on the parser
// thread. Timestamps go through the ClockCalibration into the steady domain; kernel names are
// demangled once per distinct name (CUPTI shares one name pointer per kernel); API names come
// from cuptiGetCallbackName once per callback id. Records CUPTI left incomplete (a zero
// timestamp) are skipped and counted. Not thread-safe: one parser per capture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/clock_calibration.h"
#include "gpu/gpu_records.h"
#include "moewb/base/status.h"

namespace moewb::profiler::cupti {

class ActivityParser {
 public:
  explicit ActivityParser(const gpu::ClockCalibration* clock) : m_clock(clock) {}

  // Appends the records of `buffer` [0, validBytes) to `out`. Errors: kInternal from CUPTI when
  // the buffer cannot be walked (the records read before stay in `out`).
  Status parse(uint8_t* buffer, size_t validBytes, std::vector<gpu::Record>& out);
  int64_t incompleteRecords() const { return m_incomplete; }
  int64_t ignoredRecords() const { return m_ignored; }

 private:
  const std::string& kernelName(const char* mangled);
  const std::string& apiName(bool driver, uint32_t cbid);
  int64_t steady(uint64_t cuptiNs) const { return m_clock->toSteady(int64_t(cuptiNs)); }

  const gpu::ClockCalibration* m_clock;
  std::unordered_map<const char*, std::pair<std::string, std::string>> m_kernelNames;
  std::unordered_map<uint64_t, std::string> m_apiNames;
  int64_t m_incomplete = 0;
  int64_t m_ignored = 0;
};

}  // namespace moewb::profiler::cupti
