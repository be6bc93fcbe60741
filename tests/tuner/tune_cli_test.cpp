// `moewb tune` end to end: a study with a line per trial and the final table, its resume, the
// exports, and plain messages (exit 2) for bad arguments and files that are not studies.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "../cli/cli_process.h"

namespace moewb::cli::testing {
namespace {

// The tiny sample, made quick: short sequences, a small batch, one thread.
const std::string kQuick =
    " --set model.seq_len=32 --set data.batch_size=4 --set run.threads=1 --steps 2";

std::string tune(const std::string& args) {
  return "tune --config " + tinyConfig() + kQuick + " " + args;
}

TEST(TuneCli, RunsAStudyPrintsTheTableAndResumes) {
  TempDir dir("tune-cli");
  const std::string study = dir.file("study.sqlite");
  auto r = runMoewb(tune("--knobs fusion.combine_into_experts -o " + study), dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("trial 1/2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("trial 2/2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vs base"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(base)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.000x"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best: trial"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("study-trials")));

  auto again = runMoewb(tune("--knobs fusion.combine_into_experts -o " + study), dir.path());
  ASSERT_EQ(again.exitCode, 0) << again.err;
  EXPECT_NE(again.out.find("0 new runs"), std::string::npos) << again.out;

  auto other = runMoewb(tune("--knobs loss.kind -o " + study), dir.path());
  EXPECT_EQ(other.exitCode, 2);
  EXPECT_NE(other.err.find("--knobs"), std::string::npos) << other.err;

  for (const char* format : {"toml", "megatron", "torchtitan"}) {
    const std::string out = dir.file(std::string("tuned.") + format);
    auto e = runMoewb("tune --export " + study + " --format " + format + " -o " + out, dir.path());
    ASSERT_EQ(e.exitCode, 0) << e.err;
    EXPECT_NE(readFile(out).find("trial"), std::string::npos);
    auto twice =
        runMoewb("tune --export " + study + " --format " + format + " -o " + out, dir.path());
    EXPECT_EQ(twice.exitCode, 2) << "an existing export needs --force";
    auto forced = runMoewb(
        "tune --export " + study + " --format " + format + " -o " + out + " --force", dir.path());
    EXPECT_EQ(forced.exitCode, 0) << forced.err;
  }
  // The exported TOML trains as it is.
  auto train = runMoewb("run --config " + dir.file("tuned.toml") + " --steps 1 --quiet --out " +
                            dir.file("check.sqlite"),
                        dir.path());
  EXPECT_EQ(train.exitCode, 0) << train.err;
}

// Trials recorded in the study file at `path` (-1 when it cannot be read yet).
int64_t recordedTrials(const std::string& path) {
  sqlite3* db = nullptr;
  int64_t n = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 1000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM tuner_trial", -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      n = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return n;
}

TEST(TuneCli, SigkilledStudyResumesWithoutRerunningMeasuredTrials) {
  TempDir dir("tune-cli-kill");
  const std::string study = dir.file("study.sqlite");
  std::vector<std::string> args = {MOEWB_CLI_PATH,
                                   "tune",
                                   "--config",
                                   tinyConfig(),
                                   "--set",
                                   "model.seq_len=32",
                                   "--set",
                                   "data.batch_size=4",
                                   "--set",
                                   "run.threads=1",
                                   "--steps",
                                   "24",
                                   "-q",
                                   "--knobs",
                                   "loss.kind,fusion.combine_into_experts",
                                   "--strategy",
                                   "exhaustive",
                                   "-o",
                                   study};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, MOEWB_CLI_PATH, nullptr, nullptr, argv.data(), environ), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (recordedTrials(study) < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  const int64_t kept = recordedTrials(study);
  ASSERT_GE(kept, 2);
  if (WIFEXITED(status)) GTEST_SKIP() << "the study finished before the kill";
  ASSERT_LT(kept, 6);

  std::string resume;
  for (size_t i = 1; i < args.size(); ++i) resume += " '" + args[i] + "'";
  auto r = runMoewb(resume, dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find(std::to_string(6 - kept) + " new runs"), std::string::npos) << r.out;
  EXPECT_EQ(recordedTrials(study), 6);
}

TEST(TuneCli, BadArgumentsGetAPlainMessageAndExit2) {
  TempDir dir("tune-cli-bad");
  const std::string study = dir.file("s.sqlite");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {tune("--objective speed -o " + study), "tokens_per_s, peak_memory"},
      {tune("--budget forever -o " + study), "30trials"},
      {tune("--knobs model.d_model -o " + study), "not a tunable key"},
      {tune("--knobs loss.kind=fancy -o " + study), "\"cce\""},
      {tune("--strategy random -o " + study), "exhaustive, halving"},
      {tune("--set moe.top_k=99 -o " + study), "moe.top_k"},
      {"tune -o " + study, "--config FILE is required"},
      {"tune --export " + study + " --format xml -o " + dir.file("x"),
       "toml, megatron, torchtitan"},
      {tune("-o " + dir.file("missing/s.sqlite")), "does not exist"},
  };
  for (const auto& [args, needle] : cases) {
    auto r = runMoewb(args, dir.path());
    EXPECT_EQ(r.exitCode, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(study));
}

// --strategy model prints predictions and the predicted-vs-measured error; --predict predicts a
// layout larger than the machine from the study's calibrating trace, with its assumptions.
TEST(TuneCli, ModelStrategyAndPredictionPastTheMachine) {
  TempDir dir("tune-cli-model");
  const std::string study = dir.file("m.sqlite");
  auto r =
      runMoewb(tune("--knobs loss.kind --strategy model --model-top 1 -o " + study), dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("pred ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("candidates scored in"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("predicted vs measured over"), std::string::npos) << r.out;
  const std::string trace = dir.file("m-trials/c0-r0.sqlite");
  ASSERT_TRUE(std::filesystem::exists(trace));
  auto p = runMoewb("tune --predict --trace " + trace +
                        " --gpus 64 --set moe.num_experts=64 --set parallel.ep=32"
                        " --set data.batch_size=64 --interconnect inter_node_gbps=25",
                    dir.path());
  ASSERT_EQ(p.exitCode, 0) << p.err;
  EXPECT_NE(p.out.find("64 rank(s) on as many GPUs, ep 32"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("exposed all-to-all"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("inter_node_gbps=25"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("assumptions:"), std::string::npos) << p.out;
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"tune --predict --gpus 4", "--predict needs --trace"},
      {"tune --predict --trace " + trace + " --interconnect nvlink=9", "intra_node_gbps"},
      {"tune --predict --trace " + trace + " --gpus 3 --set parallel.ep=2", "parallel"},
      {"tune --predict --trace " + dir.file("none.sqlite"), "none.sqlite"},
  };
  for (const auto& [args, needle] : bad) {
    auto b = runMoewb(args, dir.path());
    EXPECT_EQ(b.exitCode, 2) << args << "\n" << b.err;
    EXPECT_NE(b.err.find(needle), std::string::npos) << args << "\n" << b.err;
  }
}

TEST(TuneCli, AFileThatIsNotAStudyIsRefusedAndKept) {
  TempDir dir("tune-cli-notstudy");
  const std::string notes = dir.file("notes.sqlite");
  { std::ofstream(notes) << "not a study\n"; }
  const std::string before = readFile(notes);
  auto r = runMoewb(tune("-o " + notes), dir.path());
  EXPECT_EQ(r.exitCode, 2) << r.err;
  EXPECT_NE(r.err.find("not a SQLite file"), std::string::npos) << r.err;
  auto e = runMoewb("tune --export " + notes + " -o " + dir.file("out.toml"), dir.path());
  EXPECT_EQ(e.exitCode, 2) << e.err;
  EXPECT_EQ(readFile(notes), before);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.toml")));
}

}  // namespace
}  // namespace moewb::cli::testing
