// Causal softmax attention (mixer 'A', ops/attention/attention_cuda.h) on the GPU, against
// ../shared/anchors/attention.py (torch SDPA, causal, bf16, forward + backward of the core on
// q, k, v [B, H, T, K]). Run both with the same B T H K. At K = 64 and 128 the core is the flash
// kernels (no T x T workspace, so T = 32768 fits); other K take the cuBLAS path, whose
// workspace is fp32 + bf16 [H, T, T] forward and twice that backward.
// Prints one JSON line per case: median ms of 10 CUDA-event-timed runs after 3 warm-up runs,
// TFLOP/s against the causal flop count FlashAttention reports (forward 2 B H T^2 K: the two
// GEMMs over the unmasked half; backward 2.5x that; our flash backward recomputes S and dP once
// more, 3.5x), peak device memory beyond the inputs, shapes. Cases:
//   attention_core_fwd       attentionCoreForwardCuda (context + lse from q, k, v)
//   attention_core_fwd_bwd   + attentionCoreBackwardCuda (dq, dk, dv): the anchor's step
//   attention_layer_fwd      attentionForwardCuda (q/k/v/o projections + core), D = H K
//   attention_layer_fwd_bwd  + attentionBackwardCuda (dx and the four weight gradients)
// Layer flops add 8 N D^2 forward (four projections) and 16 N D^2 backward.
// Usage: attention_cuda_bench [B T H K]   (default 2 16384 16 128)
#include "cuda_bench_util.h"
#include "ops/attention/attention_cuda.h"

namespace moewb::engine::cuda::bench {
namespace {

int run(int argc, char** argv) {
  AttentionDims dims;
  dims.batch = argOr(argc, argv, 1, 2);
  dims.seqLen = argOr(argc, argv, 2, 16384);
  dims.numHeads = argOr(argc, argv, 3, 16);
  dims.headDim = argOr(argc, argv, 4, 128);
  const int64_t n = dims.tokens(), d = dims.dModel();
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;

  const double b = double(dims.batch), h = double(dims.numHeads), t = double(dims.seqLen),
               k = double(dims.headDim);
  const double coreFwdFlops = 2.0 * b * h * t * t * k;       // causal half of QK^T and PV
  const double coreFwdBwdFlops = 3.5 * coreFwdFlops;          // backward 2.5x the forward
  const double projFwdFlops = 8.0 * double(n) * double(d) * double(d);
  auto line = [&](const char* name, const Timing& timing, double flops) {
    JsonLine(name)
        .timing(timing)
        .flops(flops, timing.medianMs)
        .num("tokens_per_s", double(n) / (timing.medianMs * 1e-3), 0)
        .integer("B", dims.batch)
        .integer("T", dims.seqLen)
        .integer("H", dims.numHeads)
        .integer("D", dims.headDim)
        .integer("d_model", d)
        .print();
  };

  {  // Core: q, k, v ~ N(0, 1) like the anchor's torch.randn.
    auto q = randomBf16(c, {n, d}, 1.0f, 11);
    auto kk = randomBf16(c, {n, d}, 1.0f, 12);
    auto v = randomBf16(c, {n, d}, 1.0f, 13);
    auto dContext = randomBf16(c, {n, d}, 1e-3f, 14);
    auto lse = empty<float>(c, {dims.batch, dims.numHeads, dims.seqLen});
    auto out = empty<bf16>(c, {n, d});
    auto dq = empty<bf16>(c, {n, d});
    auto dk = empty<bf16>(c, {n, d});
    auto dv = empty<bf16>(c, {n, d});
    auto forward = [&] {
      check(attentionCoreForwardCuda(c, dims, q.data(), kk.data(), v.data(), lse.data(),
                                     out.data()));
    };
    auto backward = [&] {
      check(attentionCoreBackwardCuda(c, dims, dContext.data(), q.data(), kk.data(), v.data(),
                                      out.data(), lse.data(), dq.data(), dk.data(), dv.data()));
    };
    const Timing fwd = timeSteps(c, forward);
    checkFinite(c, out, "core context");
    line("moewb_attention_core_fwd", fwd, coreFwdFlops);
    const Timing fwdBwd = timeSteps(c, [&] { forward(); backward(); });
    checkFinite(c, dq, "core dq");
    line("moewb_attention_core_fwd_bwd", fwdBwd, coreFwdBwdFlops);
  }
  {  // Layer: x ~ N(0, 1), weights ~ N(0, 0.02), fp32 gradient accumulators.
    auto x = randomBf16(c, {n, d}, 1.0f, 21);
    auto dy = randomBf16(c, {n, d}, 1e-3f, 22);
    auto wq = randomBf16(c, {d, d}, 0.02f, 23, 0.0f, MemoryCategory::kWeights);
    auto wk = randomBf16(c, {d, d}, 0.02f, 24, 0.0f, MemoryCategory::kWeights);
    auto wv = randomBf16(c, {d, d}, 0.02f, 25, 0.0f, MemoryCategory::kWeights);
    auto wo = randomBf16(c, {d, d}, 0.02f, 26, 0.0f, MemoryCategory::kWeights);
    auto gq = gradFloat(c, {d, d}, 27);
    auto gk = gradFloat(c, {d, d}, 28);
    auto gv = gradFloat(c, {d, d}, 29);
    auto go = gradFloat(c, {d, d}, 30);
    auto y = empty<bf16>(c, {n, d});
    auto dx = empty<bf16>(c, {n, d});
    const AttentionWeightsCuda weights{wq.data(), wk.data(), wv.data(), wo.data()};
    const AttentionGradsCuda grads{gq.data(), gk.data(), gv.data(), go.data()};
    const Timing fwd = timeSteps(c, [&] {
      AttentionSavedCuda saved;
      check(attentionForwardCuda(c, dims, x.data(), weights, saved, y.data()));
    });
    checkFinite(c, y, "layer y");
    line("moewb_attention_layer_fwd", fwd, projFwdFlops + coreFwdFlops);
    const Timing fwdBwd = timeSteps(c, [&] {
      AttentionSavedCuda saved;
      check(attentionForwardCuda(c, dims, x.data(), weights, saved, y.data()));
      check(attentionBackwardCuda(c, dims, dy.data(), x.data(), weights, saved, grads, dx.data()));
    });
    checkFinite(c, dx, "layer dx");
    line("moewb_attention_layer_fwd_bwd", fwdBwd, 3.0 * projFwdFlops + coreFwdBwdFlops);
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) { return moewb::engine::cuda::bench::run(argc, argv); }
