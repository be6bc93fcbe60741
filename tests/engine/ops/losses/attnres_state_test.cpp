// AttnResState (Block AttnRes bookkeeping) around a 3-layer stack of toy sublayers
// y = tanh(x A): the forward equals an independent construction of the sources from the block
// rule, and the backward of the whole stack (embedding, A, every query/gain) matches finite
// differences in double, for several block sizes.
#include "model/layers/attnres_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "grad_check.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;
using test::randomTensor;

constexpr int64_t kLayers = 3;
constexpr int64_t kSublayers = 2 * kLayers;  // attention-like and FFN-like per layer

// y[N, D] = tanh(x[N, D] A[D, D]).
template <typename T>
Tensor<T> toyForward(const Tensor<T>& x, const Tensor<T>& a) {
  const int64_t n = x.dim(0), d = x.dim(1);
  Tensor<T> y({n, d});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < d; ++k) {
      T sum = 0;
      for (int64_t j = 0; j < d; ++j) sum += x.at(t, j) * a.at(j, k);
      y.at(t, k) = std::tanh(sum);
    }
  }
  return y;
}

// Returns dx and adds dA, given y = toyForward(x, a) and dy.
template <typename T>
Tensor<T> toyBackward(const Tensor<T>& x, const Tensor<T>& a, const Tensor<T>& y,
                      const Tensor<T>& dy, Tensor<T>& dA) {
  const int64_t n = x.dim(0), d = x.dim(1);
  Tensor<T> dx({n, d});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t k = 0; k < d; ++k) {
      const T u = dy.at(t, k) * (T(1) - y.at(t, k) * y.at(t, k));
      for (int64_t j = 0; j < d; ++j) {
        dx.at(t, j) += u * a.at(j, k);
        dA.at(j, k) += x.at(t, j) * u;
      }
    }
  }
  return dx;
}

template <typename T>
struct Stack {
  Tensor<T> embedding;             // [N, D]
  std::vector<Tensor<T>> a;        // [S][D, D]
  std::vector<Tensor<T>> query;    // [S + 1][D], the last one is the top's
  std::vector<Tensor<T>> keyGain;  // [S + 1][D]
  Tensor<T> weights;               // [N, D], loss = sum(top * weights)
};

template <typename T>
Stack<T> makeStack(int64_t n, int64_t d, uint64_t seed) {
  Rng rng(seed);
  Stack<T> s;
  s.embedding = randomTensor<T>({n, d}, rng);
  for (int64_t i = 0; i < kSublayers; ++i) s.a.push_back(randomTensor<T>({d, d}, rng, 0.6));
  for (int64_t i = 0; i <= kSublayers; ++i) {
    s.query.push_back(randomTensor<T>({d}, rng, 0.5));
    Tensor<T> gain = randomTensor<T>({d}, rng, 0.3);
    for (int64_t j = 0; j < d; ++j) gain[j] += 1;
    s.keyGain.push_back(std::move(gain));
  }
  s.weights = randomTensor<T>({n, d}, rng);
  return s;
}

template <typename T>
struct StackGrads {
  Tensor<T> embedding;
  std::vector<Tensor<T>> a, query, keyGain;
};

// Runs the stack through an AttnResState; fills `grads` when non-null. Returns the loss.
template <typename T>
double runStack(ThreadPool& pool, const Stack<T>& s, int64_t blockSize, StackGrads<T>* grads,
                Tensor<T>* top = nullptr) {
  AttnResState<T> state(blockSize, AttnResOptions{1e-6, 1.0});
  state.begin(s.embedding.clone());
  std::vector<Tensor<T>> xs, ys;
  for (int64_t i = 0; i < kSublayers; ++i) {
    xs.push_back(state.mixBeforeSublayer(pool, s.query[size_t(i)], s.keyGain[size_t(i)]));
    ys.push_back(toyForward(xs.back(), s.a[size_t(i)]));
    state.addSublayerOutput(pool, ys.back().clone());
  }
  EXPECT_EQ(state.completedBlocks(), (kSublayers - 1) / blockSize + 1);
  Tensor<T> out = state.mixFinal(pool, s.query.back(), s.keyGain.back());
  const double loss = test::dot(out, s.weights);
  if (top != nullptr) *top = out.clone();
  if (grads == nullptr) return loss;

  const int64_t d = s.embedding.dim(1);
  for (int64_t i = 0; i < kSublayers; ++i) grads->a.emplace_back(Tensor<T>({d, d}));
  for (int64_t i = 0; i <= kSublayers; ++i) {
    grads->query.emplace_back(Tensor<T>({d}));
    grads->keyGain.emplace_back(Tensor<T>({d}));
  }
  state.backwardFinal(pool, s.weights, s.query.back(), s.keyGain.back(), grads->query.back(),
                      grads->keyGain.back());
  for (int64_t i = kSublayers - 1; i >= 0; --i) {
    const size_t k = size_t(i);
    Tensor<T> dy = state.backwardSublayerOutput();
    Tensor<T> dx = toyBackward(xs[k], s.a[k], ys[k], dy, grads->a[k]);
    state.backwardMixBeforeSublayer(pool, dx, s.query[k], s.keyGain[k], grads->query[k],
                                    grads->keyGain[k]);
  }
  EXPECT_EQ(state.sublayers(), 0);
  grads->embedding = state.takeEmbeddingGrad();
  EXPECT_EQ(state.heldBytes(), 0);
  return loss;
}

// Independent construction: sublayer s sees [emb] + one sum per block of B outputs among
// out_0..out_{s-1} (the last block possibly partial); the top sees the same for s = S.
Tensor<double> oracleTop(ThreadPool& pool, const Stack<double>& s, int64_t blockSize) {
  const AttnResOptions options{1e-6, 1.0};
  std::vector<Tensor<double>> outs;
  auto sourcesFor = [&](int64_t sublayer) {
    std::vector<Tensor<double>> sources;
    sources.push_back(s.embedding.clone());
    for (int64_t first = 0; first < sublayer; first += blockSize) {
      Tensor<double> sum = outs[size_t(first)].clone();
      for (int64_t i = first + 1; i < std::min(sublayer, first + blockSize); ++i) {
        for (int64_t e = 0; e < sum.numel(); ++e) sum[e] += outs[size_t(i)][e];
      }
      sources.push_back(std::move(sum));
    }
    return sources;
  };
  auto mix = [&](int64_t sublayer) {
    std::vector<Tensor<double>> sources = sourcesFor(sublayer);
    std::vector<const Tensor<double>*> ptrs;
    for (const Tensor<double>& t : sources) ptrs.push_back(&t);
    return attnResForward(pool, ptrs, s.query[size_t(sublayer)], s.keyGain[size_t(sublayer)],
                          options);
  };
  for (int64_t i = 0; i < kSublayers; ++i) outs.push_back(toyForward(mix(i), s.a[size_t(i)]));
  return mix(kSublayers);
}

TEST(AttnResState, ForwardMatchesIndependentBlockConstruction) {
  ThreadPool pool(2);
  const Stack<double> s = makeStack<double>(4, 6, 5);
  for (int64_t blockSize : {1, 2, 3, 4, 100}) {
    Tensor<double> top;
    runStack<double>(pool, s, blockSize, nullptr, &top);
    const Tensor<double> expected = oracleTop(pool, s, blockSize);
    for (int64_t i = 0; i < top.numel(); ++i) {
      EXPECT_NEAR(top[i], expected[i], 1e-13) << "block size " << blockSize;
    }
  }
}

TEST(AttnResState, FirstSublayerSeesOnlyTheEmbedding) {
  ThreadPool pool(1);
  Rng rng(2);
  AttnResState<float> state(2, AttnResOptions{});
  Tensor<float> emb = randomTensor<float>({3, 4}, rng);
  const Tensor<float> expected = emb.clone();
  state.begin(std::move(emb));
  const Tensor<float> query = randomTensor<float>({4}, rng), gain = randomTensor<float>({4}, rng);
  const Tensor<float> x = state.mixBeforeSublayer(pool, query, gain);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(x[i], expected[i]);
  EXPECT_EQ(state.completedBlocks(), 1);
}

TEST(AttnResState, WholeStackGradientMatchesFiniteDifferences) {
  ThreadPool pool(2);
  for (int64_t blockSize : {1, 2, 4}) {
    Stack<double> s = makeStack<double>(3, 4, 11 + uint64_t(blockSize));
    StackGrads<double> g;
    runStack(pool, s, blockSize, &g);
    auto loss = [&] { return runStack<double>(pool, s, blockSize, nullptr); };
    // Names built by append: GCC 12 -O3 reports a false -Wrestrict on "literal" + std::string.
    auto name = [&](const char* what, int64_t index) {
      std::string text(what);
      if (index >= 0) text.append(std::to_string(index));
      return text.append(" (block size ").append(std::to_string(blockSize)).append(")");
    };
    expectGradientMatches(name("embedding", -1), s.embedding, g.embedding, loss);
    for (int64_t i = 0; i < kSublayers; ++i) {
      const size_t k = size_t(i);
      expectGradientMatches(name("A", i), s.a[k], g.a[k], loss);
    }
    for (int64_t i = 0; i <= kSublayers; ++i) {
      const size_t k = size_t(i);
      expectGradientMatches(name("w", i), s.query[k], g.query[k], loss);
      expectGradientMatches(name("gamma", i), s.keyGain[k], g.keyGain[k], loss);
    }
  }
}

TEST(AttnResState, FloatMatchesDouble) {
  ThreadPool pool(2);
  const Stack<double> sd = makeStack<double>(5, 8, 19);
  Stack<float> sf;
  auto toFloat = [](const Tensor<double>& t) {
    Tensor<float> f =
        t.rank() == 1 ? Tensor<float>({t.dim(0)}) : Tensor<float>({t.dim(0), t.dim(1)});
    for (int64_t i = 0; i < t.numel(); ++i) f[i] = float(t[i]);
    return f;
  };
  sf.embedding = toFloat(sd.embedding);
  sf.weights = toFloat(sd.weights);
  for (const auto& t : sd.a) sf.a.push_back(toFloat(t));
  for (const auto& t : sd.query) sf.query.push_back(toFloat(t));
  for (const auto& t : sd.keyGain) sf.keyGain.push_back(toFloat(t));
  StackGrads<double> gd;
  StackGrads<float> gf;
  const double lossD = runStack(pool, sd, 2, &gd);
  const double lossF = runStack(pool, sf, 2, &gf);
  EXPECT_NEAR(lossF, lossD, 1e-4 * std::max(1.0, std::abs(lossD)));
  for (int64_t i = 0; i < gd.embedding.numel(); ++i) {
    EXPECT_NEAR(gf.embedding[i], gd.embedding[i], 1e-4);
  }
}

}  // namespace
}  // namespace moewb::engine
