// Tensor<T> ownership and shapes, the TensorMemory byte counter, and the Rng's fixed sequences.
#include "runtime/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "runtime/tensor/rng.h"

namespace moewb::engine {
namespace {

TEST(Tensor, ShapeZeroFillAndAccess) {
  Tensor<float> t({2, 3});  // [2, 3]
  EXPECT_EQ(t.rank(), 2);
  EXPECT_EQ(t.dim(0), 2);
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.bytes(), 24);
  EXPECT_EQ(t.shapeString(), "[2, 3]");
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t[i], 0.0f);
  t.at(1, 2) = 5.0f;
  EXPECT_EQ(t[5], 5.0f);
  EXPECT_EQ(t.row(1)[2], 5.0f);
  Tensor<double> stack({4, 2, 3});  // [4, 2, 3]
  EXPECT_EQ(stack.rowStride(), 6);
  EXPECT_EQ(stack.row(2) - stack.data(), 12);
}

TEST(Tensor, CloneIsDeepAndMoveTransfers) {
  Tensor<float> a({3});
  a.fill(2.0f);
  Tensor<float> b = a.clone();
  b[0] = 7.0f;
  EXPECT_EQ(a[0], 2.0f);
  EXPECT_TRUE(a.sameShape(b));
  const float* data = a.data();
  Tensor<float> c = std::move(a);
  EXPECT_EQ(c.data(), data);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

TEST(Tensor, EmptyExtentsAreAllowed) {
  Tensor<float> t({0, 5});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.data(), nullptr);
}

// Tensors of 64 MiB or more are anonymous mappings (zero pages until touched): still zero,
// aligned, writable, counted and given back; clone copies them.
TEST(Tensor, LargeTensorsAreZeroAlignedAndCounted) {
  const int64_t before = TensorMemory::currentBytes();
  {
    Tensor<float> big({17, int64_t(1) << 20});  // [17, 1Mi] fp32: 68 MiB
    EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % 64, 0u);
    EXPECT_EQ(TensorMemory::currentBytes(), before + big.bytes());
    for (int64_t i = 0; i < big.numel(); i += 4099) ASSERT_EQ(big[i], 0.0f) << i;
    EXPECT_EQ(big[big.numel() - 1], 0.0f);
    big[big.numel() - 1] = 3.0f;
    big.at(5, 7) = -1.0f;
    Tensor<float> copy = big.clone();
    EXPECT_EQ(copy[copy.numel() - 1], 3.0f);
    EXPECT_EQ(copy.at(5, 7), -1.0f);
    EXPECT_EQ(copy[0], 0.0f);
  }
  EXPECT_EQ(TensorMemory::currentBytes(), before);
}

TEST(TensorMemory, CountsLiveBytesAndPeak) {
  const int64_t before = TensorMemory::currentBytes();
  TensorMemory::resetPeak();
  {
    Tensor<float> a({1000});     // 4000 bytes
    Tensor<double> b({10, 10});  // 800 bytes
    EXPECT_EQ(TensorMemory::currentBytes(), before + 4800);
    EXPECT_GE(TensorMemory::peakBytes(), before + 4800);
  }
  EXPECT_EQ(TensorMemory::currentBytes(), before);
  EXPECT_GE(TensorMemory::peakBytes(), before + 4800);
  TensorMemory::resetPeak();
  EXPECT_EQ(TensorMemory::peakBytes(), before);
}

TEST(Rng, Mt19937SequenceIsTheStandardOne) {
  // The C++ standard fixes the 10000th output of a default-seeded mt19937_64.
  Rng rng(5489u);
  uint64_t value = 0;
  for (int i = 0; i < 10000; ++i) value = rng.nextU64();
  EXPECT_EQ(value, 9981545732273789042ull);
}

TEST(Rng, SameSeedSameDrawsAndSaneMoments) {
  Rng a(42), b(42);
  double sum = 0, sumSq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double x = a.normal();
    EXPECT_EQ(x, b.normal());
    sum += x;
    sumSq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sumSq / n, 1.0, 0.05);
  Rng c(7);
  for (int i = 0; i < 1000; ++i) {
    const int64_t k = c.uniformInt(5);
    EXPECT_GE(k, 0);
    EXPECT_LT(k, 5);
    const double u = c.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
  EXPECT_NE(mixSeed(1, 2), mixSeed(1, 3));
}

}  // namespace
}  // namespace moewb::engine
