// A trace file that stops growing mid-run (a full disk, here a file-size limit) ends the run
// within a step or so of the first failed write, exit 1 naming the file (issue 19, item 4),
// instead of training on to the last step and only then reporting it.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

TEST(CliFullDisk, AFailedTraceWriteStopsTheRunAtTheNextStep) {
  TempDir dir("full-disk");
  const std::string trace = dir.file("limited.sqlite");
  // bash's `ulimit -f` counts 1024-byte blocks; SIGXFSZ ignored so the write fails with EFBIG.
  const std::string command = "-c 'ulimit -f 256; trap \"\" XFSZ; exec " +
                              std::string(MOEWB_CLI_PATH) + " run -c " + tinyConfig() +
                              " --steps 100000 -q -o " + trace + "'";
  const auto start = std::chrono::steady_clock::now();
  ProcessResult r = runProgram("bash " + command, dir.path());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  EXPECT_NE(r.err.find(trace), std::string::npos) << r.err;
  // 100000 tiny steps take minutes; the limit is reached within a few hundred.
  EXPECT_LT(seconds, 60.0) << r.err;
}

}  // namespace
}  // namespace moewb::cli::testing
