// writeParallelTrace: a tiny config trained on in-process ranks through run::TrainingRun.
#include "parallel_trace.h"

#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"

namespace moewb::testing {

Status writeParallelTrace(const std::string& path, int32_t worldSize, int32_t ep, int64_t steps) {
  engine::RunConfig config;
  config.run.name = "parallel-test";
  config.run.threads = 1;
  config.run.seed = 11;
  config.model.vocabSize = 32;
  config.model.dModel = kParallelTraceDModel;
  config.model.numLayers = kParallelTraceLayers;
  config.model.numHeads = 2;
  config.model.seqLen = 8;
  config.model.mixerPattern = "A";
  config.moe.numExperts = kParallelTraceExperts;
  config.moe.topK = 2;
  config.moe.dFf = 16;
  config.data.batchSize = 8;
  config.parallel.worldSize = worldSize;
  config.parallel.ep = ep;
  MOEWB_ASSIGN_OR_RETURN(
      auto run,
      run::TrainingRun::create(config, {.outPath = path, .overwrite = true, .steps = steps}));
  MOEWB_ASSIGN_OR_RETURN(const run::RunSummary summary, run->run());
  (void)summary;
  return Status::ok();
}

}  // namespace moewb::testing
