// The GPU router against the CPU reference: selection (ids and order, ties to the lower id) for
// softmax / sigmoid scores, bias, route scale and group limits; probs, scores and weights; the
// backward of the weights; the Switch and sequence aux losses (value, counts, backward) and the
// z-loss. The reference runs in float on the same bf16-rounded logits, so selection values are
// bit-identical for the softmax router (z + b); for the sigmoid router expf may differ by an ulp,
// so a differing choice is accepted only where the two selection values tie within 1e-6.
#include "ops/router/router_cuda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "moe_cuda_test_util.h"
#include "ops/router/router.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using moetest::describe;
using moetest::MoeShape;

using RouterCudaTest = CudaTest;

struct Variant {
  RouterScore score;
  bool bias;
  double routeScale;
  int32_t groups;
  int32_t topKGroups;
};

std::string describe(const Variant& v) {
  return std::string(v.score == RouterScore::kSoftmax ? "softmax" : "sigmoid") +
         (v.bias ? " bias" : "") + " scale=" + std::to_string(v.routeScale) +
         " groups=" + std::to_string(v.groups) + "/" + std::to_string(v.topKGroups);
}

std::vector<Variant> variantsFor(const MoeShape& s) {
  std::vector<Variant> out;
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    out.push_back({score, false, 1.0, 1, 1});
    out.push_back({score, true, 2.5, 1, 1});
    if (s.e == 64 && s.k <= 24) out.push_back({score, true, 1.0, 8, 3});
    if (s.e == 8 && s.k <= 4) out.push_back({score, false, 1.0, 4, 2});
  }
  return out;
}

// The selection value of expert j in row t, as both implementations compute it (float).
float selectionValue(const Tensor<float>& logits, const std::vector<float>* bias, RouterScore score,
                     int64_t t, int32_t j) {
  float v = logits.at(t, j);
  if (score == RouterScore::kSigmoid) v = 1.0f / (1.0f + std::exp(-v));
  return bias != nullptr ? v + (*bias)[size_t(j)] : v;
}

// Host copy of a device route, as the reference's RouterOutput (for the loss references).
RouterOutput<float> hostRoute(CudaContext& context, const DeviceRouterOutput& route, bool& ok) {
  RouterOutput<float> out;
  out.score = route.score;
  out.routeScale = route.routeScale;
  auto probs = toHost(context, route.probs);
  auto top = toHost(context, route.topExpert);
  auto weight = toHost(context, route.topWeight);
  ok = probs.isOk() && top.isOk() && weight.isOk();
  if (!ok) return out;
  out.probs = std::move(probs).value();
  out.topExpert = std::move(top).value();
  out.topWeight = std::move(weight).value();
  if (route.score == RouterScore::kSigmoid) {
    auto scores = toHost(context, route.scores);
    ok = scores.isOk();
    if (ok) out.scores = std::move(scores).value();
  }
  return out;
}

TEST_F(RouterCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 6000;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (const Variant& v : variantsFor(s)) {
      const std::string what = describe(s) + " " + describe(v);
      Tensor<float> logits = roundedToBf16(randomTensor({s.n, s.e}, ++seed, 2.0));
      std::vector<float> bias(static_cast<size_t>(s.e));
      Tensor<float> biasT = randomTensor({s.e}, ++seed, 0.1);
      for (int64_t j = 0; j < s.e; ++j) bias[size_t(j)] = biasT[j];
      RouterConfig config;
      config.score = v.score;
      config.topK = int32_t(s.k);
      config.routeScale = v.routeScale;
      config.numGroups = v.groups;
      config.topKGroups = v.topKGroups;
      const std::vector<float>* biasPtr = v.bias ? &bias : nullptr;
      RouterOutput<float> want = routerForward(pool, logits, config, biasPtr);
      MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDevice(context(), logits, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dBias, toDevice(context(), biasT, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(
          DeviceRouterOutput route,
          routerForwardCuda(context(), dLogits, config, v.bias ? dBias.data() : nullptr));
      bool ok = false;
      RouterOutput<float> got = hostRoute(context(), route, ok);
      ASSERT_TRUE(ok) << what;
      // Selection: equal ids in order, or (sigmoid only) an ulp-level tie.
      int64_t rowsDiffering = 0;
      for (int64_t t = 0; t < s.n; ++t) {
        bool same = true;
        for (int64_t j = 0; j < s.k; ++j)
          same = same && got.topExpert.at(t, j) == want.topExpert.at(t, j);
        if (same) continue;
        ++rowsDiffering;
        ASSERT_EQ(v.score, RouterScore::kSigmoid) << what << " row " << t;
        for (int64_t j = 0; j < s.k; ++j) {
          const float a = selectionValue(logits, biasPtr, v.score, t, got.topExpert.at(t, j));
          const float b = selectionValue(logits, biasPtr, v.score, t, want.topExpert.at(t, j));
          ASSERT_NEAR(a, b, 1e-6) << what << " row " << t << " slot " << j;
        }
      }
      EXPECT_LE(rowsDiffering, 1) << what;
      if (rowsDiffering > 0) continue;  // values below compare slot by slot
      EXPECT_LT(relativeError(got.probs, want.probs), 1e-5) << what;
      EXPECT_LT(relativeError(got.topWeight, want.topWeight), 1e-5) << what;
      if (v.score == RouterScore::kSigmoid) {
        EXPECT_LT(relativeError(got.scores, want.scores), 1e-5) << what;
      }
      // Backward of the weights, added into a non-zero dLogits.
      Tensor<float> dTop = randomTensor({s.n, s.k}, ++seed);
      Tensor<float> base = randomTensor({s.n, s.e}, ++seed, 0.1);
      MOEWB_ASSIGN_OR_FAIL(auto dDTop, toDevice(context(), dTop, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dGrad, toDevice(context(), base, MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(routerTopKBackwardCuda(context(), route, dDTop, dGrad));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotGrad, toHost(context(), dGrad));
      Tensor<float> wantGrad = base.clone();
      routerTopKBackward(pool, want, dTop, wantGrad);
      EXPECT_LT(relativeError(gotGrad, wantGrad), 1e-5) << what;
    }
  }
}

TEST_F(RouterCudaTest, AuxLossesMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 7000;
  for (const MoeShape& s : moetest::moeShapes()) {
    for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
      const std::string what =
          describe(s) + (score == RouterScore::kSoftmax ? " softmax" : " sigmoid");
      Tensor<float> logits = roundedToBf16(randomTensor({s.n, s.e}, ++seed, 2.0));
      RouterConfig config;
      config.score = score;
      config.topK = int32_t(s.k);
      MOEWB_ASSIGN_OR_FAIL(auto dLogits, toDevice(context(), logits, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(DeviceRouterOutput route, routerForwardCuda(context(), dLogits, config));
      bool ok = false;
      RouterOutput<float> host = hostRoute(context(), route, ok);
      ASSERT_TRUE(ok) << what;
      const double alpha = 0.01;
      // Switch aux loss: value, counts, backward.
      MOEWB_ASSIGN_OR_FAIL(DeviceAuxLoss aux, auxLossForwardCuda(context(), route, alpha));
      AuxLossStats want = auxLossForward(host, alpha);
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> loss, toHost(context(), aux.loss));
      MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> counts, toHost(context(), aux.counts));
      EXPECT_NEAR(loss[0], want.loss, 1e-5 * std::abs(want.loss) + 1e-9) << what;
      for (int64_t e = 0; e < s.e; ++e) ASSERT_EQ(counts[e], want.counts[size_t(e)]) << what;
      // Gradients are tiny (alpha E f / N); start from 0 and add twice (tests the accumulation).
      Tensor<float> base({s.n, s.e});
      MOEWB_ASSIGN_OR_FAIL(auto dGrad, toDevice(context(), base, MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(auxLossBackwardCuda(context(), route, aux, alpha, dGrad));
      MOEWB_ASSERT_OK(auxLossBackwardCuda(context(), route, aux, alpha, dGrad));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotGrad, toHost(context(), dGrad));
      Tensor<float> wantGrad = base.clone();
      auxLossBackward(pool, host, want, alpha, wantGrad);
      auxLossBackward(pool, host, want, alpha, wantGrad);
      // With k = E every expert is chosen, f is uniform and the gradient vanishes analytically:
      // both sides are rounding noise, so compare absolutely against the gradient's scale.
      const bool vanishing = s.k == s.e;
      if (vanishing) {
        EXPECT_LT(maxAbsDifference(gotGrad, wantGrad), 1e-6 * alpha) << what;
      } else {
        EXPECT_LT(relativeError(gotGrad, wantGrad), 1e-5) << what;
      }
      // Sequence aux loss (N = S seqLen).
      const int64_t seqLen = s.n == 63 ? 21 : s.n;
      MOEWB_ASSIGN_OR_FAIL(DeviceAuxLoss seq,
                           seqAuxLossForwardCuda(context(), route, alpha, seqLen));
      SeqAuxLossStats wantSeq = seqAuxLossForward(host, alpha, seqLen);
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> seqLoss, toHost(context(), seq.loss));
      EXPECT_NEAR(seqLoss[0], wantSeq.loss, 1e-5 * std::abs(wantSeq.loss) + 1e-9) << what;
      MOEWB_ASSIGN_OR_FAIL(auto dSeqGrad, toDevice(context(), base, MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(auxLossBackwardCuda(context(), route, seq, alpha, dSeqGrad));
      MOEWB_ASSERT_OK(auxLossBackwardCuda(context(), route, seq, alpha, dSeqGrad));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotSeqGrad, toHost(context(), dSeqGrad));
      Tensor<float> wantSeqGrad = base.clone();
      seqAuxLossBackward(pool, host, wantSeq, alpha, wantSeqGrad);
      seqAuxLossBackward(pool, host, wantSeq, alpha, wantSeqGrad);
      if (vanishing) {
        EXPECT_LT(maxAbsDifference(gotSeqGrad, wantSeqGrad), 1e-6 * alpha) << what;
      } else {
        EXPECT_LT(relativeError(gotSeqGrad, wantSeqGrad), 1e-5) << what;
      }
      // z-loss.
      const double coef = 1e-3;
      MOEWB_ASSIGN_OR_FAIL(DeviceTensor<float> zLoss, zLossForwardCuda(context(), dLogits, coef));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotZ, toHost(context(), zLoss));
      const double wantZ = zLossForward(pool, toDouble(logits), coef);
      EXPECT_NEAR(gotZ[0], wantZ, 1e-5 * std::abs(wantZ) + 1e-9) << what;
      MOEWB_ASSIGN_OR_FAIL(auto dZGrad, toDevice(context(), base, MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(zLossBackwardCuda(context(), dLogits, coef, dZGrad));
      MOEWB_ASSERT_OK(zLossBackwardCuda(context(), dLogits, coef, dZGrad));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gotZGrad, toHost(context(), dZGrad));
      Tensor<double> wantZGrad = toDouble(base);
      zLossBackward(pool, toDouble(logits), coef, wantZGrad);
      zLossBackward(pool, toDouble(logits), coef, wantZGrad);
      EXPECT_LT(relativeError(gotZGrad, toFloat(wantZGrad)), 1e-5) << what;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
