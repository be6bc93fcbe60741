// attentionForwardCuda / attentionBackwardCuda (and through them the core functions) against
// ops/attention (double): y, the saved context, dx and the four weight gradients (added into
// random initial values), on awkward shapes (T = 1, 63, 130; one and several heads/sequences;
// head dims 8 and 16 take the cuBLAS core, 64 the flash core). The flash core (K = 64, 128) alone:
// context, lse, dq, dk, dv against the double reference at T = 1, 77, 200 (not multiples of its
// 64/128 tiles), against the cuBLAS core on the device, and two backward runs bitwise equal.
#include "ops/attention/attention_cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "ops/attention/attention.h"

namespace moewb::engine::cuda {
namespace {

using AttentionCudaTest = CudaTest;

std::string shapeTag(const AttentionDims& dims) {
  std::ostringstream tag;
  tag << "B" << dims.batch << " T" << dims.seqLen << " H" << dims.numHeads << " K"
      << dims.headDim;
  return tag.str();
}

// lse[B, H, T] = ln sum_{s<=t} exp(q_t.k_s / sqrt(K)) of one head's rows, in double.
Tensor<float> referenceLse(const AttentionDims& dims, const Tensor<double>& q,
                           const Tensor<double>& k) {
  const int64_t tLen = dims.seqLen, heads = dims.numHeads, hd = dims.headDim, d = dims.dModel();
  const double scale = 1.0 / std::sqrt(double(hd));
  Tensor<float> lse({dims.batch, heads, tLen});
  std::vector<double> s(static_cast<size_t>(tLen));
  for (int64_t b = 0; b < dims.batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < tLen; ++t) {
        const double* qt = q.data() + (b * tLen + t) * d + h * hd;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j <= t; ++j) {
          const double* kj = k.data() + (b * tLen + j) * d + h * hd;
          double dot = 0;
          for (int64_t c = 0; c < hd; ++c) dot += qt[c] * kj[c];
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        double sum = 0;
        for (int64_t j = 0; j <= t; ++j) sum += std::exp(s[size_t(j)] - mx);
        lse.data()[(b * heads + h) * tLen + t] = float(mx + std::log(sum));
      }
    }
  }
  return lse;
}

// Device inputs of one core test: q, k, v, dContext [N, D], N(0, 1) rounded to bf16.
struct CoreInputs {
  Tensor<float> q, k, v, dContext;
  DeviceTensor<bf16> dq, dk, dv, dDContext;  // device copies of q, k, v, dContext
};

// Device outputs of one core forward + backward, poisoned with NaN before the calls.
struct CoreOutputs {
  DeviceTensor<bf16> context, dq, dk, dv;
  DeviceTensor<float> lse;
};

void makeInputs(CudaContext& context, const AttentionDims& dims, uint64_t seed, CoreInputs& in) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  in.q = roundedToBf16(randomTensor({n, d}, seed + 1));
  in.k = roundedToBf16(randomTensor({n, d}, seed + 2));
  in.v = roundedToBf16(randomTensor({n, d}, seed + 3));
  in.dContext = roundedToBf16(randomTensor({n, d}, seed + 4));
  const MemoryCategory act = MemoryCategory::kActivations;
  in.dq = std::move(toDeviceBf16(context, in.q, act)).value();
  in.dk = std::move(toDeviceBf16(context, in.k, act)).value();
  in.dv = std::move(toDeviceBf16(context, in.v, act)).value();
  in.dDContext = std::move(toDeviceBf16(context, in.dContext, act)).value();
}

void makePoisoned(CudaContext& context, const AttentionDims& dims, CoreOutputs& out) {
  const int64_t n = dims.tokens(), d = dims.dModel();
  out.context = std::move(poisonedBf16(context, {n, d})).value();
  out.dq = std::move(poisonedBf16(context, {n, d})).value();
  out.dk = std::move(poisonedBf16(context, {n, d})).value();
  out.dv = std::move(poisonedBf16(context, {n, d})).value();
  out.lse = std::move(poisonedFloat(context, {dims.batch, dims.numHeads, dims.seqLen})).value();
}

// Forward then backward through attentionCore*Cuda (flash for K = 64, 128) or the cuBLAS core.
Status runCore(CudaContext& context, const AttentionDims& dims, const CoreInputs& in,
               CoreOutputs& out, bool cublas) {
  if (cublas) {
    MOEWB_RETURN_IF_ERROR(attentionCoreForwardCublas(context, dims, in.dq.data(), in.dk.data(),
                                                     in.dv.data(), out.lse.data(),
                                                     out.context.data()));
    return attentionCoreBackwardCublas(context, dims, in.dDContext.data(), in.dq.data(),
                                       in.dk.data(), in.dv.data(), out.lse.data(), out.dq.data(),
                                       out.dk.data(), out.dv.data());
  }
  MOEWB_RETURN_IF_ERROR(attentionCoreForwardCuda(context, dims, in.dq.data(), in.dk.data(),
                                                 in.dv.data(), out.lse.data(),
                                                 out.context.data()));
  return attentionCoreBackwardCuda(context, dims, in.dDContext.data(), in.dq.data(),
                                   in.dk.data(), in.dv.data(), out.context.data(),
                                   out.lse.data(), out.dq.data(), out.dk.data(), out.dv.data());
}

bool bitwiseEqual(const Tensor<float>& a, const Tensor<float>& b) {
  return a.numel() == b.numel() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

TEST_F(AttentionCudaTest, FlashCoreMatchesReference) {
  ThreadPool pool(1);
  uint64_t seed = 6100;
  for (AttentionDims dims : {AttentionDims{1, 1, 1, 64}, AttentionDims{1, 1, 1, 128},
                             AttentionDims{2, 77, 3, 64}, AttentionDims{2, 77, 2, 128},
                             AttentionDims{1, 200, 1, 128}, AttentionDims{3, 200, 2, 64}}) {
    const std::string tag = shapeTag(dims);
    seed += 10;
    CoreInputs in;
    CoreOutputs out;
    makeInputs(context(), dims, seed, in);
    makePoisoned(context(), dims, out);
    MOEWB_ASSERT_OK(runCore(context(), dims, in, out, false));

    const Tensor<double> qd = toDouble(in.q), kd = toDouble(in.k), vd = toDouble(in.v);
    Tensor<double> probs, ctxWant, dqWant, dkWant, dvWant;
    attentionCoreForward<double>(pool, dims, qd, kd, vd, probs, ctxWant);
    attentionCoreBackward<double>(pool, dims, toDouble(in.dContext), qd, kd, vd, probs, dqWant,
                                  dkWant, dvWant);
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> ctxGot, toHostFloat(context(), out.context));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context(), out.lse));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dqGot, toHostFloat(context(), out.dq));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dkGot, toHostFloat(context(), out.dk));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dvGot, toHostFloat(context(), out.dv));
    EXPECT_LT(relativeError(ctxGot, toFloat(ctxWant)), 1e-2) << tag;
    EXPECT_LT(relativeError(lseGot, referenceLse(dims, qd, kd)), 1e-4) << tag;
    EXPECT_LT(relativeError(dvGot, toFloat(dvWant)), 2e-2) << tag;
    if (dims.seqLen == 1) {
      // One key: P = 1, so dS = dP - delta vanishes and dq = dk = 0 analytically; a relative
      // error would compare rounding noise with rounding noise. Bound it by dv's scale.
      double dvScale = 0;
      for (int64_t i = 0; i < dvGot.numel(); ++i) {
        dvScale = std::max(dvScale, std::abs(double(dvGot[i])));
      }
      EXPECT_LT(maxAbsDifference(dqGot, toFloat(dqWant)), 1e-3 * dvScale) << tag;
      EXPECT_LT(maxAbsDifference(dkGot, toFloat(dkWant)), 1e-3 * dvScale) << tag;
      continue;
    }
    EXPECT_LT(relativeError(dqGot, toFloat(dqWant)), 2e-2) << tag;
    EXPECT_LT(relativeError(dkGot, toFloat(dkWant)), 2e-2) << tag;
  }
}

TEST_F(AttentionCudaTest, FlashCoreMatchesCublasCore) {
  uint64_t seed = 6200;
  for (AttentionDims dims : {AttentionDims{2, 300, 4, 128}, AttentionDims{1, 513, 2, 64}}) {
    const std::string tag = shapeTag(dims);
    seed += 10;
    CoreInputs in;
    CoreOutputs flash, cublas;
    makeInputs(context(), dims, seed, in);
    makePoisoned(context(), dims, flash);
    makePoisoned(context(), dims, cublas);
    MOEWB_ASSERT_OK(runCore(context(), dims, in, flash, false));
    MOEWB_ASSERT_OK(runCore(context(), dims, in, cublas, true));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseGot, toHost(context(), flash.lse));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> lseWant, toHost(context(), cublas.lse));
    EXPECT_LT(relativeError(lseGot, lseWant), 1e-4) << tag;
    const DeviceTensor<bf16>* got[4] = {&flash.context, &flash.dq, &flash.dk, &flash.dv};
    const DeviceTensor<bf16>* want[4] = {&cublas.context, &cublas.dq, &cublas.dk, &cublas.dv};
    const char* names[4] = {"context", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> g, toHostFloat(context(), *got[i]));
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> w, toHostFloat(context(), *want[i]));
      EXPECT_LT(relativeError(g, w), 2e-2) << tag << " " << names[i];
    }
  }
}

TEST_F(AttentionCudaTest, FlashBackwardIsDeterministic) {
  const AttentionDims dims{2, 333, 3, 128};
  CoreInputs in;
  CoreOutputs first, second;
  makeInputs(context(), dims, 6300, in);
  makePoisoned(context(), dims, first);
  makePoisoned(context(), dims, second);
  MOEWB_ASSERT_OK(runCore(context(), dims, in, first, false));
  MOEWB_ASSERT_OK(runCore(context(), dims, in, second, false));
  const DeviceTensor<bf16>* a[4] = {&first.context, &first.dq, &first.dk, &first.dv};
  const DeviceTensor<bf16>* b[4] = {&second.context, &second.dq, &second.dk, &second.dv};
  for (int i = 0; i < 4; ++i) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> x, toHostFloat(context(), *a[i]));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> y, toHostFloat(context(), *b[i]));
    EXPECT_TRUE(bitwiseEqual(x, y)) << "output " << i;
  }
}

TEST_F(AttentionCudaTest, ForwardAndBackwardMatchReference) {
  ThreadPool pool(1);
  uint64_t seed = 6000;
  for (AttentionDims dims :
       {AttentionDims{1, 1, 1, 8}, AttentionDims{2, 63, 3, 16}, AttentionDims{3, 130, 2, 64}}) {
    const int64_t n = dims.tokens(), d = dims.dModel();
    const double wScale = 1.0 / std::sqrt(double(d));  // scores of unit scale
    Tensor<float> x = roundedToBf16(randomTensor({n, d}, ++seed));
    Tensor<float> w[4], g0[4];
    for (int i = 0; i < 4; ++i) {
      w[i] = roundedToBf16(randomTensor({d, d}, ++seed, wScale));
      g0[i] = randomTensor({d, d}, ++seed, 0.1);
    }
    Tensor<float> dy = roundedToBf16(randomTensor({n, d}, ++seed));

    MOEWB_ASSIGN_OR_FAIL(auto dX, toDeviceBf16(context(), x, MemoryCategory::kActivations));
    MOEWB_ASSIGN_OR_FAIL(auto dDy, toDeviceBf16(context(), dy, MemoryCategory::kActivations));
    DeviceTensor<bf16> dW[4];
    DeviceTensor<float> dG[4];
    for (int i = 0; i < 4; ++i) {
      MOEWB_ASSIGN_OR_FAIL(dW[i], toDeviceBf16(context(), w[i], MemoryCategory::kWeights));
      MOEWB_ASSIGN_OR_FAIL(dG[i], toDevice(context(), g0[i], MemoryCategory::kGrads));
    }
    MOEWB_ASSIGN_OR_FAIL(auto dY, poisonedBf16(context(), {n, d}));
    MOEWB_ASSIGN_OR_FAIL(auto dDx, poisonedBf16(context(), {n, d}));
    const AttentionWeightsCuda weights{dW[0].data(), dW[1].data(), dW[2].data(), dW[3].data()};
    const AttentionGradsCuda grads{dG[0].data(), dG[1].data(), dG[2].data(), dG[3].data()};
    AttentionSavedCuda saved;
    MOEWB_ASSERT_OK(attentionForwardCuda(context(), dims, dX.data(), weights, saved, dY.data()));
    MOEWB_ASSERT_OK(attentionBackwardCuda(context(), dims, dDy.data(), dX.data(), weights, saved,
                                          grads, dDx.data()));

    Tensor<double> wd[4], gWant[4];
    for (int i = 0; i < 4; ++i) {
      wd[i] = toDouble(w[i]);
      gWant[i] = toDouble(g0[i]);
    }
    const AttentionWeights<double> refWeights{wd[0], wd[1], wd[2], wd[3]};
    AttentionSaved<double> refSaved;
    Tensor<double> xd = toDouble(x);
    Tensor<double> yWant = attentionForward<double>(pool, dims, xd, refWeights, refSaved);
    Tensor<double> dxWant =
        attentionBackward<double>(pool, dims, toDouble(dy), xd, refWeights, refSaved,
                                  AttentionGrads<double>{gWant[0], gWant[1], gWant[2], gWant[3]});

    std::ostringstream tagStream;
    tagStream << "B" << dims.batch << " T" << dims.seqLen << " H" << dims.numHeads << " K"
              << dims.headDim;
    const std::string tag = tagStream.str();
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context(), dY));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> ctxGot, toHostFloat(context(), saved.context));
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context(), dDx));
    EXPECT_LT(relativeError(ctxGot, toFloat(refSaved.context)), 1e-2) << tag;
    EXPECT_LT(relativeError(yGot, toFloat(yWant)), 1e-2) << tag;
    EXPECT_LT(relativeError(dxGot, toFloat(dxWant)), 2e-2) << tag;
    const char* names[4] = {"wq", "wk", "wv", "wo"};
    for (int i = 0; i < 4; ++i) {
      MOEWB_ASSIGN_OR_FAIL(Tensor<float> gGot, toHost(context(), dG[i]));
      EXPECT_LT(relativeError(minus(gGot, g0[i]), minus(toFloat(gWant[i]), g0[i])), 2e-2)
          << tag << " " << names[i];
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
