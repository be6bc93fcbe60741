// EP, FSDP, EP x FSDP and HSDP on in-process ranks against one rank on the same global batch:
// the step's losses and every parameter's gradient (gathered, full expert count) after the first
// step, and the losses of three optimizer steps (sharded AdamW, global-norm clipping). Also the
// [parallel] config rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "comm/in_process_comm.h"
#include "train/synthetic_data.h"
#include "model/cpu/model.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"
#include "train/parallel/cpu_rank_stepper.h"

namespace moewb::engine {
namespace {

RunConfig smallConfig(const char* mixers) {
  RunConfig c;
  c.run.threads = 1;
  c.run.seed = 7;
  c.model.vocabSize = 32;
  c.model.dModel = 16;
  c.model.numLayers = 2;
  c.model.numHeads = 2;
  c.model.seqLen = 8;
  c.model.mixerPattern = mixers;
  c.model.initStd = 0.1;
  c.moe.numExperts = 8;
  c.moe.topK = 2;
  c.moe.dFf = 12;
  c.moe.auxLossCoef = 0.01;
  c.moe.zLossCoef = 0.001;
  c.data.batchSize = 8;
  c.kda.chunkSize = 4;
  c.sparse.topK = 4;
  c.sparse.warmupSteps = 0;
  c.optim.warmupSteps = 0;
  c.optim.gradClip = 0.5;  // clipping active: the global norm must be right
  return c;
}

RunConfig withParallel(RunConfig c, int32_t world, int32_t ep, int32_t fsdp, int32_t replicate) {
  c.parallel.worldSize = world;
  c.parallel.ep = ep;
  c.parallel.fsdp = fsdp;
  c.parallel.replicate = replicate;
  return c;
}

struct Reference {
  double loss = 0, auxLoss = 0;
  std::vector<Tensor<float>> grads;  // [params]
  std::vector<double> stepLosses;    // total loss of 3 trainer steps
};

Reference singleRank(const RunConfig& config) {
  Reference ref;
  ThreadPool pool(1);
  Model<float> model(ModelDims::fromConfig(config), pool);
  model.initialize(config.run.seed);
  SyntheticData data(config.data, config.model.vocabSize, config.model.seqLen, config.run.seed);
  model.setStep(0);
  const ForwardResult forward = model.forward(data.batch(0), nullptr);
  model.backward(nullptr);
  ref.loss = forward.loss;
  ref.auxLoss = forward.auxLoss;
  for (const auto& p : model.parameters()) ref.grads.push_back(p.grad.clone());
  auto trainer = Trainer::create(config, nullptr);
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  for (int i = 0; i < 3; ++i) {
    auto event = (*trainer)->step();
    EXPECT_TRUE(event.isOk());
    ref.stepLosses.push_back(event->loss + event->auxLoss);
  }
  return ref;
}

void expectClose(double a, double b, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(a - b), rel * std::max(1.0, std::fabs(b)))
      << what << ": " << a << " vs " << b;
}

void checkParallel(const RunConfig& base, int32_t world, int32_t ep, int32_t fsdp,
                   int32_t replicate) {
  SCOPED_TRACE("world " + std::to_string(world) + " ep " + std::to_string(ep) + " fsdp " +
               std::to_string(fsdp) + " replicate " + std::to_string(replicate));
  const Reference ref = singleRank(base);
  const RunConfig config = withParallel(base, world, ep, fsdp, replicate);
  ASSERT_TRUE(validateConfig(config).isOk()) << validateConfig(config).toString();
  std::mutex mutex;
  std::vector<double> losses(size_t(world) * 3);
  std::vector<Tensor<float>> grads;
  const Status status = runRanks(world, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(auto trainer, CpuRankStepper::create(*ValidConfig::validate(config), comm, nullptr));
    for (int i = 0; i < 3; ++i) {
      MOEWB_ASSIGN_OR_RETURN(RankStepOutcome outcome, trainer->step());
      const StepEvent& event = outcome.event;
      losses[size_t(comm.rank() * 3 + i)] = event.loss + event.auxLoss;
      if (i > 0) continue;
      std::lock_guard<std::mutex> lock(mutex);
      if (comm.rank() == 0) {
        expectClose(event.loss, ref.loss, 1e-6, "loss");
        expectClose(event.auxLoss, ref.auxLoss, 1e-5, "aux loss");
      }
    }
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t r = 0; r < world; ++r) {
    for (int i = 0; i < 3; ++i) {
      expectClose(losses[size_t(r * 3 + i)], ref.stepLosses[size_t(i)], 2e-5,
                  "rank " + std::to_string(r) + " step " + std::to_string(i) + " loss");
    }
  }
}

// Gradients of the first step, gathered on every rank, against the single-rank backward.
void checkGradients(const RunConfig& base, int32_t world, int32_t ep, int32_t fsdp,
                    int32_t replicate) {
  SCOPED_TRACE("gradients: world " + std::to_string(world) + " ep " + std::to_string(ep) +
               " fsdp " + std::to_string(fsdp));
  const Reference ref = singleRank(base);
  const RunConfig config = withParallel(base, world, ep, fsdp, replicate);
  std::mutex mutex;
  std::vector<std::vector<Tensor<float>>> rankGrads(static_cast<size_t>(world));
  std::vector<std::string> names;
  const Status status = runRanks(world, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(auto trainer, CpuRankStepper::create(*ValidConfig::validate(config), comm, nullptr));
    MOEWB_RETURN_IF_ERROR(trainer->step().status());
    MOEWB_ASSIGN_OR_RETURN(auto grads, trainer->fullGradients());
    std::lock_guard<std::mutex> lock(mutex);
    rankGrads[size_t(comm.rank())] = std::move(grads);
    if (comm.rank() == 0) {
      for (const auto& p : trainer->model().parameters()) names.push_back(p.name);
    }
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t r = 0; r < world; ++r) {
    const auto& grads = rankGrads[size_t(r)];
    ASSERT_EQ(grads.size(), ref.grads.size());
    for (size_t i = 0; i < grads.size(); ++i) {
      const Tensor<float>& want = ref.grads[i];
      ASSERT_EQ(grads[i].shape(), want.shape()) << names[i];
      float scale = 0;
      for (int64_t j = 0; j < want.numel(); ++j) scale = std::max(scale, std::fabs(want[j]));
      for (int64_t j = 0; j < want.numel(); ++j) {
        ASSERT_NEAR(grads[i][j], want[j], 2e-5 * scale + 1e-8)
            << "rank " << r << " " << names[i] << " element " << j;
      }
    }
  }
}

TEST(ParallelEquivalence, ExpertParallel2) {
  checkParallel(smallConfig("A"), 2, 2, 0, 1);
  checkGradients(smallConfig("A"), 2, 2, 0, 1);
}

TEST(ParallelEquivalence, ExpertParallel4) {
  checkParallel(smallConfig("A"), 4, 4, 0, 1);
  checkGradients(smallConfig("A"), 4, 4, 0, 1);
}

TEST(ParallelEquivalence, Fsdp2) {
  checkParallel(smallConfig("A"), 2, 1, 2, 1);
  checkGradients(smallConfig("A"), 2, 1, 2, 1);
}

TEST(ParallelEquivalence, Fsdp4) {
  checkParallel(smallConfig("A"), 4, 1, 4, 1);
  checkGradients(smallConfig("A"), 4, 1, 4, 1);
}

TEST(ParallelEquivalence, ExpertParallel2TimesFsdp2) {
  checkParallel(smallConfig("A"), 4, 2, 2, 2);
  checkGradients(smallConfig("A"), 4, 2, 2, 2);
  checkGradients(smallConfig("A"), 4, 2, 4, 1);
}

TEST(ParallelEquivalence, ReplicateOnly) {
  checkGradients(smallConfig("A"), 2, 2, 1, 2);
}

TEST(ParallelEquivalence, HybridMixersWithSharedAndLatentExperts) {
  RunConfig c = smallConfig("KKS");
  c.model.numLayers = 3;
  c.moe.numSharedExperts = 1;
  c.moe.latentDim = 8;
  c.moe.router = "sigmoid";
  c.moe.biasUpdateRate = 0.01;
  c.moe.seqAuxLossCoef = 0.01;
  checkParallel(c, 4, 2, 2, 2);
  checkGradients(c, 4, 2, 2, 2);
}

TEST(ParallelConfig, RulesNameTheKey) {
  RunConfig c = smallConfig("A");
  auto message = [](const RunConfig& config) { return validateConfig(config).toString(); };
  EXPECT_TRUE(validateConfig(withParallel(c, 4, 2, 2, 2)).isOk());
  EXPECT_TRUE(validateConfig(withParallel(c, 4, 4, 0, 1)).isOk());
  EXPECT_NE(message(withParallel(c, 4, 3, 0, 1)).find("parallel.ep"), std::string::npos);
  EXPECT_NE(message(withParallel(c, 4, 1, 3, 1)).find("parallel.fsdp"), std::string::npos);
  EXPECT_NE(message(withParallel(c, 4, 1, 0, 3)).find("parallel.replicate"), std::string::npos);
  RunConfig odd = c;
  odd.moe.numExperts = 6;
  EXPECT_NE(message(withParallel(odd, 4, 4, 0, 1)).find("moe.num_experts"), std::string::npos);
  RunConfig batch = c;
  batch.data.batchSize = 6;
  EXPECT_NE(message(withParallel(batch, 4, 1, 0, 1)).find("data.batch_size"), std::string::npos);
  RunConfig fused = c;
  fused.fusion.combineIntoExperts = true;
  EXPECT_NE(message(withParallel(fused, 2, 2, 0, 1)).find("fusion.combine_into_experts"),
            std::string::npos);
  EXPECT_TRUE(validateConfig(withParallel(fused, 2, 1, 0, 1)).isOk());
  RunConfig chunked = withParallel(c, 4, 4, 0, 1);  // 8 experts: 2 per EP rank
  chunked.parallel.a2aChunks = 2;
  EXPECT_TRUE(validateConfig(chunked).isOk());
  chunked.parallel.a2aChunks = 3;
  EXPECT_NE(message(chunked).find("parallel.a2a_chunks"), std::string::npos) << message(chunked);
  EXPECT_NE(message(chunked).find("accepted: 1..2"), std::string::npos) << message(chunked);
}

}  // namespace
}  // namespace moewb::engine
