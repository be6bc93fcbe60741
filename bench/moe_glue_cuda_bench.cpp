// The MoE layer's glue on the GPU without the expert GEMMs: router (fp32 logits GEMM, softmax
// top-k, Switch aux loss alpha = 0.01, the config default), device dispatch plan, permute, weighted
// combine, and their backwards, exactly as model/cuda/cuda_moe.cpp runs them for a plain
// (non-latent, no shared expert, dropless) MoE layer. The experts are replaced by the identity
// (the combine reads the permuted rows, the permute backward reads the combine's row gradients),
// so moe_glue_fwd_bwd is what the MoE layer costs beyond its expert GEMMs (compare with
// moe_layer_cuda_bench's moewb_moe_layer_balanced). Router weights ~ N(0, 0.02), x ~ N(0, 1):
// near-balanced routing. T tokens, D width, E experts, top-K.
// One JSON line per case: median ms of 10 CUDA-event-timed runs after 3 warm-up runs, GB/s against
// the fewest bytes each stage must move (each input read once, each output written once; bf16
// rows 2 D bytes) and TFLOP/s for the router's GEMMs, peak device memory beyond the inputs. Cases:
//   moe_glue_router_fwd    logits = x Wr^T (fp32), routerForwardCuda, auxLossForwardCuda (counts)
//                          flops 2 T D E; bytes 2 T D (x) + 4 T E (logits) + T K 8 (ids, weights)
//   moe_glue_dispatch      buildDispatchCuda; bytes T K 4 (ids) + T K 12 (row token, row slot,
//                          slot row) + counts
//   moe_glue_permute_fwd   permuteForwardCuda; bytes 2 T D + 2 T K D
//   moe_glue_combine_fwd   combineForwardCuda; bytes 2 T K D + 2 T D + 4 T K
//   moe_glue_combine_bwd   combineBackwardCuda; bytes 2 T D (dy) + 2 T K D (rows) + 2 T K D (dRows)
//                          + 4 T K (weights) + 4 T K (dWeights)
//   moe_glue_permute_bwd   permuteBackwardCuda; bytes 2 T K D + 2 T D
//   moe_glue_router_bwd    routerTopKBackwardCuda + auxLossBackwardCuda into dLogits, then the two
//                          fp32 router GEMMs (dWr += dLogits^T x, dx += dLogits Wr) with x and Wr
//                          widened to fp32; flops 4 T D E; bytes 2 T D (x) + 2 (2 T D) (dx read
//                          and written) + 8 T E (probabilities read, logit gradients written)
//   moe_glue_fwd_bwd       all of the above in order (tokens/s; GB/s against the sum of the bytes)
// Usage: moe_glue_cuda_bench [T D E K]   (default 16384 2048 64 8)
#include "runtime/cuda/gemm.h"
#include "cuda_bench_util.h"
#include "ops/combine/combine_cuda.h"
#include "ops/permute/permute_cuda.h"
#include "ops/router/router_cuda.h"

namespace moewb::engine::cuda::bench {
namespace {

constexpr double kAuxLossCoef = 0.01;

struct Forward {
  DeviceTensor<float> logits;  // [T, E]
  DeviceRouterOutput route;
  DeviceAuxLoss aux;
  DeviceDispatch plan;
  DeviceTensor<bf16> xPerm;  // [T K, D], also the experts' output (identity experts)
  DeviceTensor<bf16> y;      // [T, D]
};

struct Backward {
  DeviceTensor<bf16> dYPerm;      // [T K, D], also the experts' input gradient
  DeviceTensor<float> dTopWeight; // [T, K]
  DeviceTensor<bf16> dx;          // [T, D]
};

int run(int argc, char** argv) {
  const int64_t n = argOr(argc, argv, 1, 16384), d = argOr(argc, argv, 2, 2048),
                e = argOr(argc, argv, 3, 64), k = argOr(argc, argv, 4, 8);
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;
  auto x = randomBf16(c, {n, d}, 1.0f, 1);
  auto dy = randomBf16(c, {n, d}, 1e-3f, 2);
  auto router = randomBf16(c, {e, d}, 0.02f, 3, 0.0f, MemoryCategory::kWeights);
  auto gRouter = gradFloat(c, {e, d}, 4);
  RouterConfig config;
  config.topK = int32_t(k);

  auto routerForward = [&](Forward& f) {
    f.logits = empty<float>(c, {n, e});
    check(gemm(c, n, e, d, 1.0f, GemmOperand{x.data(), DType::kBf16, d, false},
               GemmOperand{router.data(), DType::kBf16, d, true}, 0.0f,
               GemmOutput{f.logits.data(), DType::kF32, e}));
    f.route = take(routerForwardCuda(c, f.logits, config));
    f.aux = take(auxLossForwardCuda(c, f.route, kAuxLossCoef));
  };
  auto dispatch = [&](Forward& f) { f.plan = take(buildDispatchCuda(c, f.route.topExpert, e)); };
  auto permuteForward = [&](Forward& f) {
    f.xPerm = empty<bf16>(c, {f.plan.maxRows(), d});
    check(permuteForwardCuda(c, x, f.plan, f.xPerm));
  };
  auto combineForward = [&](Forward& f) {
    f.y = empty<bf16>(c, {n, d});
    check(combineForwardCuda(c, f.xPerm, f.route.topWeight, f.plan, f.y));
  };
  auto combineBackward = [&](Forward& f, Backward& b) {
    b.dYPerm = empty<bf16>(c, {f.plan.maxRows(), d});
    b.dTopWeight = empty<float>(c, {n, k});
    check(combineBackwardCuda(c, dy, f.xPerm, f.route.topWeight, f.plan, b.dYPerm, b.dTopWeight));
  };
  auto permuteBackward = [&](Forward& f, Backward& b) {
    b.dx = empty<bf16>(c, {n, d});
    check(permuteBackwardCuda(c, b.dYPerm, f.plan, b.dx));
  };
  auto routerBackward = [&](Forward& f, Backward& b) {
    auto dLogits = empty<float>(c, {n, e});
    check(fillFloat(c.stream(), dLogits.data(), 0.0f, n * e));
    check(routerTopKBackwardCuda(c, f.route, b.dTopWeight, dLogits));
    check(auxLossBackwardCuda(c, f.route, f.aux, kAuxLossCoef, dLogits));
    auto xWide = take(c.newTensor<float>({n, d}, MemoryCategory::kWorkspace));
    auto routerWide = take(c.newTensor<float>({e, d}, MemoryCategory::kWorkspace));
    auto dxRouter = take(c.newTensor<float>({n, d}, MemoryCategory::kWorkspace));
    check(castBf16ToFloat(c.stream(), x.data(), xWide.data(), n * d));
    check(castBf16ToFloat(c.stream(), router.data(), routerWide.data(), e * d));
    check(gemm(c, e, d, n, 1.0f, GemmOperand{dLogits.data(), DType::kF32, e, true},
               GemmOperand{xWide.data(), DType::kF32, d, false}, 1.0f,
               GemmOutput{gRouter.data(), DType::kF32, d}));
    check(gemm(c, n, d, e, 1.0f, GemmOperand{dLogits.data(), DType::kF32, e, false},
               GemmOperand{routerWide.data(), DType::kF32, d, false}, 0.0f,
               GemmOutput{dxRouter.data(), DType::kF32, d}));
    check(addFloatIntoBf16(c.stream(), dxRouter.data(), b.dx.data(), n * d));
  };

  const double nn = double(n), dd = double(d), ee = double(e), kk = double(k);
  const double row = 2.0 * dd;  // bytes of one bf16 row
  const double routerFwdBytes = nn * row + 4.0 * nn * ee + 8.0 * nn * kk;
  const double dispatchBytes = 4.0 * nn * kk + 12.0 * nn * kk + 8.0 * ee;
  const double permuteFwdBytes = nn * row + nn * kk * row;
  const double combineFwdBytes = nn * kk * row + nn * row + 4.0 * nn * kk;
  const double combineBwdBytes = nn * row + 2.0 * nn * kk * row + 8.0 * nn * kk;
  const double permuteBwdBytes = nn * kk * row + nn * row;
  const double routerBwdBytes = 3.0 * nn * row + 8.0 * nn * ee;
  const double routerFwdFlops = 2.0 * nn * dd * ee, routerBwdFlops = 4.0 * nn * dd * ee;
  auto line = [&](const char* name, const Timing& timing, double bytes, double flops) {
    JsonLine json(name);
    json.timing(timing).bytes(bytes, timing.medianMs);
    if (flops > 0) json.flops(flops, timing.medianMs);
    json.num("tokens_per_s", nn / (timing.medianMs * 1e-3), 0)
        .integer("T", n)
        .integer("D", d)
        .integer("E", e)
        .integer("K", k)
        .print();
  };

  // One full pass builds the state every stage reads; then each stage alone, on that state.
  Forward f;
  Backward b;
  routerForward(f);
  dispatch(f);
  permuteForward(f);
  combineForward(f);
  combineBackward(f, b);
  permuteBackward(f, b);
  routerBackward(f, b);
  check(c.synchronize());
  line("moewb_moe_glue_router_fwd", timeSteps(c, [&] { routerForward(f); }), routerFwdBytes,
       routerFwdFlops);
  line("moewb_moe_glue_dispatch", timeSteps(c, [&] { dispatch(f); }), dispatchBytes, 0);
  line("moewb_moe_glue_permute_fwd", timeSteps(c, [&] { permuteForward(f); }), permuteFwdBytes, 0);
  line("moewb_moe_glue_combine_fwd", timeSteps(c, [&] { combineForward(f); }), combineFwdBytes, 0);
  checkFinite(c, f.y, "y");
  line("moewb_moe_glue_combine_bwd", timeSteps(c, [&] { combineBackward(f, b); }),
       combineBwdBytes, 0);
  line("moewb_moe_glue_permute_bwd", timeSteps(c, [&] { permuteBackward(f, b); }),
       permuteBwdBytes, 0);
  line("moewb_moe_glue_router_bwd", timeSteps(c, [&] { routerBackward(f, b); }), routerBwdBytes,
       routerBwdFlops);
  const Timing all = timeSteps(c, [&] {
    Forward sf;
    Backward sb;
    routerForward(sf);
    dispatch(sf);
    permuteForward(sf);
    combineForward(sf);
    combineBackward(sf, sb);
    permuteBackward(sf, sb);
    routerBackward(sf, sb);
  });
  checkFinite(c, b.dx, "dx");
  const double allBytes = routerFwdBytes + dispatchBytes + permuteFwdBytes + combineFwdBytes +
                          combineBwdBytes + permuteBwdBytes + routerBwdBytes;
  line("moewb_moe_glue_fwd_bwd", all, allBytes, routerFwdFlops + routerBwdFlops);
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) { return moewb::engine::cuda::bench::run(argc, argv); }
