// The multi-tensor launches (ops/adamw/multi_tensor_adamw.h) against the per-tensor ones of
// adamw_cuda.h: AdamW bitwise equal (parameters, moments, bf16 copy) over tensors of awkward sizes
// (chunk boundaries, an empty tensor, decay on and off, a device clip scale), the global norm
// equal within double rounding and bitwise reproducible, zeroing of every gradient, and a plan
// that notices when a buffer moved.
#include "ops/adamw/multi_tensor_adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "cuda_test_util.h"
#include "ops/adamw/adamw_cuda.h"

namespace moewb::engine::cuda {
namespace {

using MultiTensorAdamWTest = CudaTest;

// Device copies of one set of optimizer buffers.
struct DeviceSet {
  std::vector<DeviceTensor<float>> p, g, m, v;
  std::vector<DeviceTensor<bf16>> pBf16;
};

constexpr int64_t kChunk = kMultiTensorChunkElements;
const std::vector<int64_t> kSizes = {1, 63, 0, kChunk, kChunk + 1, 3 * kChunk - 5, 100003};

DeviceSet uploadSet(CudaContext& context, uint64_t seed) {
  DeviceSet set;
  for (int64_t n : kSizes) {
    Tensor<float> v = randomTensor({n}, seed + 3, 1e-4);
    for (int64_t i = 0; i < n; ++i) v[i] = std::fabs(v[i]);
    auto p = toDevice(context, randomTensor({n}, seed), MemoryCategory::kWeights);
    auto g = toDevice(context, randomTensor({n}, seed + 1, 0.01), MemoryCategory::kGrads);
    auto m = toDevice(context, randomTensor({n}, seed + 2, 0.01), MemoryCategory::kOptimizer);
    auto vd = toDevice(context, v, MemoryCategory::kOptimizer);
    auto b = poisonedBf16(context, {n});
    EXPECT_TRUE(p.isOk() && g.isOk() && m.isOk() && vd.isOk() && b.isOk());
    set.p.push_back(std::move(p).value());
    set.g.push_back(std::move(g).value());
    set.m.push_back(std::move(m).value());
    set.v.push_back(std::move(vd).value());
    set.pBf16.push_back(std::move(b).value());
    seed += 10;
  }
  return set;
}

std::vector<MultiTensorRef> refsOf(DeviceSet& set) {
  std::vector<MultiTensorRef> refs;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    refs.push_back({set.p[i].data(), set.g[i].data(), set.m[i].data(), set.v[i].data(),
                    set.pBf16[i].data(), kSizes[i], i % 2 == 0});
  }
  return refs;
}

template <typename T>
void expectBitwiseEqual(CudaContext& context, const DeviceTensor<T>& a, const DeviceTensor<T>& b,
                        int64_t n) {
  std::vector<T> ha(static_cast<size_t>(n)), hb(static_cast<size_t>(n));
  ASSERT_TRUE(context.synchronize().isOk());
  if (n == 0) return;
  ASSERT_EQ(cudaMemcpy(ha.data(), a.data(), size_t(n) * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hb.data(), b.data(), size_t(n) * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  ASSERT_EQ(std::memcmp(ha.data(), hb.data(), size_t(n) * sizeof(T)), 0) << "n=" << n;
}

double readDouble(CudaContext& context, const double* device) {
  double value = std::nan("");
  EXPECT_TRUE(context.synchronize().isOk());
  EXPECT_EQ(cudaMemcpy(&value, device, sizeof value, cudaMemcpyDeviceToHost), cudaSuccess);
  return value;
}

TEST_F(MultiTensorAdamWTest, MatchesThePerTensorLaunches) {
  DeviceSet single = uploadSet(context(), 9100), multi = uploadSet(context(), 9100);
  MOEWB_ASSIGN_OR_FAIL(MultiTensorPlan plan, MultiTensorPlan::create(context(), refsOf(multi)));
  int64_t chunksWant = 0;
  for (int64_t n : kSizes) chunksWant += (n + kChunk - 1) / kChunk;
  EXPECT_EQ(plan.chunkCount(), chunksWant);

  // The norm: per-tensor and multi-tensor agree within double rounding; the multi-tensor one
  // is bitwise reproducible.
  MOEWB_ASSIGN_OR_FAIL(auto norms, context().newTensor<double>({3}, MemoryCategory::kWorkspace));
  std::vector<const float*> grads;
  for (auto& g : single.g) grads.push_back(g.data());
  MOEWB_ASSERT_OK(globalGradNormCuda(context(), grads, kSizes, norms.data()));
  MOEWB_ASSERT_OK(multiTensorGradNormCuda(stream(), plan, norms.data() + 1));
  MOEWB_ASSERT_OK(multiTensorGradNormCuda(stream(), plan, norms.data() + 2));
  const double normSingle = readDouble(context(), norms.data());
  const double normMulti = readDouble(context(), norms.data() + 1);
  EXPECT_GT(normSingle, 0.0);
  EXPECT_NEAR(normMulti, normSingle, 1e-13 * normSingle);
  EXPECT_EQ(normMulti, readDouble(context(), norms.data() + 2));

  // AdamW with a clipping scale on the device: bitwise equal to the per-tensor kernel.
  Tensor<float> scaleHost({1});
  scaleHost[0] = 0.625f;
  MOEWB_ASSIGN_OR_FAIL(auto scale, toDevice(context(), scaleHost, MemoryCategory::kWorkspace));
  AdamWHyper hyper;
  hyper.lr = 3e-3;
  hyper.weightDecay = 0.1;
  hyper.step = 5;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    MOEWB_ASSERT_OK(adamwUpdateCuda(stream(), single.p[i].data(), single.g[i].data(),
                                    single.m[i].data(), single.v[i].data(), single.pBf16[i].data(),
                                    kSizes[i], hyper, i % 2 == 0, scale.data()));
  }
  MOEWB_ASSERT_OK(multiTensorAdamWCuda(stream(), plan, hyper, scale.data()));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    expectBitwiseEqual(context(), single.p[i], multi.p[i], kSizes[i]);
    expectBitwiseEqual(context(), single.m[i], multi.m[i], kSizes[i]);
    expectBitwiseEqual(context(), single.v[i], multi.v[i], kSizes[i]);
    expectBitwiseEqual(context(), single.pBf16[i], multi.pBf16[i], kSizes[i]);
  }

  // Zeroing reaches every element of every gradient.
  MOEWB_ASSERT_OK(multiTensorZeroGradsCuda(stream(), plan));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> g, toHost(context(), multi.g[i]));
    for (int64_t j = 0; j < kSizes[i]; ++j) ASSERT_EQ(g[j], 0.0f) << i << " " << j;
  }
  MOEWB_ASSERT_OK(multiTensorGradNormCuda(stream(), plan, norms.data()));
  EXPECT_EQ(readDouble(context(), norms.data()), 0.0);
}

// Buffers that start one element past an aligned address (not 16-byte aligned) take the scalar
// loop; the aligned ones the 4-wide loop: both bitwise equal to the per-tensor kernel.
TEST_F(MultiTensorAdamWTest, UnalignedBuffersGiveTheSameBits) {
  DeviceSet single = uploadSet(context(), 9300), multi = uploadSet(context(), 9300);
  std::vector<MultiTensorRef> refs;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const int64_t n = kSizes[i] > 1 ? kSizes[i] - 1 : 0;
    const int64_t at = kSizes[i] > 1 ? 1 : 0;
    sizes.push_back(n);
    refs.push_back({multi.p[i].data() + at, multi.g[i].data() + at, multi.m[i].data() + at,
                    multi.v[i].data() + at, multi.pBf16[i].data() + at, n, i % 2 == 1});
  }
  MOEWB_ASSIGN_OR_FAIL(MultiTensorPlan plan, MultiTensorPlan::create(context(), refs));
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  hyper.weightDecay = 0.05;
  hyper.step = 2;
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const int64_t at = kSizes[i] > 1 ? 1 : 0;
    MOEWB_ASSERT_OK(adamwUpdateCuda(stream(), single.p[i].data() + at, single.g[i].data() + at,
                                    single.m[i].data() + at, single.v[i].data() + at,
                                    single.pBf16[i].data() + at, sizes[i], hyper, i % 2 == 1,
                                    nullptr));
  }
  MOEWB_ASSERT_OK(multiTensorAdamWCuda(stream(), plan, hyper, nullptr));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    expectBitwiseEqual(context(), single.p[i], multi.p[i], kSizes[i]);
    expectBitwiseEqual(context(), single.m[i], multi.m[i], kSizes[i]);
    expectBitwiseEqual(context(), single.v[i], multi.v[i], kSizes[i]);
    expectBitwiseEqual(context(), single.pBf16[i], multi.pBf16[i], kSizes[i]);
  }
  MOEWB_ASSERT_OK(multiTensorZeroGradsCuda(stream(), plan));
  for (size_t i = 0; i < kSizes.size(); ++i) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> g, toHost(context(), multi.g[i]));
    const int64_t at = kSizes[i] > 1 ? 1 : 0;
    for (int64_t j = at; j < at + sizes[i]; ++j) ASSERT_EQ(g[j], 0.0f) << i << " " << j;
  }
}

TEST_F(MultiTensorAdamWTest, PlanNoticesWhenABufferMoved) {
  DeviceSet set = uploadSet(context(), 9200);
  std::vector<MultiTensorRef> refs = refsOf(set);
  MOEWB_ASSIGN_OR_FAIL(MultiTensorPlan plan, MultiTensorPlan::create(context(), refs));
  EXPECT_TRUE(plan.matches(refs));
  refs[1].grad = set.g[2].data();
  EXPECT_FALSE(plan.matches(refs));
  refs = refsOf(set);
  refs[3].decay = !refs[3].decay;
  EXPECT_FALSE(plan.matches(refs));
  MOEWB_ASSIGN_OR_FAIL(MultiTensorPlan empty, MultiTensorPlan::create(context(), {}));
  EXPECT_EQ(empty.chunkCount(), 0);
  MOEWB_ASSIGN_OR_FAIL(auto norm, context().newTensor<double>({1}, MemoryCategory::kWorkspace));
  MOEWB_ASSERT_OK(multiTensorGradNormCuda(stream(), empty, norm.data()));
  EXPECT_EQ(readDouble(context(), norm.data()), 0.0);
  MOEWB_ASSERT_OK(multiTensorAdamWCuda(stream(), empty, AdamWHyper{}, nullptr));
  MOEWB_ASSERT_OK(multiTensorZeroGradsCuda(stream(), empty));
}

}  // namespace
}  // namespace moewb::engine::cuda
