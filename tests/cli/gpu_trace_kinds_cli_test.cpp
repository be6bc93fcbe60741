// `moewb run --gpu-trace-kinds`: a bad list or a list without --gpu-trace exits 2 with a message
// naming the option and what is accepted, before anything is written; the help says which kinds
// attribution needs.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

TEST(CliGpuTraceKinds, BadListsExitTwoNamingTheAcceptedKinds) {
  TempDir dir("cli-gpu-trace-kinds");
  const std::string trace = dir.file("never.sqlite");
  const std::string run = "run --config " + tinyConfig() + " --steps 2 --out " + trace + " ";
  const std::pair<std::string, std::string> cases[] = {
      {"--gpu-trace-kinds kernel", "--gpu-trace-kinds requires --gpu-trace"},
      {"--gpu-trace --gpu-trace-kinds kernel,bogus",
       "--gpu-trace-kinds: 'bogus' is not a GPU trace kind; accepted: a comma-separated list of "
       "kernel, memcpy, memset, memory, sync, runtime, driver, nvtx, launch_api, or the sets all, "
       "launches"},
      {"--gpu-trace --gpu-trace-kinds kernel,,nvtx", "have an empty entry"},
  };
  for (const auto& [options, message] : cases) {
    ProcessResult r = runMoewb(run + options, dir.path());
    EXPECT_EQ(r.exitCode, 2) << options;
    EXPECT_NE(r.err.find(message), std::string::npos) << options << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(trace)) << options;
  }
}

TEST(CliGpuTraceKinds, HelpSaysWhatAttributionNeeds) {
  TempDir dir("cli-gpu-trace-kinds-help");
  ProcessResult r = runMoewb("run --help", dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const std::string help = r.out + r.err;
  EXPECT_NE(help.find("--gpu-trace-kinds"), std::string::npos) << help;
  EXPECT_NE(help.find("without runtime, driver or launch_api its kernels cannot be attributed"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("the sets all and launches"), std::string::npos) << help;
}

}  // namespace
}  // namespace moewb::cli::testing
