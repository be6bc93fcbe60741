// The single-rank StepRunners (step_runner.h): one model in this process, on the CPU (the fp32
// reference, CpuModelRunner) or on one GPU (the CUDA backend, CudaModelRunner). Both keep the host
// Model<float> as the owner of the run's identity: parameter names and order, the initial weights
// drawn from the seed, the expert bias state, and what checkpoints read and write. The models are
// built for one forward's batch (ModelDims::forwardFromConfig): a step cut into micro-batches
// (data.micro_batch_size, micro_batches.h) runs one forward and backward per micro-batch, then
// one optimizer update. Alignment dumps need one forward a step (refused otherwise).
// Used from the trainer thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/cpu/model.h"
#include "runtime/thread_pool.h"
#include "train/step_runner.h"
#include "train/synthetic_data.h"

namespace moewb::engine {

class ModelRunner : public StepRunner {
 public:
  ~ModelRunner() override;

  int32_t reportedRanks() const override { return 1; }
  Status start(const std::vector<EventSink*>& sinks) override;
  Result<bool> agreeOnStop(bool stop) override { return stop; }
  Status applyLiveConfig(const ValidConfig& config) override;
  Status finish() override { return Status::ok(); }
  Model<float>* hostModel() override { return m_model.get(); }
  int32_t threadCount() const override { return m_pool->size(); }
  std::vector<StartupPhase> startupPhases() const override { return m_startup; }
  // Appends one start-up phase (createModelRunner: the device's parts).
  void addStartupPhases(const std::vector<StartupPhase>& phases) {
    m_startup.insert(m_startup.end(), phases.begin(), phases.end());
  }

 protected:
  // Builds the host model from `config` and initialises it from run.seed. Throws std::bad_alloc
  // when it does not fit.
  explicit ModelRunner(const ValidConfig& config);

  RunConfig m_config;
  EventSink* m_sink = nullptr;
  std::unique_ptr<ThreadPool> m_pool;
  std::unique_ptr<Model<float>> m_model;
  std::unique_ptr<SyntheticData> m_data;
  std::vector<StartupPhase> m_startup;  // host model and weights, then the device's
};

// The StepRunner for one rank: the CUDA backend when run.backend = "cuda" (or "auto" with a
// visible GPU that runs the config), else the CPU reference. Errors: kInvalidArgument (more than
// 2^31-1 routed rows per step), kResourceExhausted (the model and one step's activations would not
// fit in half of the machine's memory, or out of memory while allocating), those of the CUDA
// backend when run.backend = "cuda".
Result<std::unique_ptr<StepRunner>> createModelRunner(const ValidConfig& config);

}  // namespace moewb::engine
