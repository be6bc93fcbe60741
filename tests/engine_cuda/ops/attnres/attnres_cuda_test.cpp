// attnResForwardCuda / attnResBackwardCuda against ops/attnres (double): the output, the source
// gradients (fp32 and bf16 accumulation buffers, with a skipped null entry) and the query / key
// gain gradients (added into), on awkward shapes (one token, one source, D not a multiple of the
// block, many sources, more tokens than one backward chunk, the most sources with a row wider
// than the default shared memory holds); the parameter gradients are also checked to be bitwise
// reproducible.
#include "ops/attnres/attnres_cuda.h"

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "ops/attnres/attnres.h"

namespace moewb::engine::cuda {
namespace {

using AttnResCudaTest = CudaTest;

struct Shape {
  int64_t n, d, sources;
};

TEST_F(AttnResCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 41000;
  const AttnResOptions options{1e-6, 0.7};
  for (const Shape shape :
       {Shape{1, 7, 1}, Shape{63, 64, 3}, Shape{300, 129, 5}, Shape{5, 1000, 17},
        Shape{2100, 48, 4}, Shape{3, 12345, kAttnResMaxSources}}) {
    const int64_t n = shape.n, d = shape.d, count = shape.sources;
    SCOPED_TRACE(::testing::Message() << n << "x" << d << " sources " << count);
    for (bool bf16Grads : {false, true}) {
      // Sources of different scales so the softmax is far from uniform.
      std::vector<Tensor<float>> sources;
      std::vector<DeviceTensor<bf16>> deviceSources;
      std::vector<const bf16*> sourcePtrs;
      for (int64_t i = 0; i < count; ++i) {
        sources.push_back(roundedToBf16(randomTensor({n, d}, ++seed, 0.5 + 0.4 * double(i % 4))));
        MOEWB_ASSIGN_OR_FAIL(auto dev,
                             toDeviceBf16(context(), sources.back(), MemoryCategory::kActivations));
        sourcePtrs.push_back(dev.data());
        deviceSources.push_back(std::move(dev));
      }
      Tensor<float> query = roundedToBf16(randomTensor({d}, ++seed, 2.0 / std::sqrt(double(d))));
      Tensor<float> gain = randomTensor({d}, ++seed, 0.3);
      for (int64_t j = 0; j < d; ++j) gain[j] += 1.0f;
      gain = roundedToBf16(gain);
      Tensor<float> dOut = roundedToBf16(randomTensor({n, d}, ++seed));
      Tensor<float> dQuery0 = randomTensor({d}, ++seed);
      Tensor<float> dGain0 = randomTensor({d}, ++seed);
      std::vector<Tensor<float>> dSources0;
      for (int64_t i = 0; i < count; ++i) {
        Tensor<float> g = randomTensor({n, d}, ++seed, 0.1);
        dSources0.push_back(bf16Grads ? roundedToBf16(g) : std::move(g));
      }
      const int64_t skipped = count > 1 ? 1 : -1;  // a null gradient entry

      MOEWB_ASSIGN_OR_FAIL(auto dQ, toDeviceBf16(context(), query, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dG, toDeviceBf16(context(), gain, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dOut, MemoryCategory::kActivations));
      MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
      MOEWB_ASSIGN_OR_FAIL(auto dDq, toDevice(context(), dQuery0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dDg, toDevice(context(), dGain0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dDq2, toDevice(context(), dQuery0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(auto dDg2, toDevice(context(), dGain0, MemoryCategory::kGrads));
      std::vector<DeviceTensor<float>> gradsF;
      std::vector<DeviceTensor<bf16>> gradsB;
      std::vector<float*> ptrsF;
      std::vector<bf16*> ptrsB;
      for (int64_t i = 0; i < count; ++i) {
        if (bf16Grads) {
          MOEWB_ASSIGN_OR_FAIL(
              auto g, toDeviceBf16(context(), dSources0[size_t(i)], MemoryCategory::kActivations));
          ptrsB.push_back(i == skipped ? nullptr : g.data());
          gradsB.push_back(std::move(g));
        } else {
          MOEWB_ASSIGN_OR_FAIL(
              auto g, toDevice(context(), dSources0[size_t(i)], MemoryCategory::kActivations));
          ptrsF.push_back(i == skipped ? nullptr : g.data());
          gradsF.push_back(std::move(g));
        }
      }

      MOEWB_ASSERT_OK(attnResForwardCuda(context(), sourcePtrs, n, d, dQ.data(), dG.data(), options,
                                         dY.data()));
      if (bf16Grads) {
        MOEWB_ASSERT_OK(attnResBackwardCuda(context(), sourcePtrs, n, d, dQ.data(), dG.data(),
                                            options, dDy.data(), ptrsB, dDq.data(), dDg.data()));
      } else {
        MOEWB_ASSERT_OK(attnResBackwardCuda(context(), sourcePtrs, n, d, dQ.data(), dG.data(),
                                            options, dDy.data(), ptrsF, dDq.data(), dDg.data()));
      }
      // Again with every gradient skipped: the parameter gradients must be bitwise equal.
      MOEWB_ASSERT_OK(attnResBackwardCuda(
          context(), sourcePtrs, n, d, dQ.data(), dG.data(), options, dDy.data(),
          std::vector<float*>(size_t(count), nullptr), dDq2.data(), dDg2.data()));

      std::vector<Tensor<double>> sourcesD;
      for (const Tensor<float>& s : sources) sourcesD.push_back(toDouble(s));
      std::vector<const Tensor<double>*> sourcePtrsD;
      for (const Tensor<double>& s : sourcesD) sourcePtrsD.push_back(&s);
      const Tensor<double> queryD = toDouble(query), gainD = toDouble(gain);
      Tensor<double> yWant = attnResForward<double>(pool, sourcePtrsD, queryD, gainD, options);
      std::vector<Tensor<double>> dSourcesWant;
      for (const Tensor<float>& g : dSources0) dSourcesWant.push_back(toDouble(g));
      std::vector<Tensor<double>*> dSourcePtrsD;
      for (int64_t i = 0; i < count; ++i) {
        dSourcePtrsD.push_back(i == skipped ? nullptr : &dSourcesWant[size_t(i)]);
      }
      Tensor<double> dQueryWant = toDouble(dQuery0), dGainWant = toDouble(dGain0);
      attnResBackward<double>(pool, sourcePtrsD, queryD, gainD, options, toDouble(dOut),
                              dSourcePtrsD, dQueryWant, dGainWant);

      MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
      EXPECT_LT(relativeError(yGot, toFloat(yWant)), 1e-2);
      for (int64_t i = 0; i < count; ++i) {
        Tensor<float> got;
        if (bf16Grads) {
          MOEWB_ASSIGN_OR_FAIL(got, toHostFloat(context(), gradsB[size_t(i)]));
        } else {
          MOEWB_ASSIGN_OR_FAIL(got, toHost(context(), gradsF[size_t(i)]));
        }
        // The skipped entry keeps its initial value exactly.
        const Tensor<float> want = toFloat(dSourcesWant[size_t(i)]);
        if (i == skipped) {
          EXPECT_EQ(maxAbsDifference(got, want), 0.0) << "source " << i;
        } else {
          EXPECT_LT(relativeError(got, want), bf16Grads ? 1e-2 : 1e-4) << "source " << i;
        }
      }
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dqGot, toHost(context(), dDq));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dgGot, toHost(context(), dDg));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dqGot2, toHost(context(), dDq2));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dgGot2, toHost(context(), dDg2));
      EXPECT_LT(relativeError(dqGot, toFloat(dQueryWant)), 1e-3);
      EXPECT_LT(relativeError(dgGot, toFloat(dGainWant)), 1e-3);
      for (int64_t j = 0; j < d; ++j) {
        ASSERT_EQ(dqGot[j], dqGot2[j]) << j;
        ASSERT_EQ(dgGot[j], dgGot2[j]) << j;
      }
    }
  }
}

// Zero query: the output is the mean of the sources; one source: the source itself.
TEST_F(AttnResCudaTest, ZeroQueryGivesMeanAndOneSourceIsIdentity) {
  const int64_t n = 37, d = 200;
  uint64_t seed = 42000;
  Tensor<float> zeros({d});
  Tensor<float> ones({d});
  for (int64_t j = 0; j < d; ++j) ones[j] = 1.0f;
  MOEWB_ASSIGN_OR_FAIL(auto dQ, toDeviceBf16(context(), zeros, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dG, toDeviceBf16(context(), ones, MemoryCategory::kWeights));
  std::vector<Tensor<float>> sources;
  std::vector<DeviceTensor<bf16>> device;
  std::vector<const bf16*> ptrs;
  for (int i = 0; i < 3; ++i) {
    sources.push_back(roundedToBf16(randomTensor({n, d}, ++seed)));
    MOEWB_ASSIGN_OR_FAIL(auto dev,
                         toDeviceBf16(context(), sources.back(), MemoryCategory::kActivations));
    ptrs.push_back(dev.data());
    device.push_back(std::move(dev));
  }
  MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
  MOEWB_ASSERT_OK(
      attnResForwardCuda(context(), ptrs, n, d, dQ.data(), dG.data(), AttnResOptions{}, dY.data()));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> mean, toHostFloat(context(), dY));
  Tensor<float> want({n, d});
  for (int64_t k = 0; k < want.numel(); ++k) {
    want[k] = (sources[0][k] + sources[1][k] + sources[2][k]) / 3.0f;
  }
  EXPECT_LT(relativeError(mean, want), 1e-2);

  Tensor<float> query = roundedToBf16(randomTensor({d}, ++seed));
  MOEWB_ASSIGN_OR_FAIL(auto dQ2, toDeviceBf16(context(), query, MemoryCategory::kWeights));
  MOEWB_ASSIGN_OR_FAIL(auto dY2, poisonedBf16(context(), {n, d}));
  MOEWB_ASSERT_OK(attnResForwardCuda(context(), {ptrs[1]}, n, d, dQ2.data(), dG.data(),
                                     AttnResOptions{}, dY2.data()));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> same, toHostFloat(context(), dY2));
  EXPECT_EQ(maxAbsDifference(same, sources[1]), 0.0);
}

TEST_F(AttnResCudaTest, RejectsBadArguments) {
  std::vector<const bf16*> none;
  const Status status =
      attnResForwardCuda(context(), none, 4, 8, nullptr, nullptr, AttnResOptions{}, nullptr);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  std::vector<const bf16*> tooMany(size_t(kAttnResMaxSources + 1), nullptr);
  EXPECT_EQ(
      attnResForwardCuda(context(), tooMany, 4, 8, nullptr, nullptr, AttnResOptions{}, nullptr)
          .code(),
      StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::engine::cuda
