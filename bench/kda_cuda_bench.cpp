// KDA (mixer 'K', ops/kda/kda_cuda.h) on the GPU, forward + backward, at a realistic size: B
// sequences of T tokens (B T = 16384 by default), D = 2048, H = 16 heads of K = V = 128, chunk
// C = 64 (the kernels' limits: head dim <= 128, chunk <= 64), the lower-bound gate and gate rank
// K (the config defaults). No PyTorch anchor (fla's Triton kernels are not in the image): absolute
// times and tokens/s. Inputs: the layer's weights by kdaInitialize (fla's init, std 0.02, 24
// layers) with exact zeros replaced by small noise, x ~ N(0, 1), dy ~ N(0, 1e-6); the core alone
// gets q, k ~ N(0, 1/K), v ~ N(0, 1), log decays g ~ U[-0.5, -0.01), beta ~ U[0, 1).
// One JSON line per case: median ms of 10 CUDA-event-timed runs after 3 warm-up runs, tokens/s,
// TFLOP/s against the count below, peak device memory beyond the inputs, shapes. Cases:
//   kda_core_fwd_bwd    kdaChunkForwardCuda + kdaChunkBackwardCuda (dq, dk, dv, dg, dbeta)
//   kda_layer_fwd       kdaLayerForwardCuda (projections, convs, gate, L2 norms, core, gated norm)
//   kda_layer_fwd_bwd   + kdaLayerBackwardCuda (dx and the 16 weight gradients)
// Flops: core forward per (sequence, head, chunk) 2 (C^2 K + C^3 / 6 + C^2 (K + V) / 2 + 4 C K V)
// (kda_cuda.h's cost line; FMAs x 2), backward 3x that; layer projections 2 N (3 D P + 2 D R +
// 2 R P + D H + P D) forward (q, k, v, f and gate bottlenecks, beta, output), backward 2x.
// Usage: kda_cuda_bench [B T D H K C]   (default 4 4096 2048 16 128 64)
#include "cuda_bench_util.h"
#include "model/layers/kda_layer_cuda.h"

namespace moewb::engine::cuda::bench {
namespace {

int run(int argc, char** argv) {
  KdaDims dims;
  dims.batch = argOr(argc, argv, 1, 4);
  dims.seqLen = argOr(argc, argv, 2, 4096);
  dims.dModel = argOr(argc, argv, 3, 2048);
  dims.numHeads = argOr(argc, argv, 4, 16);
  dims.headDim = argOr(argc, argv, 5, 128);
  dims.chunk = argOr(argc, argv, 6, 64);
  dims.gate = KdaGateKind::kLowerBound;
  const int64_t n = dims.tokens(), d = dims.dModel, p = dims.innerDim(), r = dims.rank(),
                h = dims.numHeads;
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;

  const double kd = double(dims.headDim), cc = double(dims.chunk);
  const double chunkFwdFma =
      cc * cc * kd + cc * cc * cc / 6.0 + cc * cc * (2.0 * kd) / 2.0 + 4.0 * cc * kd * kd;
  const double coreFwdFlops =
      2.0 * chunkFwdFma * double(dims.batch * h) * double(dims.coreDims().numChunks());
  const double projFwdFlops =
      2.0 * double(n) *
      double(3 * d * p + 2 * d * r + 2 * r * p + d * h + p * d);
  auto line = [&](const char* name, const Timing& timing, double flops) {
    JsonLine(name)
        .timing(timing)
        .num("tokens_per_s", double(n) / (timing.medianMs * 1e-3), 0)
        .flops(flops, timing.medianMs)
        .integer("B", dims.batch)
        .integer("T", dims.seqLen)
        .integer("d_model", d)
        .integer("H", h)
        .integer("K", dims.headDim)
        .integer("chunk", dims.chunk)
        .print();
  };

  {  // Core alone.
    const KdaCoreDims core = dims.coreDims();
    auto q = randomBf16(c, {n, p}, float(1.0 / std::sqrt(kd)), 11);
    auto k = randomBf16(c, {n, p}, float(1.0 / std::sqrt(kd)), 12);
    auto v = randomBf16(c, {n, p}, 1.0f, 13);
    auto g = uniformFloat(c, {n, p}, -0.5f, -0.01f, 14);
    auto beta = uniformFloat(c, {n, h}, 0.0f, 1.0f, 15);
    auto dO = randomBf16(c, {n, p}, 1e-3f, 16);
    auto o = empty<bf16>(c, {n, p});
    auto dq = empty<bf16>(c, {n, p});
    auto dk = empty<bf16>(c, {n, p});
    auto dv = empty<bf16>(c, {n, p});
    auto dg = empty<float>(c, {n, p});
    auto dbeta = empty<float>(c, {n, h});
    const KdaCoreGradsCuda grads{dq.data(), dk.data(), dv.data(), dg.data(), dbeta.data(), nullptr};
    const Timing timing = timeSteps(c, [&] {
      KdaChunkSavedCuda saved;
      check(kdaChunkForwardCuda(c, core, q.data(), k.data(), v.data(), g.data(), beta.data(),
                                nullptr, o.data(), nullptr, saved));
      check(kdaChunkBackwardCuda(c, core, dO.data(), nullptr, q.data(), k.data(), v.data(),
                                 g.data(), beta.data(), nullptr, saved, grads));
    });
    checkFinite(c, o, "core o");
    checkFinite(c, dg, "core dg");
    line("moewb_kda_core_fwd_bwd", timing, 4.0 * coreFwdFlops);
  }
  {  // Whole layer.
    KdaParameterSet<float> host(dims);
    Rng rng(1);
    kdaInitialize(dims, rng, 0.02, 24, host.refs());
    std::vector<DeviceTensor<bf16>> weights;
    std::vector<DeviceTensor<float>> gradTensors;
    std::vector<const bf16*> wp;
    std::vector<float*> gp;
    for (size_t i = 0; i < host.tensors.size(); ++i) {
      weights.push_back(parameterToDevice(c, host.tensors[i], rng));
      gradTensors.push_back(gradFloat(c, host.tensors[i].shape(), 100 + i));
      wp.push_back(weights.back().data());
      gp.push_back(gradTensors.back().data());
    }
    if (wp.size() != 16) check(internalError("KDA layer: expected 16 weights"));
    const KdaWeightsCuda w{wp[0], wp[1], wp[2],  wp[3],  wp[4],  wp[5],  wp[6],  wp[7],
                           wp[8], wp[9], wp[10], wp[11], wp[12], wp[13], wp[14], wp[15]};
    const KdaGradsCuda gw{gp[0], gp[1], gp[2],  gp[3],  gp[4],  gp[5],  gp[6],  gp[7],
                          gp[8], gp[9], gp[10], gp[11], gp[12], gp[13], gp[14], gp[15]};
    auto x = randomBf16(c, {n, d}, 1.0f, 21);
    auto dy = randomBf16(c, {n, d}, 1e-3f, 22);
    auto y = empty<bf16>(c, {n, d});
    auto dx = empty<bf16>(c, {n, d});
    const Timing fwd = timeSteps(c, [&] {
      KdaSavedCuda saved;
      check(kdaLayerForwardCuda(c, dims, x.data(), w, y.data(), saved));
    });
    checkFinite(c, y, "layer y");
    line("moewb_kda_layer_fwd", fwd, projFwdFlops + coreFwdFlops);
    const Timing fwdBwd = timeSteps(c, [&] {
      KdaSavedCuda saved;
      check(kdaLayerForwardCuda(c, dims, x.data(), w, y.data(), saved));
      check(kdaLayerBackwardCuda(c, dims, dy.data(), x.data(), w, saved, gw, dx.data()));
    });
    checkFinite(c, dx, "layer dx");
    line("moewb_kda_layer_fwd_bwd", fwdBwd, 3.0 * projFwdFlops + 4.0 * coreFwdFlops);
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) { return moewb::engine::cuda::bench::run(argc, argv); }
