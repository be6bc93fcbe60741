#include "train/memory_estimate.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "moewb/base/units.h"
#include "moewb/engine/trainer.h"
#include "train/device_backend.h"

namespace moewb::engine {
namespace {

// Floats one layer keeps for the backward pass beyond the residual stream, by its mixer.
double mixerActivationFloats(const ModelDims& d, char mixer) {
  const double batch = double(d.batchSize), heads = double(d.numHeads), t = double(d.seqLen);
  const double n = double(d.tokens());
  if (mixer == 'S') {
    // The dense warm-up stage attends to every earlier key; the sparse stage to top_k of them.
    const double width = d.sparse.warmupSteps > 0 ? t : std::min(double(d.sparse.topK), t);
    const double indexer = 5.0 * n * width;  // logits, target, probs, dLogits, selection
    return batch * heads * t * width + indexer;
  }
  if (mixer == 'K') {
    const double kdaHeads = d.kda.numHeads > 0 ? double(d.kda.numHeads) : heads;
    const double headDim = d.kda.headDim > 0 ? double(d.kda.headDim) : double(d.dModel) / heads;
    const double chunks = n / double(std::max<int32_t>(1, d.kda.chunkSize));
    return 2.0 * chunks * kdaHeads * headDim * headDim;  // states and their gradients
  }
  return batch * heads * t * t;  // softmax attention probabilities
}

}  // namespace

double estimateKdaKeptBytes(const ModelDims& d) {
  if (!d.kda.keepIntermediates || d.numLayers < 1) return 0.0;
  const double heads = d.kda.numHeads > 0 ? double(d.kda.numHeads) : double(d.numHeads);
  const double headDim =
      d.kda.headDim > 0 ? double(d.kda.headDim) : double(d.dModel) / double(d.numHeads);
  const int64_t chunk = std::max<int64_t>(1, d.kda.chunkSize);
  const double chunks = double((d.seqLen + chunk - 1) / chunk);
  const double slots = double(d.batchSize) * heads * chunks;  // B*H*NC
  const double rows = slots * double(chunk);                   // B*H*T'
  const double perLayer = rows * 5.0 * headDim + slots * headDim * (1.0 + headDim);
  int64_t kdaLayers = 0;
  for (int64_t layer = 0; layer < d.numLayers; ++layer) kdaLayers += d.mixerOf(layer) == 'K';
  return 4.0 * perLayer * double(kdaLayers);
}

double estimateParameters(const ModelDims& d) {
  const double dm = double(d.dModel);
  const double expertWidth = d.moe.latent() ? double(d.moe.latentDim) : dm;
  const double moe = 3.0 * double(d.numExperts) * double(d.dFf) * expertWidth +
                     (d.moe.latent() ? 2.0 * dm * double(d.moe.latentDim) : 0.0) +
                     3.0 * dm * double(d.moe.sharedWidth());
  return double(d.vocabSize) * dm * 2 + double(d.numLayers) * (4.0 * dm * dm + moe);
}

double estimateHostStateBytes(const ModelDims& d) { return 16.0 * estimateParameters(d); }

double estimateCpuTrainingBytes(const ModelDims& d) {
  const double n = double(d.tokens()), rows = n * double(d.topK);
  double activations = 2.0 * n * double(d.vocabSize);
  for (int64_t layer = 0; layer < d.numLayers; ++layer) {
    activations += n * double(d.dModel) * 12 + mixerActivationFloats(d, d.mixerOf(layer)) +
                   rows * (2.0 * double(d.dModel) + 3.0 * double(d.dFf)) +
                   2.0 * n * double(d.numExperts);
  }
  return 4.0 * (4.0 * estimateParameters(d) + activations);
}

double physicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageBytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && pageBytes > 0 ? double(pages) * double(pageBytes) : 0.0;
}

Status checkHostMemory(const ModelDims& dims, bool onCpu, double memoryBytes) {
  const double neededBytes = onCpu ? estimateCpuTrainingBytes(dims) : estimateHostStateBytes(dims);
  if (memoryBytes <= 0 || neededBytes <= 0.5 * memoryBytes) return Status::ok();
  const bool sparse = dims.mixerPattern.find('S') != std::string::npos;
  return invalidArgument(
      std::string(onCpu ? "the model and one step's activations need about "
                        : "the host copy of the model (fp32 weights, grads and AdamW moments) "
                          "needs about ") +
      formatBytes(int64_t(neededBytes)) + ", more than half of the " +
      formatBytes(int64_t(memoryBytes)) +
      " of host memory; reduce model.d_model, moe.num_experts, moe.d_ff, model.vocab_size" +
      (onCpu ? std::string(" or the tokens of one forward (data.batch_size or "
                           "data.micro_batch_size, times model.seq_len)") +
                   (sparse ? " (the gated sparse layers' dense warm-up keeps [B*T, T] "
                             "indexer tensors: sparse.warmup_steps = 0 skips it)"
                           : "")
             : ""));
}

bool runsOnCpuBackend(const RunConfig& config) {
  const std::string& wanted = config.run.backend;
  return wanted == "cpu" || (wanted == "auto" && !cudaDeviceAvailable());
}

Status checkFitsThisMachine(const RunConfig& config) {
  if (config.parallel.worldSize > 1) return Status::ok();
  return checkHostMemory(ModelDims::forwardFromConfig(config), runsOnCpuBackend(config),
                         physicalMemoryBytes());
}

}  // namespace moewb::engine
