// loraMergeCuda / loraBackwardCuda against the reference ops/lora/lora.h (double): the
// merged bf16 weight (rank-2 and per-expert rank-3 weights, with the merge workspace forced into
// several expert chunks) and the adapter gradients (added into), on awkward shapes.
#include "ops/lora/lora_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/lora/lora.h"

namespace moewb::engine::cuda {
namespace {

using LoraCudaTest = CudaTest;

TEST_F(LoraCudaTest, MergeAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 44000;
  const double scale = 32.0 / 8.0;
  struct Case {
    std::vector<int64_t> weight;
    int64_t rank;
    int64_t workspaceElements;
  };
  for (const Case& c : {Case{{1, 1}, 1, kLoraMergeWorkspaceElements},
                        Case{{63, 65}, 8, kLoraMergeWorkspaceElements},
                        Case{{130, 257}, 3, kLoraMergeWorkspaceElements},
                        Case{{3, 37, 50}, 4, kLoraMergeWorkspaceElements},
                        Case{{5, 33, 20}, 8, 2 * 33 * 20 + 7},  // chunks of 2, 2, 1 experts
                        Case{{1, 64, 128}, 16, 1}}) {
    SCOPED_TRACE(::testing::Message() << "weight dims " << c.weight.size() << " rank " << c.rank);
    const std::vector<int64_t> aShape = loraAShape(c.weight, c.rank);
    const std::vector<int64_t> bShape = loraBShape(c.weight, c.rank);
    const Tensor<float> w = randomTensor(c.weight, ++seed, 0.05);
    const Tensor<float> a = randomTensor(aShape, ++seed, 0.3);
    const Tensor<float> b = randomTensor(bShape, ++seed, 0.02);  // trained away from zero
    const Tensor<float> dW = randomTensor(c.weight, ++seed);
    const Tensor<float> dA0 = randomTensor(aShape, ++seed);
    const Tensor<float> dB0 = randomTensor(bShape, ++seed);

    MOEWB_ASSIGN_OR_FAIL(auto wDev, toDevice(context(), w, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto aDev, toDevice(context(), a, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto bDev, toDevice(context(), b, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dWDev, toDevice(context(), dW, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dADev, toDevice(context(), dA0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dBDev, toDevice(context(), dB0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto merged, poisonedBf16(context(), c.weight));

    MOEWB_ASSERT_OK(loraMergeCuda(context(), wDev, aDev, bDev, scale, merged, c.workspaceElements));
    MOEWB_ASSERT_OK(loraBackwardCuda(context(), dWDev, aDev, bDev, scale, dADev, dBDev));

    Tensor<double> mergedWant;
    loraMerge<double>(pool, toDouble(w), toDouble(a), toDouble(b), scale, mergedWant);
    Tensor<double> dAWant = toDouble(dA0), dBWant = toDouble(dB0);
    loraBackward<double>(pool, toDouble(dW), toDouble(a), toDouble(b), scale, dAWant, dBWant);

    MOEWB_ASSIGN_OR_FAIL(Tensor<float> mergedGot, toHostFloat(context(), merged));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dAGot, toHost(context(), dADev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dBGot, toHost(context(), dBDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dWAfter, toHost(context(), dWDev));
    EXPECT_LT(relativeError(mergedGot, toFloat(mergedWant)), 1e-2);
    // One bf16 rounding of the fp32 sum: at most one bf16 step (|W'| < 1 here) from the exact one.
    EXPECT_LT(maxAbsDifference(roundedToBf16(toFloat(mergedWant)), mergedGot), 8e-3);
    EXPECT_LT(relativeError(dAGot, toFloat(dAWant)), 1e-4);
    EXPECT_LT(relativeError(dBGot, toFloat(dBWant)), 1e-4);
    EXPECT_EQ(maxAbsDifference(dWAfter, dW), 0.0);  // dW is left for the caller
  }
}

TEST_F(LoraCudaTest, RejectsMismatchedShapes) {
  MOEWB_ASSIGN_OR_FAIL(auto w, context().newTensor<float>({4, 6}, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto a, context().newTensor<float>({2, 5}, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto b, context().newTensor<float>({4, 2}, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto out, context().newTensor<bf16>({4, 6}, MemoryCategory::kWeights));
  EXPECT_EQ(loraMergeCuda(context(), w, a, b, 1.0, out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::engine::cuda
