// The MoE layer on the GPU (router GEMM, top-k, device dispatch, permute, grouped SwiGLU experts,
// combine; forward + backward), at the sizes of ../shared/anchors/moe_layer.py so the two print
// comparable lines: T tokens, D model width, E experts, top-K, FF expert width; balanced (random
// router) and Zipf-skewed routing. Prints one JSON line per case: median ms over 10 timed steps
// after 3 warm-up steps (CUDA events), expert TFLOP/s (3 * T K 6 D FF flops, the anchor's count)
// and max/mean expert load. Usage: moe_layer_cuda_bench [T D E K FF]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/transfer.h"
#include "model/cuda/cuda_moe.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine::cuda {
namespace {

int64_t argOr(int argc, char** argv, int i, int64_t fallback) {
  return argc > i ? std::atoll(argv[i]) : fallback;
}

Tensor<float> normal(std::vector<int64_t> shape, double stddev, uint64_t seed) {
  Tensor<float> t(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(stddev * rng.normal());
  return t;
}

void check(const Status& status) {
  if (!status.isOk()) {
    std::fprintf(stderr, "%s\n", status.toString().c_str());
    std::exit(1);
  }
}

template <typename T>
T take(Result<T> result) {
  check(result.status());
  return std::move(result).value();
}

int run(int argc, char** argv) {
  const int64_t t = argOr(argc, argv, 1, 16384), d = argOr(argc, argv, 2, 2048),
                e = argOr(argc, argv, 3, 64), k = argOr(argc, argv, 4, 8),
                ff = argOr(argc, argv, 5, 1024);
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;
  const MemoryCategory w = MemoryCategory::kWeights;
  auto x = take(toDeviceBf16(c, normal({t, d}, 1.0, 1), MemoryCategory::kActivations));
  auto dy = take(toDeviceBf16(c, normal({t, d}, 1e-3, 2), MemoryCategory::kActivations));
  auto router = take(toDeviceBf16(c, normal({e, d}, 0.02, 3), w));
  auto gate = take(toDeviceBf16(c, normal({e, ff, d}, 0.02, 4), w));
  auto up = take(toDeviceBf16(c, normal({e, ff, d}, 0.02, 5), w));
  auto down = take(toDeviceBf16(c, normal({e, d, ff}, 0.02, 6), w));
  auto gRouter = take(c.newTensor<float>({e, d}, MemoryCategory::kGrads));
  auto gGate = take(c.newTensor<float>({e, ff, d}, MemoryCategory::kGrads));
  auto gUp = take(c.newTensor<float>({e, ff, d}, MemoryCategory::kGrads));
  auto gDown = take(c.newTensor<float>({e, d, ff}, MemoryCategory::kGrads));
  auto dx = take(c.newTensor<bf16>({t, d}, MemoryCategory::kActivations));
  Tensor<float> zipfBias({e});
  double zipfSum = 0;
  for (int64_t i = 0; i < e; ++i) zipfSum += 1.0 / double(i + 1);
  for (int64_t i = 0; i < e; ++i) zipfBias[i] = float(1.5 * std::log(1.0 / double(i + 1) / zipfSum));
  auto skewBias = take(toDevice(c, zipfBias, w));

  MoeOptions options;
  options.topK = int32_t(k);
  options.auxLossCoef = 0;
  options.seqLen = t;
  const MoeShapeCuda shape{t, d, e, ff};
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (bool skewed : {false, true}) {
    MoeWeightsCuda weights;
    weights.router = router.data();
    weights.gate = &gate;
    weights.up = &up;
    weights.down = &down;
    weights.bias = skewed ? skewBias.data() : nullptr;
    const MoeGradsCuda grads{gRouter.data(), &gGate, &gUp, &gDown};
    double maxOverMean = 0;
    auto step = [&] {
      MoeSavedCuda saved;
      auto y = take(moeForwardCuda(c, x, weights, shape, options, saved));
      check(moeBackwardCuda(c, dy, x, weights, shape, saved, grads, dx));
      if (maxOverMean == 0) {
        auto counts = take(toHost(c, saved.switchAux.counts));
        int64_t most = 0, total = 0;
        for (int64_t i = 0; i < e; ++i) {
          most = std::max<int64_t>(most, counts[i]);
          total += counts[i];
        }
        maxOverMean = double(most) / (double(total) / double(e));
      }
    };
    for (int i = 0; i < 3; ++i) step();
    check(c.synchronize());
    std::vector<float> times;
    for (int i = 0; i < 10; ++i) {
      cudaEventRecord(start, c.stream());
      step();
      cudaEventRecord(stop, c.stream());
      cudaEventSynchronize(stop);
      float ms = 0;
      cudaEventElapsedTime(&ms, start, stop);
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    const double ms = times[times.size() / 2];
    const double flops = 3.0 * double(t) * double(k) * 6.0 * double(d) * double(ff);
    std::printf("{\"name\": \"moewb_moe_layer_%s\", \"ms\": %.3f, \"expert_tflops\": %.1f, "
                "\"max_over_mean_load\": %.3f, \"peak_gib\": %.2f, \"T\": %lld, \"D\": %lld, "
                "\"E\": %lld, \"K\": %lld, \"FF\": %lld}\n",
                skewed ? "skewed" : "balanced", ms, flops / ms / 1e9, maxOverMean,
                double(c.allocator().stats().totalPeakInUseBytes) / double(1 << 30),
                (long long)t, (long long)d, (long long)e, (long long)k, (long long)ff);
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda

int main(int argc, char** argv) { return moewb::engine::cuda::run(argc, argv); }
