// Live control on 4 virtual GPU ranks sharing one GPU: pause, single step, a patch and resume,
// checked on every rank's events (the same check as the CPU ranks', tests/engine/).
#include <gtest/gtest.h>

#include "../../engine/live_control_check.h"
#include "cuda_test_util.h"

namespace moewb::engine::cuda {
namespace {

class CudaLiveControlTest : public CudaTest {};

TEST_F(CudaLiveControlTest, PauseStepPatchResumeOnFourVirtualGpuRanks) {
  RunConfig config;
  config.run.backend = "cuda";
  config.model.mixerPattern = "A";
  config.model.numLayers = 1;
  config.model.dModel = 64;
  config.model.numHeads = 4;
  config.model.seqLen = 16;
  config.moe.numExperts = 8;
  config.moe.topK = 2;
  config.moe.dFf = 64;
  config.data.batchSize = 8;
  config.optim.warmupSteps = 10;
  config.parallel.worldSize = 4;
  config.parallel.ep = 2;
  config.parallel.fsdp = 2;
  test::checkLiveControlOnRanks(config);
}

}  // namespace
}  // namespace moewb::engine::cuda
