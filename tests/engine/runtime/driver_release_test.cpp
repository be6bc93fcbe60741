// nvidiaDriverReleaseFrom on the version file's texts of the proprietary and the open kernel
// module (the H200 machines run the open one: "... Open Kernel Module for x86_64  580.159.04 ..."),
// and on texts without a release.
#include "runtime/driver_release.h"

#include <gtest/gtest.h>

namespace moewb::engine {
namespace {

TEST(DriverRelease, ReadsTheReleaseOfBothKernelModules) {
  EXPECT_EQ(nvidiaDriverReleaseFrom(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                "Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Oct 21 2025\nGCC version:  gcc "
                "version 12.3.0\n"),
            "580.159.04");
  EXPECT_EQ(nvidiaDriverReleaseFrom("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  "
                                    "Sun May 12 19:39:15 UTC 2024\n"),
            "535.183.01");
}

TEST(DriverRelease, NoReleaseGivesEmpty) {
  EXPECT_EQ(nvidiaDriverReleaseFrom(""), "");
  EXPECT_EQ(nvidiaDriverReleaseFrom("GCC version: gcc version 12.3.0"), "");  // no marker
  EXPECT_EQ(nvidiaDriverReleaseFrom("NVRM version: NVIDIA UNIX Kernel Module for x86_64 2025"),
            "");  // no dotted number after it
}

}  // namespace
}  // namespace moewb::engine
