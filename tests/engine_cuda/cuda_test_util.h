// Shared helpers of the CUDA backend's tests: a fixture that skips without a device and owns a
// CudaContext, random host tensors, bf16 rounding, relative errors, NaN-poisoned device outputs
// and Status assertions. Tolerances (STYLE.md): fp32 ~1e-5, bf16 ~1e-2 relative.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/transfer.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::cuda {

#define MOEWB_ASSERT_OK(expr)                               \
  do {                                                      \
    ::moewb::Status moewb_test_status_ = (expr);            \
    ASSERT_TRUE(moewb_test_status_.isOk()) << moewb_test_status_.toString(); \
  } while (0)

// `MOEWB_ASSIGN_OR_FAIL(auto x, makeX());` in a test body (void function).
#define MOEWB_ASSIGN_OR_FAIL(lhs, expr) \
  MOEWB_ASSIGN_OR_FAIL_IMPL(MOEWB_STATUS_CONCAT(moewb_test_result_, __LINE__), lhs, expr)
#define MOEWB_ASSIGN_OR_FAIL_IMPL(tmp, lhs, expr)                    \
  auto tmp = (expr);                                                 \
  ASSERT_TRUE(tmp.isOk()) << tmp.status().toString();               \
  lhs = std::move(tmp).value()

// Skips every test of a suite when no CUDA device is visible; otherwise owns a context on
// device 0 (context()).
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override;
  CudaContext& context() { return *m_context; }
  cudaStream_t stream() { return m_context->stream(); }

 private:
  std::unique_ptr<CudaContext> m_context;
};

// Values ~ N(0, scale^2) (or uniform in [-scale, scale] when `uniform`) from `seed`.
Tensor<float> randomTensor(const std::vector<int64_t>& shape, uint64_t seed, double scale = 1.0,
                           bool uniform = false);
// Each element rounded to the nearest bf16 (what a bf16 device copy holds).
Tensor<float> roundedToBf16(const Tensor<float>& x);
// The same values in double (for references computed in double).
Tensor<double> toDouble(const Tensor<float>& x);
Tensor<float> toFloat(const Tensor<double>& x);
// ||got - want||_2 / max(||want||_2, tiny); +inf when got holds a NaN or Inf or shapes differ.
double relativeError(const Tensor<float>& got, const Tensor<float>& want);
// a - b element by element (same shapes): the change an op added into a gradient.
Tensor<float> minus(const Tensor<float>& a, const Tensor<float>& b);
// max_i |got[i] - want[i]|; +inf for NaN/Inf or different shapes (for gradients that vanish
// analytically, where a relative error would compare rounding noise with rounding noise).
double maxAbsDifference(const Tensor<float>& got, const Tensor<float>& want);
// A device tensor filled with NaN (outputs are poisoned before each op under test).
Result<DeviceTensor<bf16>> poisonedBf16(CudaContext& context, const std::vector<int64_t>& shape);
Result<DeviceTensor<float>> poisonedFloat(CudaContext& context, const std::vector<int64_t>& shape);

}  // namespace moewb::engine::cuda
