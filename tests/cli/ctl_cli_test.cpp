// `moewb ctl` against a live `moewb run --control` on the real binaries: status, pause, a live
// patch (a config_change row with source "cli"), a refused key and an unknown command (exit 1
// with the run's error line), stop (the run exits 0 with status "stopped" and its socket file
// gone), "nothing listens" afterwards, SIGTERM also removing the socket, and a --control path
// taken by a regular file refused before the trace is created.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "cli_process.h"
#include "cli_wait.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli::testing {
namespace {

namespace fs = std::filesystem;

// A `moewb run --control SOCKET` of tiny.toml in `dir`, long enough to be stopped by hand.
pid_t startControlledRun(const TempDir& dir, const std::string& socket) {
  return spawnMoewb({"run", "--config", tinyConfig(), "--steps", "1000000", "--out",
                     dir.file("trace.sqlite"), "--quiet", "--set", "run.threads=1", "--control",
                     socket},
                    dir.file("run-err.txt"));
}

// The exit code of `pid` once it ends (-1 when it was killed by a signal).
int exitCodeOf(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

ProcessResult ctl(const std::string& socket, const std::string& command, const TempDir& dir) {
  return runMoewb("ctl " + socket + " " + command, dir.path());
}

TEST(CliCtl, DrivesALiveRunAndStopsIt) {
  TempDir dir("cli-ctl");
  const std::string socket = dir.file("control.sock");
  const pid_t child = startControlledRun(dir, socket);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(waitFor([&] { return ctl(socket, "status", dir).exitCode == 0; }))
      << readFile(dir.file("run-err.txt"));
  const ProcessResult status = ctl(socket, "status", dir);
  EXPECT_EQ(status.out.rfind("ok state=running step=", 0), 0u) << status.out;
  EXPECT_NE(status.out.find(" backend=cpu "), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("trace.sqlite"), std::string::npos) << status.out;

  EXPECT_EQ(ctl(socket, "pause", dir).out, "ok\n");
  EXPECT_NE(ctl(socket, "status", dir).out.find("state=paused"), std::string::npos);
  const ProcessResult patched = ctl(socket, "set optim.lr=1e-3", dir);
  EXPECT_EQ(patched.exitCode, 0) << patched.out << patched.err;
  EXPECT_EQ(patched.out, "ok\n");

  const ProcessResult refused = ctl(socket, "set model.d_model=32", dir);
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_EQ(refused.out.rfind("error: model.d_model cannot change while the run goes on", 0), 0u)
      << refused.out;
  const ProcessResult unknown = ctl(socket, "bogus", dir);
  EXPECT_EQ(unknown.exitCode, 1);
  EXPECT_EQ(unknown.out.rfind("error: unknown command 'bogus'", 0), 0u) << unknown.out;

  const ProcessResult stopped = ctl(socket, "stop", dir);
  EXPECT_EQ(stopped.exitCode, 0) << stopped.out << stopped.err;
  EXPECT_EQ(exitCodeOf(child), 0) << readFile(dir.file("run-err.txt"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket))) << "the socket file was left behind";

  auto reader = storage::TraceReader::open(dir.file("trace.sqlite"));
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk() && !runs->empty());
  EXPECT_EQ(runs->front().status, "stopped");
  auto changes = (*reader)->configChanges();
  ASSERT_TRUE(changes.isOk());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ(changes->front().key, "optim.lr");
  EXPECT_EQ(changes->front().source, "cli");

  const ProcessResult nobody = ctl(socket, "status", dir);
  EXPECT_EQ(nobody.exitCode, 1);
  EXPECT_EQ(nobody.out, "");
  EXPECT_EQ(nobody.err, "moewb ctl: no run is listening at " + socket + " (is `moewb run "
                        "--control " + socket + "` running?)\n");
}

TEST(CliCtl, SigtermRemovesTheSocket) {
  TempDir dir("cli-ctl-term");
  const std::string socket = dir.file("control.sock");
  const pid_t child = startControlledRun(dir, socket);
  ASSERT_GT(child, 0);
  ASSERT_TRUE(waitFor([&] { return ctl(socket, "status", dir).exitCode == 0; }))
      << readFile(dir.file("run-err.txt"));
  ASSERT_EQ(kill(child, SIGTERM), 0);
  EXPECT_EQ(exitCodeOf(child), 0) << readFile(dir.file("run-err.txt"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(socket))) << "the socket file was left behind";
}

TEST(CliCtl, AControlPathTakenByAFileIsRefusedBeforeTheTrace) {
  TempDir dir("cli-ctl-taken");
  const std::string taken = dir.file("taken");
  {
    std::ofstream(taken) << "keep me\n";
  }
  const ProcessResult run = runMoewb("run --config " + tinyConfig() + " --steps 1 --quiet --out " +
                                         dir.file("trace.sqlite") + " --control " + taken,
                                     dir.path());
  EXPECT_EQ(run.exitCode, 2);
  EXPECT_NE(run.err.find("moewb run: --control: control socket path '" + taken +
                         "' exists and is not a socket"),
            std::string::npos)
      << run.err;
  EXPECT_EQ(readFile(taken), "keep me\n");
  EXPECT_FALSE(fs::exists(dir.file("trace.sqlite")));

  const ProcessResult missingDir = runMoewb("run --config " + tinyConfig() + " --steps 1 --out " +
                                                dir.file("t2.sqlite") + " --control " +
                                                dir.file("no/such/dir.sock"),
                                            dir.path());
  EXPECT_EQ(missingDir.exitCode, 2);
  EXPECT_NE(missingDir.err.find("does not exist"), std::string::npos) << missingDir.err;
}

TEST(CliCtl, NeedsACommand) {
  TempDir dir("cli-ctl-args");
  const ProcessResult bare = runMoewb("ctl " + dir.file("s"), dir.path());
  EXPECT_EQ(bare.exitCode, 2) << bare.out << bare.err;
}

}  // namespace
}  // namespace moewb::cli::testing
