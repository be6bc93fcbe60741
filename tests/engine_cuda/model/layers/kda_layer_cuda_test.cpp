// The whole KDA mixer layer on the GPU (kdaLayerForwardCuda / kdaLayerBackwardCuda) against
// kdaForward / kdaBackward in double on the same bf16-rounded weights and inputs: y, dx and every
// fp32 weight gradient, both gate variants, T not a multiple of the chunk.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "model/layers/kda_layer_cuda.h"
#include "model/layers/kda_layer.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine::cuda {
namespace {

using KdaLayerCudaTest = CudaTest;

// Random bf16-representable weights in a regime where every path carries gradient.
void randomWeights(const KdaDims& dims, KdaParameterSet<double>& params, uint64_t seed) {
  Rng rng(seed);
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor<double>& t = params.tensors[i];
    const std::string& name = shapes[i].name;
    const double stddev = name.starts_with("conv") ? 0.5 : name == "wo" ? 0.1 : 0.15;
    for (int64_t j = 0; j < t.numel(); ++j) t[j] = rng.normal() * stddev;
    if (name == "norm_weight") {
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = 1.0 + 0.3 * rng.normal();
    }
    if (name == "a_log" || name == "dt_bias") {
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = 0.5 * rng.normal();
    }
    if (name == "bg") {
      for (int64_t j = 0; j < t.numel(); ++j) t[j] = 0.3 * rng.normal();
    }
    t = toDouble(roundedToBf16(toFloat(t)));
  }
}

void checkLayer(CudaContext& context, const KdaDims& dims, uint64_t seed) {
  SCOPED_TRACE("T=" + std::to_string(dims.seqLen) + " K=" + std::to_string(dims.headDim) +
               " C=" + std::to_string(dims.chunk));
  ThreadPool pool(2);
  const int64_t n = dims.tokens(), d = dims.dModel;
  const MemoryCategory act = MemoryCategory::kActivations;
  KdaParameterSet<double> params(dims);
  randomWeights(dims, params, seed);
  const Tensor<float> x = roundedToBf16(randomTensor({n, d}, seed + 1));
  const Tensor<float> dy = roundedToBf16(randomTensor({n, d}, seed + 2));

  // Device weights (bf16) and zeroed fp32 gradients, in kdaParameterShapes order.
  const size_t count = params.tensors.size();
  std::vector<DeviceTensor<bf16>> weights(count);
  std::vector<DeviceTensor<float>> grads(count);
  for (size_t i = 0; i < count; ++i) {
    MOEWB_ASSIGN_OR_FAIL(weights[i], toDeviceBf16(context, toFloat(params.tensors[i]), act));
    MOEWB_ASSIGN_OR_FAIL(grads[i], context.newTensor<float>(params.tensors[i].shape(),
                                                             MemoryCategory::kGrads));
    MOEWB_ASSERT_OK(fillFloat(context.stream(), grads[i].data(), 0.f, grads[i].numel()));
  }
  auto wp = [&](size_t i) -> const bf16* { return weights[i].data(); };
  auto gp = [&](size_t i) { return grads[i].data(); };
  const KdaWeightsCuda weightsView{wp(0), wp(1),  wp(2),  wp(3),  wp(4),  wp(5),  wp(6),  wp(7),
                                   wp(8), wp(9),  wp(10), wp(11), wp(12), wp(13), wp(14), wp(15)};
  const KdaGradsCuda gradsView{gp(0), gp(1),  gp(2),  gp(3),  gp(4),  gp(5),  gp(6),  gp(7),
                               gp(8), gp(9),  gp(10), gp(11), gp(12), gp(13), gp(14), gp(15)};

  MOEWB_ASSIGN_OR_FAIL(auto xDev, toDeviceBf16(context, x, act));
  MOEWB_ASSIGN_OR_FAIL(auto dyDev, toDeviceBf16(context, dy, act));
  MOEWB_ASSIGN_OR_FAIL(auto yDev, poisonedBf16(context, {n, d}));
  MOEWB_ASSIGN_OR_FAIL(auto dxDev, poisonedBf16(context, {n, d}));
  KdaSavedCuda saved;
  MOEWB_ASSERT_OK(kdaLayerForwardCuda(context, dims, xDev.data(), weightsView, yDev.data(), saved));
  MOEWB_ASSERT_OK(kdaLayerBackwardCuda(context, dims, dyDev.data(), xDev.data(), weightsView, saved,
                                       gradsView, dxDev.data()));

  const Tensor<double> xd = toDouble(x);
  KdaSaved<double> savedRef;
  Tensor<double> yRef = kdaForward(pool, dims, xd, params.weights(), savedRef);
  KdaParameterSet<double> gradsRef(dims);
  Tensor<double> dxRef =
      kdaBackward(pool, dims, toDouble(dy), xd, params.weights(), savedRef, gradsRef.refs());

  MOEWB_ASSIGN_OR_FAIL(Tensor<float> yGot, toHostFloat(context, yDev));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> dxGot, toHostFloat(context, dxDev));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> oGot, toHostFloat(context, saved.o));
  MOEWB_ASSIGN_OR_FAIL(Tensor<float> gGot, toHost(context, saved.g));
  // Bounds: a CPU emulation of this bf16 pipeline (the double reference ops with bf16 rounding
  // wherever the GPU stores bf16) lands at 0.5-1.2e-2 for y and 0.5-2e-2 for dx and the weight
  // gradients on these shapes; the bounds leave ~2.5x headroom and still catch any real bug.
  EXPECT_LT(relativeError(oGot, toFloat(savedRef.o)), 3e-2);
  EXPECT_LT(relativeError(gGot, toFloat(savedRef.g)), 1e-2);
  EXPECT_LT(relativeError(yGot, toFloat(yRef)), 3e-2);
  EXPECT_LT(relativeError(dxGot, toFloat(dxRef)), 5e-2);
  const std::vector<KdaParameterShape> shapes = kdaParameterShapes(dims);
  for (size_t i = 0; i < count; ++i) {
    MOEWB_ASSIGN_OR_FAIL(Tensor<float> got, toHost(context, grads[i]));
    EXPECT_LT(relativeError(got, toFloat(gradsRef.tensors[i])), 5e-2) << "d" << shapes[i].name;
  }
}

KdaDims layerDims(int64_t seqLen, int64_t headDim, int64_t chunk, KdaGateKind gate) {
  KdaDims dims;
  dims.batch = 2;
  dims.seqLen = seqLen;
  dims.dModel = 64;
  dims.numHeads = 2;
  dims.headDim = headDim;
  dims.chunk = chunk;
  dims.gateRank = 16;
  dims.gate = gate;
  return dims;
}

TEST_F(KdaLayerCudaTest, DefaultGateMatchesReference) {
  checkLayer(context(), layerDims(63, 16, 64, KdaGateKind::kDefault), 100);
}

TEST_F(KdaLayerCudaTest, LowerBoundGateMatchesReference) {
  checkLayer(context(), layerDims(130, 32, 16, KdaGateKind::kLowerBound), 200);
}

}  // namespace
}  // namespace moewb::engine::cuda
