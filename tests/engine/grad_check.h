// Helpers for the engine's op tests: seeded random tensors and a central finite-difference
// gradient check in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::test {

// Fills `t` with N(0, stddev^2) values from `rng`.
template <typename T>
void fillNormal(Tensor<T>& t, Rng& rng, double stddev = 1.0) {
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = T(rng.normal() * stddev);
}

template <typename T>
Tensor<T> randomTensor(std::initializer_list<int64_t> shape, Rng& rng, double stddev = 1.0) {
  Tensor<T> t(shape);
  fillNormal(t, rng, stddev);
  return t;
}

// sum_i a[i] * b[i] in double.
template <typename T>
double dot(const Tensor<T>& a, const Tensor<T>& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double sum = 0;
  for (int64_t i = 0; i < a.numel(); ++i) sum += double(a[i]) * double(b[i]);
  return sum;
}

// Compares analytic[i] with (loss(x + eps e_i) - loss(x - eps e_i)) / (2 eps) for the elements
// `indices` of `x` (all elements when empty). `x` is restored. Tolerance: |a - n| <= tol *
// max(1, |n|).
inline void expectGradientMatches(const std::string& what, Tensor<double>& x,
                                  const Tensor<double>& analytic,
                                  const std::function<double()>& loss,
                                  std::vector<int64_t> indices = {}, double eps = 1e-5,
                                  double tol = 1e-6) {
  ASSERT_EQ(x.numel(), analytic.numel()) << what;
  if (indices.empty()) {
    for (int64_t i = 0; i < x.numel(); ++i) indices.push_back(i);
  }
  double worst = 0;
  for (int64_t i : indices) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double plus = loss();
    x[i] = saved - eps;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (2 * eps);
    const double error = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    worst = std::max(worst, error);
    EXPECT_LE(error, tol) << what << "[" << i << "]: analytic " << analytic[i] << " numeric "
                          << numeric;
  }
  ::testing::Test::RecordProperty(what + ".max_error", std::to_string(worst));
}

}  // namespace moewb::engine::test
