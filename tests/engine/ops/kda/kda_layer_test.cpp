// The KDA mixer layer: finite-difference gradients of dx and every weight in double (both gate
// variants), bitwise determinism across thread counts, causality and sequence independence,
// float vs double, the parameter list and the init.  Timings live in bench/kda_bench.cpp.
#include "model/layers/kda_layer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "kda_test_util.h"

namespace moewb::engine {
namespace {

using test::expectGradientMatches;

// Random weights in a regime where every path carries gradient (larger than the real init).
template <typename T>
void randomWeights(const KdaDims& dims, KdaParameterSet<T>& params, Rng& rng) {
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor<T>& t = params.tensors[i];
    const std::string& name = shapes[i].name;
    const double stddev = name.starts_with("conv") ? 0.5 : name == "wo" ? 0.3 : 0.4;
    for (int64_t j = 0; j < t.numel(); ++j) t[j] = T(rng.normal() * stddev);
    if (name == "norm_weight") {
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = T(1.0 + 0.3 * rng.normal());
    }
    if (name == "a_log") {
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = T(0.5 * rng.normal());
    }
  }
}

KdaDims tinyDims(KdaGateKind gate) {
  KdaDims dims;
  dims.batch = 2;
  dims.seqLen = 7;
  dims.dModel = 8;
  dims.numHeads = 2;
  dims.headDim = 4;
  dims.chunk = 4;  // two chunks, the second partial
  dims.gateRank = 3;
  dims.gate = gate;
  return dims;
}

void checkLayerGradients(const KdaDims& dims, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  KdaParameterSet<double> params(dims);
  randomWeights(dims, params, rng);
  Tensor<double> x = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<double> r = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);  // dL/dy
  auto loss = [&] {
    KdaSaved<double> saved;
    return test::dot(kdaForward(pool, dims, x, params.weights(), saved), r);
  };
  KdaSaved<double> saved;
  kdaForward(pool, dims, x, params.weights(), saved);
  KdaParameterSet<double> grads(dims);
  Tensor<double> dx = kdaBackward(pool, dims, r, x, params.weights(), saved, grads.refs());
  // A smaller step than the default: the layer's third derivatives are large enough for the
  // O(eps^2) truncation error of eps = 1e-5 to reach ~1e-6.
  const double eps = 2e-6;
  expectGradientMatches("dx", x, dx, loss, {}, eps);
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < shapes.size(); ++i) {
    expectGradientMatches("d" + shapes[i].name, params.tensors[i], grads.tensors[i], loss, {}, eps);
  }
}

TEST(KdaLayer, GradientsMatchFiniteDifferencesDefaultGate) {
  checkLayerGradients(tinyDims(KdaGateKind::kDefault), 1);
}

TEST(KdaLayer, GradientsMatchFiniteDifferencesLowerBoundGate) {
  checkLayerGradients(tinyDims(KdaGateKind::kLowerBound), 2);
}

TEST(KdaLayer, GradientsMatchFiniteDifferencesLongChunk) {
  KdaDims dims = tinyDims(KdaGateKind::kLowerBound);
  dims.batch = 1;
  dims.seqLen = 19;  // one chunk of two sub-blocks (16 + 3 rows)
  dims.chunk = 64;
  dims.gateRank = 0;  // = headDim
  checkLayerGradients(dims, 9);
}

TEST(KdaLayer, BackwardAccumulatesIntoGrads) {
  ThreadPool pool(1);
  Rng rng(3);
  const KdaDims dims = tinyDims(KdaGateKind::kDefault);
  KdaParameterSet<double> params(dims);
  randomWeights(dims, params, rng);
  Tensor<double> x = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<double> r = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  KdaSaved<double> saved;
  kdaForward(pool, dims, x, params.weights(), saved);
  KdaParameterSet<double> once(dims), twice(dims);
  kdaBackward(pool, dims, r, x, params.weights(), saved, once.refs());
  kdaBackward(pool, dims, r, x, params.weights(), saved, twice.refs());
  kdaBackward(pool, dims, r, x, params.weights(), saved, twice.refs());
  for (size_t i = 0; i < once.tensors.size(); ++i) {
    for (int64_t j = 0; j < once.tensors[i].numel(); ++j) {
      EXPECT_NEAR(twice.tensors[i][j], 2 * once.tensors[i][j],
                  1e-12 * (1 + std::abs(once.tensors[i][j])));
    }
  }
}

KdaDims mediumDims() {
  KdaDims dims;
  dims.batch = 3;
  dims.seqLen = 70;  // N = 210 crosses row tiles; 5 chunks of 16, the last partial
  dims.dModel = 32;
  dims.numHeads = 2;
  dims.headDim = 8;
  dims.chunk = 16;
  return dims;
}

TEST(KdaLayer, ResultsDoNotDependOnThreadCount) {
  const KdaDims dims = mediumDims();
  Rng rng(4);
  KdaParameterSet<float> params(dims);
  kdaInitialize(dims, rng, 0.2, 2, params.refs());
  Tensor<float> x = test::randomTensor<float>({dims.tokens(), dims.dModel}, rng);
  Tensor<float> dy = test::randomTensor<float>({dims.tokens(), dims.dModel}, rng);
  auto run = [&](int32_t threads, Tensor<float>& y, Tensor<float>& dx,
                 KdaParameterSet<float>& grads) {
    ThreadPool pool(threads);
    KdaSaved<float> saved;
    y = kdaForward(pool, dims, x, params.weights(), saved);
    dx = kdaBackward(pool, dims, dy, x, params.weights(), saved, grads.refs());
  };
  Tensor<float> y1, y2, dx1, dx2;
  KdaParameterSet<float> g1(dims), g2(dims);
  run(1, y1, dx1, g1);
  run(2, y2, dx2, g2);
  test::expectBitwiseEqual("y", y1, y2);
  test::expectBitwiseEqual("dx", dx1, dx2);
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < shapes.size(); ++i) {
    test::expectBitwiseEqual("d" + shapes[i].name, g1.tensors[i], g2.tensors[i]);
  }
}

TEST(KdaLayer, OutputAtTIgnoresLaterTokensAndOtherSequences) {
  ThreadPool pool(2);
  Rng rng(5);
  KdaDims dims = mediumDims();
  dims.gate = KdaGateKind::kLowerBound;
  KdaParameterSet<double> params(dims);
  randomWeights(dims, params, rng);
  Tensor<double> x = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  KdaSaved<double> saved;
  Tensor<double> before = kdaForward(pool, dims, x, params.weights(), saved);
  const int64_t t0 = 33, seqLen = dims.seqLen;  // perturb sequence 1 after t0
  for (int64_t t = t0 + 1; t < seqLen; ++t) {
    for (int64_t j = 0; j < dims.dModel; ++j) x.at(seqLen + t, j) += 1.5;
  }
  Tensor<double> after = kdaForward(pool, dims, x, params.weights(), saved);
  for (int64_t row = 0; row < dims.tokens(); ++row) {
    const bool mayChange = row > seqLen + t0 && row < 2 * seqLen;
    double diff = 0;
    for (int64_t j = 0; j < dims.dModel; ++j)
      diff += std::abs(after.at(row, j) - before.at(row, j));
    if (mayChange) {
      EXPECT_GT(diff, 1e-9) << "token " << row;
    } else {
      EXPECT_EQ(diff, 0.0) << "token " << row;
    }
  }
}

TEST(KdaLayer, FloatMatchesDouble) {
  ThreadPool pool(2);
  Rng rng(6);
  const KdaDims dims = mediumDims();
  KdaParameterSet<double> pd(dims);
  kdaInitialize(dims, rng, 0.3, 2, pd.refs());
  KdaParameterSet<float> pf(dims);
  for (size_t i = 0; i < pd.tensors.size(); ++i)
    pf.tensors[i] = test::convertTensor<float>(pd.tensors[i]);
  Tensor<double> xd = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<float> xf = test::convertTensor<float>(xd);
  Tensor<double> dyd = test::randomTensor<double>({dims.tokens(), dims.dModel}, rng);
  Tensor<float> dyf = test::convertTensor<float>(dyd);
  KdaSaved<double> sd;
  KdaSaved<float> sf;
  Tensor<double> yd = kdaForward(pool, dims, xd, pd.weights(), sd);
  Tensor<float> yf = kdaForward(pool, dims, xf, pf.weights(), sf);
  KdaParameterSet<double> gd(dims);
  KdaParameterSet<float> gf(dims);
  Tensor<double> dxd = kdaBackward(pool, dims, dyd, xd, pd.weights(), sd, gd.refs());
  Tensor<float> dxf = kdaBackward(pool, dims, dyf, xf, pf.weights(), sf, gf.refs());
  test::expectClose("y", yf, yd, 1e-4);
  test::expectClose("dx", dxf, dxd, 1e-4);
}

TEST(KdaLayer, ParameterShapesAndInit) {
  KdaDims dims = mediumDims();
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  ASSERT_EQ(shapes.size(), 16u);
  for (const KdaParameterShape& s : shapes) {
    const bool noDecay =
        s.name == "a_log" || s.name == "dt_bias" || s.name == "bg" || s.name == "norm_weight";
    EXPECT_EQ(s.decay, !noDecay) << s.name;
  }
  EXPECT_EQ(shapes[0].shape, (std::vector<int64_t>{16, 32}));   // wq [H*K, D]
  EXPECT_EQ(shapes[3].shape, (std::vector<int64_t>{16, 4}));    // conv_q [H*K, W]
  EXPECT_EQ(shapes[6].shape, (std::vector<int64_t>{8, 32}));    // wf1 [R = K, D]
  EXPECT_EQ(shapes[15].shape, (std::vector<int64_t>{32, 16}));  // wo [D, H*K]
  for (KdaGateKind gate : {KdaGateKind::kDefault, KdaGateKind::kLowerBound}) {
    dims.gate = gate;
    Rng rng(7), rng2(7);
    KdaParameterSet<double> p(dims), again(dims);
    kdaInitialize(dims, rng, 0.02, 4, p.refs());
    kdaInitialize(dims, rng2, 0.02, 4, again.refs());
    const KdaWeights<double> w = p.weights();
    for (int64_t h = 0; h < dims.numHeads; ++h) {
      if (gate == KdaGateKind::kDefault) {
        EXPECT_GE(w.aLog[h], 0.0);
        EXPECT_LT(w.aLog[h], std::log(16.0));
      } else {
        EXPECT_EQ(w.aLog[h], 0.0);
      }
    }
    for (int64_t c = 0; c < dims.innerDim(); ++c) {
      const double dt = std::log1p(std::exp(w.dtBias[c]));  // softplus(dt_bias)
      EXPECT_GE(dt, 1e-3 * (1 - 1e-9));
      EXPECT_LE(dt, 1e-1 * (1 + 1e-9));
      EXPECT_EQ(w.bg[c], 0.0);
    }
    for (int64_t d = 0; d < dims.headDim; ++d) EXPECT_EQ(w.normWeight[d], 1.0);
    for (size_t i = 0; i < p.tensors.size(); ++i)
      test::expectBitwiseEqual("init", p.tensors[i], again.tensors[i]);
  }
}

}  // namespace
}  // namespace moewb::engine
