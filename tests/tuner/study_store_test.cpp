// StudyStore: the study file's schema and rows; files that are not studies (text, a moewb trace,
// a damaged or truncated study) are refused with a clear error and left byte-identical.
#include "moewb/tuner/study_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>

#include "moewb/run/training_run.h"
#include "moewb/tuner/study.h"
#include "tuner_test_util.h"

namespace moewb::tuner {
namespace {

using testing::fileBytes;
using testing::TempDir;

StudyInfo sampleInfo() {
  StudyInfo info;
  info.configPath = "tiny.toml";
  info.configToml = engine::toToml(testing::quickTiny());
  info.objective = "tokens_per_s";
  info.strategy = "exhaustive";
  info.trialSteps = 3;
  info.gateSteps = 3;
  info.gateLossRel = 1e-5;
  info.gateGradNormRel = 1e-4;
  info.startedAt = utcNow();
  info.gitCommit = "abc";
  info.host = "test (cpu, 1 rank)";
  return info;
}

TrialRecord sampleTrial(const std::string& settings) {
  TrialRecord t;
  t.settings = settings;
  t.steps = 3;
  t.stepTimeMs = 2.5;
  t.tokensPerSecond = 51200;
  t.peakBytes = 1 << 20;
  t.finalLoss = 5.1;
  t.losses = {5.5, 5.3, 5.1};
  t.gradNorms = {0.8, 0.7, 0.9};
  t.stepMs = {4.0, 2.5, 2.5};
  t.tracePath = "t.sqlite";
  t.startedAt = t.endedAt = utcNow();
  return t;
}

// A study with a few trials, padded so that damage to a middle page hits table data.
std::string makeStudy(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  auto store = StudyStore::create(path, sampleInfo());
  EXPECT_TRUE(store.isOk()) << store.status().toString();
  for (int i = 0; i < 40; ++i) {
    TrialRecord t = sampleTrial("loss.kind=cce,x=" + std::to_string(i));
    t.message = std::string(300, 'm');
    EXPECT_TRUE((*store)->addTrial(t).isOk());
  }
  return path;
}

TEST(StudyStore, WritesTheSchemaAndReadsTrialsBack) {
  TempDir dir("store");
  const std::string path = dir.file("study.sqlite");
  {
    auto store = StudyStore::create(path, sampleInfo());
    ASSERT_TRUE(store.isOk()) << store.status().toString();
    auto id = (*store)->addTrial(sampleTrial("loss.kind=cce"));
    ASSERT_TRUE(id.isOk()) << id.status().toString();
    EXPECT_TRUE((*store)->setVerdict(*id, Verdict::kPruned, "beaten").isOk());
    EXPECT_EQ((*store)->setVerdict(*id + 7, Verdict::kOk, "").code(), StatusCode::kNotFound);
    EXPECT_EQ(StudyStore::create(path, sampleInfo()).status().code(), StatusCode::kAlreadyExists);
  }
  auto store = StudyStore::open(path, false);
  ASSERT_TRUE(store.isOk()) << store.status().toString();
  EXPECT_EQ((*store)->info().configToml, sampleInfo().configToml);
  EXPECT_EQ((*store)->info().gitCommit, "abc");
  auto trials = (*store)->trials();
  ASSERT_TRUE(trials.isOk());
  ASSERT_EQ(trials->size(), 1u);
  const TrialRecord& t = trials->front();
  EXPECT_EQ(t.settings, "loss.kind=cce");
  EXPECT_EQ(t.verdict, Verdict::kPruned);
  EXPECT_EQ(t.message, "beaten");
  EXPECT_EQ(t.losses, (std::vector<double>{5.5, 5.3, 5.1}));
  EXPECT_EQ(t.gradNorms, (std::vector<double>{0.8, 0.7, 0.9}));
  EXPECT_EQ(t.peakBytes, 1 << 20);

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'schema_version'", -1, &st,
                               nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(st), SQLITE_ROW);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))),
            std::to_string(kStudySchemaVersion));
  sqlite3_finalize(st);
  sqlite3_close(db);
}

void expectRefusedAndUntouched(const std::string& path, const std::string& why) {
  const std::string before = fileBytes(path);
  for (bool writable : {false, true}) {
    auto store = StudyStore::open(path, writable);
    ASSERT_FALSE(store.isOk()) << why;
    EXPECT_NE(store.status().message().find(path), std::string::npos) << store.status().message();
  }
  // The study runner refuses it too, before anything is written.
  StudyOptions options;
  options.studyPath = path;
  options.base = testing::quickTiny();
  options.knobs = {{"fusion.permute_into_experts", {}}};
  options.steps = 2;
  auto result = runStudy(options);
  ASSERT_FALSE(result.isOk()) << why;
  EXPECT_EQ(fileBytes(path), before) << why;
  EXPECT_FALSE(std::filesystem::exists(path + "-journal")) << why;
  EXPECT_FALSE(std::filesystem::exists(trialDirectory(path))) << why;
}

TEST(StudyStore, RefusesAFileThatIsNotAStudyAndLeavesItAsItWas) {
  TempDir dir("notstudy");
  const std::string text = dir.file("notes.sqlite");
  std::ofstream(text) << "these are my notes, not a database\n";
  expectRefusedAndUntouched(text, "a text file");
  const std::string empty = dir.file("empty.sqlite");
  std::ofstream(empty).flush();
  expectRefusedAndUntouched(empty, "an empty file");

  const std::string trace = dir.file("trace.sqlite");
  {
    engine::RunConfig config = testing::quickTiny();
    auto run = run::TrainingRun::create(config, {.outPath = trace, .overwrite = true, .steps = 1});
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    ASSERT_TRUE((*run)->run().isOk());
  }
  auto asStudy = StudyStore::open(trace, false);
  ASSERT_FALSE(asStudy.isOk());
  EXPECT_NE(asStudy.status().message().find("not a moewb tuner study"), std::string::npos)
      << asStudy.status().message();
  expectRefusedAndUntouched(trace, "a moewb trace");
}

TEST(StudyStore, RefusesADamagedStudyAndLeavesItByteIdentical) {
  TempDir dir("damaged");
  const std::string path = makeStudy(dir, "study.sqlite");
  ASSERT_TRUE(StudyStore::open(path, true).isOk());
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 4 * 4096u);

  const std::string scribbled = dir.file("scribbled.sqlite");
  std::filesystem::copy_file(path, scribbled);
  {
    std::fstream f(scribbled, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(size / 4096 / 2 * 4096));  // the start of a middle page
    const std::string junk(2048, '\xA5');
    f.write(junk.data(), std::streamsize(junk.size()));
  }
  expectRefusedAndUntouched(scribbled, "scribbled pages");

  const std::string truncated = dir.file("truncated.sqlite");
  std::filesystem::copy_file(path, truncated);
  std::filesystem::resize_file(truncated, size / 3);
  expectRefusedAndUntouched(truncated, "a truncated study");
}

}  // namespace
}  // namespace moewb::tuner
