#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/tensor/rng.h"

namespace moewb::engine::cuda {

void CudaTest::SetUp() {
  if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  auto context = CudaContext::create(0);
  ASSERT_TRUE(context.isOk()) << context.status().toString();
  m_context = std::move(context).value();
}

Tensor<float> randomTensor(const std::vector<int64_t>& shape, uint64_t seed, double scale,
                           bool uniform) {
  Tensor<float> x(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < x.numel(); ++i) {
    x[i] = float(scale * (uniform ? 2.0 * rng.uniform() - 1.0 : rng.normal()));
  }
  return x;
}

Tensor<float> roundedToBf16(const Tensor<float>& x) {
  Tensor<float> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = __bfloat162float(__float2bfloat16(x[i]));
  return y;
}

Tensor<double> toDouble(const Tensor<float>& x) {
  Tensor<double> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = double(x[i]);
  return y;
}

Tensor<float> toFloat(const Tensor<double>& x) {
  Tensor<float> y(x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = float(x[i]);
  return y;
}

double relativeError(const Tensor<float>& got, const Tensor<float>& want) {
  if (!got.sameShape(want)) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    const double d = double(got[i]) - double(want[i]);
    diff += d * d;
    norm += double(want[i]) * double(want[i]);
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

Tensor<float> minus(const Tensor<float>& a, const Tensor<float>& b) {
  MOEWB_CHECK(a.sameShape(b));
  Tensor<float> out(a.shape());
  for (int64_t i = 0; i < a.numel(); ++i) out[i] = a[i] - b[i];
  return out;
}

double maxAbsDifference(const Tensor<float>& got, const Tensor<float>& want) {
  if (!got.sameShape(want)) return std::numeric_limits<double>::infinity();
  double most = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    most = std::max(most, std::fabs(double(got[i]) - double(want[i])));
  }
  return most;
}

Result<DeviceTensor<bf16>> poisonedBf16(CudaContext& context, const std::vector<int64_t>& shape) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> t,
                         context.newTensor<bf16>(shape, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(fillBf16(context.stream(), t.data(), std::nanf(""), t.numel()));
  return t;
}

Result<DeviceTensor<float>> poisonedFloat(CudaContext& context, const std::vector<int64_t>& shape) {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> t,
                         context.newTensor<float>(shape, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), t.data(), std::nanf(""), t.numel()));
  return t;
}

}  // namespace moewb::engine::cuda
