// A `moewb run` killed with SIGKILL mid-way leaves a trace that opens and holds every step that was
// committed before the kill.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "cli_process.h"
#include "cli_wait.h"
#include "moewb/storage/trace_reader.h"

extern char** environ;

namespace moewb::cli::testing {
namespace {

TEST(CliKill, SigkillKeepsEveryCommittedStep) {
  TempDir dir("cli-kill");
  std::string trace = dir.file("killed.sqlite");
  std::string config = tinyConfig();
  std::vector<std::string> args = {MOEWB_CLI_PATH, "run",  "--config", config, "--steps",
                                   "100000",       "--out", trace,     "--quiet"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, MOEWB_CLI_PATH, nullptr, nullptr, argv.data(), environ), 0);

  int64_t seen = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    seen = committedSteps(trace);
    if (seen >= 5) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(seen, 5) << "the run never committed 5 steps";
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));

  auto reader = storage::TraceReader::open(trace);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, "running");  // it never finished
  auto steps = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  ASSERT_GE(int64_t(steps->size()), seen);
  for (size_t i = 0; i < steps->size(); ++i) EXPECT_EQ((*steps)[i].step, int64_t(i));
  auto load = (*reader)->expertLoad(0, steps->back().step);
  ASSERT_TRUE(load.isOk());
  EXPECT_EQ(load->size(), steps->size() * 2 * 8);
}

}  // namespace
}  // namespace moewb::cli::testing
