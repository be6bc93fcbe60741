// embeddingForwardCuda / embeddingBackwardCuda against ops/embedding (double): repeated tokens,
// negative ids (image positions), D a multiple of 8 (vector path) and not (scalar path); and the
// backward bitwise equal to the CPU reference's order (fp32 adds in position order) run to run.
#include "ops/embedding/embedding_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/embedding/embedding.h"

namespace moewb::engine::cuda {
namespace {

using EmbeddingCudaTest = CudaTest;

TEST_F(EmbeddingCudaTest, GatherAndScatterAddMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 2000;
  struct Shape {
    int64_t n, vocab, d;
  };
  for (Shape s : {Shape{1, 3, 5}, Shape{63, 17, 64}, Shape{200, 50, 37}}) {
    Tensor<int32_t> tokens({s.n});
    for (int64_t i = 0; i < s.n; ++i) {
      tokens[i] = int32_t((i * 7 + 3 * (i % 5)) % s.vocab);
      if (i % 11 == 4) tokens[i] = -1;  // an image position
    }
    Tensor<float> table = roundedToBf16(randomTensor({s.vocab, s.d}, ++seed));
    Tensor<float> dOut = roundedToBf16(randomTensor({s.n, s.d}, ++seed));
    Tensor<float> dTable0 = randomTensor({s.vocab, s.d}, ++seed);

    MOEWB_ASSIGN_OR_FAIL(auto dTok, toDevice(context(), tokens, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dTab, toDeviceBf16(context(), table, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_FAIL(auto dDo, toDeviceBf16(context(), dOut, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dDt, toDevice(context(), dTable0, MemoryCategory::kGrads));
    MOEWB_ASSIGN_OR_FAIL(auto dOutGot, poisonedBf16(context(), {s.n, s.d}));
    MOEWB_ASSERT_OK(embeddingForwardCuda(stream(), dTok.data(), s.n, dTab.data(), s.vocab, s.d,
                                         dOutGot.data()));
    MOEWB_ASSERT_OK(
        embeddingBackwardCuda(context(), dTok.data(), s.n, dDo.data(), s.vocab, s.d, dDt.data()));

    Tensor<double> want = embeddingForward<double>(pool, tokens, toDouble(table));
    Tensor<double> dTableWant = toDouble(dTable0);
    embeddingBackward<double>(tokens, toDouble(dOut), dTableWant);

    MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHostFloat(context(), dOutGot));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dTableGot, toHost(context(), dDt));
    EXPECT_EQ(relativeError(got, toFloat(want)), 0.0) << s.n;
    EXPECT_LT(relativeError(dTableGot, toFloat(dTableWant)), 1e-6) << s.n;
  }
}


// Many repeats of few tokens (runs longer than the kernel's lookahead, ids out of range, D across
// two column slabs): the backward is the sequential fp32 sum in position order, bitwise, and two
// calls from the same start give the same bits.
TEST_F(EmbeddingCudaTest, BackwardIsTheSequentialSumBitwiseRunToRun) {
  const int64_t n = 5000, vocab = 9, d = 300;
  Tensor<int32_t> tokens({n});
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = int32_t((i * i + 3 * i) % 11) - 1;  // -1 (image position), 0..8, 9 (>= vocab)
  }
  Tensor<float> dOut = roundedToBf16(randomTensor({n, d}, 77));
  Tensor<float> dTable0 = randomTensor({vocab, d}, 78);
  Tensor<float> want = dTable0.clone();
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) continue;
    for (int64_t j = 0; j < d; ++j) want.row(tokens[i])[j] += dOut.row(i)[j];
  }
  MOEWB_ASSIGN_OR_FAIL(auto dTok, toDevice(context(), tokens, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(auto dDo, toDeviceBf16(context(), dOut, MemoryCategory::kActivations));
  for (int call = 0; call < 2; ++call) {
    MOEWB_ASSIGN_OR_FAIL(auto dDt, toDevice(context(), dTable0, MemoryCategory::kGrads));
    MOEWB_ASSERT_OK(
        embeddingBackwardCuda(context(), dTok.data(), n, dDo.data(), vocab, d, dDt.data()));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHost(context(), dDt));
    for (int64_t i = 0; i < vocab * d; ++i) {
      ASSERT_EQ(got.data()[i], want.data()[i]) << "call " << call << ", element " << i;
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
