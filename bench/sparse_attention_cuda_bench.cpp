// Gated sparse attention (mixer 'S', ops/sparse_attention/sparse_attention_cuda.h) on the GPU,
// the whole layer forward + backward (projections, lightning indexer and its KL objective,
// selection, sink attention over the selection, sigmoid output gate), at a realistic size: B
// sequences of T tokens (B T = 16384 by default), D = 2048, H = 16 query heads of dh = 128, one
// key/value head (MQA, the config default), top-512 keys per query, an indexer of 8 heads of 64,
// indexer loss weight 1. No PyTorch anchor: absolute times and tokens/s. Inputs: the layer's
// weights by initSparseAttentionParameter (std 0.02, 24 layers) with exact zeros (sink, key-norm
// bias) replaced by small noise, x ~ N(0, 1), dy ~ N(0, 1e-6).
// One JSON line per case: median ms of 10 CUDA-event-timed runs after 3 warm-up runs, tokens/s,
// TFLOP/s against the count below, peak device memory beyond the inputs, shapes. Cases:
//   sparse_attention_sparse_fwd          stage kSparse: dense indexer scores, top-k, core over W
//   sparse_attention_sparse_fwd_bwd      + the backward (dx, every weight gradient)
//   sparse_attention_dense_warmup_fwd_bwd  stage kDenseWarmup: every causal key (W = T)
// Flops (forward; fwd+bwd counts 3x the forward's projections and core, 2x its indexer logits):
// projections 2 N D (3 H dh + 2 Hkv dh) and indexer projections 2 N D (HI dI + dI + HI); core
// 4 N H w dh with w the mean number of valid selected keys per query; indexer logits over the
// selection 2 N w HI dI; in the sparse stage also the dense causal scores, N T HI dI.
// Usage: sparse_attention_cuda_bench [B T D H Hkv dh topK HI dI]
//        (default 4 4096 2048 16 1 128 512 8 64)
#include <algorithm>

#include "cuda_bench_util.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace moewb::engine::cuda::bench {
namespace {

int run(int argc, char** argv) {
  SparseAttentionDims dims;
  dims.batch = argOr(argc, argv, 1, 4);
  dims.seqLen = argOr(argc, argv, 2, 4096);
  dims.dModel = argOr(argc, argv, 3, 2048);
  dims.numHeads = argOr(argc, argv, 4, 16);
  dims.kvHeads = argOr(argc, argv, 5, 1);
  dims.headDim = argOr(argc, argv, 6, 128);
  dims.topK = argOr(argc, argv, 7, 512);
  dims.indexerHeads = argOr(argc, argv, 8, 8);
  dims.indexerDim = argOr(argc, argv, 9, 64);
  dims.indexerLossCoef = 1.0;
  const int64_t n = dims.tokens(), d = dims.dModel;
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;

  // Weights (model init, zeros replaced by noise) and fp32 gradient accumulators.
  const std::vector<SparseAttentionParamShape> shapes = sparseAttentionParameterShapes(dims);
  std::vector<DeviceTensor<bf16>> weights;
  std::vector<DeviceTensor<float>> gradTensors;
  std::vector<const bf16*> wp;
  std::vector<float*> gp;
  Rng rng(1);
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor<float> host(shapes[i].shape);
    initSparseAttentionParameter(shapes[i].name, host, 0.02, 24, rng);
    weights.push_back(parameterToDevice(c, host, rng));
    gradTensors.push_back(gradFloat(c, shapes[i].shape, 100 + i));
    wp.push_back(weights.back().data());
    gp.push_back(gradTensors.back().data());
  }
  if (wp.size() != 11) check(internalError("sparse attention: expected 11 weights"));
  const SparseAttentionWeightsCuda w{wp[0], wp[1], wp[2], wp[3], wp[4], wp[5],
                                     wp[6], wp[7], wp[8], wp[9], wp[10]};
  const SparseAttentionGradsCuda g{gp[0], gp[1], gp[2], gp[3], gp[4], gp[5],
                                   gp[6], gp[7], gp[8], gp[9], gp[10]};
  auto x = randomBf16(c, {n, d}, 1.0f, 21);
  auto dy = randomBf16(c, {n, d}, 1e-3f, 22);
  auto y = empty<bf16>(c, {n, d});
  auto dx = empty<bf16>(c, {n, d});

  for (SparseStage stage : {SparseStage::kSparse, SparseStage::kDenseWarmup}) {
    SparseAttentionDims sd = dims;
    sd.stage = stage;
    const bool sparse = stage == SparseStage::kSparse;
    const int64_t width = sd.selectionWidth();
    double validKeys = 0;  // sum over a sequence's queries of min(W, t + 1)
    for (int64_t t = 0; t < sd.seqLen; ++t) validKeys += double(std::min(width, t + 1));
    const double wMean = validKeys / double(sd.seqLen);
    const double nn = double(n), dd = double(d), h = double(sd.numHeads), dh = double(sd.headDim),
                 hkv = double(sd.kvHeads), hi = double(sd.indexerHeads),
                 di = double(sd.indexerDim);
    const double proj = 2.0 * nn * dd * (3.0 * h * dh + 2.0 * hkv * dh) +
                        2.0 * nn * dd * (hi * di + di + hi);
    const double core = 4.0 * nn * h * wMean * dh;
    const double logits = 2.0 * nn * wMean * hi * di;
    const double scores = sparse ? nn * double(sd.seqLen) * hi * di : 0.0;
    const double fwdFlops = proj + core + logits + scores;
    const double fwdBwdFlops = 3.0 * (proj + core) + 2.0 * logits + scores;
    auto line = [&](const char* name, const Timing& timing, double flops) {
      JsonLine(name)
          .timing(timing)
          .num("tokens_per_s", nn / (timing.medianMs * 1e-3), 0)
          .flops(flops, timing.medianMs)
          .integer("B", sd.batch)
          .integer("T", sd.seqLen)
          .integer("d_model", d)
          .integer("H", sd.numHeads)
          .integer("Hkv", sd.kvHeads)
          .integer("dh", sd.headDim)
          .integer("W", width)
          .integer("HI", sd.indexerHeads)
          .integer("dI", sd.indexerDim)
          .print();
    };
    if (sparse) {
      const Timing fwd = timeSteps(c, [&] {
        SparseAttentionSavedCuda saved;
        check(sparseAttentionForwardCuda(c, sd, x.data(), w, saved, y.data()));
      });
      checkFinite(c, y, "y");
      line("moewb_sparse_attention_sparse_fwd", fwd, fwdFlops);
    }
    const Timing fwdBwd = timeSteps(c, [&] {
      SparseAttentionSavedCuda saved;
      check(sparseAttentionForwardCuda(c, sd, x.data(), w, saved, y.data()));
      check(sparseAttentionBackwardCuda(c, sd, dy.data(), x.data(), w, saved, g, dx.data()));
    });
    checkFinite(c, dx, "dx");
    line(sparse ? "moewb_sparse_attention_sparse_fwd_bwd"
                : "moewb_sparse_attention_dense_warmup_fwd_bwd",
         fwdBwd, fwdBwdFlops);
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) { return moewb::engine::cuda::bench::run(argc, argv); }
