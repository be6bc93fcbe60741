// The CUDA DeviceBackend (backend/device_backend.h): a CudaContext on one GPU, the CudaModel and
// the device optimizer; one trainStep = zero grads, forward + backward per micro-batch (one
// without data.micro_batch_size; each with its loss weights, adding into the gradients), norm,
// clip + AdamW.
// Swap ([swap], single GPU): the backend owns the SwapController (settings, plan) and, from the
// first step with swap on, the SwapTierCuda that moves the tensors. Per step: the controller
// plans when due (onSwapPlan), the tier is attached to the model for the step, and after the
// step's final synchronisation its copies (onSwap), totals (onSwapStep) and measured layer times
// (SwapController::recordStepTimes, so auto mode plans without tracing) are reported.
// Calibration: the planner's memory model (swap.h) counts the saved tensors, not the transient
// workspaces of the step (loss head, attention scratch, ...). The backend measures the exact
// no-swap peak of each swapping step (the allocator's shadow peak) and hands the planner, as
// fixedBytes, weights + grads + optimizer state plus the part of that peak the model missed
// (measured no-swap peak - the model's no-swap peak of the same profile), so an HBM target is
// compared with what the device really needs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <vector>

#include "train/device_backend.h"
#include "runtime/cuda/cuda_context.h"
#include "model/cuda/cuda_model.h"
#include "train/cuda/cuda_optimizer.h"
#include "moewb/base/units.h"
#include "model/cuda/device_memory_reporter.h"
#include "model/cuda/device_timeline.h"
#include "model/cuda/swap_tier_cuda.h"
#include "model/swap/swap_controller.h"

namespace moewb::engine {
namespace {

using cuda::CudaContext;
using cuda::CudaModel;
using cuda::MemoryCategory;

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend(std::unique_ptr<CudaContext> context, std::unique_ptr<CudaModel> model,
              std::unique_ptr<SwapController> swap)
      : m_context(std::move(context)), m_model(std::move(model)), m_swap(std::move(swap)) {}

  using DeviceBackend::trainStep;  // the whole-batch overload
  std::string backendName() const override { return "cuda"; }

  std::string deviceDescription() const override {
    const cuda::DeviceInfo& d = m_context->device();
    char text[224];
    std::snprintf(text, sizeof text,
                  "%s (device %d, compute %d.%d, %d SMs, %.1f GiB; driver %s, CUDA %d.%d)",
                  d.name.c_str(), d.ordinal, d.computeMajor, d.computeMinor, d.multiprocessors,
                  double(d.totalMemoryBytes) / double(int64_t(1) << 30),
                  d.driverRelease.empty() ? "release unknown" : d.driverRelease.c_str(),
                  d.driverCudaVersion / 1000, d.driverCudaVersion % 1000 / 10);
    return text;
  }

  void setEventSink(EventSink* sink, int32_t rank) override {
    m_sink = sink;
    m_rank = rank;
  }

  Result<DeviceStepResult> trainStep(const std::vector<MicroBatch>& batches, int64_t step,
                                     const OptimSection& optim, PhaseRecorder* recorder) override {
    m_memory.emit(m_step);  // events since the last step (a reload, ...) keep its tag
    m_step = step;
    if (m_sink != nullptr && !m_memory.started()) m_memory.start(*m_context, m_sink, m_rank, step);
    Result<DeviceStepResult> result = trainStepOnce(batches, step, optim, recorder);
    m_model->clearSwap();  // forwardBackward and the next step attach (or not) afresh
    m_memory.emit(step);  // after an error; a finished step emitted them before its sync
    return result;
  }

  Result<ForwardResult> forwardBackward(const std::vector<MicroBatch>& batches,
                                        int64_t step) override {
    Result<ForwardResult> forward = runForwardBackward(batches, step, nullptr);
    m_memory.emit(m_step);
    return forward;
  }

  Status pullState(Model<float>& host) override {
    return m_model->parameters().download(*m_context, host.parameters());
  }
  Status pushState(const Model<float>& host) override {
    MOEWB_RETURN_IF_ERROR(m_model->parameters().reload(*m_context, host.parameters()));
    return m_context->synchronize();
  }
  Status pullGrads(Model<float>& host) override {
    return m_model->parameters().downloadGrads(*m_context, host.parameters());
  }
  void applyLiveDims(const ModelDims& dims) override {
    m_model->applyLiveDims(dims);
    SwapProfile sizes = swapProfileFor(m_model->dims());
    if (sizes.sameCandidatesAs(m_swap->profile())) return;
    // New candidates (the CPU runner's rule): a new controller measures and plans again.
    m_swap = std::make_unique<SwapController>(m_swap->settings(), std::move(sizes), 0);
    m_unmodeledBytes = 0;
  }
  void applySwapSettings(const SwapSection& section) override {
    m_swap->setSettings(swapSettingsFrom(section, m_context->device().totalMemoryBytes));
  }

 private:
  Result<DeviceStepResult> trainStepOnce(const std::vector<MicroBatch>& batches, int64_t step,
                                         const OptimSection& optim, PhaseRecorder* recorder) {
    m_context->allocator().resetPeaks();
    MOEWB_RETURN_IF_ERROR(beginSwapStep(step));
    MOEWB_RETURN_IF_ERROR(m_timeline.begin(m_context->stream(), recorder));
    DeviceStepResult result;
    MOEWB_ASSIGN_OR_RETURN(result.forward, runForwardBackward(batches, step, &m_timeline));
    {
      cuda::DevicePhase phase(&m_timeline, Phase::kOptimizer, Pass::kNone, -1);
      MOEWB_ASSIGN_OR_RETURN(result.optim.gradNorm,
                             cuda::parameterGradNormCuda(*m_context, m_model->parameters()));
      const bool finite = std::isfinite(result.forward.loss) &&
                          std::isfinite(result.forward.auxLoss) &&
                          std::isfinite(result.optim.gradNorm);
      if (finite) {
        MOEWB_ASSIGN_OR_RETURN(OptimizerStepResult applied,
                               cuda::optimizerStepCuda(*m_context, m_model->parameters(), optim,
                                                       step, result.optim.gradNorm));
        result.optim.clipScale = applied.clipScale;
        result.optim.lr = applied.lr;
        result.updated = true;
      }
    }
    // The step's last launch is queued: handing its memory events to the sinks now overlaps
    // that host work with the GPU's tail of the step.
    m_memory.emit(step);
    MOEWB_RETURN_IF_ERROR(m_context->synchronize());
    MOEWB_RETURN_IF_ERROR(m_timeline.flush());
    MOEWB_RETURN_IF_ERROR(finishSwapStep(step, result.forward));
    const cuda::AllocatorStats stats = m_context->allocator().stats();
    auto inUse = [&](MemoryCategory c) { return stats.inUseBytes[size_t(c)]; };
    result.weightsBytes = inUse(MemoryCategory::kWeights);
    result.gradsBytes = inUse(MemoryCategory::kGrads);
    result.optimizerBytes = inUse(MemoryCategory::kOptimizer);
    result.peakBytes = stats.totalPeakInUseBytes;
    result.activationsPeakBytes = std::max<int64_t>(
        0, stats.totalPeakInUseBytes - result.weightsBytes - result.gradsBytes -
               result.optimizerBytes);
    return result;
  }

  // Zero grads, then forward and backward per micro-batch. On an error (out of memory included)
  // the activations are dropped so the next step starts from a clean device state.

  Result<ForwardResult> runForwardBackward(const std::vector<MicroBatch>& batches, int64_t step,
                                           cuda::DeviceTimeline* timeline) {
    Result<ForwardResult> forward = forwardBackwardOnce(batches, step, timeline);
    m_model->setLossWeights({});
    if (!forward.isOk()) {
      m_model->releaseActivations();
      (void)m_context->synchronize();
      m_context->allocator().emptyCache();
      return forward.status().withContext("CUDA step " + std::to_string(step));
    }
    return forward;
  }

  Result<ForwardResult> forwardBackwardOnce(const std::vector<MicroBatch>& batches, int64_t step,
                                            cuda::DeviceTimeline* timeline) {
    MOEWB_RETURN_IF_ERROR(m_model->parameters().zeroGrads(*m_context));
    m_model->setStep(step);
    ForwardResult total;
    for (size_t m = 0; m < batches.size(); ++m) {
      m_model->setLossWeights(batches[m].weights);
      ForwardResult forward;
      {
        cuda::DevicePhase phase(timeline, Phase::kForward, Pass::kForward, -1);
        MOEWB_ASSIGN_OR_RETURN(forward, m_model->forward(batches[m].batch, timeline));
      }
      const bool finite = std::isfinite(forward.loss) && std::isfinite(forward.auxLoss);
      addMicroBatchResult(total, std::move(forward), batches[m].weights, m == 0);
      if (!finite) {
        m_model->releaseActivations();  // no backward: the swap tier's copies end here too
        return total;
      }
      cuda::DevicePhase phase(timeline, Phase::kBackward, Pass::kBackward, -1);
      MOEWB_RETURN_IF_ERROR(m_model->backward(timeline));
    }
    return total;
  }

  // Swap: plans (onSwapPlan) and attaches the tier when swap is on this step.
  Status beginSwapStep(int64_t step) {
    m_swapActive = false;
    const cuda::AllocatorStats stats = m_context->allocator().stats();
    auto inUse = [&](MemoryCategory c) { return stats.inUseBytes[size_t(c)]; };
    m_stateBytes = inUse(MemoryCategory::kWeights) + inUse(MemoryCategory::kGrads) +
                   inUse(MemoryCategory::kOptimizer);
    const std::optional<SwapPlanEvent> plan =
        m_swap->beginStep(step, m_stateBytes + m_unmodeledBytes);
    if (plan && m_sink != nullptr) m_sink->onSwapPlan(*plan);
    const SwapSettings& settings = m_swap->settings();
    if (settings.mode == SwapMode::kOff) return Status::ok();
    if (m_swapTier == nullptr) {
      MOEWB_ASSIGN_OR_RETURN(m_swapTier, cuda::SwapTierCuda::create(*m_context));
    }
    const SwapPrediction* current = m_swap->plan();
    const bool needPool = current != nullptr && current->swappedBytes > 0;
    MOEWB_RETURN_IF_ERROR(m_swapTier->beginStep(int32_t(m_model->dims().numLayers),
                                                settings.prefetchLayers,
                                                settings.freeLagLayers,
                                                settings.pinnedBudgetBytes, needPool));
    MOEWB_RETURN_IF_ERROR(m_model->setSwap(m_swapTier.get(), m_swap.get()));
    m_swapActive = true;
    return Status::ok();
  }

  // After the step's synchronisation: the copies and totals to the sink, the layer times to the
  // controller. A step whose loss was not finite ran no backward: nothing to report.
  Status finishSwapStep(int64_t step, const ForwardResult& forward) {
    if (!m_swapActive) return Status::ok();
    m_swapActive = false;
    if (!std::isfinite(forward.loss) || !std::isfinite(forward.auxLoss)) return Status::ok();
    MOEWB_ASSIGN_OR_RETURN(cuda::SwapTierStepReport report, m_swapTier->finishStep(step, m_rank));
    if (m_sink != nullptr) {
      for (const SwapEvent& event : report.events) m_sink->onSwap(event);
      m_sink->onSwapStep(report.step);
    }
    m_swap->recordStepTimes(report.layerForwardMs, report.layerBackwardMs, report.turnMs,
                            report.layerRecomputeMs);
    calibrate(report.step.hbmPeakNoSwapBytes);
    return Status::ok();
  }

  // The bytes of the measured no-swap peak that the planner's model of the same step misses.
  void calibrate(int64_t measuredNoSwapPeakBytes) {
    SwapProfile profile = m_swap->profile();
    profile.fixedBytes = m_stateBytes;
    const std::vector<SwapAction> keep(profile.tensors.size(), SwapAction::kKeep);
    Result<SwapPrediction> model = simulateSwap(m_swap->settings(), profile, keep);
    if (!model.isOk()) return;  // a profile the planner refuses: no calibration
    m_unmodeledBytes = std::max<int64_t>(0, measuredNoSwapPeakBytes - model.value().peakNoSwapBytes);
  }

  std::unique_ptr<CudaContext> m_context;
  std::unique_ptr<CudaModel> m_model;
  std::unique_ptr<SwapController> m_swap;            // settings and plan (always present)
  std::unique_ptr<cuda::SwapTierCuda> m_swapTier;    // from the first step with swap on
  bool m_swapActive = false;                         // this step swaps (tier attached)
  int64_t m_stateBytes = 0;       // weights + grads + optimizer at the step's start
  int64_t m_unmodeledBytes = 0;   // measured no-swap peak - the planner's (last swap step)
  cuda::DeviceTimeline m_timeline;
  EventSink* m_sink = nullptr;
  int32_t m_rank = 0;
  int64_t m_step = 0;
  cuda::DeviceMemoryReporter m_memory;  // after m_context: stops before the context goes
};

}  // namespace

Result<std::unique_ptr<DeviceBackend>> createCudaBackend(const RunConfig& config,
                                                         Model<float>& host, int deviceOrdinal,
                                                         std::vector<StartupPhase>* startup) {
  MOEWB_RETURN_IF_ERROR(CudaModel::checkSupported(host.dims()));
  int64_t startNs = steadyNowNs();
  auto lap = [&](const char* name) {
    const int64_t nowNs = steadyNowNs();
    if (startup != nullptr) startup->push_back({name, nowNs - startNs});
    startNs = nowNs;
  };
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context,
                         CudaContext::create(deviceOrdinal));
  lap("CUDA context");
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model, CudaModel::create(*context, host));
  lap("weights to the GPU");
  auto swap = std::make_unique<SwapController>(
      swapSettingsFrom(config.swap, context->device().totalMemoryBytes),
      swapProfileFor(host.dims()), 0);
  return std::unique_ptr<DeviceBackend>(
      new CudaBackend(std::move(context), std::move(model), std::move(swap)));
}

bool cudaDeviceAvailable() { return cuda::deviceCount() > 0; }

}  // namespace moewb::engine
