// Shared helpers of the MoE GPU tests: random routings with empty experts, CPU references in
// double from bf16-rounded inputs, and small host/device conversions.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cuda_test_util.h"
#include "ops/permute/permute.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine::cuda::moetest {

// The (N, E, k) grid of the MoE tests (k <= E only).
struct MoeShape {
  int64_t n;
  int64_t e;
  int64_t k;
};

inline std::vector<MoeShape> moeShapes() {
  std::vector<MoeShape> shapes;
  for (int64_t n : {1, 63, 257}) {
    for (int64_t e : {1, 8, 64}) {
      for (int64_t k : {1, 2, 4, 8}) {
        if (k <= e) shapes.push_back({n, e, k});
      }
    }
  }
  return shapes;
}

inline std::string describe(const MoeShape& s) {
  return "N=" + std::to_string(s.n) + " E=" + std::to_string(s.e) + " k=" + std::to_string(s.k);
}

// topExpert [N, k]: k distinct experts per row, drawn from a random subset of about 3/4 of the
// experts (at least k), so some experts receive no token whenever k < E.
inline Tensor<int32_t> randomTopExpert(int64_t n, int64_t k, int64_t e, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> pool(static_cast<size_t>(e));
  std::iota(pool.begin(), pool.end(), 0);
  for (int64_t i = e - 1; i > 0; --i)
    std::swap(pool[size_t(i)], pool[size_t(rng.uniformInt(i + 1))]);
  const int64_t used = std::max<int64_t>(k, (3 * e) / 4);
  pool.resize(size_t(used));
  Tensor<int32_t> top({n, k});
  std::vector<int32_t> row = pool;
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct of `used`
      const int64_t pick = j + rng.uniformInt(used - j);
      std::swap(row[size_t(j)], row[size_t(pick)]);
      top.at(t, j) = row[size_t(j)];
    }
  }
  return top;
}

// A random keep mask [N, k] (about 70% kept).
inline Tensor<uint8_t> randomKeep(int64_t n, int64_t k, uint64_t seed) {
  Rng rng(seed);
  Tensor<uint8_t> keep({n, k});
  for (int64_t i = 0; i < keep.numel(); ++i) keep[i] = rng.uniform() < 0.7 ? 1 : 0;
  return keep;
}

template <typename T>
Tensor<T> slice(const Tensor<T>& x, int64_t rows) {  // first `rows` rows
  std::vector<int64_t> shape = x.shape();
  shape[0] = rows;
  Tensor<T> out(shape);
  std::copy_n(x.data(), out.numel(), out.data());
  return out;
}

inline Tensor<float> castToFloat(const Tensor<double>& x) {
  return toFloat(x);
}

}  // namespace moewb::engine::cuda::moetest
