// `moewb diff` on real traces of the tiny config: a trace against itself (every delta 0, nothing
// significant), against a run with moe.top_k = 1 and skewed data (the table is sorted by |delta|,
// each flag follows the rule, the imbalance lines match the trace's expert_load rows), one
// trace split at a live config patch (made here through TrainingRun::post, as the GUI's Live
// control does), --json, and bad input (exit 2 with the file or option named).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_process.h"
#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"

namespace moewb::cli::testing {
namespace {

// Runs `sql` on `path` and returns the first column of the first row as text ("" without rows).
std::string sqlOne(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
      if (sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0) != nullptr) {
        out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
      }
    } else {
      out = std::string("error: ") + sqlite3_errmsg(db);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

// Posts a live patch when step `atStep` ends (taken at the next step boundary).
class PatchAtStep : public engine::EventSink {
 public:
  PatchAtStep(int64_t atStep, std::string assignment)
      : m_atStep(atStep), m_assignment(std::move(assignment)) {}
  void setRun(run::TrainingRun* run) { m_run = run; }
  void onRunStart(const engine::RunStartEvent&) override {}
  void onPhase(const engine::PhaseEvent&) override {}
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onRunEnd(const engine::RunEndEvent&) override {}
  void onStep(const engine::StepEvent& event) override {
    if (event.step == m_atStep && m_run != nullptr) {
      m_run->post({engine::TrainerCommand::Kind::kApplyPatch, {m_assignment}, "test"});
    }
  }

 private:
  int64_t m_atStep;
  std::string m_assignment;
  run::TrainingRun* m_run = nullptr;
};

class CliDiff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new TempDir("cli-diff");
    const std::string common = " --quiet --steps 12 --set run.threads=1 --set model.seq_len=32";
    s_a = s_dir->file("a.sqlite");
    s_b = s_dir->file("b.sqlite");
    s_patched = s_dir->file("patched.sqlite");
    ProcessResult a =
        runMoewb("run --config " + tinyConfig() + common + " --out " + s_a, s_dir->path());
    ASSERT_EQ(a.exitCode, 0) << a.err;
    ProcessResult b = runMoewb("run --config " + tinyConfig() + common +
                                   " --set moe.top_k=1 --set data.skew=2 --out " + s_b,
                               s_dir->path());
    ASSERT_EQ(b.exitCode, 0) << b.err;
    // The patched trace: 12 steps, moe.top_k 2 -> 1 from the step after step 5.
    auto config = engine::loadConfigFile(tinyConfig());
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    config->run.threads = 1;
    config->model.seqLen = 32;
    PatchAtStep patcher(5, "moe.top_k=1");
    auto created = run::TrainingRun::create(*config, {.outPath = s_patched, .steps = 12}, &patcher);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    patcher.setRun(created->get());
    auto summary = (*created)->run();
    ASSERT_TRUE(summary.isOk()) << summary.status().toString();
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }

  static TempDir* s_dir;
  static std::string s_a, s_b, s_patched;
};

TempDir* CliDiff::s_dir = nullptr;
std::string CliDiff::s_a, CliDiff::s_b, CliDiff::s_patched;

TEST_F(CliDiff, ATraceAgainstItselfHasNoDeltaAndNothingSignificant) {
  ProcessResult r = runMoewb("diff " + s_a + " " + s_a + " --top 100", s_dir->path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("steps 1..11 (11 steps"), std::string::npos) << r.out;
  for (const char* phase : {"experts.fwd", "experts.bwd", "attention.fwd", "optimizer", "step"}) {
    EXPECT_NE(r.out.find(std::string("phase ") + phase + " "), std::string::npos) << phase;
  }
  EXPECT_EQ(r.out.find(" *\n"), std::string::npos) << r.out;  // no significant row
  EXPECT_NE(r.out.find("step time"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layer 1"), std::string::npos) << r.out;

  ProcessResult j = runMoewb("diff " + s_a + " " + s_a + " --json", s_dir->path());
  ASSERT_EQ(j.exitCode, 0) << j.err;
  const auto json = nlohmann::json::parse(j.out);
  ASSERT_GE(json["names"].size(), 10u);
  for (const auto& row : json["names"]) {
    EXPECT_EQ(row["delta"].get<double>(), 0.0) << row["name"];
    EXPECT_FALSE(row["significant"].get<bool>()) << row["name"];
    EXPECT_GT(row["noise"].get<double>(), 0.0) << row["name"];
  }
}

TEST_F(CliDiff, SortsByDeltaFlagsByTheRuleAndReadsImbalanceFromTheTrace) {
  ProcessResult r = runMoewb("diff " + s_a + " " + s_b + " --json --top 1000", s_dir->path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["a"]["steps"].get<int>(), 11);
  EXPECT_EQ(json["a"]["first_step"].get<int>(), 1);  // step 0 left out as warm-up
  // Sorted by |delta|, largest first.
  double previous = INFINITY;
  for (const auto& row : json["names"]) {
    const double magnitude = std::fabs(row["delta"].get<double>());
    EXPECT_LE(magnitude, previous) << row["name"];
    previous = magnitude;
  }
  // Times are the machine's (no timing assertion): the flag follows the documented rule.
  for (const auto& row : json["names"]) {
    const double delta = std::fabs(row["delta"].get<double>());
    const double scale = std::max(std::fabs(row["a"]["mean"].get<double>()),
                                  std::fabs(row["b"]["mean"].get<double>()));
    EXPECT_EQ(row["significant"].get<bool>(),
              delta > row["noise"].get<double>() && delta >= 0.01 * scale)
        << row.dump();
  }
  // Layer 1's imbalance of B, recomputed from expert_load (steps 1..11; 8 experts).
  const double expected = std::stod(
      sqlOne(s_b,
             "SELECT avg(m * 8.0 / t) FROM (SELECT step, max(tokens) AS m, sum(tokens) AS t FROM "
             "expert_load WHERE layer = 1 AND step >= 1 GROUP BY step)"));
  ASSERT_EQ(json["imbalance_layers"].size(), 2u);
  EXPECT_NEAR(json["imbalance_layers"][1]["b"]["mean"].get<double>(), expected, 1e-9);

  ProcessResult text = runMoewb("diff " + s_a + " " + s_b, s_dir->path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("expert imbalance"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("tokens/s"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("loss at end"), std::string::npos) << text.out;
}

TEST_F(CliDiff, SplitsOneTraceAtItsLivePatch) {
  const std::string patchStep =
      sqlOne(s_patched, "SELECT step FROM config_change WHERE key = 'moe.top_k'");
  ASSERT_FALSE(patchStep.empty());
  const int split = std::stoi(patchStep);
  ASSERT_GE(split, 6);
  ASSERT_LE(split, 10);
  ProcessResult r = runMoewb("diff " + s_patched + " --split-at-patch --json", s_dir->path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  const auto json = nlohmann::json::parse(r.out);
  EXPECT_EQ(json["a"]["first_step"].get<int>(), 1);
  EXPECT_EQ(json["a"]["last_step"].get<int>(), split - 1);
  EXPECT_EQ(json["b"]["first_step"].get<int>(), split);
  EXPECT_EQ(json["b"]["last_step"].get<int>(), 11);
  EXPECT_NE(json["split"].get<std::string>().find("moe.top_k 2 -> 1"), std::string::npos);

  // The same split by explicit ranges gives the same rows.
  ProcessResult ranges = runMoewb(
      "diff " + s_patched + " --json --a-steps :" + patchStep + " --b-steps " + patchStep + ":",
      s_dir->path());
  ASSERT_EQ(ranges.exitCode, 0) << ranges.err;
  auto explicitJson = nlohmann::json::parse(ranges.out);
  EXPECT_EQ(explicitJson["names"], json["names"]);

  ProcessResult text = runMoewb("diff " + s_patched + " --split-at-patch", s_dir->path());
  ASSERT_EQ(text.exitCode, 0) << text.err;
  EXPECT_NE(text.out.find("split at step " + patchStep + ": moe.top_k 2 -> 1 (test)"),
            std::string::npos)
      << text.out;
}

TEST_F(CliDiff, BadInputExitsWith2AndSaysWhatWasWrong) {
  const std::string notes = s_dir->file("notes.txt");
  std::ofstream(notes) << "not a trace\n";
  const std::string damaged = s_dir->file("damaged.sqlite");
  std::filesystem::copy_file(s_a, damaged, std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(sqlOne(damaged, "DROP TABLE expert_load"), "");
  const std::string missing = s_dir->file("missing.sqlite");
  struct Case {
    std::string args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {s_a + " " + missing, missing},
      {s_a + " " + notes, notes},
      {damaged + " " + s_a, "lacks the table(s) expert_load"},
      {s_a + " " + s_b + " --a-steps 5:2", "--a-steps '5:2' is not a step range"},
      {s_a + " " + s_b + " --b-steps 40:50", "no committed step in steps 40:50"},
      {s_a + " " + s_b + " --split-at-patch", "ONE trace"},
      {s_a + " --split-at-patch", "has no live config change"},
      {s_a, "needs --split-at-patch or both --a-steps and --b-steps"},
      {s_a + " " + s_b + " --warmup 12", "all inside the 12-step warm-up"},
      {s_a + " " + s_b + " " + s_a, "not expected"},
  };
  for (const Case& c : cases) {
    ProcessResult r = runMoewb("diff " + c.args, s_dir->path());
    EXPECT_EQ(r.exitCode, 2) << c.args << "\n" << r.out << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("invalid argument"), std::string::npos) << r.err;
  }
}

// The usage line names the two positionals (CLI11 printed "traces(1x)" for one 1-2 valued one).
TEST_F(CliDiff, HelpNamesTheTwoTraces) {
  ProcessResult r = runMoewb("diff --help", s_dir->path());
  EXPECT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("moewb diff [OPTIONS] A [B]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("(1x)"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moewb::cli::testing
