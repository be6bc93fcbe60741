// DeviceBackend: a training step that runs somewhere other than the CPU reference (the CUDA
// backend), behind an interface the Trainer can hold in every build. The host Model<float>
// stays the owner of the run's identity: its parameter names and order, the initial weights
// (drawn on the host from the seed, so the same seed gives the same model on every backend), the
// aux-loss-free expert bias state, and what checkpoints read and write (pullState before a save,
// pushState after a load).
//
// createCudaBackend picks the device (run.backend = "cuda" or "auto"); in a build without CUDA it
// answers kUnimplemented with a message saying so. Not thread-safe: used by the trainer thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/cpu/model.h"
#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "train/micro_batches.h"
#include "train/optimizer.h"
#include "runtime/phase_recorder.h"

namespace moewb::engine {

struct DeviceStepResult {
  ForwardResult forward;          // losses, expert counts and drops per layer
  OptimizerStepResult optim;      // grad norm before clipping, clip scale, lr
  bool updated = false;           // false when the loss or grad norm was not finite (no update)
  int64_t peakBytes = 0;          // device bytes in use at the step's peak
  int64_t weightsBytes = 0;       // device bytes per category, now
  int64_t gradsBytes = 0;
  int64_t optimizerBytes = 0;
  int64_t activationsPeakBytes = 0;  // activations + workspace at the step's peak
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // "cuda" (the trace's run.backend).
  virtual std::string backendName() const = 0;
  // "NVIDIA H200 (device 0, compute 9.0, 139.8 GiB)".
  virtual std::string deviceDescription() const = 0;

  // Device-memory events (EventSink::onMemory) go to `sink` from the next step on; null stops.
  virtual void setEventSink(EventSink* sink, int32_t rank) = 0;

  // One optimizer step on the micro-batches of its batch (micro_batches.h; one element = the
  // whole batch): gradients zeroed once, forward and backward of each micro-batch with its loss
  // weights, then global-norm clip and AdamW with `optim` at 0-based `step`; `forward` is the
  // step's result (addMicroBatchResult). Each micro-batch's batch must have the model's batch
  // size. The update is skipped (updated = false) when a loss (no backward then, nor for the
  // micro-batches after it) or the norm is not finite. `recorder` may be null. Errors:
  // kResourceExhausted (device memory; nothing is updated and later steps may be tried again),
  // kInternal (a CUDA failure).
  virtual Result<DeviceStepResult> trainStep(const std::vector<MicroBatch>& batches, int64_t step,
                                             const OptimSection& optim,
                                             PhaseRecorder* recorder) = 0;

  // trainStep on the whole of `batch` in one forward (a copy of it as the one micro-batch).
  Result<DeviceStepResult> trainStep(const Batch& batch, int64_t step, const OptimSection& optim,
                                     PhaseRecorder* recorder) {
    std::vector<MicroBatch> whole;
    whole.push_back({sliceSequences(batch, 0, batch.batchSize), LossWeights{}});
    return trainStep(whole, step, optim, recorder);
  }

  // Forward and backward only (no update); gradients are left on the device for pullGrads.
  virtual Result<ForwardResult> forwardBackward(const std::vector<MicroBatch>& batches,
                                                int64_t step) = 0;

  // Copies the device weights and moments into the host model (checkpoints, exports).
  virtual Status pullState(Model<float>& host) = 0;
  // Copies the host model's weights and moments to the device (after a checkpoint load).
  virtual Status pushState(const Model<float>& host) = 0;
  // Copies the gradients of the last backward into the host model's grads.
  virtual Status pullGrads(Model<float>& host) = 0;

  // The live-patchable settings of Model::applyLiveDims (dims of one forward). A change of the
  // swap candidates (batch size, top-k, permute fusion) gives the swap controller a new profile.
  virtual void applyLiveDims(const ModelDims& dims) = 0;

  // New [swap] settings (a live patch, validated): take effect at the next step's start, which
  // plans again (SwapController::setSettings). Single-GPU backends only swap.
  virtual void applySwapSettings(const SwapSection& section) = 0;
};

// The CUDA backend for `host` (built from `config` and initialised). `deviceOrdinal` picks the
// GPU. Errors: kUnimplemented (no CUDA in this build, or a config setting the CUDA backend does
// not run yet, named), kNotFound (no device), kFailedPrecondition (device too old),
// kResourceExhausted (the weights do not fit). When `startup` is not null, the times of the
// device's context and of the weights' upload are appended to it.
Result<std::unique_ptr<DeviceBackend>> createCudaBackend(const RunConfig& config,
                                                         Model<float>& host, int deviceOrdinal,
                                                         std::vector<StartupPhase>* startup =
                                                             nullptr);

// True when this build has the CUDA backend and a device is visible (what run.backend = "auto"
// looks at).
bool cudaDeviceAvailable();

}  // namespace moewb::engine
