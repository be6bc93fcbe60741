// The full training step on the GPU (run.backend = "cuda") for a config file: tokens/s, step time,
// achieved model TFLOP/s (3x the forward's matrix flops: attention projections and scores, router,
// experts, shared experts, LM head) and peak device memory, as one JSON line; the same config on
// the CPU reference is timed too when --cpu is given. Median of the timed steps after warm-up.
// Usage: train_step_cuda_bench CONFIG.toml [--steps N] [--set key=value ...] [--cpu]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"

namespace {

using moewb::engine::RunConfig;

double forwardMatrixFlops(const RunConfig& c) {
  const double n = double(c.tokensPerStep()), d = c.model.dModel, v = c.model.vocabSize;
  const double e = c.moe.numExperts, k = c.moe.topK, f = c.moe.dFf;
  const double dx = c.moe.latentDim > 0 ? c.moe.latentDim : d;
  const double t = c.model.seqLen;
  double perLayer = 2 * n * d * e + 6 * n * k * dx * f;
  if (c.moe.latentDim > 0) perLayer += 4 * n * d * dx;
  const double shared = double(c.moe.numSharedExperts) * (c.moe.sharedDFf > 0 ? c.moe.sharedDFf : f);
  perLayer += 6 * n * d * shared;
  perLayer += 8 * n * d * d + 2 * n * t * d;  // projections + causal scores and context
  return double(c.model.numLayers) * perLayer + 2 * n * d * v;
}

struct Timing {
  double medianMs = 0;
  double loss = 0;
  int64_t peakBytes = 0;
  std::string device;
};

Timing timeSteps(const RunConfig& config, int steps) {
  auto trainer = moewb::engine::Trainer::create(config, nullptr);
  if (!trainer.isOk()) {
    std::fprintf(stderr, "%s\n", trainer.status().toString().c_str());
    std::exit(2);
  }
  Timing timing;
  timing.device = trainer.value()->deviceDescription();
  std::vector<double> ms;
  for (int s = 0; s < steps + 5; ++s) {
    const auto start = std::chrono::steady_clock::now();
    auto step = trainer.value()->step();
    const auto end = std::chrono::steady_clock::now();
    if (!step.isOk()) {
      std::fprintf(stderr, "%s\n", step.status().toString().c_str());
      std::exit(1);
    }
    if (s >= 5) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
    timing.loss = step.value().loss;
    timing.peakBytes = std::max(timing.peakBytes, step.value().peakBytes);
  }
  std::sort(ms.begin(), ms.end());
  timing.medianMs = ms[ms.size() / 2];
  return timing;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CONFIG.toml [--steps N] [--set key=value ...] [--cpu]\n", argv[0]);
    return 2;
  }
  auto config = moewb::engine::loadConfigFile(argv[1]);
  if (!config.isOk()) {
    std::fprintf(stderr, "%s\n", config.status().toString().c_str());
    return 2;
  }
  int steps = 20;
  bool cpu = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--set") && i + 1 < argc) {
      auto status = moewb::engine::applyOverride(config.value(), argv[++i]);
      if (!status.isOk()) {
        std::fprintf(stderr, "%s\n", status.toString().c_str());
        return 2;
      }
    } else if (!std::strcmp(argv[i], "--cpu")) {
      cpu = true;
    }
  }
  for (const char* backend : cpu ? std::vector<const char*>{"cuda", "cpu"}
                                 : std::vector<const char*>{"cuda"}) {
    RunConfig c = config.value();
    c.run.backend = backend;
    const Timing t = timeSteps(c, steps);
    const double tokens = double(c.tokensPerStep());
    std::printf("{\"name\": \"moewb_train_step_%s_%s\", \"step_ms\": %.3f, \"tokens_per_s\": %.0f, "
                "\"model_tflops\": %.3f, \"peak_mib\": %.1f, \"loss\": %.4f, \"device\": \"%s\"}\n",
                c.run.name.c_str(), backend, t.medianMs, tokens / (t.medianMs / 1e3),
                3 * forwardMatrixFlops(c) / (t.medianMs / 1e3) / 1e12,
                double(t.peakBytes) / double(1 << 20), t.loss, t.device.c_str());
  }
  return 0;
}
