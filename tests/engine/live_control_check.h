// checkLiveControlOnRanks: pause, single step, a live patch and resume on a run of several ranks
// (in-process CPU ranks or virtual GPU ranks), each checked on every rank's events. Shared by the
// CPU suite (tests/engine/train/trainer_control_ranks_test.cpp) and the GPU suite.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "moewb/engine/trainer.h"
#include "recording_sink.h"

namespace moewb::engine::test {

inline bool waitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return done();
}

// `config` has parallel.world_size > 1, moe.top_k = 2, optim.warmup_steps = 10 and trains 8 steps.
inline void checkLiveControlOnRanks(const RunConfig& config) {
  using Kind = TrainerCommand::Kind;
  const int32_t world = config.parallel.worldSize;
  std::vector<RecordingSink> sinks(static_cast<size_t>(world));
  std::vector<EventSink*> rankSinks;
  for (RecordingSink& sink : sinks) rankSinks.push_back(&sink);
  auto created = Trainer::create(config, TrainerOptions{.rankSinks = rankSinks});
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  Trainer& t = **created;
  EXPECT_EQ(t.localRanks(), world);

  std::future<Status> pause = t.post({Kind::kPause});  // handled before the first step
  Status runStatus;
  std::thread runner([&] { runStatus = t.run(8); });
  EXPECT_TRUE(pause.get().isOk());
  ASSERT_TRUE(waitFor([&] { return t.paused(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(t.stepsDone(), 0);  // really paused: no rank stepped

  EXPECT_TRUE(t.post({Kind::kStep}).get().isOk());
  ASSERT_TRUE(waitFor([&] { return t.stepsDone() == 1 && t.paused(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(t.stepsDone(), 1);  // exactly one step

  // While paused after step 0: a patch every rank must take from step 1 on.
  Status patched = t.post({Kind::kApplyPatch, {"optim.lr=0.0005", "moe.top_k=1"}, "test"}).get();
  EXPECT_TRUE(patched.isOk()) << patched.toString();
  Status refused = t.post({Kind::kApplyPatch, {"model.d_model=128"}, "test"}).get();
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(t.post({Kind::kResume}).get().isOk());
  runner.join();
  ASSERT_TRUE(runStatus.isOk()) << runStatus.toString();
  EXPECT_EQ(t.stepsDone(), 8);

  const int64_t rankTokens = int64_t(config.data.batchSize / world) * config.model.seqLen;
  for (int32_t r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const RecordingSink& sink = sinks[size_t(r)];
    ASSERT_EQ(sink.steps.size(), 8u);
    for (const StepEvent& step : sink.steps) {
      EXPECT_EQ(step.rank, r);
      const double lr = step.step == 0 ? config.optim.lr : 0.0005;
      EXPECT_NEAR(step.lr, lr * double(step.step + 1) / 10.0, 1e-12) << "step " << step.step;
    }
    for (const ExpertLoadEvent& load : sink.loads) {
      const int64_t routed =
          std::accumulate(load.tokensPerExpert.begin(), load.tokensPerExpert.end(), int64_t{0});
      EXPECT_EQ(routed, rankTokens * (load.step == 0 ? 2 : 1))
          << "step " << load.step << " layer " << load.layer;
    }
    EXPECT_EQ(sink.configChanges.size(), r == 0 ? 2u : 0u);  // one row per key, from rank 0
  }
  EXPECT_EQ(sinks[0].configChanges[0].step, 1);
  EXPECT_EQ(t.config().moe.topK, 1);
}

}  // namespace moewb::engine::test
