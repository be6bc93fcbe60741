// Timings of the LM-head loss paths on one thread: dense (linear + ops/cross_entropy, as
// model.cpp runs it), Chunk Loss and CCE, forward and backward, with the peak tensor bytes each
// allocates beyond its inputs and the weight gradient. Not a test: run by hand,
//   engine_losses_bench [reps]
// Data: h ~ N(0, 1) (a normed hidden), Wv ~ N(0, wStd^2), uniform random targets; wStd 0.02 is
// the model's init (flat softmax, nothing to filter), wStd 4 a very peaked softmax where CCE
// filtering skips tiles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "ops/cce/cce.h"
#include "ops/chunk_loss/chunk_loss.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/linear/linear.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {
namespace {

struct Case {
  int64_t tokens, dModel, vocab;
  double wStd;   // std of Wv: small = flat softmax (as at init), large = peaked
  bool cceOnly;  // skip dense and chunk (for the filtering case)
};

struct Timing {
  double forwardMs = 1e300, backwardMs = 1e300;
  int64_t peakBytes = 0;
};

double msSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Best of `reps` runs of forward() then backward(); the peak is that of the last run.
Timing measure(int reps, const std::function<void()>& forward,
               const std::function<void()>& backward, const std::function<void()>& release) {
  Timing timing;
  for (int r = 0; r < reps; ++r) {
    const int64_t base = TensorMemory::currentBytes();
    TensorMemory::resetPeak();
    auto start = std::chrono::steady_clock::now();
    forward();
    timing.forwardMs = std::min(timing.forwardMs, msSince(start));
    start = std::chrono::steady_clock::now();
    backward();
    timing.backwardMs = std::min(timing.backwardMs, msSince(start));
    timing.peakBytes = TensorMemory::peakBytes() - base;
    release();
  }
  return timing;
}

void print(const Case& c, const std::string& method, const Timing& t, const std::string& note) {
  std::printf(
      "N=%-5lld D=%-4lld V=%-6lld wStd=%-4g %-26s fwd %9.2f ms  bwd %9.2f ms  total %9.2f ms  "
      "peak extra %8.2f MiB (logits N*V would be %8.2f MiB) %s\n",
      (long long)c.tokens, (long long)c.dModel, (long long)c.vocab, c.wStd, method.c_str(),
      t.forwardMs, t.backwardMs, t.forwardMs + t.backwardMs, double(t.peakBytes) / (1 << 20),
      double(c.tokens * c.vocab * int64_t(sizeof(float))) / (1 << 20), note.c_str());
}

void runCase(const Case& c, int reps) {
  ThreadPool pool(1);
  Rng rng(7);
  const int64_t n = c.tokens, d = c.dModel, vocab = c.vocab;
  Tensor<float> h({n, d}), wv({vocab, d}), dWv({vocab, d});
  Tensor<int32_t> targets({n});
  for (int64_t i = 0; i < h.numel(); ++i) h[i] = float(rng.normal());
  for (int64_t i = 0; i < wv.numel(); ++i) wv[i] = float(rng.normal() * c.wStd);
  for (int64_t t = 0; t < n; ++t) targets[t] = int32_t(rng.uniformInt(vocab));

  if (!c.cceOnly) {
    Tensor<float> logits, lse, dh;
    double loss = 0;
    const Timing t = measure(
        reps,
        [&] {
          logits = Tensor<float>({n, vocab});
          linearForward(pool, h.data(), wv.data(), logits.data(), n, d, vocab);
          loss = crossEntropyForward(pool, logits, targets, lse);
        },
        [&] {
          Tensor<float> dLogits = crossEntropyBackward(pool, logits, targets, lse, 1.0);
          logits = Tensor<float>();
          dh = Tensor<float>({n, d});
          linearBackwardData(pool, dLogits.data(), wv.data(), dh.data(), n, d, vocab);
          linearBackwardWeight(pool, dLogits.data(), h.data(), dWv.data(), n, d, vocab);
        },
        [&] {
          dh = Tensor<float>();
          lse = Tensor<float>();
        });
    print(c, "dense", t, "loss " + std::to_string(loss));
  }
  for (int64_t chunk : {int64_t(0), int64_t(256)}) {
    if (c.cceOnly) break;
    ChunkLossOptions options;
    options.chunkTokens = chunk;
    ChunkLossSaved<float> saved;
    Tensor<float> dh;
    double loss = 0;
    const Timing t = measure(
        reps, [&] { loss = chunkLossForward(pool, h, wv, targets, options, saved).loss; },
        [&] { dh = chunkLossBackward(pool, saved, 1.0, dWv); }, [&] { dh = Tensor<float>(); });
    const int64_t used = chunk > 0 ? std::min(chunk, n) : chunkLossAutoTokens(n, vocab, d);
    print(c, "chunk Nc=" + std::to_string(used) + (chunk == 0 ? " (auto)" : ""), t,
          "loss " + std::to_string(loss));
  }
  const struct {
    const char* name;
    double eps;
    bool filterWeights;
  } variants[] = {{"cce exact", 0, false},
                  {"cce filter(dh), dWv exact", kCceFilterAuto, false},
                  {"cce filter(dh, dWv)", kCceFilterAuto, true}};
  for (const auto& variant : variants) {
    CceOptions options;
    options.filterEps = variant.eps;
    options.filterWeightGrad = variant.filterWeights;
    CceSaved<float> saved;
    CceStats stats;
    Tensor<float> dh;
    double loss = 0;
    const Timing t = measure(
        reps, [&] { loss = cceForward(pool, h, wv, targets, options, saved).loss; },
        [&] { dh = cceBackward(pool, h, wv, targets, options, saved, 1.0, dWv, &stats); },
        [&] {
          dh = Tensor<float>();
          saved = CceSaved<float>();
        });
    print(c, std::string(variant.name) + " Tb=64 Vb=256", t,
          "loss " + std::to_string(loss) + " skipped " + std::to_string(stats.skippedTiles) + "/" +
              std::to_string(stats.tiles));
  }
}

}  // namespace
}  // namespace moewb::engine

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  moewb::engine::runCase({512, 64, 256, 0.02, false}, reps * 3);
  moewb::engine::runCase({2048, 128, 32768, 0.02, false}, reps);
  moewb::engine::runCase({2048, 128, 32768, 4.0, true}, reps);
  return 0;
}
