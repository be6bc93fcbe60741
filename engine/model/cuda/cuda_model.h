// CudaModel: the decoder stack of model/model.h on one GPU in bf16 mixed precision: the same
// parameters (names, order and initial values come from the host Model<float>), the same
// forward/backward structure and phases, each phase also an NVTX range ("experts.fwd").
//
//   h = embed(tokens); per layer: h += Mixer(RMSNorm(h)); h += MoE(RMSNorm(h));
//   loss = CE(RMSNorm(h) Wlm^T) + aux losses
//
// forward() keeps the activations on the device and reads back, once, the loss values and the
// per-layer expert counts (the step's one host synchronisation in the forward); backward() adds
// every gradient into CudaParameters' fp32 grads. Plain or AttnRes residuals, LoRA (W' merged
// into the compute copies per step) and image patches as on the CPU. checkSupported() names the
// first setting the CUDA path does not run yet (run.backend = "auto" then stays on the CPU).
// The aux-loss-free expert bias lives in the host model (uploaded per forward, updated on the
// host from the counts), so checkpoints see one copy.
// Parallel runs (setParallel, as Model::setParallel): with dims.expertShards > 1 the routed
// experts' tensors hold this rank's E / expertShards experts and the experts stage is the device
// all-to-all round trip of cuda_ep.h; `world` globalises the Switch-loss statistics; the hooks run
// before each unit's forward and after its backward (FSDP); their CollectiveError becomes the
// step's Status.
// Swap (setSwap, single GPU only): after layer l's forward the tensors the SwapController plans
// to swap (attn_norm = input, mixer_input = norm1, moe_norm = mid, moe_input = norm2, expert_fc1
// = moe.xPerm unless empty, moe_act = experts.gatePre + upPre, expert_fc2 = experts.hidden) go to
// the SwapTierCuda and come back before layer l's backward. None of them is read between the two:
// with plain residuals the next layer's input is a new tensor (moe output + mid), not input or
// mid; with AttnRes, input and mid are fresh mixes the AttnRes state does not keep (it keeps its
// own block sums and snapshots); the readback at the forward's end reads only losses and counts;
// and no saved state holds a raw pointer into them (the backward reads them through LayerActs).
// So every op is allowed in every configuration. The tensors it plans to recompute (moe_act,
// expert_fc2) are dropped after the layer's forward and written again by one re-run of the
// experts' gate + up launch at the start of the layer's experts backward, bitwise.
// Not thread-safe; one model per context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/host_readback.h"
#include "model/cuda/cuda_ep.h"
#include "model/cuda/cuda_loss.h"
#include "model/cuda/cuda_mixer.h"
#include "model/cuda/cuda_moe.h"
#include "model/cuda/cuda_parameters.h"
#include "model/cuda/device_timeline.h"
#include "model/cuda/swap_tier_cuda.h"
#include "model/layers/attnres_state_cuda.h"
#include "model/batch.h"
#include "model/cpu/model.h"
#include "model/cpu/model_parallel.h"

namespace moewb::engine::cuda {

class CudaModel {
 public:
  // kUnimplemented naming the first setting of `dims` that does not run on the GPU yet.
  static Status checkSupported(const ModelDims& dims);

  // Uploads `host`'s parameters (initialised) to the context's device. `host` must outlive the
  // model (its expert bias state is used). Errors: those of checkSupported, kResourceExhausted.
  static Result<std::unique_ptr<CudaModel>> create(CudaContext& context, Model<float>& host);

  CudaParameters& parameters() { return m_params; }
  // As Model::dims (aux coefficients times the loss weights' aux weight while they are set).
  const ModelDims& dims() const { return m_dims; }
  void setStep(int64_t step) { m_step = step; }
  // As Model::setLossWeights: the next forwards and backwards weigh the aux losses by
  // weights.aux and scale the LM loss's gradient by weights.lm (micro-batching).
  void setLossWeights(const LossWeights& weights);
  // The communicators and hooks of a parallel run (pointers must outlive the model). parallel.ep
  // is required when dims().expertShards > 1 and must have that many ranks.
  void setParallel(const ModelParallel& parallel) { m_parallel = parallel; }
  // As Model::applyLiveDims.
  void applyLiveDims(const ModelDims& dims);
  // Swap for the next forward / backward: `tier` moves what `controller` plans (both must
  // outlive their use, the tier's beginStep called for the step). Single GPU only. Errors:
  // kFailedPrecondition with parallel.ep, ranks (setParallel) or expert shards.
  Status setSwap(SwapTierCuda* tier, const SwapController* controller);
  // Detaches the swap tier (nothing is swapped from the next forward on).
  void clearSwap() {
    m_swapTier = nullptr;
    m_swapController = nullptr;
  }

  // Forward on `batch` (shapes as dims); keeps activations. Accumulates the expert counts into
  // the host model's bias state (as Model::forward does). `timeline` (phases: NVTX ranges and,
  // while it times, GPU-timed phase events) may be null.
  // Errors: kResourceExhausted (activations; the model stays usable), kInternal.
  Result<ForwardResult> forward(const Batch& batch, DeviceTimeline* timeline);

  // Backward of the last forward's lm * loss + auxLoss (LossWeights); adds into the grads (so
  // several micro-batches accumulate) and frees the activations.
  Status backward(DeviceTimeline* timeline);

  // Drops the activations of a forward whose step failed (and the swap tier's copies of them).
  void releaseActivations();

 private:
  struct LayerActs {
    DeviceTensor<bf16> input;  // [N, D] input of the mixer norm
    DeviceTensor<bf16> norm1;  // [N, D]
    DeviceTensor<float> rstd1; // [N]
    MixerSavedCuda mixer;
    DeviceTensor<bf16> mid;    // [N, D] input of the MoE norm
    DeviceTensor<bf16> norm2;  // [N, D]
    DeviceTensor<float> rstd2; // [N]
    MoeSavedCuda moe;
    EpSavedCuda ep;            // expert parallelism (parallel.ep > 1)
  };

  CudaModel(CudaContext& context, Model<float>& host, CudaParameters params);
  std::string layerName(int64_t layer, const char* local) const;
  const bf16* weight(const std::string& name) const;
  float* gradOf(const std::string& name);
  std::vector<CudaParameter*> mixerParams(int64_t layer);
  MoeWeightsCuda moeWeights(int64_t layer) const;
  MoeGradsCuda moeGrads(int64_t layer);
  MoeOptions moeOptions() const;
  MoeShapeCuda moeShape() const;

  Status layerForward(int32_t layer, DeviceTensor<bf16>& h, DeviceTimeline* timeline);
  Result<DeviceTensor<bf16>> mixerSublayerForward(int32_t layer, const DeviceTensor<bf16>* residual,
                                                  DeviceTimeline* timeline);
  Result<DeviceTensor<bf16>> moeSublayerForward(int32_t layer, const DeviceTensor<bf16>* residual,
                                                DeviceTimeline* timeline);
  Status layerBackward(int32_t layer, DeviceTensor<bf16>& dh, DeviceTimeline* timeline);
  Status moeSublayerBackward(int32_t layer, const DeviceTensor<bf16>& dOut,
                             DeviceTensor<bf16>& dInput, bool accumulate, DeviceTimeline* timeline);
  Status mixerSublayerBackward(int32_t layer, const DeviceTensor<bf16>& dOut,
                               DeviceTensor<bf16>& dInput, bool accumulate,
                               DeviceTimeline* timeline);
  Status enterUnit(int32_t unit, bool forward);
  Status offloadLayer(int32_t layer);
  void dropActivations();
  Status mergeLora();
  Status convertLoraGrads();
  Status uploadBias(int32_t layer);
  Result<ForwardResult> readForwardResult();

  CudaContext& m_context;
  Model<float>& m_host;
  ModelDims m_baseDims;  // the host's dims with live settings applied, no loss weights
  ModelDims m_dims;      // m_baseDims with the aux weight of m_lossWeights
  LossWeights m_lossWeights;
  // The [kernels] choice last applied to the process-wide expert switches; none before the first
  // forward (which applies the run's choice, auto restoring the defaults an earlier run in this
  // process may have changed).
  KernelsSection m_appliedKernels{"", ""};
  CudaParameters m_params;
  int64_t m_step = 0;
  ModelParallel m_parallel;
  struct LoraTriple {
    CudaParameter* base = nullptr;  // W (frozen; its compute copy holds W')
    CudaParameter* a = nullptr;     // A
    CudaParameter* b = nullptr;     // B
  };
  std::vector<LoraTriple> m_lora;   // adapted weights (lora.enabled)
  double m_loraScale = 0;           // s = alpha / rank

  bool m_hasActivations = false;
  DeviceTensor<int32_t> m_inputs;   // [N]
  DeviceTensor<int32_t> m_targets;  // [N]
  DeviceTensor<bf16> m_patches;     // [B*P, patch_dim] image patches (multimodal)
  std::unique_ptr<AttnResStateCuda> m_attnRes;  // block attention residuals (model.residual)
  std::vector<LayerActs> m_acts;
  std::vector<DeviceTensor<float>> m_bias;  // [L] x [E] selection bias (when enabled)
  DeviceTensor<bf16> m_finalInput;    // [N, D]
  DeviceTensor<bf16> m_finalNormOut;  // [N, D]
  DeviceTensor<float> m_finalRstd;    // [N]
  LossStateCuda m_loss;
  HostReadback m_readback;  // the forward's scalars and counts, read with one wait a step
  SwapTierCuda* m_swapTier = nullptr;             // swap (setSwap), or null
  const SwapController* m_swapController = nullptr;
};

}  // namespace moewb::engine::cuda
