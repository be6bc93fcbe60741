// `moewb launch`: every rank gets its torchrun-style environment; a rank killed by SIGKILL makes
// the launcher stop the others after --grace-s and exit non-zero naming the rank and the signal;
// ranks that exit on their own within the grace period are not signalled; SIGTERM to the launcher
// reaches the ranks; bad arguments exit 2 saying what is accepted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cli_process.h"

extern char** environ;

namespace moewb::cli::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LaunchCommand, EveryRankGetsItsEnvironment) {
  TempDir dir("launch-env");
  ProcessResult r = runMoewb(
      "launch --nproc 3 -- sh -c "
      "'echo rank=$RANK/$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE master=$MASTER_ADDR'",
      dir.path());
  EXPECT_EQ(r.exitCode, 0) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string line =
        "rank=" + std::to_string(rank) + "/3 local=" + std::to_string(rank) + "/3 master=127.0.0.1";
    EXPECT_TRUE(contains(r.out, line)) << "missing '" << line << "' in:\n" << r.out;
  }
  EXPECT_TRUE(contains(r.err, "MASTER_PORT=")) << r.err;
}

TEST(LaunchCommand, AKilledRankMakesTheLauncherStopTheOthers) {
  TempDir dir("launch-kill");
  const auto start = Clock::now();
  ProcessResult r = runMoewb(
      "launch --nproc 3 --grace-s 1 -- sh -c "
      "'if [ \"$RANK\" = 1 ]; then kill -9 $$; fi; exec sleep 60'",
      dir.path());
  const auto elapsed = Clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(4));
  EXPECT_EQ(r.exitCode, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(contains(r.err, "moewb launch: rank 1 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by signal 9 (SIGKILL)")) << r.err;
  EXPECT_TRUE(contains(r.err,
                       "ranks 0, 2 still running 1.0 s after rank 1 failed; sending "
                       "SIGTERM"))
      << r.err;
}

TEST(LaunchCommand, RanksThatStopOnTheirOwnAreNotSignalled) {
  TempDir dir("launch-grace");
  ProcessResult r = runMoewb(
      "launch --nproc 3 --grace-s 4 -- sh -c "
      "'if [ \"$RANK\" = 2 ]; then exit 7; fi; sleep 0.3; exit 1'",
      dir.path());
  EXPECT_EQ(r.exitCode, 7) << r.err;  // the first failure, not the later ones
  EXPECT_TRUE(contains(r.err, "moewb launch: rank 2 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 7")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with code 1")) << r.err;
  EXPECT_FALSE(contains(r.err, "sending SIGTERM")) << r.err;
}

TEST(LaunchCommand, SigtermToTheLauncherReachesTheRanks) {
  TempDir dir("launch-term");
  const std::string outFile = dir.file("out.txt");
  std::vector<std::string> args = {MOEWB_CLI_PATH, "launch", "--nproc", "2",
                                   "--",           "sh",     "-c",      "echo up; exec sleep 60"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, outFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, dir.file("err.txt").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t launcher = 0;
  ASSERT_EQ(posix_spawn(&launcher, MOEWB_CLI_PATH, &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  while (Clock::now() < deadline && readFile(outFile) != "up\nup\n") {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(readFile(outFile), "up\nup\n");
  std::this_thread::sleep_for(milliseconds(100));  // both ranks are in sleep now
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  int status = 0;
  pid_t done = 0;
  const auto stopBy = Clock::now() + std::chrono::seconds(3);
  while ((done = waitpid(launcher, &status, WNOHANG)) == 0 && Clock::now() < stopBy) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  if (done == 0) kill(launcher, SIGKILL), waitpid(launcher, &status, 0);
  ASSERT_EQ(done, launcher) << "the launcher did not exit within 3 s of SIGTERM";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(contains(readFile(dir.file("err.txt")), "got SIGTERM; passed it on to the ranks"))
      << readFile(dir.file("err.txt"));
}

TEST(LaunchCommand, BadArgumentsExitTwoSayingWhatIsAccepted) {
  TempDir dir("launch-args");
  ProcessResult r = runMoewb("launch --nproc 0 -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--nproc 0 is not accepted")) << r.err;
  EXPECT_TRUE(contains(r.err, "1..4096")) << r.err;
  r = runMoewb("launch --nproc 2", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "no program to run; put it after --")) << r.err;
  r = runMoewb("launch --nproc 2 --", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  r = runMoewb("launch -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--nproc is required")) << r.err;
  r = runMoewb("launch --nproc 2 --grace-s -1 -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "--grace-s")) << r.err;
  r = runMoewb("launch --nproc 2 --master-port 70000 -- true", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "1..65535")) << r.err;
  r = runMoewb("launch --nproc 2 -- moewb-no-such-program-xyz", dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_TRUE(contains(r.err, "program 'moewb-no-such-program-xyz' not found on PATH")) << r.err;
}

}  // namespace
}  // namespace moewb::cli::testing
