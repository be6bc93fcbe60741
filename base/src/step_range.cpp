// parseStepRange (step_range.h).
#include "moewb/base/step_range.h"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <limits>

namespace moewb {
namespace {

// A base-10 int64 from [begin, stop) exactly, or false (empty, junk, out of range).
bool parseInt64(const char* begin, const char* stop, int64_t* value) {
  // strtoll would skip leading spaces and take a '+': the text must start with the number.
  if (begin == stop || !((*begin >= '0' && *begin <= '9') || *begin == '-')) return false;
  errno = 0;
  char* rest = nullptr;
  const long long parsed = std::strtoll(begin, &rest, 10);
  if (rest != stop || errno == ERANGE) return false;
  *value = parsed;
  return true;
}

}  // namespace

Result<StepRange> parseStepRange(const std::string& text, const std::string& option) {
  const auto bad = [&] {
    return invalidArgument(option + " '" + text + "' is not a step range; accepted: A:B with " +
                           "0 <= A < B (steps A..B-1) or a single step A");
  };
  const char* begin = text.c_str();
  const char* stop = begin + text.size();
  const size_t colon = text.find(':');
  StepRange range;
  if (colon == std::string::npos) {
    if (!parseInt64(begin, stop, &range.first)) return bad();
    if (range.first == std::numeric_limits<int64_t>::max()) return bad();
    range.end = range.first + 1;
  } else if (!parseInt64(begin, begin + colon, &range.first) ||
             !parseInt64(begin + colon + 1, stop, &range.end)) {
    return bad();
  }
  if (range.first < 0 || range.end <= range.first) return bad();
  return range;
}

Result<int64_t> parseStepNumber(const std::string& text) {
  int64_t step = -1;
  const bool digitsOnly = !text.empty() && text.front() != '-';
  if (!digitsOnly || !parseInt64(text.c_str(), text.c_str() + text.size(), &step) || step < 0) {
    const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
    return invalidArgument("'" + shown + "' is not a step number (a whole number >= 0)");
  }
  return step;
}

}  // namespace moewb
