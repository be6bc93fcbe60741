// Clock reads and the short human formats for durations, sizes and counts.
#include "moewb/base/units.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace moewb {

int64_t steadyNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * kNsPerSecond + ts.tv_nsec;
}

int64_t unixNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * kNsPerSecond + ts.tv_nsec;
}

namespace {
std::string threeDigits(double v, const char* unit) {
  char buf[48];
  double a = std::fabs(v);
  const char* fmt = a >= 100 ? "%.0f %s" : a >= 10 ? "%.1f %s" : "%.2f %s";
  std::snprintf(buf, sizeof buf, fmt, v, unit);
  return buf;
}
}  // namespace

std::string formatDurationNs(int64_t durNs) {
  double a = std::fabs(double(durNs));
  if (a < kNsPerUs) return std::to_string(durNs) + " ns";
  if (a < kNsPerMs) return threeDigits(double(durNs) / kNsPerUs, "us");
  if (a < kNsPerSecond) return threeDigits(double(durNs) / kNsPerMs, "ms");
  return threeDigits(double(durNs) / kNsPerSecond, "s");
}

std::string formatBytes(int64_t bytes) {
  double a = std::fabs(double(bytes));
  if (a < kBytesPerKiB) return std::to_string(bytes) + " B";
  if (a < kBytesPerMiB) return threeDigits(double(bytes) / kBytesPerKiB, "KiB");
  if (a < kBytesPerGiB) return threeDigits(double(bytes) / kBytesPerMiB, "MiB");
  return threeDigits(double(bytes) / kBytesPerGiB, "GiB");
}

std::string formatCount(double value) {
  char buf[48];
  double a = std::fabs(value);
  if (a < 1e3) std::snprintf(buf, sizeof buf, "%.0f", value);
  else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.1fk", value / 1e3);
  else if (a < 1e9) std::snprintf(buf, sizeof buf, "%.2fM", value / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2fG", value / 1e9);
  return buf;
}

}  // namespace moewb
