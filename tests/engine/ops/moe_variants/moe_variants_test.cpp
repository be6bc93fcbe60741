// The MoE layer across its variants (ENGINE-MATH §5): every variant against the per-expert-loop
// oracle on awkward sizes (experts with no tokens, top-k = 1 and = E), fused stage boundaries
// equal to the unfused stages, identical results for 1, 2 and 3 threads, the aux-loss-free bias
// update rule and its convergence toward balance on a fixed batch, and the parameter list.
#include <gtest/gtest.h>

#include <algorithm>

#include "moe_test_util.h"

namespace moewb::engine {
namespace {

using test::randomTensor;

struct OracleCase {
  const char* name;
  int64_t n, d, e, f;
  MoeOptions options;
};

MoeOptions withTopK(int32_t k) {
  MoeOptions o;
  o.topK = k;
  o.auxLossCoef = 0.1;
  return o;
}

std::vector<OracleCase> oracleCases() {
  std::vector<OracleCase> cases;
  cases.push_back({"default", 7, 5, 4, 6, withTopK(2)});
  cases.push_back({"k=1 empty experts", 3, 5, 6, 4, withTopK(1)});  // >= 3 experts idle
  cases.push_back({"k=E", 5, 4, 4, 3, withTopK(4)});
  MoeOptions sig = withTopK(2);
  sig.routerScore = RouterScore::kSigmoid;
  sig.routeScale = 2.5;
  sig.numGroups = 3;
  sig.topKGroups = 2;
  cases.push_back({"sigmoid groups", 9, 5, 6, 4, sig});
  MoeOptions losses = withTopK(2);
  losses.seqAuxLossCoef = 0.3;
  losses.seqLen = 3;
  losses.zLossCoef = 0.02;
  cases.push_back({"seq aux + z", 9, 5, 4, 4, losses});
  MoeOptions sigLosses = losses;
  sigLosses.routerScore = RouterScore::kSigmoid;
  cases.push_back({"sigmoid seq aux + z", 9, 5, 4, 4, sigLosses});
  MoeOptions situ = withTopK(2);
  situ.activation = GluKind::kSitu;
  situ.situBeta1 = 1.0;
  situ.situBeta2 = 0.8;
  cases.push_back({"situ", 7, 5, 4, 6, situ});
  MoeOptions all = sig;
  all.capacityFactor = 0.7;
  all.latentDim = 3;
  all.numSharedExperts = 1;
  all.sharedDFf = 3;
  all.permuteIntoExperts = true;
  all.combineIntoExperts = true;
  cases.push_back({"everything fused", 12, 5, 6, 4, all});
  return cases;
}

TEST(MoeVariants, EveryVariantMatchesThePerExpertLoopOracle) {
  uint64_t seed = 400;
  for (const OracleCase& c : oracleCases()) {
    test::expectMatchesOracle(c.name, c.options, c.n, c.d, c.e, c.f, ++seed);
  }
}

TEST(MoeVariants, EveryVariantMatchesFiniteDifferences) {
  uint64_t seed = 420;
  for (const OracleCase& c : oracleCases()) {
    ThreadPool pool(2);
    Rng rng(++seed);
    test::MoeParams<double> p(c.options, c.d, c.e, c.f);
    p.randomize(rng, 0.6, 1.0);
    Tensor<double> x = randomTensor<double>({c.n, c.d}, rng);
    Tensor<double> dy = randomTensor<double>({c.n, c.d}, rng);
    test::expectMoeGradientsMatch(c.name, pool, x, p, dy);
  }
}

// Forward + backward; returns y, dx, the aux loss and every gradient, flattened.
template <typename T>
std::vector<std::vector<T>> runLayer(ThreadPool& pool, const MoeOptions& o, test::MoeParams<T>& p,
                                     const Tensor<T>& x, const Tensor<T>& dy,
                                     const ExpertBias* bias = nullptr) {
  MoeSaved<T> saved;
  Tensor<T> y = moeFfnForward(pool, x, p.weights(bias), o, saved);
  test::MoeParams<T> grads(o, p.d, p.e, p.f);
  Tensor<T> dx = moeFfnBackward(pool, dy, x, p.weights(bias), o, saved, grads.grads());
  auto flat = [](const Tensor<T>& t) { return std::vector<T>(t.data(), t.data() + t.numel()); };
  std::vector<std::vector<T>> out = {flat(y), flat(dx), {T(saved.aux.loss)}};
  for (auto& [name, t] : grads.all()) out.push_back(flat(*t));
  return out;
}

MoeOptions fusionBase(int variant) {
  MoeOptions o = withTopK(2);
  if (variant >= 1) {
    o.routerScore = RouterScore::kSigmoid;
    o.capacityFactor = 0.8;
    o.activation = GluKind::kSitu;
  }
  if (variant >= 2) {
    o.latentDim = 6;
    o.numSharedExperts = 2;
    o.sharedDFf = 3;
    o.dropPolicy = DropPolicy::kPosition;
  }
  return o;
}

TEST(MoeFusion, FusedBoundariesEqualUnfusedStagesBitwise) {
  // 150 tokens: experts span several 64-row tiles; the last expert gets no tokens.
  const int64_t n = 150, d = 13, e = 5, f = 7;
  for (int variant = 0; variant < 3; ++variant) {
    ThreadPool pool(2);
    Rng rng(440 + uint64_t(variant));
    const MoeOptions base = fusionBase(variant);
    test::MoeParams<float> p(base, d, e, f);
    p.randomize(rng, 0.4, 1.0);
    Tensor<float> x = randomTensor<float>({n, d}, rng);
    Tensor<float> dy = randomTensor<float>({n, d}, rng);
    for (int64_t t = 0; t < n; ++t) x.at(t, 0) = 1.0f;
    p.router.at(e - 1, 0) = -100.0f;
    const auto ref = runLayer(pool, base, p, x, dy);
    for (int flags = 1; flags < 4; ++flags) {
      MoeOptions o = base;
      o.permuteIntoExperts = (flags & 1) != 0;
      o.combineIntoExperts = (flags & 2) != 0;
      const auto got = runLayer(pool, o, p, x, dy);
      ASSERT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        EXPECT_TRUE(got[i] == ref[i]) << "variant " << variant << " flags " << flags << " output "
                                      << i << " (0 y, 1 dx, 2 aux, then parameter grads)";
      }
    }
  }
}

TEST(MoeVariants, ResultsAreIdenticalForAnyThreadCount) {
  const int64_t n = 140, d = 11, e = 6, f = 9;
  for (int variant = 0; variant < 2; ++variant) {
    MoeOptions o = fusionBase(2);
    o.numGroups = 3;
    o.topKGroups = 2;
    o.seqAuxLossCoef = 0.01;
    o.seqLen = 35;
    o.zLossCoef = 0.001;
    o.permuteIntoExperts = variant == 1;
    o.combineIntoExperts = variant == 1;
    Rng rng(460);
    test::MoeParams<float> p(o, d, e, f);
    p.randomize(rng, 0.4, 1.0);
    Tensor<float> x = randomTensor<float>({n, d}, rng);
    Tensor<float> dy = randomTensor<float>({n, d}, rng);
    ExpertBias bias = makeExpertBias(e);
    bias.bias = {0.01f, -0.02f, 0.0f, 0.03f, 0.0f, -0.01f};
    std::vector<std::vector<float>> first;
    for (int32_t threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      const auto got = runLayer(pool, o, p, x, dy, &bias);
      if (threads == 1) {
        first = got;
        continue;
      }
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(got[i], first[i]) << threads << " threads, out " << i;
    }
  }
}

TEST(ExpertBias, UpdateIsRateTimesSignOfTheGapToTheMean) {
  ExpertBias state = makeExpertBias(4);
  accumulateExpertCounts(state, {3, 1, 2, 2});
  accumulateExpertCounts(state, {2, 0, 1, 1});  // totals 5, 1, 3, 3; mean 3
  updateExpertBias(state, 0.25);
  EXPECT_EQ(state.bias, (std::vector<float>{-0.25f, 0.25f, 0.0f, 0.0f}));
  EXPECT_EQ(state.pendingCounts, (std::vector<int64_t>{0, 0, 0, 0}));
  updateExpertBias(state, 0.25);  // nothing pending: no change
  EXPECT_EQ(state.bias, (std::vector<float>{-0.25f, 0.25f, 0.0f, 0.0f}));
}

double maxOverMean(const std::vector<int64_t>& counts) {
  int64_t total = 0, most = 0;
  for (int64_t c : counts) {
    total += c;
    most = std::max(most, c);
  }
  return double(most) * double(counts.size()) / double(total);
}

TEST(ExpertBias, UpdatesMoveCountsTowardBalanceOnAFixedBatch) {
  for (RouterScore score : {RouterScore::kSigmoid, RouterScore::kSoftmax}) {
    ThreadPool pool(2);
    Rng rng(470);
    const int64_t n = 512, d = 8, e = 8, f = 4;
    MoeOptions o = withTopK(2);
    o.routerScore = score;
    o.biasUpdateRate = 0.01;
    test::MoeParams<float> p(o, d, e, f);
    p.randomize(rng, 0.3, 0.5);
    Tensor<float> x = randomTensor<float>({n, d}, rng);
    for (int64_t t = 0; t < n; ++t) x.at(t, 0) = 2.0f;         // a shared direction ...
    for (int64_t j = 0; j < 3; ++j) p.router.at(j, 0) = 1.2f;  // ... that 3 experts love
    ExpertBias bias = makeExpertBias(e);
    double start = 0, end = 0;
    for (int step = 0; step < 500; ++step) {
      MoeSaved<float> saved;
      moeRouterForward(pool, x, p.weights(&bias), o, saved);
      if (step == 0) start = maxOverMean(saved.aux.counts);
      end = maxOverMean(saved.aux.counts);
      accumulateExpertCounts(bias, saved.aux.counts);
      updateExpertBias(bias, o.biasUpdateRate);
    }
    EXPECT_GT(start, 2.0);
    EXPECT_LT(end, 1.2) << "start " << start;
    EXPECT_GT(bias.bias[6], bias.bias[0]);  // the loved experts were pushed down
  }
}

TEST(MoeOptions, ParameterSpecsAndValidation) {
  MoeOptions o;
  EXPECT_EQ(moeOptionsError(o, 8), "");
  auto specs = moeParameterSpecs(o, 16, 8, 32);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{8, 32, 16}));
  o.latentDim = 6;
  o.numSharedExperts = 2;
  o.sharedDFf = 5;
  specs = moeParameterSpecs(o, 16, 8, 32);
  ASSERT_EQ(specs.size(), 10u);
  EXPECT_EQ(specs[1].shape, (std::vector<int64_t>{8, 32, 6}));
  EXPECT_EQ(specs[3].shape, (std::vector<int64_t>{8, 6, 32}));
  EXPECT_EQ(specs[4].name, "moe.shared.gate");
  EXPECT_EQ(specs[4].shape, (std::vector<int64_t>{10, 16}));
  EXPECT_EQ(specs[6].init, MoeParamInit::kOutput);
  EXPECT_EQ(specs[8].name, "moe.latent.up");
  EXPECT_EQ(specs[9].shape, (std::vector<int64_t>{6}));
  EXPECT_FALSE(specs[9].decay);
  EXPECT_EQ(specs[9].init, MoeParamInit::kOnes);
  o.numGroups = 3;
  EXPECT_NE(moeOptionsError(o, 8).find("moe.num_groups"), std::string::npos);
  o.numGroups = 4;
  o.topKGroups = 1;
  o.topK = 3;  // only 2 experts in one group of 2
  EXPECT_NE(moeOptionsError(o, 8).find("moe.top_k"), std::string::npos);
}

}  // namespace
}  // namespace moewb::engine
