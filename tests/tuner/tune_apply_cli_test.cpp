// `moewb tune --apply` end to end on the real binary: a study (written through the tuner's
// StudyStore with chosen measurements, so the pick is known) whose pick changes a live key
// (optim.lr) and one that needs a restart (model.seq_len), applied to a real `moewb run
// --control` of tiny.toml on the CPU: --dry-run prints the plan and sends nothing (no
// config_change row while the run goes on), the real apply is ONE patch recorded with source
// "tuner", a second apply has nothing to send; bad arguments exit 2, nothing listening exits 1,
// and a study file that is damaged or not a study is refused (exit 2) and left byte-identical.
// Waits are on conditions with generous deadlines, never fixed sleeps.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../cli/cli_process.h"
#include "../cli/cli_wait.h"
#include "moewb/engine/config.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/tuner/study_store.h"

namespace moewb::cli::testing {
namespace {

namespace fs = std::filesystem;

// The exit code of `pid` once it ends (-1 when it was killed by a signal).
int exitCodeOf(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// A study of tiny.toml whose trials have `settings` (verdict ok); the last one is the pick (it
// has the most tokens/s).
void writeStudy(const std::string& path, const std::vector<std::string>& settings) {
  auto base = engine::loadConfigFile(tinyConfig());
  ASSERT_TRUE(base.isOk()) << base.status().toString();
  tuner::StudyInfo info;
  info.configPath = tinyConfig();
  info.configToml = engine::toToml(*base);
  info.objective = "tokens_per_s";
  info.strategy = "exhaustive";
  info.trialSteps = 3;
  info.gateSteps = 3;
  info.startedAt = "2026-12-02T00:00:00Z";
  info.gitCommit = "unknown";
  info.host = "test (cpu)";
  auto store = tuner::StudyStore::create(path, info);
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  double tokensPerSecond = 1000;
  for (const std::string& s : settings) {
    tuner::TrialRecord r;
    r.settings = s;
    r.steps = 3;
    r.tokensPerSecond = tokensPerSecond;
    r.stepTimeMs = 512.0 * 1000.0 / tokensPerSecond;
    r.peakBytes = 1 << 20;
    r.finalLoss = 5.0;
    r.losses = {5.5, 5.2, 5.0};
    r.gradNorms = {1.0, 0.9, 0.8};
    r.stepMs = {r.stepTimeMs, r.stepTimeMs, r.stepTimeMs};
    ASSERT_TRUE((*store)->addTrial(r).isOk());
    tokensPerSecond += 500;
  }
}

std::vector<storage::ConfigChangeRow> changesIn(const std::string& trace) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return {};
  auto rows = (*reader)->configChanges();
  return rows.isOk() ? *rows : std::vector<storage::ConfigChangeRow>{};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(TuneApplyCli, ThePickGoesToARunningRunAsOnePatchWithSourceTuner) {
  TempDir dir("tune-apply");
  const std::string study = dir.file("study.sqlite");
  writeStudy(study, {"optim.lr=3e-3,model.seq_len=64", "optim.lr=1e-3,model.seq_len=32"});
  const std::string studyBytes = readFile(study);
  const std::string socket = dir.file("c.sock");
  const std::string trace = dir.file("trace.sqlite");
  const pid_t child = spawnMoewb({"run", "--config", tinyConfig(), "--steps", "1000000", "--out",
                                  trace, "--quiet", "--set", "run.threads=1", "--control", socket},
                                 dir.file("run-err.txt"));
  ASSERT_GT(child, 0);
  ASSERT_TRUE(waitFor([&] { return committedSteps(trace) >= 1; })) << readFile(dir.file("run-err.txt"));
  const std::string apply = "tune --apply " + study + " --control " + socket;

  // --dry-run: the plan, and nothing sent while the run goes on.
  const ProcessResult dry = runMoewb(apply + " --dry-run", dir.path());
  EXPECT_EQ(dry.exitCode, 0) << dry.out << dry.err;
  EXPECT_TRUE(contains(dry.out, "trial 2 of " + study + " (the pick)")) << dry.out;
  EXPECT_TRUE(contains(dry.out,
                       "send (one live patch, source tuner):\n"
                       "  optim.lr = 0.001 (the run has 0.003)\n"))
      << dry.out;
  EXPECT_TRUE(contains(dry.out,
                       "needs a restart (not live on this run; never sent):\n"
                       "  model.seq_len = 32 (the run has 64)\n"))
      << dry.out;
  EXPECT_TRUE(contains(dry.out, "dry run: nothing sent")) << dry.out;
  const int64_t afterDry = committedSteps(trace);
  ASSERT_TRUE(waitFor([&] { return committedSteps(trace) >= afterDry + 3; }));
  EXPECT_TRUE(changesIn(trace).empty()) << "the dry run sent a patch";

  // For real: one `apply`, the run's answer printed, one row with source "tuner".
  const ProcessResult real = runMoewb(apply, dir.path());
  EXPECT_EQ(real.exitCode, 0) << real.out << real.err;
  EXPECT_TRUE(contains(real.out, "sent: apply optim.lr=0.001\nrun: ok\n")) << real.out;
  EXPECT_TRUE(contains(real.out, "model.seq_len = 32 (the run has 64)")) << real.out;
  ASSERT_TRUE(waitFor([&] { return !changesIn(trace).empty(); }));
  const std::vector<storage::ConfigChangeRow> rows = changesIn(trace);
  ASSERT_EQ(rows.size(), 1u) << "a key that needs a restart was sent";
  EXPECT_EQ(rows[0].key, "optim.lr");
  EXPECT_EQ(rows[0].source, "tuner");
  EXPECT_DOUBLE_EQ(std::stod(rows[0].newValue), 1e-3);

  // The run has the pick's live settings now: nothing to send (exit 0, no new row).
  const ProcessResult again = runMoewb(apply, dir.path());
  EXPECT_EQ(again.exitCode, 0) << again.out << again.err;
  EXPECT_TRUE(contains(again.out, "nothing to send")) << again.out;
  EXPECT_TRUE(contains(again.out, "unchanged (the run has them): optim.lr")) << again.out;

  // --trial picks another trial: the base's values go back live.
  const ProcessResult first = runMoewb(apply + " --trial 1 --dry-run", dir.path());
  EXPECT_EQ(first.exitCode, 0) << first.out << first.err;
  EXPECT_TRUE(contains(first.out, "trial 1 of " + study + ": ")) << first.out;
  EXPECT_TRUE(contains(first.out, "optim.lr = 0.003 (the run has 0.001)")) << first.out;

  EXPECT_EQ(runMoewb("ctl " + socket + " stop", dir.path()).exitCode, 0);
  EXPECT_EQ(exitCodeOf(child), 0) << readFile(dir.file("run-err.txt"));
  EXPECT_EQ(changesIn(trace).size(), 1u);
  EXPECT_EQ(readFile(study), studyBytes) << "the study file was modified";

  // Nothing listens any more: exit 1 with the ctl client's message.
  const ProcessResult nobody = runMoewb(apply, dir.path());
  EXPECT_EQ(nobody.exitCode, 1) << nobody.out;
  EXPECT_EQ(nobody.err, "moewb tune: no run is listening at " + socket +
                            " (is `moewb run --control " + socket + "` running?)\n");
}

TEST(TuneApplyCli, BadArgumentsExit2) {
  TempDir dir("tune-apply-args");
  const std::string study = dir.file("study.sqlite");
  writeStudy(study, {"optim.lr=1e-3"});
  const std::string socket = dir.file("nobody.sock");
  const std::pair<std::string, std::string> cases[] = {
      {"tune --apply " + study, "--apply needs --control PATH"},
      {"tune --control " + socket, "--control and --dry-run go with --apply STUDY"},
      {"tune --apply " + study + " --control " + socket + " -o x.toml", "--apply takes no"},
      {"tune --apply " + study + " --control " + socket + " --trial 7", "--trial 7: no such trial"},
      {"tune --apply " + dir.file("missing.sqlite") + " --control " + socket, "missing.sqlite"},
  };
  for (const auto& [args, expected] : cases) {
    const ProcessResult r = runMoewb(args, dir.path());
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, expected)) << args << "\n" << r.err;
  }
}

TEST(TuneApplyCli, ADamagedStudyIsRefusedAndLeftByteIdentical) {
  TempDir dir("tune-apply-damaged");
  const std::string good = dir.file("good.sqlite");
  writeStudy(good, {"optim.lr=1e-3"});
  std::string bytes = readFile(good);
  ASSERT_GT(bytes.size(), 4096u);
  // A study cut after its first page, and one whose pages after the header are overwritten.
  const std::string cut = dir.file("cut.sqlite");
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, 1024);
  for (size_t i = 1024; i < bytes.size(); ++i) bytes[i] = char(0xA5 ^ (i & 0xff));
  const std::string scribbled = dir.file("scribbled.sqlite");
  std::ofstream(scribbled, std::ios::binary) << bytes;
  const std::string text = dir.file("notes.sqlite");
  std::ofstream(text) << "not a study\n";
  for (const std::string& path : {cut, scribbled, text}) {
    const std::string before = readFile(path);
    const ProcessResult r =
        runMoewb("tune --apply " + path + " --control " + dir.file("c.sock"), dir.path());
    EXPECT_EQ(r.exitCode, 2) << path << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, path)) << r.err;
    EXPECT_EQ(r.out, "") << "a plan was printed for a damaged study";
    EXPECT_EQ(readFile(path), before) << path << " was modified";
    EXPECT_FALSE(fs::exists(path + "-wal")) << path;
    EXPECT_FALSE(fs::exists(path + "-journal")) << path;
  }
}

}  // namespace
}  // namespace moewb::cli::testing
