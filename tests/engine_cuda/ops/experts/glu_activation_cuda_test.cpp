// gluForwardCuda / gluBackwardCuda against ops/experts/glu_activation.h (double) for SwiGLU and
// SiTU-GLU, with inputs reaching SiTU's clipping region (|g| >> beta1, |u| >> beta2), on
// contiguous [R, F] arrays and on the column blocks of a fused [R, 2F] gate|up array.
#include "ops/experts/glu_activation_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {
namespace {

using GluActivationCudaTest = CudaTest;

TEST_F(GluActivationCudaTest, ForwardAndBackwardMatchReference) {
  uint64_t seed = 4000;
  for (GluKind kind : {GluKind::kSwiGlu, GluKind::kSitu}) {
    GluParams params;
    params.kind = kind;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {63, 37}, {130, 256}}) {
      for (bool fused : {false, true}) {
        const double gScale = kind == GluKind::kSitu ? 10.0 : 3.0;
        const double uScale = kind == GluKind::kSitu ? 60.0 : 2.0;
        Tensor<float> g = roundedToBf16(randomTensor({rows, cols}, ++seed, gScale));
        Tensor<float> u = roundedToBf16(randomTensor({rows, cols}, ++seed, uScale));
        Tensor<float> dh = roundedToBf16(randomTensor({rows, cols}, ++seed));
        // Device layout: either two [R, F] arrays or one [R, 2F] array with g | u.
        const int64_t ld = fused ? 2 * cols : cols;
        Tensor<float> packed({rows, fused ? 2 * cols : cols});
        Tensor<float> packedU({rows, cols});
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t c = 0; c < cols; ++c) {
            packed[r * ld + c] = g[r * cols + c];
            if (fused) packed[r * ld + cols + c] = u[r * cols + c];
            packedU[r * cols + c] = u[r * cols + c];
          }
        }
        MOEWB_ASSIGN_OR_FAIL(auto dPacked,
                             toDeviceBf16(context(), packed, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(auto dU,
                             toDeviceBf16(context(), packedU, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(auto dDh, toDeviceBf16(context(), dh, MemoryCategory::kActivations));
        const bf16* gPtr = dPacked.data();
        const bf16* uPtr = fused ? dPacked.data() + cols : dU.data();
        MOEWB_ASSIGN_OR_FAIL(auto dH, poisonedBf16(context(), {rows, cols}));
        MOEWB_ASSIGN_OR_FAIL(auto dDg, poisonedBf16(context(), {rows, cols}));
        MOEWB_ASSIGN_OR_FAIL(auto dDu, poisonedBf16(context(), {rows, cols}));
        MOEWB_ASSERT_OK(
            gluForwardCuda(stream(), params, gPtr, uPtr, ld, dH.data(), cols, rows, cols));
        MOEWB_ASSERT_OK(gluBackwardCuda(stream(), params, gPtr, uPtr, ld, dDh.data(), cols,
                                        dDg.data(), dDu.data(), cols, rows, cols));

        Tensor<double> gd = toDouble(g), ud = toDouble(u);
        Tensor<double> hWant({rows, cols});
        gluForward<double>(params, gd.data(), ud.data(), hWant.data(), rows * cols);
        Tensor<double> dgWant = toDouble(dh);
        Tensor<double> duWant({rows, cols});
        gluBackward<double>(params, gd.data(), ud.data(), dgWant.data(), duWant.data(),
                            rows * cols);

        MOEWB_ASSIGN_OR_FAIL(Tensor<float> hGot, toHostFloat(context(), dH));
        MOEWB_ASSIGN_OR_FAIL(Tensor<float> dgGot, toHostFloat(context(), dDg));
        MOEWB_ASSIGN_OR_FAIL(Tensor<float> duGot, toHostFloat(context(), dDu));
        const char* name = kind == GluKind::kSitu ? "situ" : "swiglu";
        EXPECT_LT(relativeError(hGot, toFloat(hWant)), 1e-2) << name << " " << rows << "x" << cols;
        EXPECT_LT(relativeError(dgGot, toFloat(dgWant)), 1e-2)
            << name << " " << rows << "x" << cols;
        EXPECT_LT(relativeError(duGot, toFloat(duWant)), 1e-2)
            << name << " " << rows << "x" << cols;
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
