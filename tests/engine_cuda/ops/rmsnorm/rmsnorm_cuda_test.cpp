// rmsNormForwardCuda / rmsNormBackwardCuda against ops/rmsnorm (double): y, rstd, dx (written
// and accumulated) and dGain (added into), on awkward sizes including more rows than one dGain
// chunk; dGain is also checked to be bitwise reproducible.
#include "ops/rmsnorm/rmsnorm_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace moewb::engine::cuda {
namespace {

using RmsNormCudaTest = CudaTest;

TEST_F(RmsNormCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 3000;
  const double eps = 1e-5;
  for (auto [n, d] : {std::pair<int64_t, int64_t>{1, 7}, {63, 64}, {300, 129}, {1000, 1000}}) {
    for (bool accumulate : {false, true}) {
      Tensor<float> x = roundedToBf16(randomTensor({n, d}, ++seed, 2.0));
      Tensor<float> gain = roundedToBf16(randomTensor({d}, ++seed, 0.5));
      for (int64_t j = 0; j < d; ++j) gain[j] += 1.0f;
      gain = roundedToBf16(gain);
      Tensor<float> dy = roundedToBf16(randomTensor({n, d}, ++seed));
      Tensor<float> dx0 = roundedToBf16(randomTensor({n, d}, ++seed));
      Tensor<float> dGain0 = randomTensor({d}, ++seed);

      MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dG, toDeviceBf16(context(), gain, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
      MOEWB_ASSIGN_OR_FAIL(auto dRstd, poisonedFloat(context(), {n}));
      MOEWB_ASSIGN_OR_FAIL(auto dDx, poisonedBf16(context(), {n, d}));
      if (accumulate) {
        MOEWB_ASSIGN_OR_FAIL(dDx, toDeviceBf16(context(), dx0, MemoryCategory::kActivations));
      }
      MOEWB_ASSIGN_OR_FAIL(auto dDg, toDevice(context(), dGain0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dDg2, toDevice(context(), dGain0, MemoryCategory::kGrads));

      MOEWB_ASSERT_OK(rmsNormForwardCuda(stream(), dX.data(), dG.data(), float(eps), dY.data(),
                                         dRstd.data(), n, d));
      MOEWB_ASSERT_OK(rmsNormBackwardCuda(context(), dDy.data(), dX.data(), dG.data(), dRstd.data(),
                                          dDx.data(), dDg.data(), n, d, accumulate));
      MOEWB_ASSIGN_OR_FAIL(auto dScratch, poisonedBf16(context(), {n, d}));
      MOEWB_ASSERT_OK(rmsNormBackwardCuda(context(), dDy.data(), dX.data(), dG.data(), dRstd.data(),
                                          dScratch.data(), dDg2.data(), n, d));

      Tensor<double> rstdWant;
      Tensor<double> yWant =
          rmsNormForward<double>(pool, toDouble(x), toDouble(gain), eps, rstdWant);
      Tensor<double> dGainWant = toDouble(dGain0);
      Tensor<double> dxWant = rmsNormBackward<double>(pool, toDouble(dy), toDouble(x),
                                                      toDouble(gain), rstdWant, dGainWant);
      if (accumulate) {
        for (int64_t i = 0; i < dxWant.numel(); ++i) dxWant[i] += dx0[i];
      }

      MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> rstdGot, toHost(context(), dRstd));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dDx));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dGainGot, toHost(context(), dDg));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dGainGot2, toHost(context(), dDg2));
      EXPECT_LT(relativeError(yGot, toFloat(yWant)), 1e-2) << n << "x" << d;
      EXPECT_LT(relativeError(rstdGot, toFloat(rstdWant)), 1e-5) << n << "x" << d;
      EXPECT_LT(relativeError(dxGot, toFloat(dxWant)), 1e-2) << n << "x" << d;
      EXPECT_LT(relativeError(dGainGot, toFloat(dGainWant)), 1e-4) << n << "x" << d;
      for (int64_t j = 0; j < d; ++j) ASSERT_EQ(dGainGot[j], dGainGot2[j]) << j;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
