// A real tuning study for the Tuner window's tests, made once per test process by the tuner
// library on the tiny sample (4 sequences of 32 tokens, 2 in-process ranks, 3 steps a trial):
// knobs parallel.ep x fusion.permute_into_experts x fusion.combine_into_experts give 8
// candidates, 5 measured (verdict ok) and 3 refused by the engine (EP = 2 with a fusion flag:
// verdict invalid, never run). A few seconds on one CPU core.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../tuner/tuner_test_util.h"
#include "moewb/tuner/study.h"
#include "moewb/tuner/study_store.h"

namespace moewb::gui::testing {

struct TestStudy {
  std::string path;
  tuner::StudyResult result;  // as runStudy returned it (table best first; best = the pick)
  std::vector<tuner::TrialRecord> trials;  // the study file's rows, id order
};

// The study, made on first use; fails the calling test when the tuner cannot make it.
inline const TestStudy& sharedStudy() {
  static tuner::testing::TempDir dir("gui-study");
  static std::unique_ptr<TestStudy> study;
  if (study) return *study;
  auto made = std::make_unique<TestStudy>();
  tuner::StudyOptions o;
  o.studyPath = dir.file("study.sqlite");
  o.configPath = tuner::testing::tinyPath();
  o.base = tuner::testing::quickTiny();
  o.base.parallel.worldSize = 2;
  o.knobs = {{"parallel.ep", {}},
             {"fusion.permute_into_experts", {}},
             {"fusion.combine_into_experts", {}}};
  o.knobsText = "parallel.ep,fusion.permute_into_experts,fusion.combine_into_experts";
  o.steps = 3;
  auto result = tuner::runStudy(o);
  EXPECT_TRUE(result.isOk()) << result.status().toString();
  if (result.isOk()) made->result = *result;
  made->path = o.studyPath;
  auto store = tuner::StudyStore::open(o.studyPath, false);
  EXPECT_TRUE(store.isOk()) << store.status().toString();
  if (store.isOk()) {
    auto trials = (*store)->trials();
    if (trials.isOk()) made->trials = *trials;
  }
  study = std::move(made);
  return *study;
}

}  // namespace moewb::gui::testing
