// denseFfnForwardCuda / denseFfnBackwardCuda against ops/dense_ffn/dense_ffn.h (double), for
// SwiGLU and SiTU-GLU (SiTU with pre-activations reaching its clipping region): y += FFN(x),
// dx += ..., and the three fp32 weight gradients added into random initial values.
#include "ops/dense_ffn/dense_ffn_cuda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "ops/dense_ffn/dense_ffn.h"

namespace moewb::engine::cuda {
namespace {

using DenseFfnCudaTest = CudaTest;

struct FfnShape {
  int64_t n, d, f;
};

TEST_F(DenseFfnCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 5000;
  for (GluKind kind : {GluKind::kSwiGlu, GluKind::kSitu}) {
    GluParams params;
    params.kind = kind;
    for (FfnShape s : {FfnShape{1, 8, 5}, FfnShape{63, 48, 70}, FfnShape{130, 96, 160}}) {
      const double inScale = (kind == GluKind::kSitu ? 3.0 : 1.0) / std::sqrt(double(s.d));
      const double upScale = (kind == GluKind::kSitu ? 20.0 : 1.0) / std::sqrt(double(s.d));
      Tensor<float> x = roundedToBf16(randomTensor({s.n, s.d}, ++seed));
      Tensor<float> wg = roundedToBf16(randomTensor({s.f, s.d}, ++seed, inScale));
      Tensor<float> wu = roundedToBf16(randomTensor({s.f, s.d}, ++seed, upScale));
      Tensor<float> wd =
          roundedToBf16(randomTensor({s.d, s.f}, ++seed, 1.0 / std::sqrt(double(s.f))));
      Tensor<float> y0 = roundedToBf16(randomTensor({s.n, s.d}, ++seed));
      Tensor<float> dy = roundedToBf16(randomTensor({s.n, s.d}, ++seed));
      Tensor<float> dx0 = roundedToBf16(randomTensor({s.n, s.d}, ++seed));
      Tensor<float> gWg0 = randomTensor({s.f, s.d}, ++seed, 0.1);
      Tensor<float> gWu0 = randomTensor({s.f, s.d}, ++seed, 0.1);
      Tensor<float> gWd0 = randomTensor({s.d, s.f}, ++seed, 0.1);

      MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dWg, toDeviceBf16(context(), wg, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dWu, toDeviceBf16(context(), wu, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dWd, toDeviceBf16(context(), wd, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dY, toDeviceBf16(context(), y0, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dDx, toDeviceBf16(context(), dx0, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dGWg, toDevice(context(), gWg0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dGWu, toDevice(context(), gWu0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dGWd, toDevice(context(), gWd0, MemoryCategory::kGrads));

      const DenseFfnWeightsCuda weights{dWg.data(), dWu.data(), dWd.data()};
      const DenseFfnGradsCuda grads{dGWg.data(), dGWu.data(), dGWd.data()};
      DenseFfnSavedCuda saved;
      MOEWB_ASSERT_OK(denseFfnForwardCuda(context(), dX.data(), weights, params, saved, dY.data(),
                                          s.n, s.d, s.f));
      MOEWB_ASSERT_OK(denseFfnBackwardCuda(context(), dDy.data(), dX.data(), weights, params, saved,
                                           grads, dDx.data(), s.n, s.d, s.f));

      Tensor<double> xd = toDouble(x), wgd = toDouble(wg), wud = toDouble(wu), wdd = toDouble(wd);
      Tensor<double> yWant = toDouble(y0), dxWant = toDouble(dx0);
      Tensor<double> gWgWant = toDouble(gWg0), gWuWant = toDouble(gWu0), gWdWant = toDouble(gWd0);
      DenseFfnSaved<double> savedWant;
      denseFfnForward<double>(pool, xd, DenseFfnWeights<double>{wgd, wud, wdd}, params, savedWant,
                              yWant);
      denseFfnBackward<double>(pool, toDouble(dy), xd, DenseFfnWeights<double>{wgd, wud, wdd},
                               params, savedWant, DenseFfnGrads<double>{gWgWant, gWuWant, gWdWant},
                               dxWant);

      MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> hGot, toHostFloat(context(), saved.hidden));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dDx));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gWgGot, toHost(context(), dGWg));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gWuGot, toHost(context(), dGWu));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gWdGot, toHost(context(), dGWd));
      // Subtract the initial values from the accumulated outputs so that the bound is on the
      // FFN's contribution, not on the (exact) initial values.
      auto delta = [](const Tensor<float>& a, const Tensor<float>& b) {
        Tensor<float> out(a.shape());
        for (int64_t i = 0; i < a.numel(); ++i) out[i] = a[i] - b[i];
        return out;
      };
      const std::string tag = std::string(kind == GluKind::kSitu ? "situ " : "swiglu ") +
                              std::to_string(s.n) + "x" + std::to_string(s.d) + "x" +
                              std::to_string(s.f);
      EXPECT_LT(relativeError(hGot, toFloat(savedWant.hidden)), 1e-2) << tag;
      EXPECT_LT(relativeError(delta(yGot, y0), delta(toFloat(yWant), y0)), 2e-2) << tag;
      EXPECT_LT(relativeError(delta(dxGot, dx0), delta(toFloat(dxWant), dx0)), 2e-2) << tag;
      EXPECT_LT(relativeError(delta(gWgGot, gWg0), delta(toFloat(gWgWant), gWg0)), 1e-2) << tag;
      EXPECT_LT(relativeError(delta(gWuGot, gWu0), delta(toFloat(gWuWant), gWu0)), 1e-2) << tag;
      EXPECT_LT(relativeError(delta(gWdGot, gWd0), delta(toFloat(gWdWant), gWd0)), 1e-2) << tag;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
