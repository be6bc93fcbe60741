// AttnResStateCuda against the CPU AttnResState<double> over whole forward/backward passes with
// stand-in sublayers (fixed outputs out_s and input gradients dx_s), for full AttnRes (block 1),
// blocks of 2 and 3 sublayers, one block larger than the pass, and no sublayer at all: every
// mixed input x_s and x_top, every output gradient, every query / key-gain gradient and the
// embedding gradient. Values are multiples of 1/8 below 2 in magnitude, so the bf16 prefix sums of
// the device state are exact and the comparison isolates the bookkeeping and the op.
#include "model/layers/attnres_state_cuda.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "model/layers/attnres_state.h"

namespace moewb::engine::cuda {
namespace {

using AttnResStateCudaTest = CudaTest;

// N(0, 0.7^2) values rounded to multiples of 1/8 and clipped to [-2, 2] (exact in bf16).
Tensor<float> eighths(const std::vector<int64_t>& shape, uint64_t seed) {
  Tensor<float> t = randomTensor(shape, seed, 0.7);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t[i] = std::fmin(2.0f, std::fmax(-2.0f, std::round(t[i] * 8.0f) / 8.0f));
  }
  return t;
}

struct Param {
  Tensor<float> query, gain;                // host values [D]
  DeviceTensor<bf16> queryDev, gainDev;     // compute copies
  DeviceTensor<float> dQueryDev, dGainDev;  // gradients (start random)
  Tensor<double> dQueryWant, dGainWant;
};

TEST_F(AttnResStateCudaTest, PassMatchesCpuState) {
  struct Case {
    int64_t n, d, sublayers, blockSize;
  };
  uint64_t seed = 43000;
  for (const Case c : {Case{33, 96, 5, 1}, Case{33, 96, 6, 2}, Case{17, 130, 7, 3},
                       Case{1, 7, 4, 24}, Case{9, 40, 0, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << c.n << "x" << c.d << " sublayers " << c.sublayers << " block " << c.blockSize);
    ThreadPool pool(1);
    const AttnResOptions options{1e-6, 1.0};
    const int64_t n = c.n, d = c.d, count = c.sublayers;
    std::vector<Param> params(size_t(count + 1));  // the last is the top
    for (Param& p : params) {
      p.query = roundedToBf16(randomTensor({d}, ++seed, 1.5 / std::sqrt(double(d))));
      p.gain = randomTensor({d}, ++seed, 0.2);
      for (int64_t j = 0; j < d; ++j) p.gain[j] += 1.0f;
      p.gain = roundedToBf16(p.gain);
      const Tensor<float> dq0 = randomTensor({d}, ++seed), dg0 = randomTensor({d}, ++seed);
      MOEWB_ASSIGN_OR_FAIL(p.queryDev, toDeviceBf16(context(), p.query, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(p.gainDev, toDeviceBf16(context(), p.gain, MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(p.dQueryDev, toDevice(context(), dq0, MemoryCategory::kGrads));
      MOEWB_ASSIGN_OR_FAIL(p.dGainDev, toDevice(context(), dg0, MemoryCategory::kGrads));
      p.dQueryWant = toDouble(dq0);
      p.dGainWant = toDouble(dg0);
    }
    const Tensor<float> embedding = eighths({n, d}, ++seed);
    std::vector<Tensor<float>> outputs, dInputs;  // per sublayer
    for (int64_t s = 0; s < count; ++s) {
      outputs.push_back(eighths({n, d}, ++seed));
      dInputs.push_back(roundedToBf16(randomTensor({n, d}, ++seed)));
    }
    const Tensor<float> dTop = roundedToBf16(randomTensor({n, d}, ++seed));

    AttnResState<double> cpu(c.blockSize, options);
    AttnResStateCuda gpu(c.blockSize, options);
    cpu.begin(toDouble(embedding));
    MOEWB_ASSIGN_OR_FAIL(auto embDev,
                         toDeviceBf16(context(), embedding, MemoryCategory::kActivations));
    gpu.begin(std::move(embDev));
    for (int64_t s = 0; s < count; ++s) {
      Param& p = params[size_t(s)];
      Tensor<double> want = cpu.mixBeforeSublayer(pool, toDouble(p.query), toDouble(p.gain));
      MOEWB_ASSIGN_OR_FAIL(auto x, gpu.mixBeforeSublayer(context(), p.queryDev, p.gainDev));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHostFloat(context(), x));
      EXPECT_LT(relativeError(got, toFloat(want)), 1e-2) << "x_" << s;
      cpu.addSublayerOutput(pool, toDouble(outputs[size_t(s)]));
      MOEWB_ASSIGN_OR_FAIL(
          auto out, toDeviceBf16(context(), outputs[size_t(s)], MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(gpu.addSublayerOutput(context(), std::move(out)));
      EXPECT_EQ(gpu.completedBlocks(), cpu.completedBlocks());
    }
    Param& top = params.back();
    Tensor<double> topWant = cpu.mixFinal(pool, toDouble(top.query), toDouble(top.gain));
    MOEWB_ASSIGN_OR_FAIL(auto xTop, gpu.mixFinal(context(), top.queryDev, top.gainDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> topGot, toHostFloat(context(), xTop));
    EXPECT_LT(relativeError(topGot, toFloat(topWant)), 1e-2) << "x_top";
    EXPECT_GT(gpu.heldBytes(), 0);

    cpu.backwardFinal(pool, toDouble(dTop), toDouble(top.query), toDouble(top.gain), top.dQueryWant,
                      top.dGainWant);
    MOEWB_ASSIGN_OR_FAIL(auto dTopDev, toDeviceBf16(context(), dTop, MemoryCategory::kActivations));
    MOEWB_ASSERT_OK(gpu.backwardFinal(context(), dTopDev, top.queryDev, top.gainDev, top.dQueryDev,
                                      top.dGainDev));
    for (int64_t s = count - 1; s >= 0; --s) {
      Param& p = params[size_t(s)];
      Tensor<double> dOutWant = cpu.backwardSublayerOutput();
      MOEWB_ASSIGN_OR_FAIL(auto dOut, gpu.backwardSublayerOutput(context()));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dOutGot, toHostFloat(context(), dOut));
      EXPECT_LT(relativeError(dOutGot, toFloat(dOutWant)), 1e-2) << "dout_" << s;
      cpu.backwardMixBeforeSublayer(pool, toDouble(dInputs[size_t(s)]), toDouble(p.query),
                                    toDouble(p.gain), p.dQueryWant, p.dGainWant);
      MOEWB_ASSIGN_OR_FAIL(
          auto dIn, toDeviceBf16(context(), dInputs[size_t(s)], MemoryCategory::kActivations));
      MOEWB_ASSERT_OK(gpu.backwardMixBeforeSublayer(context(), dIn, p.queryDev, p.gainDev,
                                                    p.dQueryDev, p.dGainDev));
    }
    Tensor<double> dEmbWant = cpu.takeEmbeddingGrad();
    MOEWB_ASSIGN_OR_FAIL(auto dEmb, gpu.takeEmbeddingGrad(context()));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dEmbGot, toHostFloat(context(), dEmb));
    EXPECT_LT(relativeError(dEmbGot, toFloat(dEmbWant)), 1e-2) << "d_embedding";
    for (size_t s = 0; s < params.size(); ++s) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dq, toHost(context(), params[s].dQueryDev));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> dg, toHost(context(), params[s].dGainDev));
      EXPECT_LT(relativeError(dq, toFloat(params[s].dQueryWant)), 2e-3) << "dquery " << s;
      EXPECT_LT(relativeError(dg, toFloat(params[s].dGainWant)), 2e-3) << "dgain " << s;
    }
    EXPECT_EQ(gpu.sublayers(), 0);
    EXPECT_EQ(gpu.completedBlocks(), 0);
    EXPECT_EQ(gpu.heldBytes(), 0);
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
