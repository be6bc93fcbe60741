// patchEmbedForwardCuda / patchEmbedBackwardCuda against the reference engine's patch embedding
// (Model::embedForward / embedBackward, written out here in double with ops/linear): the embedded
// sequence (image rows changed, text rows untouched), the patch weight and bias gradients (added
// into), on awkward shapes (one patch of one feature, P = 63 of T = 70, every position an image
// position); dBias is also checked to be bitwise reproducible.
#include "ops/patchify/patch_embed_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/linear/linear.h"

namespace moewb::engine::cuda {
namespace {

using PatchEmbedCudaTest = CudaTest;

struct Case {
  int64_t batch, seqLen, patches, patchDim, d;
};

TEST_F(PatchEmbedCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 45000;
  for (const Case c : {Case{1, 1, 1, 1, 7}, Case{3, 70, 63, 48, 129}, Case{2, 16, 16, 12, 64},
                       Case{4, 33, 5, 192, 300}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.batch << " T " << c.seqLen << " P " << c.patches
                                      << " patch dim " << c.patchDim << " D " << c.d);
    const int64_t rows = c.batch * c.patches, n = c.batch * c.seqLen, d = c.d;
    const Tensor<float> patches = roundedToBf16(randomTensor({rows, c.patchDim}, ++seed));
    const Tensor<float> weight =
        roundedToBf16(randomTensor({d, c.patchDim}, ++seed, 1.0 / std::sqrt(double(c.patchDim))));
    const Tensor<float> bias = roundedToBf16(randomTensor({d}, ++seed, 0.5));
    const Tensor<float> h0 = roundedToBf16(randomTensor({n, d}, ++seed));
    const Tensor<float> dh = roundedToBf16(randomTensor({n, d}, ++seed));
    const Tensor<float> dWeight0 = randomTensor({d, c.patchDim}, ++seed);
    const Tensor<float> dBias0 = randomTensor({d}, ++seed);

    MOEWB_ASSIGN_OR_FAIL(auto pDev, toDeviceBf16(context(), patches, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto wDev, toDeviceBf16(context(), weight, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto bDev, toDeviceBf16(context(), bias, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto hDev, toDeviceBf16(context(), h0, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dhDev, toDeviceBf16(context(), dh, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dWDev, toDevice(context(), dWeight0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dBDev, toDevice(context(), dBias0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dBDev2, toDevice(context(), dBias0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dWScratch, poisonedFloat(context(), {d, c.patchDim}));

    MOEWB_ASSERT_OK(patchEmbedForwardCuda(context(), pDev.data(), wDev.data(), bDev.data(), c.batch,
                                          c.seqLen, c.patches, c.patchDim, d, hDev.data()));
    MOEWB_ASSERT_OK(patchEmbedBackwardCuda(context(), dhDev.data(), pDev.data(), c.batch, c.seqLen,
                                           c.patches, c.patchDim, d, dWDev.data(), dBDev.data()));
    MOEWB_ASSERT_OK(fillFloat(stream(), dWScratch.data(), 0.0f, dWScratch.numel()));
    MOEWB_ASSERT_OK(patchEmbedBackwardCuda(context(), dhDev.data(), pDev.data(), c.batch, c.seqLen,
                                           c.patches, c.patchDim, d, dWScratch.data(),
                                           dBDev2.data()));

    // Reference (model.cpp embedForward / embedBackward) in double.
    const Tensor<double> patchesD = toDouble(patches), weightD = toDouble(weight);
    Tensor<double> projected({rows, d});
    linearForward<double>(pool, patchesD.data(), weightD.data(), projected.data(), rows, c.patchDim,
                          d);
    Tensor<double> hWant = toDouble(h0);
    Tensor<double> dProjected({rows, d});
    Tensor<double> dBiasWant = toDouble(dBias0), dWeightWant = toDouble(dWeight0);
    for (int64_t s = 0; s < c.batch; ++s) {
      for (int64_t i = 0; i < c.patches; ++i) {
        double* dst = hWant.row(s * c.seqLen + i);
        const double* src = projected.row(s * c.patches + i);
        const float* g = dh.row(s * c.seqLen + i);
        for (int64_t j = 0; j < d; ++j) {
          dst[j] += src[j] + double(bias[j]);
          dProjected.row(s * c.patches + i)[j] = g[j];
          dBiasWant[j] += g[j];
        }
      }
    }
    linearBackwardWeight<double>(pool, dProjected.data(), patchesD.data(), dWeightWant.data(), rows,
                                 c.patchDim, d);

    MOEWB_ASSIGN_OR_FAIL(Tensor<float> hGot, toHostFloat(context(), hDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dWGot, toHost(context(), dWDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dBGot, toHost(context(), dBDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dBGot2, toHost(context(), dBDev2));
    EXPECT_LT(relativeError(hGot, toFloat(hWant)), 1e-2);
    // Text rows are untouched, bit for bit.
    for (int64_t s = 0; s < c.batch; ++s) {
      for (int64_t t = c.patches; t < c.seqLen; ++t) {
        for (int64_t j = 0; j < d; ++j) {
          ASSERT_EQ(hGot.row(s * c.seqLen + t)[j], h0.row(s * c.seqLen + t)[j]) << s << "," << t;
        }
      }
    }
    EXPECT_LT(relativeError(dWGot, toFloat(dWeightWant)), 1e-4);
    EXPECT_LT(relativeError(dBGot, toFloat(dBiasWant)), 1e-4);
    for (int64_t j = 0; j < d; ++j) ASSERT_EQ(dBGot[j], dBGot2[j]) << j;
  }
}

TEST_F(PatchEmbedCudaTest, RejectsMorePatchesThanPositions) {
  EXPECT_EQ(
      patchEmbedForwardCuda(context(), nullptr, nullptr, nullptr, 2, 4, 5, 3, 8, nullptr).code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::engine::cuda
