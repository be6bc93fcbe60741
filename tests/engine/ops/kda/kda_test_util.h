// Shared helpers of the KDA tests: random core inputs in the regime the layer produces
// (L2-normalised q / k, g in [gMin, 0), beta in (0, 1)), conversions and comparisons.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "grad_check.h"
#include "ops/kda/kda.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::test {

template <typename T>
struct KdaCoreInputs {
  Tensor<T> q, k, v, g, beta, s0;  // [N, H*K], [N, H*K], [N, HV*V], [N, HV*K], [N, HV], [B,HV,K,V]
};

// Rows of every head normalised to unit length (times `scale`).
template <typename T>
void normaliseHeads(Tensor<T>& x, int64_t headDim, double scale) {
  for (int64_t i = 0; i < x.numel(); i += headDim) {
    double sumSq = 0;
    for (int64_t d = 0; d < headDim; ++d) sumSq += double(x[i + d]) * double(x[i + d]);
    const double inv = scale / std::sqrt(sumSq);
    for (int64_t d = 0; d < headDim; ++d) x[i + d] = T(double(x[i + d]) * inv);
  }
}

template <typename T>
KdaCoreInputs<T> randomCoreInputs(const KdaCoreDims& dims, Rng& rng, double gMin,
                                  bool withInitialState) {
  const int64_t n = dims.tokens(), h = dims.numHeads, hv = dims.valueHeads();
  KdaCoreInputs<T> in;
  in.q = Tensor<T>({n, h * dims.keyDim});
  in.k = Tensor<T>({n, h * dims.keyDim});
  in.v = Tensor<T>({n, hv * dims.valueDim});
  in.g = Tensor<T>({n, hv * dims.keyDim});
  in.beta = Tensor<T>({n, hv});
  fillNormal(in.q, rng);
  fillNormal(in.k, rng);
  fillNormal(in.v, rng);
  normaliseHeads(in.q, dims.keyDim, 1.0 / std::sqrt(double(dims.keyDim)));
  normaliseHeads(in.k, dims.keyDim, 1.0);
  for (int64_t i = 0; i < in.g.numel(); ++i) in.g[i] = T(gMin * (1.0 - rng.uniform()));
  for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta[i] = T(0.05 + 0.9 * rng.uniform());
  if (withInitialState) {
    in.s0 = Tensor<T>({dims.batch, hv, dims.keyDim, dims.valueDim});
    fillNormal(in.s0, rng, 0.5);
  }
  return in;
}

template <typename To, typename From>
Tensor<To> convertTensor(const Tensor<From>& x) {
  Tensor<To> y;
  switch (x.rank()) {
    case 1:
      y = Tensor<To>({x.dim(0)});
      break;
    case 2:
      y = Tensor<To>({x.dim(0), x.dim(1)});
      break;
    case 3:
      y = Tensor<To>({x.dim(0), x.dim(1), x.dim(2)});
      break;
    case 4:
      y = Tensor<To>({x.dim(0), x.dim(1), x.dim(2), x.dim(3)});
      break;
    default:
      break;
  }
  for (int64_t i = 0; i < x.numel(); ++i) y[i] = To(x[i]);
  return y;
}

template <typename To, typename From>
KdaCoreInputs<To> convertInputs(const KdaCoreInputs<From>& in) {
  return {convertTensor<To>(in.q), convertTensor<To>(in.k),    convertTensor<To>(in.v),
          convertTensor<To>(in.g), convertTensor<To>(in.beta), convertTensor<To>(in.s0)};
}

// max_i |a_i - b_i| / max(1, |b_i|); expects it <= tol.
template <typename A, typename B>
double expectClose(const std::string& what, const Tensor<A>& a, const Tensor<B>& b, double tol) {
  EXPECT_EQ(a.numel(), b.numel()) << what;
  double worst = 0;
  for (int64_t i = 0; i < std::min(a.numel(), b.numel()); ++i) {
    const double ref = double(b[i]);
    const double err = std::abs(double(a[i]) - ref) / std::max(1.0, std::abs(ref));
    EXPECT_TRUE(std::isfinite(double(a[i]))) << what << "[" << i << "]";
    worst = std::max(worst, err);
  }
  EXPECT_LE(worst, tol) << what;
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", worst);
  ::testing::Test::RecordProperty(what + ".max_error", text);
  return worst;
}

template <typename T>
void expectBitwiseEqual(const std::string& what, const Tensor<T>& a, const Tensor<T>& b) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < a.numel(); ++i) mismatches += a[i] != b[i] ? 1 : 0;
  EXPECT_EQ(mismatches, 0) << what;
}

}  // namespace moewb::engine::test
