// The KDA gate (both variants), short causal conv + SiLU and per-head L2 norm on the GPU against
// the CPU references in double, forward and backward, on bf16-rounded inputs with NaN-poisoned
// outputs; weight gradients are added into nonzero starting values. The short conv's vectorised
// kernels are also checked bitwise against its scalar ones.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "cuda_test_util.h"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"
#include "ops/kda/kda_gate.h"
#include "runtime/thread_pool.h"

namespace moewb::engine::cuda {
namespace {

using KdaGateCudaTest = CudaTest;

const MemoryCategory kAct = MemoryCategory::kActivations;

void checkGate(CudaContext& context, KdaGateKind kind, uint64_t seed) {
  SCOPED_TRACE(kind == KdaGateKind::kDefault ? "default gate" : "lower-bound gate");
  ThreadPool pool(2);
  const KdaGateParams params{kind, -5.0, 2, 16};
  const int64_t n = 126, width = params.numHeads * params.headDim;
  const Tensor<float> f = roundedToBf16(randomTensor({n, width}, seed + 1, 2.0));
  Tensor<float> aLog = randomTensor({params.numHeads}, seed + 2, 0.5);
  if (kind == KdaGateKind::kDefault) {
    for (int64_t i = 0; i < aLog.numel(); ++i) aLog[i] = std::log(1.f + 7.f * std::fabs(aLog[i]));
  }
  aLog = roundedToBf16(aLog);
  const Tensor<float> dtBias = roundedToBf16(randomTensor({width}, seed + 3));
  const Tensor<float> dg = randomTensor({n, width}, seed + 4);
  const Tensor<float> dALog0 = randomTensor({params.numHeads}, seed + 5);
  const Tensor<float> dDtBias0 = randomTensor({width}, seed + 6);

  MOEWB_ASSIGN_OR_FAIL(auto fDev, toDeviceBf16(context, f, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto aLogDev, toDeviceBf16(context, aLog, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto dtBiasDev, toDeviceBf16(context, dtBias, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto dgDev, toDevice(context, dg, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto dALogDev, toDevice(context, dALog0, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto dDtBiasDev, toDevice(context, dDtBias0, kAct));
  MOEWB_ASSIGN_OR_FAIL(auto gDev, poisonedFloat(context, {n, width}));
  MOEWB_ASSIGN_OR_FAIL(auto dfDev, poisonedBf16(context, {n, width}));
  MOEWB_ASSERT_OK(kdaGateForwardCuda(context.stream(), params, n, fDev.data(), aLogDev.data(),
                                     dtBiasDev.data(), gDev.data()));
  MOEWB_ASSERT_OK(kdaGateBackwardCuda(context, params, n, dgDev.data(), fDev.data(), gDev.data(),
                                      aLogDev.data(), dtBiasDev.data(), dfDev.data(),
                                      dALogDev.data(), dDtBiasDev.data()));

  const Tensor<double> fd = toDouble(f), aLogd = toDouble(aLog), dtBiasd = toDouble(dtBias);
  Tensor<double> gRef = kdaGateForward(pool, params, fd, aLogd, dtBiasd);
  Tensor<double> dALogRef = toDouble(dALog0), dDtBiasRef = toDouble(dDtBias0);
  Tensor<double> dfRef = kdaGateBackward(pool, params, toDouble(dg), fd, gRef, aLogd, dtBiasd,
                                         dALogRef, dDtBiasRef);
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> gGot, toHost(context, gDev));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dfGot, toHostFloat(context, dfDev));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dALogGot, toHost(context, dALogDev));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dDtBiasGot, toHost(context, dDtBiasDev));
  EXPECT_LT(relativeError(gGot, toFloat(gRef)), 1e-5);
  EXPECT_LT(relativeError(dfGot, toFloat(dfRef)), 1e-2);
  EXPECT_LT(relativeError(dALogGot, toFloat(dALogRef)), 1e-4);
  EXPECT_LT(relativeError(dDtBiasGot, toFloat(dDtBiasRef)), 1e-4);
}

TEST_F(KdaGateCudaTest, GateForwardAndBackwardMatchReference) {
  checkGate(context(), KdaGateKind::kDefault, 10);
  checkGate(context(), KdaGateKind::kLowerBound, 20);
}

TEST_F(KdaGateCudaTest, ShortConvForwardAndBackwardMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 30;
  for (int64_t seqLen : {1, 3, 63}) {
    SCOPED_TRACE("T=" + std::to_string(seqLen));
    const int64_t batch = 2, n = batch * seqLen, ch = 40, width = 4;
    const Tensor<float> x = roundedToBf16(randomTensor({n, ch}, ++seed));
    const Tensor<float> w = roundedToBf16(randomTensor({ch, width}, ++seed, 0.5));
    const Tensor<float> dy = roundedToBf16(randomTensor({n, ch}, ++seed));
    const Tensor<float> dw0 = randomTensor({ch, width}, ++seed);
    MOEWB_ASSIGN_OR_FAIL(auto xDev, toDeviceBf16(context(), x, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto wDev, toDeviceBf16(context(), w, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto dyDev, toDeviceBf16(context(), dy, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto dwDev, toDevice(context(), dw0, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto yDev, poisonedBf16(context(), {n, ch}));
    MOEWB_ASSIGN_OR_FAIL(auto preDev, poisonedBf16(context(), {n, ch}));
    MOEWB_ASSIGN_OR_FAIL(auto dxDev, poisonedBf16(context(), {n, ch}));
    MOEWB_ASSERT_OK(kdaShortConvForwardCuda(stream(), batch, seqLen, ch, width, xDev.data(),
                                            wDev.data(), yDev.data(), preDev.data()));
    MOEWB_ASSERT_OK(kdaShortConvBackwardCuda(context(), batch, seqLen, ch, width, dyDev.data(),
                                             xDev.data(), wDev.data(), preDev.data(),
                                             dxDev.data(), dwDev.data()));
    const Tensor<double> xd = toDouble(x), wd = toDouble(w);
    Tensor<double> preRef;
    Tensor<double> yRef = kdaShortConvForward(pool, batch, seqLen, xd, wd, preRef);
    Tensor<double> dwRef = toDouble(dw0);
    Tensor<double> dxRef =
        kdaShortConvBackward(pool, batch, seqLen, toDouble(dy), xd, wd, preRef, dwRef);
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), yDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> preGot, toHostFloat(context(), preDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dxDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dwGot, toHost(context(), dwDev));
    EXPECT_LT(relativeError(yGot, toFloat(yRef)), 1e-2);
    EXPECT_LT(relativeError(preGot, toFloat(preRef)), 1e-2);
    EXPECT_LT(relativeError(dxGot, toFloat(dxRef)), 1e-2);
    EXPECT_LT(relativeError(dwGot, toFloat(dwRef)), 1e-2);
  }
}

struct ConvOutputs {
  Tensor<float> y, pre, dx, dw;
};

// Runs the short conv forward and backward once (dw added into dw0) and reads the outputs back.
ConvOutputs runShortConv(CudaContext& context, int64_t batch, int64_t seqLen, int64_t ch,
                         int64_t width, const Tensor<float>& x, const Tensor<float>& w,
                         const Tensor<float>& dy, const Tensor<float>& dw0) {
  const int64_t n = batch * seqLen;
  ConvOutputs out;
  auto xDev = toDeviceBf16(context, x, kAct);
  auto wDev = toDeviceBf16(context, w, kAct);
  auto dyDev = toDeviceBf16(context, dy, kAct);
  auto dwDev = toDevice(context, dw0, kAct);
  auto yDev = poisonedBf16(context, {n, ch});
  auto preDev = poisonedBf16(context, {n, ch});
  auto dxDev = poisonedBf16(context, {n, ch});
  if (!xDev.isOk() || !wDev.isOk() || !dyDev.isOk() || !dwDev.isOk() || !yDev.isOk() ||
      !preDev.isOk() || !dxDev.isOk()) {
    ADD_FAILURE() << "device allocation failed";
    return out;
  }
  EXPECT_TRUE(kdaShortConvForwardCuda(context.stream(), batch, seqLen, ch, width, xDev->data(),
                                      wDev->data(), yDev->data(), preDev->data())
                  .isOk());
  EXPECT_TRUE(kdaShortConvBackwardCuda(context, batch, seqLen, ch, width, dyDev->data(),
                                       xDev->data(), wDev->data(), preDev->data(), dxDev->data(),
                                       dwDev->data())
                  .isOk());
  out.y = toHostFloat(context, *yDev).value();
  out.pre = toHostFloat(context, *preDev).value();
  out.dx = toHostFloat(context, *dxDev).value();
  out.dw = toHost(context, *dwDev).value();
  return out;
}

int64_t countDifferent(const Tensor<float>& a, const Tensor<float>& b) {
  int64_t count = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++count;
  }
  return count;
}

// The vectorised kernels (channels % 8 == 0) against the scalar ones, bitwise: sequences shorter
// and longer than a 16-row run, runs that cross a sequence boundary, every width class.
TEST_F(KdaGateCudaTest, ShortConvVectorisedEqualsScalarBitwise) {
  uint64_t seed = 70;
  struct Shape {
    int64_t batch, seqLen, ch, width;
  };
  for (const Shape s : {Shape{3, 37, 64, 4}, Shape{2, 5, 16, 7}, Shape{1, 40, 8, 1},
                        Shape{4, 19, 136, 3}, Shape{2, 300, 2048, 4}}) {
    SCOPED_TRACE("B=" + std::to_string(s.batch) + " T=" + std::to_string(s.seqLen) +
                 " C=" + std::to_string(s.ch) + " W=" + std::to_string(s.width));
    const int64_t n = s.batch * s.seqLen;
    const Tensor<float> x = roundedToBf16(randomTensor({n, s.ch}, ++seed));
    const Tensor<float> w = roundedToBf16(randomTensor({s.ch, s.width}, ++seed, 0.5));
    const Tensor<float> dy = roundedToBf16(randomTensor({n, s.ch}, ++seed));
    const Tensor<float> dw0 = randomTensor({s.ch, s.width}, ++seed);
    const ConvOutputs vec = runShortConv(context(), s.batch, s.seqLen, s.ch, s.width, x, w, dy, dw0);
    setKdaShortConvVectorised(false);
    const ConvOutputs scalar =
        runShortConv(context(), s.batch, s.seqLen, s.ch, s.width, x, w, dy, dw0);
    setKdaShortConvVectorised(true);
    EXPECT_EQ(countDifferent(vec.y, scalar.y), 0);
    EXPECT_EQ(countDifferent(vec.pre, scalar.pre), 0);
    EXPECT_EQ(countDifferent(vec.dx, scalar.dx), 0);
    EXPECT_EQ(countDifferent(vec.dw, scalar.dw), 0);
  }
}

// Channels not a multiple of 8 take the scalar kernels; still the reference's numbers.
TEST_F(KdaGateCudaTest, ShortConvScalarPathMatchesReference) {
  ThreadPool pool(2);
  const int64_t batch = 2, seqLen = 21, ch = 36, width = 4, n = batch * seqLen;
  const Tensor<float> x = roundedToBf16(randomTensor({n, ch}, 90));
  const Tensor<float> w = roundedToBf16(randomTensor({ch, width}, 91, 0.5));
  const Tensor<float> dy = roundedToBf16(randomTensor({n, ch}, 92));
  const Tensor<float> dw0 = randomTensor({ch, width}, 93);
  const ConvOutputs got = runShortConv(context(), batch, seqLen, ch, width, x, w, dy, dw0);
  Tensor<double> preRef;
  const Tensor<double> yRef = kdaShortConvForward(pool, batch, seqLen, toDouble(x), toDouble(w),
                                                  preRef);
  Tensor<double> dwRef = toDouble(dw0);
  const Tensor<double> dxRef = kdaShortConvBackward(pool, batch, seqLen, toDouble(dy),
                                                    toDouble(x), toDouble(w), preRef, dwRef);
  EXPECT_LT(relativeError(got.y, toFloat(yRef)), 1e-2);
  EXPECT_LT(relativeError(got.dx, toFloat(dxRef)), 1e-2);
  EXPECT_LT(relativeError(got.dw, toFloat(dwRef)), 1e-2);
}

TEST_F(KdaGateCudaTest, L2NormForwardAndBackwardMatchReference) {
  ThreadPool pool(2);
  uint64_t seed = 50;
  for (int64_t headDim : {16, 64}) {
    SCOPED_TRACE("K=" + std::to_string(headDim));
    const int64_t n = 63, heads = 3, width = heads * headDim;
    const double scale = 1.0 / std::sqrt(double(headDim)), eps = 1e-6;
    const Tensor<float> x = roundedToBf16(randomTensor({n, width}, ++seed, 2.0));
    const Tensor<float> dy = roundedToBf16(randomTensor({n, width}, ++seed));
    MOEWB_ASSIGN_OR_FAIL(auto xDev, toDeviceBf16(context(), x, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto dyDev, toDeviceBf16(context(), dy, kAct));
    MOEWB_ASSIGN_OR_FAIL(auto yDev, poisonedBf16(context(), {n, width}));
    MOEWB_ASSIGN_OR_FAIL(auto rinvDev, poisonedFloat(context(), {n, heads}));
    MOEWB_ASSIGN_OR_FAIL(auto dxDev, poisonedBf16(context(), {n, width}));
    MOEWB_ASSERT_OK(kdaL2NormForwardCuda(stream(), n, heads, headDim, scale, eps, xDev.data(),
                                         yDev.data(), rinvDev.data()));
    MOEWB_ASSERT_OK(kdaL2NormBackwardCuda(stream(), n, heads, headDim, scale, dyDev.data(),
                                          xDev.data(), rinvDev.data(), dxDev.data()));
    const Tensor<double> xd = toDouble(x);
    Tensor<double> rinvRef;
    Tensor<double> yRef = kdaL2NormForward(pool, headDim, scale, eps, xd, rinvRef);
    Tensor<double> dxRef = kdaL2NormBackward(pool, headDim, scale, toDouble(dy), xd, rinvRef);
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), yDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> rinvGot, toHost(context(), rinvDev));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dxDev));
    EXPECT_LT(relativeError(yGot, toFloat(yRef)), 1e-2);
    EXPECT_LT(relativeError(rinvGot, toFloat(rinvRef)), 1e-5);
    EXPECT_LT(relativeError(dxGot, toFloat(dxRef)), 1e-2);
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
