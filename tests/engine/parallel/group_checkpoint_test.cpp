// Checkpoints of in-process rank groups (Trainer::saveCheckpoint / loadCheckpoint on a
// RankGroupRunner): the file is the one-rank checkpoint of the gathered state, so (a) a group
// resumed from it in its own layout continues bit for bit, (b) resumed in another layout it gives
// the steps of a live re-shard into that layout at the same step, bit for bit, (c) the same file
// resumes a one-rank run (and a one-rank checkpoint a group) within rounding, and (d) a file of
// another model is refused naming the tensor, with nothing changed.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "moewb/engine/trainer.h"
#include "reshard_check.h"

namespace moewb::engine {
namespace {

using test::expectBitwise;
using test::kStepsAfter;
using test::kStepsBefore;
using test::patched;
using test::runLive;
using test::tail;
using test::Trajectory;

constexpr double kLossTolerance = 1e-5;  // fp32, another summation order (one rank vs a group)

RunConfig groupConfig() { return test::smallGroupConfig(); }

// A scratch folder removed at the end of the test.
class GroupCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = std::filesystem::temp_directory_path() /
            ("moewb-group-ckpt-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(m_dir);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  // Trains `config` for `steps` steps, writing a checkpoint every kStepsBefore steps.
  Trajectory trainWithCheckpoints(const RunConfig& config, int steps) {
    test::RecordingSink sink;
    auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&sink}});
    EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
    Trajectory t;
    if (!trainer.isOk()) return t;
    (*trainer)->setCheckpointPolicy(kStepsBefore, m_dir.string());
    const Status status = (*trainer)->run(steps);
    EXPECT_TRUE(status.isOk()) << status.toString();
    for (const StepEvent& e : sink.steps) t.add(e);
    return t;
  }

  // Resumes `config` from `checkpoint` and trains `steps` more steps.
  Trajectory resume(const RunConfig& config, const std::string& checkpoint, int steps) {
    test::RecordingSink sink;
    auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&sink}});
    EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
    Trajectory t;
    if (!trainer.isOk()) return t;
    const Status loaded = (*trainer)->loadCheckpoint(checkpoint);
    EXPECT_TRUE(loaded.isOk()) << loaded.toString();
    if (!loaded.isOk()) return t;
    EXPECT_EQ((*trainer)->stepsDone(), kStepsBefore);
    const Status status = (*trainer)->run(steps);
    EXPECT_TRUE(status.isOk()) << status.toString();
    for (const StepEvent& e : sink.steps) {
      EXPECT_GE(e.step, kStepsBefore);  // the step index goes on from the checkpoint's
      t.add(e);
    }
    return t;
  }

  std::string checkpointAt(int step) const {
    char name[64];
    std::snprintf(name, sizeof name, "step-%08d.safetensors", step);
    return (m_dir / name).string();
  }

  std::filesystem::path m_dir;
};

// (a) and (b).
TEST_F(GroupCheckpointTest, ResumesInItsOwnLayoutAndInAnotherAsALiveReshardWould) {
  const RunConfig config = groupConfig();
  const Trajectory straight = trainWithCheckpoints(config, kStepsBefore + kStepsAfter);
  ASSERT_EQ(straight.loss.size(), size_t(kStepsBefore + kStepsAfter));
  ASSERT_TRUE(std::filesystem::exists(checkpointAt(kStepsBefore)));

  expectBitwise(resume(config, checkpointAt(kStepsBefore), kStepsAfter),
                tail(straight, kStepsBefore));

  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"parallel.ep=4"},
        std::vector<std::string>{"parallel.ep=1", "parallel.fsdp=4"}}) {
    SCOPED_TRACE(layout.front());
    const test::LiveRun live = runLive(config, layout);
    ASSERT_TRUE(live.patch.isOk()) << live.patch.toString();
    expectBitwise(resume(patched(config, layout), checkpointAt(kStepsBefore), kStepsAfter),
                  tail(live.trajectory, kStepsBefore));
  }
}

// (c) The file is a one-rank checkpoint: either side resumes the other's.
TEST_F(GroupCheckpointTest, OneRankAndGroupResumeEachOthersCheckpoints) {
  const RunConfig group = groupConfig();
  RunConfig single = group;
  single.parallel.worldSize = 1;
  single.parallel.ep = 1;
  single.parallel.fsdp = 0;
  // `writer` trains with checkpoints; `reader` resumes the one of step kStepsBefore.
  auto check = [&](const RunConfig& writer, const RunConfig& reader) {
    std::filesystem::remove_all(m_dir);
    const Trajectory written = trainWithCheckpoints(writer, kStepsBefore + kStepsAfter);
    const Trajectory resumed = resume(reader, checkpointAt(kStepsBefore), kStepsAfter);
    ASSERT_EQ(resumed.loss.size(), size_t(kStepsAfter));
    for (int i = 0; i < kStepsAfter; ++i) {
      EXPECT_NEAR(resumed.loss[size_t(i)], written.loss[size_t(kStepsBefore + i)],
                  kLossTolerance)
          << "step " << kStepsBefore + i;
    }
  };
  check(group, single);
  check(single, group);
}

// (d) Another model's checkpoint: refused naming a tensor; the group trains from its own start.
TEST_F(GroupCheckpointTest, AnotherModelsCheckpointIsRefusedAndChangesNothing) {
  RunConfig other = groupConfig();
  other.moe.dFf = 10;
  trainWithCheckpoints(other, kStepsBefore);
  const RunConfig config = groupConfig();
  Trajectory fresh;
  {
    test::RecordingSink sink;
    auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&sink}});
    ASSERT_TRUE(trainer.isOk());
    ASSERT_TRUE((*trainer)->run(2).isOk());
    for (const StepEvent& e : sink.steps) fresh.add(e);
  }
  test::RecordingSink sink;
  auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&sink}});
  ASSERT_TRUE(trainer.isOk());
  const Status loaded = (*trainer)->loadCheckpoint(checkpointAt(kStepsBefore));
  EXPECT_EQ(loaded.code(), StatusCode::kInvalidArgument) << loaded.toString();
  EXPECT_NE(loaded.message().find("layers.0.moe.gate"), std::string::npos) << loaded.message();
  EXPECT_EQ((*trainer)->stepsDone(), 0);
  ASSERT_TRUE((*trainer)->run(2).isOk());
  Trajectory after;
  for (const StepEvent& e : sink.steps) after.add(e);
  expectBitwise(after, fresh);
}

}  // namespace
}  // namespace moewb::engine
