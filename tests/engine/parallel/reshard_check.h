// The live re-shard checks shared by the CPU ranks' suite (tests/engine/parallel/reshard_test.cpp)
// and the virtual GPU ranks' (tests/engine_cuda/parallel/cuda_reshard_test.cpp): a group of
// in-process ranks driven without a Trainer (Group), a Trainer run patched after a given step
// (runLive), and checkLivePatch: a patch of the layout in the middle of a run against a group
// started in the new layout from the state gathered at that step, losses and gradient norms bit
// for bit.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <string>
#include <vector>

#include "../recording_sink.h"
#include "moewb/engine/trainer.h"
#include "train/parallel/rank_group_runner.h"

namespace moewb::engine::test {

inline constexpr int kStepsBefore = 3;  // steps in the old layout
inline constexpr int kStepsAfter = 3;   // steps after the patch

// A small model on 4 in-process CPU ranks, EP = 2 x FSDP = 2, with the expert bias on (state
// beside the parameters) and a warm-up that ties the learning rate to the step index.
inline RunConfig smallGroupConfig() {
  RunConfig c;
  c.run.threads = 1;
  c.run.seed = 11;
  c.model.vocabSize = 32;
  c.model.dModel = 16;
  c.model.numLayers = 2;
  c.model.numHeads = 2;
  c.model.seqLen = 8;
  c.model.initStd = 0.1;
  c.moe.numExperts = 8;
  c.moe.topK = 2;
  c.moe.dFf = 12;
  c.moe.auxLossCoef = 0.01;
  c.moe.biasUpdateRate = 0.01;  // the expert bias is state that must move too
  c.data.batchSize = 8;
  c.optim.lr = 3e-3;
  c.optim.warmupSteps = 4;  // the learning rate follows the step index
  c.optim.gradClip = 0.5;
  c.parallel.worldSize = 4;
  c.parallel.ep = 2;
  c.parallel.fsdp = 2;
  return c;
}

inline ValidConfig valid(const RunConfig& config) {
  Result<ValidConfig> v = ValidConfig::validate(config);
  EXPECT_TRUE(v.isOk()) << v.status().toString();
  return *v;
}

inline RunConfig patched(RunConfig config, const std::vector<std::string>& assignments) {
  for (const std::string& a : assignments) EXPECT_TRUE(applyOverride(config, a).isOk()) << a;
  return config;
}

// Losses and gradient norms of consecutive steps (rank 0's; they are global).
struct Trajectory {
  std::vector<double> loss, auxLoss, gradNorm;
  void add(const StepEvent& e) {
    loss.push_back(e.loss);
    auxLoss.push_back(e.auxLoss);
    gradNorm.push_back(e.gradNorm);
  }
  void append(const Trajectory& t) {
    loss.insert(loss.end(), t.loss.begin(), t.loss.end());
    auxLoss.insert(auxLoss.end(), t.auxLoss.begin(), t.auxLoss.end());
    gradNorm.insert(gradNorm.end(), t.gradNorm.begin(), t.gradNorm.end());
  }
};

inline void expectBitwise(const Trajectory& a, const Trajectory& b) {
  ASSERT_EQ(a.loss.size(), b.loss.size());
  for (size_t i = 0; i < a.loss.size(); ++i) {
    EXPECT_EQ(a.loss[i], b.loss[i]) << "step " << i << " loss";
    EXPECT_EQ(a.auxLoss[i], b.auxLoss[i]) << "step " << i << " aux loss";
    EXPECT_EQ(a.gradNorm[i], b.gradNorm[i]) << "step " << i << " grad norm";
  }
}

// A started group of in-process ranks driven directly (no Trainer); run(n) takes n steps.
class Group {
 public:
  explicit Group(const RunConfig& config) : m_runner(valid(config)) {
    EXPECT_TRUE(m_runner.start({}).isOk());
  }
  ~Group() { EXPECT_TRUE(m_runner.finish().isOk()); }
  Trajectory run(int steps) {
    Trajectory t;
    for (int i = 0; i < steps; ++i) {
      Result<std::vector<RankStepOutcome>> outcomes = m_runner.step({});
      EXPECT_TRUE(outcomes.isOk()) << outcomes.status().toString();
      if (!outcomes.isOk()) break;
      t.add(outcomes->front().event);
    }
    return t;
  }
  RankGroupRunner& runner() { return m_runner; }

 private:
  RankGroupRunner m_runner;
};

// Rank 0's sink, which posts `assignments` once rank 0 has finished step `afterStep` (so the
// patch is taken at the next step boundary) and records the steps.
class PatchingSink : public RecordingSink {
 public:
  PatchingSink(int64_t afterStep, std::vector<std::string> assignments)
      : m_afterStep(afterStep), m_assignments(std::move(assignments)) {}
  void onStep(const StepEvent& e) override {
    RecordingSink::onStep(e);
    if (e.step == m_afterStep && trainer != nullptr && !m_assignments.empty()) {
      reply = trainer->post({TrainerCommand::Kind::kApplyPatch, m_assignments, "tuner"});
    }
  }
  Trainer* trainer = nullptr;
  std::future<Status> reply;

 private:
  int64_t m_afterStep;
  std::vector<std::string> m_assignments;
};

struct LiveRun {
  Trajectory trajectory;  // every step
  Status patch;           // the patch's reply
  RunConfig configAfter;
  std::vector<ConfigChangeEvent> changes;
};

// A Trainer over `config` for kStepsBefore + kStepsAfter steps, patched with `assignments`
// after step kStepsBefore - 1.
inline LiveRun runLive(const RunConfig& config, const std::vector<std::string>& assignments) {
  PatchingSink sink(kStepsBefore - 1, assignments);
  auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = {&sink}});
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  LiveRun out;
  if (!trainer.isOk()) return out;
  sink.trainer = trainer->get();
  const Status status = (*trainer)->run(kStepsBefore + kStepsAfter);
  EXPECT_TRUE(status.isOk()) << status.toString();
  for (const StepEvent& e : sink.steps) out.trajectory.add(e);
  out.patch = sink.reply.valid() ? sink.reply.get() : Status::ok();
  out.configAfter = (*trainer)->config();
  out.changes = sink.configChanges;
  return out;
}

inline Trajectory tail(const Trajectory& t, size_t from) {
  Trajectory out;
  for (size_t i = from; i < t.loss.size(); ++i) {
    out.loss.push_back(t.loss[i]);
    out.auxLoss.push_back(t.auxLoss[i]);
    out.gradNorm.push_back(t.gradNorm[i]);
  }
  return out;
}

// A live patch of the layout after kStepsBefore steps (one config_change per key, source
// "tuner"): the following steps equal, bit for bit, those of a group started in the new layout
// and given the state gathered at that step; and they stay within rounding of the run that kept
// its old layout. `config` has parallel.world_size > 1; `tolerance` bounds |loss - loss of the
// old layout|.
inline void checkLivePatch(const RunConfig& config, const std::vector<std::string>& assignments,
                           double tolerance) {
  SCOPED_TRACE(assignments.front());
  const RunConfig target = patched(config, assignments);
  ASSERT_TRUE(validateConfig(target).isOk()) << validateConfig(target).toString();

  const LiveRun live = runLive(config, assignments);
  ASSERT_TRUE(live.patch.isOk()) << live.patch.toString();
  ASSERT_EQ(live.trajectory.loss.size(), size_t(kStepsBefore + kStepsAfter));
  EXPECT_EQ(live.configAfter.parallel, target.parallel);
  ASSERT_EQ(live.changes.size(), assignments.size());  // one event per key
  for (size_t i = 0; i < assignments.size(); ++i) {
    EXPECT_EQ(live.changes[i].key + "=" + live.changes[i].newValue, assignments[i]);
    EXPECT_EQ(live.changes[i].step, kStepsBefore);
    EXPECT_EQ(live.changes[i].source, "tuner");
  }

  TrainingState state;
  Trajectory kept;
  {
    Group old(config);
    kept = old.run(kStepsBefore);
    Result<TrainingState> gathered = old.runner().gatherState();
    ASSERT_TRUE(gathered.isOk()) << gathered.status().toString();
    state = std::move(gathered).value();
    kept.append(old.run(kStepsAfter));
  }
  EXPECT_EQ(state.stepsDone, kStepsBefore);
  Group fresh(target);
  ASSERT_TRUE(fresh.runner().scatterState(state).isOk());
  const Trajectory reference = fresh.run(kStepsAfter);
  expectBitwise(tail(live.trajectory, kStepsBefore), reference);
  // Same state, other reduction order: close to the old layout's steps, not equal by design.
  for (int i = 0; i < kStepsBefore + kStepsAfter; ++i) {
    EXPECT_NEAR(live.trajectory.loss[size_t(i)], kept.loss[size_t(i)], tolerance)
        << "step " << i;
  }
}

}  // namespace moewb::engine::test
