// The LM loss heads on the GPU (LM-head GEMM + softmax cross-entropy, forward + backward: dh and
// the head's fp32 weight gradient), at the sizes of ../shared/anchors/loss.py (T tokens, D model
// width, V vocabulary; h ~ N(0, 0.25), W ~ N(0, 0.0004), uniform targets) so its ce_dense and
// ce_seq_chunked_2048 lines compare with ours. Cases, each a full forward + backward:
//   loss_dense_ce        what model/cuda/cuda_loss.cpp runs for loss.kind = "dense": fp32 logits
//                        [T, V] through one GEMM, crossEntropyForwardCuda, crossEntropyBackwardCuda
//                        (bf16 dLogits), then dh = dLogits W and dW += dLogits^T h
//   loss_chunk_2048      chunkLossForwardCuda + chunkLossBackwardCuda, 2048 tokens per chunk (the
//                        anchor's chunk)
//   loss_cce_4096x4096   cceForwardCuda + cceBackwardCuda, strips of 4096 tokens x 4096 vocabulary
//                        entries (the op's defaults; the trainer passes loss.cce_vocab_block)
//   loss_cce_4096x16384  the same in strips 4 times wider
//   loss_cce_filtered_*  with gradient filtering (2^-12) on dh (_dh) or on dh and dWv (_dh_dw),
//                        tiles of 64 x 256 entries (or _64x128, _64x64), strips of 4096 x 4096
//                        (or _strip16384 / 32768, _group8192: tokens), each with its
//                        gradients' relative L2 error against the exact CCE's (dh_rel_err,
//                        dw_rel_err)
// One JSON line each: median ms of 10 CUDA-event-timed runs after 3 warm-up runs, TFLOP/s
// against 6 T V D (forward logits 2 TVD, backward dh and dW 4 TVD; CCE executes 8 TVD because it
// recomputes the logits, the anchor's checkpointed chunks too), peak device memory beyond the
// inputs and the weight gradient (the anchor's peak_extra_gib), the loss (about log V for these
// inputs), shapes.
// Usage: loss_cuda_bench [T D V]   (default 16384 2048 163840)
#include <cmath>

#include "runtime/cuda/gemm.h"
#include "cuda_bench_util.h"
#include "ops/cce/cce_cuda.h"
#include "ops/chunk_loss/chunk_loss_cuda.h"
#include "ops/cross_entropy/cross_entropy_cuda.h"
#include "ops/linear/linear_cuda.h"

namespace moewb::engine::cuda::bench {
namespace {

// ||got - want|| / ||want|| (L2 over every element, in double).
double relativeL2(const Tensor<float>& got, const Tensor<float>& want) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double e = double(got[i]) - double(want[i]);
    diff += e * e;
    norm += double(want[i]) * double(want[i]);
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

int run(int argc, char** argv) {
  const int64_t n = argOr(argc, argv, 1, 16384), d = argOr(argc, argv, 2, 2048),
                v = argOr(argc, argv, 3, 163840);
  auto context = take(CudaContext::create(0));
  CudaContext& c = *context;
  auto h = randomBf16(c, {n, d}, 0.5f, 1);
  auto w = randomBf16(c, {v, d}, 0.02f, 2, 0.0f, MemoryCategory::kWeights);
  auto targets = take(c.newTensor<int32_t>({n}, MemoryCategory::kActivations));
  check(fillUniformInt32(c.stream(), targets.data(), n, 0, int32_t(v), 3));
  auto dW = gradFloat(c, {v, d}, 4);
  auto dh = empty<bf16>(c, {n, d});
  auto loss = empty<float>(c, {1});
  const double flops = 6.0 * double(n) * double(v) * double(d);
  auto line = [&](const char* name, const Timing& timing) {
    checkFinite(c, dh, "dh");
    checkFinite(c, loss, "loss");
    JsonLine(name)
        .timing(timing)
        .flops(flops, timing.medianMs)
        .num("tokens_per_s", double(n) / (timing.medianMs * 1e-3), 0)
        .num("loss", double(readScalar(c, loss)), 4)
        .integer("T", n)
        .integer("D", d)
        .integer("V", v)
        .print();
  };

  const Timing dense = timeSteps(c, [&] {
    auto logits = empty<float>(c, {n, v});
    auto lse = empty<float>(c, {n});
    auto tokenLoss = empty<float>(c, {n});
    auto validCount = empty<int32_t>(c, {1});
    check(gemm(c, n, v, d, 1.0f, GemmOperand{h.data(), DType::kBf16, d, false},
               GemmOperand{w.data(), DType::kBf16, d, true}, 0.0f,
               GemmOutput{logits.data(), DType::kF32, v}));
    check(crossEntropyForwardCuda(c.stream(), logits.data(), targets.data(), n, v, lse.data(),
                                  tokenLoss.data(), loss.data(), validCount.data()));
    auto dLogits = empty<bf16>(c, {n, v});
    check(crossEntropyBackwardCuda(c.stream(), logits.data(), targets.data(), lse.data(),
                                   validCount.data(), 1.0f, n, v, dLogits.data()));
    logits = DeviceTensor<float>();  // released before the GEMMs, as cuda_loss.cpp does
    check(linearBackwardDataCuda(c, dLogits.data(), w.data(), dh.data(), n, d, v));
    check(linearBackwardWeightCuda(c, dLogits.data(), h.data(), dW.data(), n, d, v));
  });
  line("moewb_loss_dense_ce", dense);

  ChunkLossCudaOptions chunkOptions;
  chunkOptions.chunkTokens = 2048;
  const Timing chunk = timeSteps(c, [&] {
    ChunkLossSavedCuda saved;
    check(chunkLossForwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, chunkOptions, saved,
                               loss.data(), nullptr));
    check(chunkLossBackwardCuda(c, saved, 1.0f, dh.data(), dW.data()));
  });
  line("moewb_loss_chunk_2048", chunk);

  CceCudaOptions cceOptions;
  cceOptions.groupTokens = 4096;
  cceOptions.vocabBlock = 4096;
  const Timing cce = timeSteps(c, [&] {
    CceSavedCuda saved;
    check(cceForwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, cceOptions, saved,
                         loss.data(), nullptr));
    check(cceBackwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, cceOptions, saved, 1.0f,
                          dh.data(), dW.data()));
  });
  line("moewb_loss_cce_4096x4096", cce);

  // The exact CCE's gradients once more from dW = 0, kept for the filtered runs' error.
  auto oneCce = [&](const CceCudaOptions& options, Tensor<float>& dhHost, Tensor<float>& dWHost) {
    checkCuda(cudaMemsetAsync(dW.data(), 0, size_t(v * d) * sizeof(float), c.stream()), "memset");
    CceSavedCuda saved;
    check(cceForwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, options, saved,
                         loss.data(), nullptr));
    check(cceBackwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, options, saved, 1.0f,
                          dh.data(), dW.data()));
    dhHost = take(toHostFloat(c, dh));
    dWHost = take(toHost(c, dW));
  };
  Tensor<float> dhExact, dWExact;
  oneCce(cceOptions, dhExact, dWExact);
  // Wider strips (4096 x 16384: a quarter of the strips, 0.56 GiB of scratch), and gradient
  // filtering at bf16's automatic threshold (epsilon<bf16> / 32 = 2^-12, Cut Cross-Entropy's
  // default for bf16) with tiles of 64 tokens x tileCols vocabulary entries: dh filtered (the
  // trainer's mode), or dh and dWv.
  struct FilterRow {
    const char* name;
    bool filter;
    bool weights;
    int64_t tileCols;
    int64_t stripCols;
    int64_t groupTokens = 4096;
  };
  const FilterRow rows[] = {
      {"moewb_loss_cce_4096x16384", false, false, 0, 16384},
      {"moewb_loss_cce_filtered_dh", true, false, 256, 4096},
      {"moewb_loss_cce_filtered_dh_dw", true, true, 256, 4096},
      {"moewb_loss_cce_filtered_dh_dw_64x128", true, true, 128, 4096},
      {"moewb_loss_cce_filtered_dh_dw_64x64", true, true, 64, 4096},
      {"moewb_loss_cce_filtered_dh_64x128_strip16384", true, false, 128, 16384},
      {"moewb_loss_cce_filtered_dh_dw_64x128_strip16384", true, true, 128, 16384},
      {"moewb_loss_cce_filtered_dh_dw_64x64_strip16384", true, true, 64, 16384},
      {"moewb_loss_cce_8192x16384", false, false, 0, 16384, 8192},
      {"moewb_loss_cce_filtered_dh_dw_64x128_strip32768", true, true, 128, 32768},
      {"moewb_loss_cce_filtered_dh_dw_64x128_group8192_strip16384", true, true, 128, 16384, 8192},
      {"moewb_loss_cce_filtered_dh_dw_64x128_group8192_strip12288", true, true, 128, 12288, 8192},
      {"moewb_loss_cce_filtered_dh_dw_64x128_group6144_strip16384", true, true, 128, 16384, 6144},
  };
  for (const FilterRow& row : rows) {
    CceCudaOptions filtered = cceOptions;
    filtered.vocabBlock = row.stripCols;
    filtered.groupTokens = row.groupTokens;
    filtered.filterEps = row.filter ? std::ldexp(1.0, -12) : 0.0;
    filtered.filterTokenBlock = 64;
    filtered.filterVocabBlock = row.tileCols;
    filtered.filterWeightGrad = row.weights;
    const Timing timing = timeSteps(c, [&] {
      CceSavedCuda saved;
      check(cceForwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, filtered, saved,
                           loss.data(), nullptr));
      check(cceBackwardCuda(c, h.data(), w.data(), targets.data(), n, d, v, filtered, saved,
                            1.0f, dh.data(), dW.data()));
    });
    Tensor<float> dhGot, dWGot;
    oneCce(filtered, dhGot, dWGot);
    checkFinite(c, dh, "dh");
    JsonLine(row.name)
        .timing(timing)
        .flops(flops, timing.medianMs)
        .num("dh_rel_err", relativeL2(dhGot, dhExact), 6)
        .num("dw_rel_err", relativeL2(dWGot, dWExact), 6)
        .num("loss", double(readScalar(c, loss)), 4)
        .integer("T", n)
        .integer("D", d)
        .integer("V", v)
        .print();
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) { return moewb::engine::cuda::bench::run(argc, argv); }
