// `moewb run` under a process limit lower than run.threads: a plain refusal, not a hang or an
// abort (issue 19, item 8: run.threads = 1024 under a pids limit aborted with exit 134; the
// pool's half-built workers then deadlocked the unwinding).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

// A command prefix that runs a program with at most `processes` processes/threads for its user:
// prlimit sets RLIMIT_NPROC, and as root (whom the limit does not bind) setpriv drops to nobody.
// Empty when the tools are missing.
std::string limitedPrefix(int processes) {
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) return "";
  std::string prefix = "timeout 60 prlimit --nproc=" + std::to_string(processes) + " ";
  if (::geteuid() == 0) {
    if (std::system("command -v setpriv >/dev/null 2>&1") != 0) return "";
    prefix += "setpriv --reuid=65534 --regid=65534 --clear-groups ";
  }
  return prefix;
}

TEST(CliLimits, MoreThreadsThanTheProcessLimitIsAPlainRefusal) {
  const std::string prefix = limitedPrefix(40);
  if (prefix.empty()) GTEST_SKIP() << "prlimit or setpriv is not installed";
  TempDir dir("cli-limits");
  ::chmod(dir.path().c_str(), 0777);  // nobody writes the trace here
  // The checkout may sit in a directory only root can read (mktemp -d): give nobody a copy.
  const std::string config = dir.file("tiny.toml");
  std::filesystem::copy_file(tinyConfig(), config);
  ::chmod(config.c_str(), 0644);
  if (runProgram(prefix + MOEWB_CLI_PATH + " --version", dir.path()).exitCode != 0) {
    GTEST_SKIP() << "the limited user cannot run " << MOEWB_CLI_PATH;
  }
  const std::string trace = dir.file("t.sqlite");
  for (const std::string ranks : {"1", "2"}) {
    ProcessResult r = runProgram(prefix + MOEWB_CLI_PATH + " run --config " + config +
                                     " --steps 2 --set run.threads=200 --set parallel.world_size=" +
                                     ranks + " --set parallel.fsdp=" + ranks + " --out " + trace,
                                 dir.path());
    EXPECT_EQ(r.exitCode, 1) << "ranks " << ranks << ": " << r.err;  // 124 = hung, 134 = abort
    EXPECT_NE(r.err.find("could not start thread"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("set run.threads to at most"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace moewb::cli::testing
