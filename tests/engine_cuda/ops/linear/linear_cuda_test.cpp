// linearForwardCuda / linearBackwardDataCuda / linearBackwardWeightCuda against the CPU reference
// (ops/linear/linear.h) in double, on awkward sizes, with and without accumulation.
#include "ops/linear/linear_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/linear/linear.h"

namespace moewb::engine::cuda {
namespace {

using LinearCudaTest = CudaTest;

struct LinearShape {
  int64_t rows, in, out;
};

TEST_F(LinearCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 1000;
  for (LinearShape s : {LinearShape{1, 8, 5}, LinearShape{63, 70, 33}, LinearShape{130, 96, 257}}) {
    for (bool accumulate : {false, true}) {
      Tensor<float> x = roundedToBf16(randomTensor({s.rows, s.in}, ++seed));
      Tensor<float> w = roundedToBf16(randomTensor({s.out, s.in}, ++seed, 0.2));
      Tensor<float> dy = roundedToBf16(randomTensor({s.rows, s.out}, ++seed));
      Tensor<float> y0 = roundedToBf16(randomTensor({s.rows, s.out}, ++seed));
      Tensor<float> dx0 = roundedToBf16(randomTensor({s.rows, s.in}, ++seed));
      Tensor<float> dw0 = randomTensor({s.out, s.in}, ++seed);

      MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dW, toDeviceBf16(context(), w, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {s.rows, s.out}));
      MOEWB_ASSIGN_OR_FAIL(auto dDx, poisonedBf16(context(), {s.rows, s.in}));
      if (accumulate) {
        MOEWB_ASSIGN_OR_FAIL(dY, toDeviceBf16(context(), y0, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(dDx, toDeviceBf16(context(), dx0, MemoryCategory::kActivations));
      }
      MOEWB_ASSIGN_OR_FAIL(auto dDw, toDevice(context(), dw0, MemoryCategory::kGrads));

      MOEWB_ASSERT_OK(linearForwardCuda(context(), dX.data(), dW.data(), dY.data(), s.rows, s.in,
                                        s.out, accumulate));
      MOEWB_ASSERT_OK(linearBackwardDataCuda(context(), dDy.data(), dW.data(), dDx.data(), s.rows,
                                             s.in, s.out, accumulate));
      MOEWB_ASSERT_OK(linearBackwardWeightCuda(context(), dDy.data(), dX.data(), dDw.data(), s.rows,
                                               s.in, s.out));

      Tensor<double> xd = toDouble(x), wd = toDouble(w), dyd = toDouble(dy);
      Tensor<double> yWant = toDouble(y0), dxWant = toDouble(dx0), dwWant = toDouble(dw0);
      linearForwardSerial<double>(xd.data(), wd.data(), yWant.data(), s.rows, s.in, s.out,
                                  accumulate);
      linearBackwardDataSerial<double>(dyd.data(), wd.data(), dxWant.data(), s.rows, s.in, s.out,
                                       accumulate);
      linearBackwardWeightSerial<double>(dyd.data(), xd.data(), dwWant.data(), s.rows, s.in, s.out,
                                         0, s.out);

      MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dDx));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dwGot, toHost(context(), dDw));
      EXPECT_LT(relativeError(yGot, toFloat(yWant)), 1e-2) << s.rows << " acc=" << accumulate;
      EXPECT_LT(relativeError(dxGot, toFloat(dxWant)), 1e-2) << s.rows << " acc=" << accumulate;
      EXPECT_LT(relativeError(dwGot, toFloat(dwWant)), 1e-4) << s.rows << " acc=" << accumulate;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
