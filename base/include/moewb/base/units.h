// Time and byte units. Times are int64 nanoseconds on the steady (monotonic) clock unless a name
// says otherwise (`...UnixNs`); byte counts are int64. Names carry the unit: startNs, durNs, bytes.
// The formatting helpers produce the short human strings used by the CLI and the GUI.
#pragma once

#include <cstdint>
#include <string>

namespace moewb {

inline constexpr int64_t kNsPerUs = 1'000;
inline constexpr int64_t kNsPerMs = 1'000'000;
inline constexpr int64_t kNsPerSecond = 1'000'000'000;
inline constexpr int64_t kBytesPerKiB = 1024;
inline constexpr int64_t kBytesPerMiB = 1024 * 1024;
inline constexpr int64_t kBytesPerGiB = 1024 * 1024 * 1024;

// Monotonic clock (CLOCK_MONOTONIC), the clock domain of every host event in a trace.
int64_t steadyNowNs();
// Wall clock, nanoseconds since the Unix epoch (for "created at" metadata only).
int64_t unixNowNs();

// "812 ns", "12.3 us", "4.56 ms", "1.23 s" (three significant digits).
std::string formatDurationNs(int64_t durNs);
// "512 B", "1.5 KiB", "3.25 MiB", "2.00 GiB".
std::string formatBytes(int64_t bytes);
// "12.3k", "4.56M" for counts and rates.
std::string formatCount(double value);

}  // namespace moewb
