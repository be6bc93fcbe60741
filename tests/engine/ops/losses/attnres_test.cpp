// AttnRes op: zero query gives the mean, one source is the identity, finite-difference gradients
// in double, accumulation into the gradients, large logits, thread-count determinism.
#include "ops/attnres/attnres.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

template <typename T>
std::vector<Tensor<T>> randomSources(int64_t count, int64_t n, int64_t d, Rng& rng) {
  std::vector<Tensor<T>> sources;
  for (int64_t i = 0; i < count; ++i) sources.push_back(randomTensor<T>({n, d}, rng));
  return sources;
}

template <typename T>
std::vector<const Tensor<T>*> pointers(const std::vector<Tensor<T>>& tensors) {
  std::vector<const Tensor<T>*> out;
  for (const Tensor<T>& t : tensors) out.push_back(&t);
  return out;
}

template <typename T>
std::vector<Tensor<T>*> mutablePointers(std::vector<Tensor<T>>& tensors) {
  std::vector<Tensor<T>*> out;
  for (Tensor<T>& t : tensors) out.push_back(&t);
  return out;
}

TEST(AttnRes, ZeroQueryGivesMeanOfSources) {
  ThreadPool pool(2);
  Rng rng(3);
  const std::vector<Tensor<float>> sources = randomSources<float>(3, 5, 8, rng);
  const Tensor<float> query({8});  // zero-initialised pseudo-query
  const Tensor<float> gain = randomTensor<float>({8}, rng);
  const Tensor<float> out = attnResForward(pool, pointers(sources), query, gain, {});
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float mean = (sources[0][i] + sources[1][i] + sources[2][i]) / 3;
    EXPECT_NEAR(out[i], mean, 1e-6f);
  }
}

TEST(AttnRes, SingleSourceIsIdentity) {
  ThreadPool pool(2);
  Rng rng(4);
  std::vector<Tensor<float>> sources = randomSources<float>(1, 7, 6, rng);
  const Tensor<float> query = randomTensor<float>({6}, rng);
  const Tensor<float> gain = randomTensor<float>({6}, rng);
  const Tensor<float> out = attnResForward(pool, pointers(sources), query, gain, {});
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(out[i], sources[0][i]);

  const Tensor<float> dOut = randomTensor<float>({7, 6}, rng);
  std::vector<Tensor<float>> dSources;
  dSources.emplace_back(Tensor<float>({7, 6}));
  Tensor<float> dQuery({6}), dGain({6});
  attnResBackward(pool, pointers(sources), query, gain, {}, dOut, mutablePointers(dSources), dQuery,
                  dGain);
  for (int64_t i = 0; i < dOut.numel(); ++i) EXPECT_EQ(dSources[0][i], dOut[i]);
  for (int64_t j = 0; j < 6; ++j) {
    EXPECT_EQ(dQuery[j], 0.0f);
    EXPECT_EQ(dGain[j], 0.0f);
  }
}

TEST(AttnRes, GradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  Rng rng(1);
  const int64_t count = 4, n = 3, d = 8;
  const AttnResOptions options{1e-6, 0.7};
  std::vector<Tensor<double>> sources = randomSources<double>(count, n, d, rng);
  Tensor<double> query = randomTensor<double>({d}, rng, 0.5);
  Tensor<double> gain = randomTensor<double>({d}, rng, 0.3);
  for (int64_t j = 0; j < d; ++j) gain[j] += 1;
  const Tensor<double> weights = randomTensor<double>({n, d}, rng);  // loss = sum(o * weights)
  auto loss = [&] {
    return test::dot(attnResForward(pool, pointers(sources), query, gain, options), weights);
  };
  std::vector<Tensor<double>> dSources;
  for (int64_t i = 0; i < count; ++i) dSources.emplace_back(Tensor<double>({n, d}));
  Tensor<double> dQuery({d}), dGain({d});
  attnResBackward(pool, pointers(sources), query, gain, options, weights, mutablePointers(dSources),
                  dQuery, dGain);
  for (int64_t i = 0; i < count; ++i) {
    expectGradientMatches("dv" + std::to_string(i), sources[size_t(i)], dSources[size_t(i)], loss);
  }
  expectGradientMatches("dw", query, dQuery, loss);
  expectGradientMatches("dgamma", gain, dGain, loss);
}

TEST(AttnRes, BackwardAccumulatesAndSkipsNullSources) {
  ThreadPool pool(2);
  Rng rng(9);
  const std::vector<Tensor<double>> sources = randomSources<double>(3, 4, 5, rng);
  const Tensor<double> query = randomTensor<double>({5}, rng);
  const Tensor<double> gain = randomTensor<double>({5}, rng);
  const Tensor<double> dOut = randomTensor<double>({4, 5}, rng);
  std::vector<Tensor<double>> fresh;
  for (int i = 0; i < 3; ++i) fresh.emplace_back(Tensor<double>({4, 5}));
  Tensor<double> dQuery({5}), dGain({5});
  attnResBackward(pool, pointers(sources), query, gain, {}, dOut, mutablePointers(fresh), dQuery,
                  dGain);
  Tensor<double> start = randomTensor<double>({4, 5}, rng);
  Tensor<double> accumulated = start.clone();
  Tensor<double> dQuery2 = dQuery.clone(), dGain2 = dGain.clone();
  attnResBackward<double>(pool, pointers(sources), query, gain, {}, dOut,
                          {nullptr, &accumulated, nullptr}, dQuery2, dGain2);
  for (int64_t i = 0; i < start.numel(); ++i) {
    EXPECT_NEAR(accumulated[i], start[i] + fresh[1][i], 1e-14);
  }
  for (int64_t j = 0; j < 5; ++j) {
    EXPECT_NEAR(dQuery2[j], 2 * dQuery[j], 1e-14);
    EXPECT_NEAR(dGain2[j], 2 * dGain[j], 1e-14);
  }
}

TEST(AttnRes, LargeLogitsStayFinite) {
  ThreadPool pool(1);
  Rng rng(12);
  std::vector<Tensor<float>> sources = randomSources<float>(5, 6, 16, rng);
  Tensor<float> query = randomTensor<float>({16}, rng, 1e4);
  const Tensor<float> gain = randomTensor<float>({16}, rng);
  const Tensor<float> out = attnResForward(pool, pointers(sources), query, gain, {});
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_TRUE(std::isfinite(out[i]));
  std::vector<Tensor<float>> dSources;
  for (int i = 0; i < 5; ++i) dSources.emplace_back(Tensor<float>({6, 16}));
  Tensor<float> dQuery({16}), dGain({16});
  attnResBackward(pool, pointers(sources), query, gain, {}, out, mutablePointers(dSources), dQuery,
                  dGain);
  for (const Tensor<float>& ds : dSources) {
    for (int64_t i = 0; i < ds.numel(); ++i) EXPECT_TRUE(std::isfinite(ds[i]));
  }
}

TEST(AttnRes, ResultsDoNotDependOnThreadCount) {
  Rng rng(21);
  const int64_t n = 301, d = 40, count = 4;
  const std::vector<Tensor<float>> sources = randomSources<float>(count, n, d, rng);
  const Tensor<float> query = randomTensor<float>({d}, rng);
  const Tensor<float> gain = randomTensor<float>({d}, rng);
  const Tensor<float> dOut = randomTensor<float>({n, d}, rng);
  struct Result {
    Tensor<float> out, dQuery, dGain;
    std::vector<Tensor<float>> dSources;
  };
  auto run = [&](int threads) {
    ThreadPool pool(threads);
    Result r{attnResForward(pool, pointers(sources), query, gain, {}),
             Tensor<float>({d}),
             Tensor<float>({d}),
             {}};
    for (int64_t i = 0; i < count; ++i) r.dSources.emplace_back(Tensor<float>({n, d}));
    attnResBackward(pool, pointers(sources), query, gain, {}, dOut, mutablePointers(r.dSources),
                    r.dQuery, r.dGain);
    return r;
  };
  const Result one = run(1);
  auto same = [](const Tensor<float>& a, const Tensor<float>& b) {
    return std::memcmp(a.data(), b.data(), size_t(a.bytes())) == 0;
  };
  for (int threads : {2, 3}) {
    const Result other = run(threads);
    EXPECT_TRUE(same(one.out, other.out)) << threads;
    EXPECT_TRUE(same(one.dQuery, other.dQuery)) << threads;
    EXPECT_TRUE(same(one.dGain, other.dGain)) << threads;
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_TRUE(same(one.dSources[size_t(i)], other.dSources[size_t(i)])) << threads;
    }
  }
}

}  // namespace
}  // namespace moewb::engine
