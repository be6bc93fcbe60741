// Host <-> device transfers with bf16 rounding, and gemm() against a double reference in every
// transpose combination, batched, with bf16 and fp32 outputs and beta accumulation.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/cuda/gemm.h"
#include "cuda_test_util.h"

namespace moewb::engine::cuda {
namespace {

using TransferTest = CudaTest;
using GemmTest = CudaTest;

TEST_F(TransferTest, Bf16RoundTripRoundsToNearestEven) {
  Tensor<float> x = randomTensor({37, 5}, 11, 3.0);
  MOEWB_ASSIGN_OR_FAIL(auto device, toDeviceBf16(context(), x, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> back, toHostFloat(context(), device));
  Tensor<float> want = roundedToBf16(x);
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_EQ(back[i], want[i]) << i;
  Tensor<int32_t> ids({9});
  for (int i = 0; i < 9; ++i) ids[i] = 7 * i - 20;
  MOEWB_ASSIGN_OR_FAIL(auto deviceIds, toDevice(context(), ids, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(Tensor<int32_t> idsBack, toHost(context(), deviceIds));
  for (int i = 0; i < 9; ++i) EXPECT_EQ(idsBack[i], ids[i]);
}

// want[b, m, n] = alpha op(A) op(B) + beta C0, in double.
Tensor<float> referenceGemm(const Tensor<float>& a, bool ta, const Tensor<float>& b, bool tb,
                            const Tensor<float>& c0, float alpha, float beta, int64_t batch,
                            int64_t m, int64_t n, int64_t k) {
  Tensor<float> out({batch, m, n});
  for (int64_t p = 0; p < batch; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double av = ta ? a[p * m * k + q * m + i] : a[p * m * k + i * k + q];
          const double bv = tb ? b[p * k * n + j * k + q] : b[p * k * n + q * n + j];
          acc += av * bv;
        }
        out[p * m * n + i * n + j] = float(alpha * acc + beta * c0[p * m * n + i * n + j]);
      }
    }
  }
  return out;
}

TEST_F(GemmTest, MatchesDoubleReferenceForEveryTransposeAndOutputType) {
  const int64_t batch = 3, m = 37, n = 29, k = 70;
  uint64_t seed = 100;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (DType outType : {DType::kBf16, DType::kF32}) {
        Tensor<float> a = roundedToBf16(randomTensor({batch, ta ? k : m, ta ? m : k}, ++seed));
        Tensor<float> b = roundedToBf16(randomTensor({batch, tb ? n : k, tb ? k : n}, ++seed));
        Tensor<float> c0 = roundedToBf16(randomTensor({batch, m, n}, ++seed));
        const float alpha = 0.5f, beta = outType == DType::kF32 ? 1.0f : 0.0f;
        MOEWB_ASSIGN_OR_FAIL(auto da, toDeviceBf16(context(), a, MemoryCategory::kActivations));
        MOEWB_ASSIGN_OR_FAIL(auto db, toDeviceBf16(context(), b, MemoryCategory::kActivations));
        GemmOperand opA{da.data(), DType::kBf16, ta ? m : k, ta, m * k};
        GemmOperand opB{db.data(), DType::kBf16, tb ? k : n, tb, k * n};
        Tensor<float> got;
        if (outType == DType::kF32) {
          MOEWB_ASSIGN_OR_FAIL(auto dc, toDevice(context(), c0, MemoryCategory::kActivations));
          MOEWB_ASSERT_OK(gemm(context(), m, n, k, alpha, opA, opB, beta,
                               GemmOutput{dc.data(), DType::kF32, n, m * n}, batch));
          MOEWB_ASSIGN_OR_FAIL(got, toHost(context(), dc));
        } else {
          MOEWB_ASSIGN_OR_FAIL(auto dc, poisonedBf16(context(), {batch, m, n}));
          MOEWB_ASSERT_OK(gemm(context(), m, n, k, alpha, opA, opB, beta,
                               GemmOutput{dc.data(), DType::kBf16, n, m * n}, batch));
          MOEWB_ASSIGN_OR_FAIL(got, toHostFloat(context(), dc));
        }
        Tensor<float> want = referenceGemm(a, ta, b, tb, c0, alpha, beta, batch, m, n, k);
        const double tolerance = outType == DType::kF32 ? 1e-5 : 8e-3;
        EXPECT_LT(relativeError(got, want), tolerance)
            << "ta=" << ta << " tb=" << tb << " out=" << (outType == DType::kF32 ? "f32" : "bf16");
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
