// The element-wise launchers (runtime/cuda/elementwise.h): every function, at lengths around the
// 8-element packs (0, 1, 7, 8, 9, 37, 4103) and at offsets 0, 1 and 3 elements from a 16-byte
// aligned base (the pack kernels, the one-element tails and the unaligned fallback), gives the
// host's per-element result bit for bit and writes nothing outside [offset, offset + n). (The
// accumulate scale is 0.5: an exact product, so the device's fused multiply-add and the host's
// multiply then add round alike.)
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_test_util.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine::cuda {
namespace {

using ElementwiseTest = CudaTest;

constexpr int64_t kGuard = 16;  // elements after the range that must stay untouched

template <typename T>
std::vector<T> download(const T* device, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  EXPECT_EQ(cudaMemcpy(host.data(), device, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return host;
}

template <typename T>
void upload(T* device, const std::vector<T>& host) {
  ASSERT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
}

template <typename T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// Random host values of T (through float) for `count` elements.
template <typename T>
std::vector<T> randomValues(int64_t count, uint64_t seed) {
  const Tensor<float> r = randomTensor({count}, seed);
  std::vector<T> out(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, bf16>) {
      out[size_t(i)] = __float2bfloat16(r[i]);
    } else {
      out[size_t(i)] = T(r[i] * 100.0f);
    }
  }
  return out;
}

// Runs `launch(in + offset, out + offset, n)` on device copies of `in` / `out` (offset + n +
// kGuard elements) and checks out against `want(in[i], out[i])` inside the range, unchanged
// outside.
template <typename In, typename Out>
void checkMap(CudaContext& context, const std::string& what,
              const std::function<Status(const In*, Out*, int64_t)>& launch,
              const std::function<Out(In, Out)>& want) {
  uint64_t seed = 500;
  for (const int64_t n : {0, 1, 7, 8, 9, 37, 4103}) {
    for (const int64_t offset : {0, 1, 3}) {
      SCOPED_TRACE(what + " n=" + std::to_string(n) + " offset=" + std::to_string(offset));
      const int64_t total = offset + n + kGuard;
      const std::vector<In> in = randomValues<In>(total, seed += 2);
      const std::vector<Out> before = randomValues<Out>(total, seed += 2);
      MOEWB_ASSIGN_OR_FAIL(auto dIn, context.newTensor<In>({total}, MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(auto dOut, context.newTensor<Out>({total}, MemoryCategory::kWorkspace));
      upload(dIn.data(), in);
      upload(dOut.data(), before);
      MOEWB_ASSERT_OK(launch(dIn.data() + offset, dOut.data() + offset, n));
      MOEWB_ASSERT_OK(context.synchronize());
      const std::vector<Out> got = download(dOut.data(), total);
      for (int64_t i = 0; i < total; ++i) {
        const bool inside = i >= offset && i < offset + n;
        const Out expected = inside ? want(in[size_t(i)], before[size_t(i)]) : before[size_t(i)];
        ASSERT_TRUE(sameBits(got[size_t(i)], expected)) << "element " << i;
      }
    }
  }
}

TEST_F(ElementwiseTest, MapsMatchTheHostBitwiseAtEveryLengthAndAlignment) {
  const cudaStream_t s = stream();
  checkMap<float, bf16>(
      context(), "castFloatToBf16",
      [&](const float* in, bf16* out, int64_t n) { return castFloatToBf16(s, in, out, n); },
      [](float x, bf16) { return __float2bfloat16(x); });
  checkMap<bf16, float>(
      context(), "castBf16ToFloat",
      [&](const bf16* in, float* out, int64_t n) { return castBf16ToFloat(s, in, out, n); },
      [](bf16 x, float) { return __bfloat162float(x); });
  checkMap<float, float>(
      context(), "accumulateFloat",
      [&](const float* in, float* out, int64_t n) {
        return accumulateFloat(s, in, 0.5f, out, n);
      },
      [](float x, float acc) { return acc + 0.5f * x; });
  checkMap<float, bf16>(
      context(), "addFloatIntoBf16",
      [&](const float* in, bf16* out, int64_t n) { return addFloatIntoBf16(s, in, out, n); },
      [](float x, bf16 acc) { return __float2bfloat16(__bfloat162float(acc) + x); });
  checkMap<bf16, float>(
      context(), "accumulateBf16IntoFloat",
      [&](const bf16* in, float* out, int64_t n) {
        return accumulateBf16IntoFloat(s, in, out, n);
      },
      [](bf16 x, float acc) { return acc + __bfloat162float(x); });
  // Fills: the input is unused.
  checkMap<float, float>(
      context(), "fillFloat",
      [&](const float*, float* out, int64_t n) { return fillFloat(s, out, -2.5f, n); },
      [](float, float) { return -2.5f; });
  checkMap<float, bf16>(
      context(), "fillBf16",
      [&](const float*, bf16* out, int64_t n) { return fillBf16(s, out, 0.3f, n); },
      [](float, bf16) { return __float2bfloat16(0.3f); });
  checkMap<float, int32_t>(
      context(), "fillInt32",
      [&](const float*, int32_t* out, int64_t n) { return fillInt32(s, out, -7, n); },
      [](float, int32_t) { return int32_t(-7); });
}

// addBf16 reads two arrays: their offsets differ from the output's in one case, so the pack
// kernel must fall back when any of the three is unaligned.
TEST_F(ElementwiseTest, AddBf16MatchesTheHostBitwiseWhateverTheAlignment) {
  uint64_t seed = 900;
  for (const int64_t n : {0, 1, 7, 8, 9, 37, 4103}) {
    for (const int64_t bOffset : {0, 1}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " b offset=" + std::to_string(bOffset));
      const int64_t total = n + 1 + kGuard;
      const std::vector<bf16> a = randomValues<bf16>(total, seed += 3);
      const std::vector<bf16> b = randomValues<bf16>(total, seed += 3);
      const std::vector<bf16> before = randomValues<bf16>(total, seed += 3);
      MOEWB_ASSIGN_OR_FAIL(auto dA, context().newTensor<bf16>({total}, MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(auto dB, context().newTensor<bf16>({total}, MemoryCategory::kWorkspace));
      MOEWB_ASSIGN_OR_FAIL(auto dOut,
                           context().newTensor<bf16>({total}, MemoryCategory::kWorkspace));
      upload(dA.data(), a);
      upload(dB.data(), b);
      upload(dOut.data(), before);
      MOEWB_ASSERT_OK(addBf16(stream(), dA.data(), dB.data() + bOffset, dOut.data(), n));
      MOEWB_ASSERT_OK(context().synchronize());
      const std::vector<bf16> got = download(dOut.data(), total);
      for (int64_t i = 0; i < total; ++i) {
        const bf16 expected =
            i < n ? __float2bfloat16(__bfloat162float(a[size_t(i)]) +
                                     __bfloat162float(b[size_t(i + bOffset)]))
                  : before[size_t(i)];
        ASSERT_TRUE(sameBits(got[size_t(i)], expected)) << "element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
