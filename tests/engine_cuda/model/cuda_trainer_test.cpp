// The Trainer on run.backend = "cuda": 100 steps track the CPU reference's loss curve, the
// events carry the backend and the device memory account, and checkpoints round-trip through
// the device.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "cuda_test_util.h"
#include "moewb/engine/trainer.h"

namespace moewb::engine::cuda {
namespace {

RunConfig trackingConfig(const char* backend) {
  RunConfig config;
  config.run.backend = backend;
  config.run.threads = 2;
  config.model.mixerPattern = "A";
  config.model.seqLen = 64;
  config.moe.numExperts = 8;
  config.moe.topK = 2;
  config.data.batchSize = 8;
  return config;
}

std::vector<double> runLosses(const RunConfig& config, int64_t steps, std::string* backend) {
  auto trainer = Trainer::create(config, nullptr);
  EXPECT_TRUE(trainer.isOk()) << trainer.status().toString();
  if (!trainer.isOk()) return {};
  *backend = trainer.value()->backendName();
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    auto step = trainer.value()->step();
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    if (!step.isOk()) break;
    losses.push_back(step.value().loss);
  }
  return losses;
}

using CudaTrainerTest = CudaTest;

TEST_F(CudaTrainerTest, HundredStepsTrackTheCpuLossCurve) {
  std::string cpuBackend, gpuBackend;
  const std::vector<double> cpu = runLosses(trackingConfig("cpu"), 100, &cpuBackend);
  const std::vector<double> gpu = runLosses(trackingConfig("cuda"), 100, &gpuBackend);
  EXPECT_EQ(cpuBackend, "cpu");
  EXPECT_EQ(gpuBackend, "cuda");
  ASSERT_EQ(cpu.size(), 100u);
  ASSERT_EQ(gpu.size(), 100u);
  for (size_t s = 0; s < cpu.size(); s += 10) {
    EXPECT_NEAR(gpu[s], cpu[s], 0.03 * cpu[s] + 0.02) << "step " << s;
  }
  EXPECT_LT(gpu.back(), gpu.front() - 1.0) << "the GPU run must learn";
  EXPECT_NEAR(gpu.back(), cpu.back(), 0.05 * cpu.back());
}

TEST_F(CudaTrainerTest, AutoPicksTheGpuAndCheckpointsRoundTrip) {
  RunConfig config = trackingConfig("auto");
  auto first = Trainer::create(config, nullptr);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  EXPECT_EQ(first.value()->backendName(), "cuda");
  EXPECT_NE(first.value()->deviceDescription().find("device 0"), std::string::npos);
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(first.value()->step().isOk());
  const std::string path =
      (std::filesystem::temp_directory_path() / "moewb_cuda_ckpt.safetensors").string();
  MOEWB_ASSERT_OK(first.value()->saveCheckpoint(path));
  auto a = first.value()->step();
  ASSERT_TRUE(a.isOk());

  auto second = Trainer::create(config, nullptr);
  ASSERT_TRUE(second.isOk());
  MOEWB_ASSERT_OK(second.value()->loadCheckpoint(path));
  EXPECT_EQ(second.value()->stepsDone(), 3);
  auto b = second.value()->step();
  ASSERT_TRUE(b.isOk());
  // Same weights, moments and batch: the resumed step repeats the uninterrupted one.
  EXPECT_NEAR(b.value().loss, a.value().loss, 1e-6 * a.value().loss);
  std::filesystem::remove(path);
}

TEST_F(CudaTrainerTest, UnsupportedConfigOnCudaIsAClearErrorAndAutoFallsBack) {
  RunConfig config = trackingConfig("cuda");
  config.model.residual = "attnres";
  auto cuda = Trainer::create(config, nullptr);
  ASSERT_FALSE(cuda.isOk());
  EXPECT_EQ(cuda.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(cuda.status().message().find("model.residual"), std::string::npos);
  config.run.backend = "auto";
  auto fallback = Trainer::create(config, nullptr);
  ASSERT_TRUE(fallback.isOk());
  EXPECT_EQ(fallback.value()->backendName(), "cpu");
  EXPECT_NE(fallback.value()->deviceDescription().find("model.residual"), std::string::npos);
}

}  // namespace
}  // namespace moewb::engine::cuda
