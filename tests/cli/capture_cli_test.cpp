// `moewb capture` argument handling on the CPU machine: a missing program, an existing output
// without --force and a missing command are refused with exit 2 before anything runs; a build
// without CUDA says capture needs one; in a CUDA build a program that never touches CUDA runs,
// its exit code comes back and no trace is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

TEST(CaptureCommand, RefusesAProgramThatDoesNotExist) {
  TempDir dir("capture-missing");
  ProcessResult r =
      runMoewb("capture -o " + dir.file("t.sqlite") + " -- moewb-no-such-program-xyz", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("program 'moewb-no-such-program-xyz' not found"), std::string::npos)
      << r.err;
  r = runMoewb("capture -o " + dir.file("t.sqlite") + " -- ./not/here", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("not found or not executable"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("t.sqlite")));
}

TEST(CaptureCommand, RefusesAnExistingFileWithoutForce) {
  TempDir dir("capture-exists");
  { std::ofstream(dir.file("t.sqlite")) << "keep me"; }
  ProcessResult r = runMoewb("capture -o " + dir.file("t.sqlite") + " -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("already exists; pass --force"), std::string::npos) << r.err;
  EXPECT_EQ(readFile(dir.file("t.sqlite")), "keep me");
}

TEST(CaptureCommand, NeedsAProgram) {
  TempDir dir("capture-none");
  ProcessResult r = runMoewb("capture -o " + dir.file("t.sqlite"), dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  r = runMoewb("capture --flush-ms 0 -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
}

#ifdef MOEWB_CUDA_BUILD
TEST(CaptureCommand, RunsAProgramWithoutCudaAndForwardsItsExitCode) {
  TempDir dir("capture-nocuda");
  ProcessResult r =
      runMoewb("capture -o " + dir.file("t.sqlite") + " -- sh -c 'echo hello; exit 7'", dir.path());
  EXPECT_EQ(r.exitCode, 7) << r.err;
  EXPECT_NE(r.out.find("hello"), std::string::npos);
  EXPECT_NE(r.err.find("never initialised CUDA; no trace was written"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("t.sqlite")));
}
#else
TEST(CaptureCommand, SaysItNeedsACudaBuild) {
  TempDir dir("capture-cpu");
  ProcessResult r = runMoewb("capture -o " + dir.file("t.sqlite") + " -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("capture needs a CUDA build"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("t.sqlite")));
}
#endif

}  // namespace
}  // namespace moewb::cli::testing
