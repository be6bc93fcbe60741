// Issue 19, item 7, on the real binary: SIGTERM stops `moewb run` like Ctrl-C (status "stopped",
// every step committed), the progress line's committed count never overstates what a SIGKILL
// keeps (4 in-process ranks), `moewb info` tells a live writer from a dead one by the heartbeat,
// and a stalled in-process rank ends the process at the timeout instead of when it returns.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_process.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Steps of the first run per rank (-1 when the file cannot be read yet).
std::vector<int64_t> stepsPerRank(const std::string& trace, int32_t ranks) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return {};
  auto runs = (*reader)->runs();
  if (!runs.isOk() || runs->empty()) return {};
  auto steps = (*reader)->steps(runs->front().id);
  if (!steps.isOk()) return {};
  std::vector<int64_t> counts(size_t(ranks), 0);
  for (const auto& s : *steps) {
    if (s.rank >= 0 && s.rank < ranks) ++counts[size_t(s.rank)];
  }
  return counts;
}

std::string runStatus(const std::string& trace) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return "unreadable: " + reader.status().toString();
  auto runs = (*reader)->runs();
  return runs.isOk() && !runs->empty() ? runs->front().status : "no run";
}

// The largest "(N committed)" the progress line printed so far; -1 if none.
int64_t lastCommittedShown(const std::string& err) {
  static const std::regex committed(R"(\((\d+) committed\))");
  int64_t last = -1;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), committed);
       it != std::sregex_iterator(); ++it) {
    last = std::max<int64_t>(last, std::stoll((*it)[1].str()));
  }
  return last;
}

TEST(CliSignals, SigtermStopsLikeCtrlC) {
  TempDir dir("cli-sigterm");
  const std::string trace = dir.file("term.sqlite");
  const std::string err = dir.file("err.txt");
  const pid_t child = spawnMoewb({"run", "--config", tinyConfig(), "--steps", "100000", "--out",
                                  trace, "--set", "run.threads=1"},
                                 err);
  ASSERT_GT(child, 0);
  std::vector<int64_t> seen;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    seen = stepsPerRank(trace, 1);
    if (!seen.empty() && seen[0] >= 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(seen.empty());
  ASSERT_GE(seen[0], 3) << "the run never committed 3 steps";
  ASSERT_EQ(kill(child, SIGTERM), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "SIGTERM killed the run instead of stopping it";
  EXPECT_EQ(WEXITSTATUS(status), 0) << readFile(err);
  EXPECT_EQ(runStatus(trace), "stopped");
  const std::vector<int64_t> kept = stepsPerRank(trace, 1);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_GE(kept[0], seen[0]);
  EXPECT_NE(readFile(err).find("stopped after " + std::to_string(kept[0]) + " steps"),
            std::string::npos)
      << readFile(err);
  const ProcessResult info = runMoewb("info --no-config " + trace, dir.path());
  EXPECT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("status stopped"), std::string::npos) << info.out;
}

TEST(CliSignals, SigkillKeepsEveryStepShownAsCommittedWithFourRanks) {
  TempDir dir("cli-sigkill-ranks");
  const std::string trace = dir.file("ranks.sqlite");
  const std::string errPath = dir.file("err.txt");
  // Not a terminal: one progress line per 10% (100 steps).
  const pid_t child = spawnMoewb({"run", "--config", tinyConfig(), "--steps", "1000", "--ranks",
                                  "4", "--out", trace, "--set", "run.threads=1"},
                                 errPath);
  ASSERT_GT(child, 0);
  int64_t shown = -1;
  const auto deadline = Clock::now() + std::chrono::seconds(300);
  while (Clock::now() < deadline && shown < 100) {
    shown = lastCommittedShown(readFile(errPath));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(shown, 100) << "no progress line showed 100 committed steps: " << readFile(errPath);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before the kill";
  shown = lastCommittedShown(readFile(errPath));  // every line printed before the kill
  const std::vector<int64_t> kept = stepsPerRank(trace, 4);
  ASSERT_EQ(kept.size(), 4u);
  for (int32_t r = 0; r < 4; ++r) {
    EXPECT_GE(kept[size_t(r)], shown) << "rank " << r << " lost steps the progress line showed";
  }
  EXPECT_EQ(runStatus(trace), "running");

  // Just killed: the heartbeat is fresh, so the writer still looks alive.
  ProcessResult info = runMoewb("info --no-config " + trace, dir.path());
  EXPECT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("status running (last heartbeat "), std::string::npos) << info.out;
  // An hour later the same file says its writer died.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(trace.c_str(), &db), SQLITE_OK);
  const std::string hourAgo = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch() - std::chrono::hours(1))
          .count());
  const std::string sql =
      "UPDATE meta SET value = '" + hourAgo + "' WHERE key = 'heartbeat_unix_ms'";
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_EQ(sqlite3_changes(db), 1);
  sqlite3_close(db);
  info = runMoewb("info --no-config " + trace, dir.path());
  EXPECT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("status ended without closing (writer died; last heartbeat 60 min ago)"),
            std::string::npos)
      << info.out;
}

TEST(CliSignals, StalledInProcessRankEndsTheProcessAtTheTimeout) {
  TempDir dir("cli-stuck-rank");
  const std::string trace = dir.file("stuck.sqlite");
  // Rank 1 sleeps 120 s before its step 3; the peers give up after 2 s.
  const auto start = Clock::now();
  const ProcessResult r =
      runProgram("MOEWB_TEST_STALL_RANK=1:3:120 " + std::string(MOEWB_CLI_PATH) + " run --config " +
                     tinyConfig() + " --steps 50 --ranks 2 --out " + trace +
                     " --set run.threads=1 --set parallel.timeout_ms=2000",
                 dir.path());
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.exitCode, 1) << r.err;
  // Start-up and 3 tiny steps take well under 10 s; the timeout and the grace 2 s each.
  EXPECT_LT(seconds, 30.0) << "the process waited for the stalled rank";
  EXPECT_NE(r.err.find("rank 1 stuck in step 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("steps committed before the failure are kept in"), std::string::npos)
      << r.err;
  EXPECT_EQ(runStatus(trace), "failed");
  const std::vector<int64_t> kept = stepsPerRank(trace, 2);
  EXPECT_EQ(kept, (std::vector<int64_t>{3, 3}));
}

}  // namespace
}  // namespace moewb::cli::testing
