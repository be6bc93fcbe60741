// KDA layer forward + backward on the CPU reference at the reference shape of the op work
// (B=8, T=64, D=64, H=4, K=16), for chunk sizes 64 and 16, one thread.
#include <benchmark/benchmark.h>

#include "model/layers/kda_layer.h"
#include "runtime/tensor/rng.h"

namespace {

using namespace moewb::engine;

void BM_KdaLayerFwdBwd(benchmark::State& state) {
  KdaDims dims;
  dims.batch = 8;
  dims.seqLen = 64;
  dims.dModel = 64;
  dims.numHeads = 4;
  dims.headDim = 16;
  dims.chunk = state.range(0);
  ThreadPool pool(1);
  Rng rng(8);
  KdaParameterSet<float> params(dims), grads(dims);
  kdaInitialize(dims, rng, 0.02, 4, params.refs());
  Tensor<float> x({dims.tokens(), dims.dModel}), dy({dims.tokens(), dims.dModel});
  for (int64_t i = 0; i < x.numel(); ++i) x[i] = float(rng.normal());
  for (int64_t i = 0; i < dy.numel(); ++i) dy[i] = float(rng.normal());
  for (auto _ : state) {
    KdaSaved<float> saved;
    Tensor<float> y = kdaForward(pool, dims, x, params.weights(), saved);
    Tensor<float> dx = kdaBackward(pool, dims, dy, x, params.weights(), saved, grads.refs());
    benchmark::DoNotOptimize(dx.data());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(state.iterations() * dims.tokens()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KdaLayerFwdBwd)->Arg(64)->Arg(16)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
