// GPU ranks (virtual ranks sharing the one GPU, run.backend = "cuda"; and NCCL ranks, one per GPU,
// on machines with several GPUs): EP, FSDP, EP x FSDP and HSDP give the losses and gradient norms
// of one GPU rank on the same global batch (bf16 tolerance), and the trace events of an EP run are consistent: every routed row crosses the
// all-to-all exactly once per direction, so the dispatch traffic into each rank equals the rows
// routed to its experts times the row size.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_test_util.h"
#include "moewb/engine/trainer.h"
#include "train/parallel/rank_common.h"

namespace moewb::engine::cuda {
namespace {

RunConfig gpuConfig() {
  RunConfig c;
  c.run.backend = "cuda";
  c.run.seed = 11;
  c.model.mixerPattern = "A";
  c.model.numLayers = 2;
  c.model.dModel = 64;
  c.model.numHeads = 4;
  c.model.seqLen = 64;
  c.model.vocabSize = 256;
  c.moe.numExperts = 8;
  c.moe.topK = 2;
  c.moe.dFf = 64;
  c.moe.auxLossCoef = 0.01;
  c.data.batchSize = 8;
  c.optim.warmupSteps = 0;
  c.optim.gradClip = 0.5;
  return c;
}

RunConfig withParallel(RunConfig c, int32_t world, int32_t ep, int32_t fsdp, int32_t replicate) {
  c.parallel.worldSize = world;
  c.parallel.ep = ep;
  c.parallel.fsdp = fsdp;
  c.parallel.replicate = replicate;
  return c;
}

// Every event of one rank (thread-safe: each rank has its own sink, but keep it simple).
class RankSink : public EventSink {
 public:
  void onRunStart(const RunStartEvent& e) override { backend = e.backend; }
  void onPhase(const PhaseEvent&) override {}
  void onExpertLoad(const ExpertLoadEvent& e) override { loads.push_back(e); }
  void onCounter(const CounterEvent&) override {}
  void onStep(const StepEvent& e) override { steps.push_back(e); }
  void onCollective(const CollectiveEvent& e) override { collectives.push_back(e); }
  void onA2aTraffic(const A2aTrafficEvent& e) override { traffic.push_back(e); }
  void onRunEnd(const RunEndEvent& e) override { outcome = e.outcome; }
  std::string backend;
  std::vector<ExpertLoadEvent> loads;
  std::vector<StepEvent> steps;
  std::vector<CollectiveEvent> collectives;
  std::vector<A2aTrafficEvent> traffic;
  RunOutcome outcome = RunOutcome::kCompleted;
};

struct RunResult {
  std::vector<double> losses, gradNorms;
  std::vector<RankSink> sinks;
};

RunResult runParallel(const RunConfig& config, int64_t steps) {
  RunResult run;
  run.sinks.resize(size_t(config.parallel.worldSize));
  std::vector<EventSink*> sinks;
  for (RankSink& s : run.sinks) sinks.push_back(&s);
  auto trainer = Trainer::create(config, TrainerOptions{.rankSinks = sinks});
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  if (!trainer.isOk()) return run;
  const Status status = trainer.value()->run(steps);
  EXPECT_TRUE(status.isOk()) << status.toString();
  for (const StepEvent& e : run.sinks[0].steps) {
    run.losses.push_back(e.loss + e.auxLoss);
    run.gradNorms.push_back(e.gradNorm);
  }
  return run;
}

RunResult runOneGpu(const RunConfig& config, int64_t steps) {
  RunResult run;
  auto trainer = Trainer::create(config, nullptr);
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  if (!trainer.isOk()) return run;
  for (int64_t s = 0; s < steps; ++s) {
    auto event = trainer.value()->step();
    EXPECT_TRUE(event.isOk()) << event.status().toString();
    if (!event.isOk()) break;
    run.losses.push_back(event->loss + event->auxLoss);
    run.gradNorms.push_back(event->gradNorm);
  }
  return run;
}

void expectClose(const std::vector<double>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * std::abs(want[i]) + 1e-6) << what << " at step " << i;
  }
}

class CudaParallelTest : public CudaTest {};

TEST_F(CudaParallelTest, GpuRanksMatchOneGpuRank) {
  const RunConfig base = gpuConfig();
  const RunResult reference = runOneGpu(base, 3);
  ASSERT_EQ(reference.losses.size(), 3u);
  struct Layout {
    int32_t world, ep, fsdp, replicate;
  };
  for (const Layout l : {Layout{1, 1, 0, 0}, Layout{2, 2, 0, 0}, Layout{4, 4, 0, 0},
                         Layout{2, 1, 2, 0}, Layout{4, 2, 2, 0}, Layout{4, 2, 2, 2}}) {
    SCOPED_TRACE("world " + std::to_string(l.world) + " ep " + std::to_string(l.ep) + " fsdp " +
                 std::to_string(l.fsdp) + " replicate " + std::to_string(l.replicate));
    const RunResult run = runParallel(withParallel(base, l.world, l.ep, l.fsdp, l.replicate), 3);
    EXPECT_EQ(run.sinks[0].backend, "cuda");
    // bf16 GEMMs over differently sized token slices round differently; the first step's
    // loss sees identical weights, later steps also the (clipped) updates.
    expectClose(run.losses, reference.losses, 5e-3, "loss");
    expectClose(run.gradNorms, reference.gradNorms, 3e-2, "grad norm");
  }
}

// One thread per GPU, each an NCCL rank on its own device (as one process per GPU would be).
RunResult runNcclRanks(const RunConfig& config, int64_t steps) {
  RunResult run;
  const int32_t n = config.parallel.worldSize;
  run.sinks.resize(size_t(n));
  Result<std::string> id = newNcclUniqueId();
  EXPECT_TRUE(id.isOk()) << id.status().toString();
  if (!id.isOk()) return run;
  std::vector<Status> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(r);
      results[size_t(r)] = [&]() -> Status {
        MOEWB_ASSIGN_OR_RETURN(auto comm,
                               createNcclCommunicator(r, n, r, *id, std::chrono::seconds(60), {}));
        MOEWB_ASSIGN_OR_RETURN(auto stepper,
                               createCudaRankStepper(*ValidConfig::validate(config), *comm, &run.sinks[size_t(r)], r));
        for (int64_t i = 0; i < steps; ++i) {
          // (The Trainer's tail reports steps; a bare stepper only returns them.)
          MOEWB_ASSIGN_OR_RETURN(RankStepOutcome outcome, stepper->step());
          if (r == 0) run.sinks[0].steps.push_back(outcome.event);
        }
        return Status::ok();
      }();
    });
  }
  for (auto& t : threads) t.join();
  for (int32_t r = 0; r < n; ++r) {
    EXPECT_TRUE(results[size_t(r)].isOk()) << "rank " << r << ": " << results[size_t(r)].toString();
  }
  for (const StepEvent& e : run.sinks[0].steps) {
    run.losses.push_back(e.loss + e.auxLoss);
    run.gradNorms.push_back(e.gradNorm);
  }
  return run;
}

TEST_F(CudaParallelTest, NcclRanksMatchOneGpuRank) {
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs (one NCCL rank per GPU), this machine has " << devices;
  const RunConfig base = gpuConfig();
  const RunResult reference = runOneGpu(base, 3);
  struct Layout {
    int32_t world, ep, fsdp, replicate;
  };
  std::vector<Layout> layouts{{2, 2, 0, 0}, {2, 1, 2, 0}, {2, 2, 1, 2}};
  if (devices >= 4) layouts.insert(layouts.end(), {{4, 4, 0, 0}, {4, 2, 2, 0}, {4, 2, 2, 2}});
  if (devices >= 8) layouts.insert(layouts.end(), {{8, 8, 0, 0}, {8, 4, 2, 0}});
  for (const Layout l : layouts) {
    SCOPED_TRACE("NCCL world " + std::to_string(l.world) + " ep " + std::to_string(l.ep) +
                 " fsdp " + std::to_string(l.fsdp) + " replicate " + std::to_string(l.replicate));
    const RunResult run = runNcclRanks(withParallel(base, l.world, l.ep, l.fsdp, l.replicate), 3);
    expectClose(run.losses, reference.losses, 5e-3, "loss");
    expectClose(run.gradNorms, reference.gradNorms, 3e-2, "grad norm");
  }
}

// Overlapping the all-to-all with the experts in chunks of local experts changes the order of
// work on two streams, not the arithmetic: the losses are bitwise those of one chunk.
TEST_F(CudaParallelTest, OverlapChunksGiveBitwiseEqualLosses) {
  RunConfig base = withParallel(gpuConfig(), 4, 4, 0, 0);  // 2 local experts per rank
  const RunResult plain = runParallel(base, 3);
  base.parallel.a2aChunks = 2;
  const RunResult chunked = runParallel(base, 3);
  ASSERT_EQ(chunked.losses.size(), 3u);
  EXPECT_EQ(chunked.losses, plain.losses);
  EXPECT_EQ(chunked.gradNorms, plain.gradNorms);
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) return;
  RunConfig nccl = withParallel(gpuConfig(), 2, 2, 0, 0);  // 4 local experts per rank
  const RunResult ncclPlain = runNcclRanks(nccl, 3);
  nccl.parallel.a2aChunks = 4;
  const RunResult ncclChunked = runNcclRanks(nccl, 3);
  ASSERT_EQ(ncclChunked.losses.size(), 3u);
  EXPECT_EQ(ncclChunked.losses, ncclPlain.losses);
}

TEST_F(CudaParallelTest, ExpertParallelTraceIsConsistent) {
  const RunConfig config = withParallel(gpuConfig(), 4, 4, 0, 0);
  const RunResult run = runParallel(config, 2);
  const int64_t d = config.model.dModel, local = config.moe.numExperts / 4;
  // Dispatch bytes into rank dst in (step, layer) = 2 D x rows routed to dst's experts by all.
  std::map<std::tuple<int64_t, int32_t, int32_t>, int64_t> routedRows, dispatchBytes;
  for (const RankSink& sink : run.sinks) {
    for (const ExpertLoadEvent& load : sink.loads) {
      for (size_t e = 0; e < load.tokensPerExpert.size(); ++e) {
        routedRows[{load.step, load.layer, int32_t(int64_t(e) / local)}] +=
            load.tokensPerExpert[e] - load.droppedPerExpert[e];
      }
    }
    for (const A2aTrafficEvent& t : sink.traffic) {
      if (t.phase != "dispatch") continue;
      for (size_t j = 0; j < t.dstRanks.size(); ++j) {
        dispatchBytes[{t.step, t.layer, t.dstRanks[j]}] += t.bytes[j];
      }
    }
  }
  ASSERT_EQ(routedRows.size(), size_t(2 * config.model.numLayers * 4));
  for (const auto& [key, rows] : routedRows) {
    EXPECT_EQ(dispatchBytes[key], rows * d * 2)
        << "step " << std::get<0>(key) << " layer " << std::get<1>(key) << " rank "
        << std::get<2>(key);
  }
  // Every rank ran the same collectives: the four EP phases per layer and step, device calls.
  for (const RankSink& sink : run.sinks) {
    std::map<std::string, int> phases;
    for (const CollectiveEvent& c : sink.collectives) {
      if (c.group == "ep" && c.op == "all_to_all_v") ++phases[c.phase];
    }
    for (const char* phase : {"dispatch", "combine", "combine.bwd", "dispatch.bwd"}) {
      EXPECT_EQ(phases[phase], 2 * config.model.numLayers) << phase;
    }
    EXPECT_EQ(sink.collectives.size(), run.sinks[0].collectives.size());
    EXPECT_EQ(sink.outcome, RunOutcome::kCompleted);
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
