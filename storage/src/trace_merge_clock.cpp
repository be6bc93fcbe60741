// Clock alignment of merged traces (see trace_merge.h): the offset of one input against the
// reference is the median difference of the end times of the collectives both ran. The median
// ignores the few collectives where one peer was descheduled after the others had finished.
// Cost: O(n log n) in the number of collectives of `other`.
#include <algorithm>

#include "sqlite_trace_reader.h"
#include "trace_merge_internal.h"

namespace moewb::storage {

const char* clockAlignmentName(ClockAlignmentMethod method) {
  switch (method) {
    case ClockAlignmentMethod::kReference:
      return "reference";
    case ClockAlignmentMethod::kCollectives:
      return "collectives";
    case ClockAlignmentMethod::kRunStart:
      return "run_start";
  }
  return "reference";
}

namespace detail {

int64_t medianNs(std::vector<int64_t>& valuesNs) {
  if (valuesNs.empty()) return 0;
  const size_t middle = valuesNs.size() / 2;
  std::nth_element(valuesNs.begin(), valuesNs.begin() + std::ptrdiff_t(middle), valuesNs.end());
  const int64_t upper = valuesNs[middle];
  if (valuesNs.size() % 2 == 1) return upper;
  const int64_t lower =
      *std::max_element(valuesNs.begin(), valuesNs.begin() + std::ptrdiff_t(middle));
  // lower + (upper - lower) / 2 without overflow, rounded toward negative infinity.
  const int64_t halfGap = int64_t((uint64_t(upper) - uint64_t(lower)) / 2);
  return lower + halfGap;
}

ClockAlignment alignClock(const MergeSource& reference, const MergeSource& other) {
  std::vector<int64_t> differencesNs;
  for (const auto& [key, endNs] : other.collectiveEnds) {
    auto it = reference.collectiveEnds.find(key);
    // Times from the files: a difference beyond int64 saturates.
    if (it != reference.collectiveEnds.end()) {
      differencesNs.push_back(detail::saturatingSub(it->second, endNs));
    }
  }
  ClockAlignment alignment;
  if (differencesNs.empty()) {
    alignment.method = ClockAlignmentMethod::kRunStart;
    alignment.offsetNs = detail::saturatingSub(reference.run.startNs, other.run.startNs);
    return alignment;
  }
  alignment.method = ClockAlignmentMethod::kCollectives;
  alignment.sharedCollectives = int64_t(differencesNs.size());
  alignment.offsetNs = medianNs(differencesNs);
  return alignment;
}

}  // namespace detail
}  // namespace moewb::storage
