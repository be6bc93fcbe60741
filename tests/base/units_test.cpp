#include "moewb/base/units.h"

#include <gtest/gtest.h>

namespace moewb {
namespace {

TEST(Units, FormatsDurations) {
  EXPECT_EQ(formatDurationNs(812), "812 ns");
  EXPECT_EQ(formatDurationNs(12'345), "12.3 us");
  EXPECT_EQ(formatDurationNs(4'560'000), "4.56 ms");
  EXPECT_EQ(formatDurationNs(123'000'000'000), "123 s");
}

TEST(Units, FormatsBytesAndCounts) {
  EXPECT_EQ(formatBytes(512), "512 B");
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
  EXPECT_EQ(formatBytes(2 * kBytesPerGiB), "2.00 GiB");
  EXPECT_EQ(formatCount(12'345), "12.3k");
}

TEST(Units, SteadyClockIsMonotonic) {
  int64_t a = steadyNowNs();
  int64_t b = steadyNowNs();
  EXPECT_LE(a, b);
  EXPECT_GT(unixNowNs(), int64_t(1'600'000'000) * kNsPerSecond);
}

}  // namespace
}  // namespace moewb
