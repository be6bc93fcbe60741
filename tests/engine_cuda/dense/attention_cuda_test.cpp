// attentionForwardCuda / attentionBackwardCuda (and through them the core functions) against
// ops/attention (double): y, the saved context, dx and the four weight gradients (added into
// random initial values), on awkward shapes (T = 1, 63, 130; one and several heads/sequences).
#include "ops/attention/attention_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>

#include "cuda_test_util.h"
#include "ops/attention/attention.h"

namespace moewb::engine::cuda {
namespace {

using AttentionCudaTest = CudaTest;

TEST_F(AttentionCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 6000;
  for (AttentionDims dims :
       {AttentionDims{1, 1, 1, 8}, AttentionDims{2, 63, 3, 16}, AttentionDims{3, 130, 2, 64}}) {
    const int64_t n = dims.tokens(), d = dims.dModel();
    const double wScale = 1.0 / std::sqrt(double(d));  // scores of unit scale
    Tensor<float> x = roundedToBf16(randomTensor({n, d}, ++seed));
    Tensor<float> w[4], g0[4];
    for (int i = 0; i < 4; ++i) {
      w[i] = roundedToBf16(randomTensor({d, d}, ++seed, wScale));
      g0[i] = randomTensor({d, d}, ++seed, 0.1);
    }
    Tensor<float> dy = roundedToBf16(randomTensor({n, d}, ++seed));

    MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
    DeviceTensor<bf16> dW[4];
    DeviceTensor<float> dG[4];
    for (int i = 0; i < 4; ++i) {
      MOEWB_ASSIGN_OR_FAIL(dW[i], toDeviceBf16(context(), w[i], MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(dG[i], toDevice(context(), g0[i], MemoryCategory::kGrads));
    }
    MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
    MOEWB_ASSIGN_OR_FAIL(auto dDx, poisonedBf16(context(), {n, d}));
    const AttentionWeightsCuda weights{dW[0].data(), dW[1].data(), dW[2].data(), dW[3].data()};
    const AttentionGradsCuda grads{dG[0].data(), dG[1].data(), dG[2].data(), dG[3].data()};
    AttentionSavedCuda saved;
    MOEWB_ASSERT_OK(attentionForwardCuda(context(), dims, dX.data(), weights, saved, dY.data()));
    MOEWB_ASSERT_OK(attentionBackwardCuda(context(), dims, dDy.data(), dX.data(), weights, saved,
                                          grads, dDx.data()));

    Tensor<double> wd[4], gWant[4];
    for (int i = 0; i < 4; ++i) {
      wd[i] = toDouble(w[i]);
      gWant[i] = toDouble(g0[i]);
    }
    const AttentionWeights<double> refWeights{wd[0], wd[1], wd[2], wd[3]};
    AttentionSaved<double> refSaved;
    Tensor<double> xd = toDouble(x);
    Tensor<double> yWant = attentionForward<double>(pool, dims, xd, refWeights, refSaved);
    Tensor<double> dxWant =
        attentionBackward<double>(pool, dims, toDouble(dy), xd, refWeights, refSaved,
                                  AttentionGrads<double>{gWant[0], gWant[1], gWant[2], gWant[3]});

    std::ostringstream tagStream;
    tagStream << "B" << dims.batch << " T" << dims.seqLen << " H" << dims.numHeads << " K"
              << dims.headDim;
    const std::string tag = tagStream.str();
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> ctxGot, toHostFloat(context(), saved.context));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dDx));
    EXPECT_LT(relativeError(ctxGot, toFloat(refSaved.context)), 1e-2) << tag;
    EXPECT_LT(relativeError(yGot, toFloat(yWant)), 1e-2) << tag;
    EXPECT_LT(relativeError(dxGot, toFloat(dxWant)), 2e-2) << tag;
    const char* names[4] = {"wq", "wk", "wv", "wo"};
    for (int i = 0; i < 4; ++i) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gGot, toHost(context(), dG[i]));
      EXPECT_LT(relativeError(minus(gGot, g0[i]), minus(toFloat(gWant[i]), g0[i])), 2e-2)
          << tag << " " << names[i];
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
