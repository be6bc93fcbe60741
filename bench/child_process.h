// Helpers of the benchmarks that measure each case in a child process of its own (the program
// re-run with --child), so that one case's CUDA / CUPTI state never leaks into another.
// Header-only (the CUDA benchmarks include it from .cu files too).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace moewb::bench {

// The first line `command` prints on stdout (at most 1 KiB), or nullopt when it could not be
// started, printed nothing or exited with a non-zero status.
inline std::optional<std::string> childOutputLine(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  char line[1024] = {};
  const bool got = std::fgets(line, sizeof line, pipe) != nullptr;
  const int status = pclose(pipe);
  if (!got || status != 0) return std::nullopt;
  return std::string(line);
}

// Median of `values` (the mean of the two middle ones for an even count); NaN when empty.
inline double median(std::vector<double> values) {
  if (values.empty()) return std::nan("");
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

}  // namespace moewb::bench
