// globalGradNormCuda, gradClipScaleCuda, scaleGradsCuda and adamwUpdateCuda against the CPU
// optimizer maths (ops/adamw adamwUpdate<double>, optim/optimizer.cpp's clip factor): several
// buffers of awkward sizes, decay on and off, clipping active and inactive, the bf16 compute copy,
// and bitwise reproducibility of the norm.
#include "ops/adamw/adamw_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cuda_test_util.h"
#include "ops/adamw/adamw.h"

namespace moewb::engine::cuda {
namespace {

using AdamWCudaTest = CudaTest;

TEST_F(AdamWCudaTest, NormClipAndUpdateMatchReference) {
  ThreadPool pool(1);
  const std::vector<int64_t> sizes = {1, 63, 5000, 100003};
  for (double gradClip : {0.5, 1e9}) {
    uint64_t seed = 8000 + uint64_t(gradClip);
    std::vector<Tensor<float>> p, g, m, v;
    std::vector<DeviceTensor<float>> dp, dg, dm, dv;
    std::vector<DeviceTensor<bf16>> dpBf16;
    for (int64_t n : sizes) {
      p.push_back(randomTensor({n}, ++seed));
      g.push_back(randomTensor({n}, ++seed, 0.01));
      m.push_back(randomTensor({n}, ++seed, 0.01));
      Tensor<float> vInit = randomTensor({n}, ++seed, 1e-4);
      for (int64_t i = 0; i < n; ++i) vInit[i] = std::fabs(vInit[i]);
      v.push_back(std::move(vInit));
      MOEWB_ASSIGN_OR_FAIL(auto a, toDevice(context(), p.back(), MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto b, toDevice(context(), g.back(), MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto c, toDevice(context(), m.back(), MemoryCategory::kOptimizer));
      MOEWB_ASSIGN_OR_FAIL(auto d, toDevice(context(), v.back(), MemoryCategory::kOptimizer));
      MOEWB_ASSIGN_OR_FAIL(auto e, poisonedBf16(context(), {n}));
      dp.push_back(std::move(a));
      dg.push_back(std::move(b));
      dm.push_back(std::move(c));
      dv.push_back(std::move(d));
      dpBf16.push_back(std::move(e));
    }
    std::vector<const float*> gradPtrs;
    for (auto& t : dg) gradPtrs.push_back(t.data());
    // Device scalars: [0] norm (double), [1] scale (float), via 1-element tensors.
    MOEWB_ASSIGN_OR_FAIL(auto dNorm, context().newTensor<double>({1}, MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dNorm2, context().newTensor<double>({1}, MemoryCategory::kWorkspace));
    MOEWB_ASSIGN_OR_FAIL(auto dScale, poisonedFloat(context(), {1}));
    MOEWB_ASSERT_OK(globalGradNormCuda(context(), gradPtrs, sizes, dNorm.data()));
    MOEWB_ASSERT_OK(globalGradNormCuda(context(), gradPtrs, sizes, dNorm2.data()));
    MOEWB_ASSERT_OK(gradClipScaleCuda(stream(), dNorm.data(), gradClip, dScale.data()));

    AdamWHyper hyper;
    hyper.lr = 3e-3;
    hyper.weightDecay = 0.1;
    hyper.step = 7;
    for (size_t i = 0; i < sizes.size(); ++i) {
      MOEWB_ASSERT_OK(adamwUpdateCuda(stream(), dp[i].data(), dg[i].data(), dm[i].data(),
                                      dv[i].data(), dpBf16[i].data(), sizes[i], hyper, i % 2 == 0,
                                      dScale.data()));
    }

    double sumSq = 0;
    for (auto& t : g) {
      for (int64_t i = 0; i < t.numel(); ++i) sumSq += double(t[i]) * double(t[i]);
    }
    const double normWant = std::sqrt(sumSq);
    const double scaleWant = normWant > gradClip ? gradClip / (normWant + 1e-6) : 1.0;
    double normGot = 0, normGot2 = 0;
    MOEWB_ASSERT_OK(context().synchronize());
    ASSERT_EQ(cudaMemcpy(&normGot, dNorm.data(), sizeof(double), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(&normGot2, dNorm2.data(), sizeof(double), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_NEAR(normGot, normWant, 1e-12 * normWant);
    EXPECT_EQ(normGot, normGot2);
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> scaleGot, toHost(context(), dScale));
    EXPECT_NEAR(scaleGot[0], scaleWant, 1e-6 * scaleWant);
    if (gradClip < 1) {
      EXPECT_LT(scaleGot[0], 1.0f);  // the clipping case really clips
    }

    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor<double> pw = toDouble(p[i]), gw = toDouble(g[i]), mw = toDouble(m[i]),
                     vw = toDouble(v[i]);
      adamwUpdate<double>(pool, pw.data(), gw.data(), mw.data(), vw.data(), sizes[i], hyper,
                          i % 2 == 0, double(scaleGot[0]));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> pGot, toHost(context(), dp[i]));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> mGot, toHost(context(), dm[i]));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> vGot, toHost(context(), dv[i]));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> bGot, toHostFloat(context(), dpBf16[i]));
      EXPECT_LT(relativeError(pGot, toFloat(pw)), 1e-6) << sizes[i];
      EXPECT_LT(relativeError(mGot, toFloat(mw)), 1e-5) << sizes[i];
      EXPECT_LT(relativeError(vGot, toFloat(vw)), 1e-5) << sizes[i];
      Tensor<float> pRounded = roundedToBf16(pGot);
      for (int64_t j = 0; j < sizes[i]; ++j)
        ASSERT_EQ(bGot[j], pRounded[j]) << sizes[i] << " " << j;
      // The update itself (p - p0) within fp32 tolerance.
      Tensor<float> stepGot(pGot.shape()), stepWant(pGot.shape());
      for (int64_t j = 0; j < sizes[i]; ++j) {
        stepGot[j] = float(double(pGot[j]) - double(p[i][j]));
        stepWant[j] = float(pw[j] - double(p[i][j]));
      }
      EXPECT_LT(relativeError(stepGot, stepWant), 1e-3) << sizes[i];
    }
  }
}

TEST_F(AdamWCudaTest, ScaleGradsMultipliesByDeviceScalar) {
  Tensor<float> g = randomTensor({1001}, 8100);
  Tensor<float> s({1});
  s[0] = 0.37f;
  MOEWB_ASSIGN_OR_FAIL(auto dG, toDevice(context(), g, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_FAIL(auto dS, toDevice(context(), s, MemoryCategory::kWorkspace));
  MOEWB_ASSERT_OK(scaleGradsCuda(stream(), dG.data(), g.numel(), dS.data()));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHost(context(), dG));
  for (int64_t i = 0; i < g.numel(); ++i) ASSERT_EQ(got[i], g[i] * 0.37f) << i;
}

}  // namespace
}  // namespace moewb::engine::cuda
