// TestTrace: engine-shaped synthetic traces for the GUI tests.
#include "test_trace.h"

#include "moewb/profiler/host_tracer.h"

namespace moewb::gui::testing {

Result<std::unique_ptr<TestTrace>> TestTrace::create(const std::string& path, int layers,
                                                     int experts) {
  storage::WriterOptions options;
  options.overwrite = true;
  MOEWB_ASSIGN_OR_RETURN(auto writer, storage::TraceWriter::create(path, options));
  auto trace = std::unique_ptr<TestTrace>(new TestTrace);
  trace->m_layers = layers;
  trace->m_experts = experts;
  storage::RunRow run;
  run.name = "gui-test";
  run.backend = "cpu";
  run.startNs = kOriginNs;
  run.status = "running";
  trace->m_run = writer->addRun(run);
  storage::TrackRow track;
  track.name = "trainer thread";
  track.kind = "thread";
  trace->m_track = writer->addTrack(track);
  trace->m_writer = std::move(writer);
  MOEWB_RETURN_IF_ERROR(trace->m_writer->flush());
  return trace;
}

int64_t TestTrace::tokensFor(int64_t step, int layer, int expert) {
  // Expert 0 is hot; the rest vary deterministically with step and layer.
  return (expert == 0 ? 300 : 60) + (expert * 37 + layer * 11 + step * 5) % 90;
}

Status TestTrace::addStep(int64_t step) {
  const int64_t start = kOriginNs + step * kStepNs;
  writeSlices(step, start);
  for (int l = 0; l < m_layers; ++l) {
    for (int e = 0; e < m_experts; ++e) {
      storage::ExpertLoadRow load;
      load.step = step;
      load.layer = l;
      load.expert = e;
      load.tokens = tokensFor(step, l, e);
      m_writer->addExpertLoad(load);
    }
  }
  storage::StepRow row;
  row.run = m_run;
  row.step = step;
  row.startNs = start;
  row.endNs = start + kStepNs;
  row.loss = 5.5 - 0.1 * double(step);
  row.auxLoss = 0.01;
  row.tokens = 512;
  row.tokensPerSecond = 512.0 / (double(kStepNs) * 1e-9);
  row.peakBytes = 64 << 20;
  if (m_memory) {
    if (!m_counters.isValid()) {
      storage::TrackRow track;
      track.name = "counters";
      track.kind = "counter";
      m_counters = m_writer->addTrack(track);
    }
    static const char* kNames[] = {"memory.weights_bytes", "memory.grads_bytes",
                                   "memory.optimizer_bytes", "memory.activations_bytes"};
    for (int c = 0; c < 4; ++c) {
      m_writer->addCounter({m_counters, kNames[c], row.endNs, memoryBytes(step, c)});
    }
  }
  if (m_deviceMemory) writeDeviceMemory(step, start);
  if (m_gpu) writeGpu(step, start);
  if (m_swap) writeSwap(step, start);
  m_writer->addStep(row);
  return m_writer->flush();
}

void TestTrace::writeDeviceMemory(int64_t step, int64_t start) {
  if (!m_deviceTrack.isValid()) {
    storage::TrackRow track;
    track.name = "device memory";
    track.kind = storage::kTrackKindMemory;
    m_deviceTrack = m_writer->addTrack(track);
    m_writer->addMemoryEvent({m_deviceTrack, start, step, true, 8 * kMiB, 0, "weights", 8 * kMiB});
    m_writer->addMemoryEvent(
        {m_deviceTrack, start, step, true, 16 * kMiB, 0, "optimizer", 16 * kMiB});
  }
  const int64_t activations = 0x7f0000000000, workspace = 0x7f0010000000;
  m_writer->addMemoryEvent({m_deviceTrack, start + 100'000, step, true, 4 * kMiB, activations,
                            "activations", 4 * kMiB});
  m_writer->addMemoryEvent(
      {m_deviceTrack, start + 700'000, step, true, kMiB, workspace, "workspace", kMiB});
  m_writer->addMemoryEvent(
      {m_deviceTrack, start + 800'000, step, false, kMiB, workspace, "workspace", 0});
  m_writer->addMemoryEvent({m_deviceTrack, start + 1'500'000, step, false, 4 * kMiB, activations,
                            "activations", 0});
}

void TestTrace::writeSlices(int64_t step, int64_t start) {
  auto slice = [&](int64_t s, int64_t dur, const char* name, int32_t depth, int32_t layer) {
    storage::SliceRow r;
    r.track = m_track;
    r.startNs = s;
    r.durNs = dur;
    r.name = name;
    r.category = depth == 0 ? storage::kCategoryStep : storage::kCategoryPhase;
    r.step = step;
    r.layer = layer;
    r.depth = depth;
    m_writer->addSlice(r);
  };
  // Forward 0.6 ms, backward 1.2 ms, optimizer 0.2 ms.
  const int64_t fwd = 600'000, bwd = 1'200'000, opt = 200'000;
  slice(start, kStepNs, "step", 0, -1);
  slice(start, fwd, "forward", 1, -1);
  slice(start + fwd, bwd, "backward", 1, -1);
  slice(start + fwd + bwd, opt, "optimizer", 1, -1);
  slice(start, 20'000, "embedding.fwd", 2, -1);
  slice(start + fwd - 40'000, 40'000, "loss.fwd", 2, -1);
  static const char* kFwd[] = {"attention.fwd", "router.fwd", "permute.fwd", "experts.fwd",
                               "combine.fwd"};
  static const char* kBwd[] = {"combine.bwd", "experts.bwd", "permute.bwd", "router.bwd",
                               "attention.bwd"};
  static const int64_t kFwdNs[] = {40'000, 10'000, 8'000, 60'000, 12'000};  // sum 130 us
  const int64_t fwdLayerNs = (fwd - 60'000) / m_layers;
  const int64_t bwdLayerNs = bwd / m_layers;
  for (int l = 0; l < m_layers; ++l) {
    int64_t t = start + 20'000 + l * fwdLayerNs;
    for (int i = 0; i < 5; ++i) {
      slice(t, kFwdNs[i] * fwdLayerNs / 140'000, kFwd[i], 2, l);
      t += kFwdNs[i] * fwdLayerNs / 130'000;
    }
    t = start + fwd + (m_layers - 1 - l) * bwdLayerNs;
    for (int i = 0; i < 5; ++i) {
      slice(t, 2 * kFwdNs[4 - i] * bwdLayerNs / 280'000, kBwd[i], 2, l);
      t += 2 * kFwdNs[4 - i] * bwdLayerNs / 260'000;
    }
  }
}

void TestTrace::addConfigChange(int64_t step, const std::string& key, const std::string& oldValue,
                                const std::string& newValue, const std::string& source) {
  storage::ConfigChangeRow row;
  row.step = step;
  row.tsNs = kOriginNs + step * kStepNs;
  row.key = key;
  row.oldValue = oldValue;
  row.newValue = newValue;
  row.source = source;
  m_writer->addConfigChange(m_run, row);
}

double TestTrace::memoryBytes(int64_t step, int category) {
  // Weights fixed at 8 MiB, grads = weights, optimizer state twice that (Adam), activations
  // growing a little with the step.
  constexpr double kMiB = 1 << 20;
  switch (category) {
    case 0:
    case 1:
      return 8 * kMiB;
    case 2:
      return 16 * kMiB;
    default:
      return 3 * kMiB + double(step) * 0.25 * kMiB;
  }
}

Status TestTrace::flush() {
  return m_writer->flush();
}

Status TestTrace::finish() {
  m_writer->finishRun(m_run, "completed", "", kOriginNs + 1'000 * kStepNs);
  return m_writer->close();
}

void TestTrace::writeGpu(int64_t step, int64_t start) {
  using namespace storage;
  if (!m_apiTrack.isValid()) {
    m_apiTrack = m_writer->addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, 0, 11});
    m_stream7 = m_writer->addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
    m_stream13 = m_writer->addTrack({TrackId(), "GPU 0 stream 13", kTrackKindStream, 0, 13});
  }
  const int64_t copyCorr = step * 1000 + 999;
  m_writer->addCudaApi(
      {SliceId(), m_apiTrack, start + 10'000, 3'000, "cudaMemcpyAsync", kCategoryApi, step, -1,
       copyCorr, 0},
      {"runtime", 41, 11, 0, "step"});
  m_writer->addGpuMemcpy({SliceId(), m_stream13, start + 20'000, 50'000, "memcpy HtoD",
                          kCategoryMemcpy, step, -1, copyCorr, 0},
                         {0, 13, 1, 2, 3, 4 * kMiB, "step"});
  for (int l = 0; l < m_layers; ++l) {
    const int64_t corr = step * 1000 + l * 10 + 1;
    m_writer->addCudaApi({SliceId(), m_apiTrack, start + 100'000 + l * kGpuLayerStrideNs, 5'000,
                          "cudaLaunchKernel", kCategoryApi, step, l, corr, 0},
                         {"runtime", 211, 11, 0, "experts.fwd"});
    GpuKernelRow k{0, 7, 64, l + 1, 1, 256, 1, 1, 96, 4096, 16384,
                   "_ZN5moewb23grouped_gemm_fwd_kernelEv", "grouped_gemm_fwd_kernel",
                   "experts.fwd"};
    m_writer->addGpuKernel(
        {SliceId(), m_stream7, start + kGpuKernelOffsetNs + l * kGpuLayerStrideNs, kGpuKernelNs,
         "void moewb::grouped_gemm_fwd_kernel<__nv_bfloat16, 128, 64>(moewb::GemmArgs)",
         kCategoryKernel, step, l, corr, 0},
        k);
  }
  m_writer->addGpuMemset({SliceId(), m_stream13, start + 1'500'000, 10'000, "memset",
                          kCategoryMemset, step, -1, 0, 0},
                         {0, 13, 1024, 0, 3, "step"});
  for (int i = 0; i < 20; ++i) {
    GpuKernelRow k{0, 7, 8, 1, 1, 128, 1, 1, 16, 0, 0, "_Z11elementwisev", "elementwise", "step"};
    m_writer->addGpuKernel({SliceId(), m_stream7, start + 1'600'000 + i * 2'000, 1'000,
                            "elementwise(float*)", kCategoryKernel, step, -1, 0, 0},
                           k);
  }
}

int64_t TestTrace::backwardStartNs(int64_t step, int layer) const {
  // writeSlices' layout: backward from +600 us, layers in reverse, 1.2 ms / layers each.
  const int64_t bwdLayerNs = 1'200'000 / m_layers;
  return kOriginNs + step * kStepNs + 600'000 + (m_layers - 1 - layer) * bwdLayerNs;
}

storage::SwapPlanRow TestTrace::swapPlanRow(int layers, int64_t step) {
  storage::SwapPlanRow plan;
  plan.step = step;
  plan.mode = "auto";
  plan.hbmTargetBytes = 2'500'000'000;
  plan.pinnedBudgetBytes = 10'000'000'000;
  plan.prefetchLayers = 1;
  plan.d2hGbps = 55;
  plan.h2dGbps = 55;
  plan.bidirGbps = 36;
  plan.fixedBytes = 1'000'000'000;
  plan.turnMs = 2.0;
  plan.layerForwardMs.assign(size_t(layers), 10.0);
  plan.layerBackwardMs.assign(size_t(layers), 20.0);
  plan.layerOtherBytes.assign(size_t(layers), 100'000'000);
  static const char* kOps[] = {"attn_norm", "mixer_input", "moe_norm", "moe_input",
                               "expert_fc1", "moe_act", "expert_fc2"};
  for (int l = 0; l < layers; ++l) {
    for (const char* op : kOps) {
      storage::SwapPlanTensorRow t;
      t.layer = l;
      t.op = op;
      t.bytes = 50'000'000;
      t.reason = "picked";
      t.swapped = true;
      if (t.op == "attn_norm") {
        t.reason = "op not in swap.ops";
        t.swapped = false;
      } else if (t.op == "moe_norm") {
        t.bytes = 1000;
        t.reason = "below swap.min_bytes";
        t.swapped = false;
      }
      plan.tensors.push_back(t);
    }
  }
  plan.predictedPeakBytes = 2'400'000'000;
  plan.predictedPeakNoSwapBytes = 2'800'000'000;
  plan.summary = "auto: test plan";
  return plan;
}

void TestTrace::writeSwap(int64_t step, int64_t start) {
  const int64_t fwdLayerNs = (600'000 - 60'000) / m_layers;
  storage::SwapStepRow row;
  row.step = step;
  row.simulated = m_swapSimulated;
  for (int l = 0; l < m_layers; ++l) {
    storage::SwapEventRow e;
    e.step = step;
    e.layer = l;
    e.op = "expert_fc1";
    e.bytes = (l + 1) * kMiB;
    e.simulated = m_swapSimulated;
    e.toHost = true;
    e.startNs = start + 20'000 + (l + 1) * fwdLayerNs;
    e.endNs = e.startNs + kSwapCopyNs;
    m_writer->addSwapEvent(m_run, e);
    e.toHost = false;
    e.neededNs = backwardStartNs(step, l);
    const int64_t endNs = l == kLateLayer ? e.neededNs + kSwapStallNs : e.neededNs - kSwapLeadNs;
    e.startNs = endNs - kSwapCopyNs;
    e.endNs = endNs;
    e.stallNs = l == kLateLayer ? kSwapStallNs : 0;
    m_writer->addSwapEvent(m_run, e);
    row.swappedBytes += e.bytes;
    row.offloads += 1;
    row.reloads += 1;
    row.copyMs += 2 * double(kSwapCopyNs) / 1e6;
    row.exposedMs += double(e.stallNs) / 1e6;
    row.lateReloads += e.stallNs > 0;
  }
  row.hbmPeakBytes = (100 - step) * kMiB;
  row.hbmPeakNoSwapBytes = 120 * kMiB;
  row.pinnedPeakBytes = row.swappedBytes;
  row.pinnedCapacityBytes = 64 * kMiB;
  m_writer->addSwapStep(m_run, row);
  if (!m_swapPlanned) {
    m_writer->addSwapPlan(m_run, swapPlanRow(m_layers, step));
    m_swapPlanned = true;
  }
}

Result<RecomputeRun> recomputeRun() {
  RecomputeRun run;
  engine::SwapSettings& s = run.settings;
  s.mode = engine::SwapMode::kAuto;
  s.ops = engine::swapOpNames();
  s.recomputeOps = engine::swapRecomputeOpNames();
  s.minBytes = 1 << 20;
  s.pinnedBudgetBytes = 10'000'000'000;
  s.prefetchLayers = 1;
  s.freeLagLayers = 1;
  s.d2hBytesPerMs = s.h2dBytesPerMs = s.bidirBytesPerMs = 1e6;  // 1 GB/s
  engine::SwapProfile& p = run.profile;
  const size_t layers = size_t(kRecomputeLayers);
  p.layerForwardMs.assign(layers, 10.0);
  p.layerBackwardMs.assign(layers, 20.0);
  p.layerOtherBytes.assign(layers, 100'000'000);
  p.layerRecomputeMs.assign(layers, kRecomputeMs);
  p.turnMs = 2.0;
  p.fixedBytes = 1'000'000'000;
  for (int32_t l = 0; l < kRecomputeLayers; ++l) {
    for (const std::string& op : engine::swapOpNames()) {
      p.tensors.push_back({l, op, op == "moe_act" ? 100'000'000 : 50'000'000});
    }
  }
  engine::SwapSettings keep = s;
  keep.mode = engine::SwapMode::kOff;
  MOEWB_ASSIGN_OR_RETURN(const engine::SwapPrediction none, engine::planSwap(keep, p));
  s.hbmTargetBytes = none.peakNoSwapBytes - kRecomputeRunFreeBytes;
  MOEWB_ASSIGN_OR_RETURN(run.plan, engine::planSwap(s, p));
  return run;
}

engine::SwapPlanEvent recomputePlanEvent(const RecomputeRun& run) {
  const engine::SwapSettings& s = run.settings;
  engine::SwapPlanEvent e;
  e.mode = "auto";
  e.hbmTargetBytes = s.hbmTargetBytes;
  e.pinnedBudgetBytes = s.pinnedBudgetBytes;
  e.prefetchLayers = s.prefetchLayers;
  e.freeLagLayers = s.freeLagLayers;
  e.ops = "";  // every op
  e.minBytes = s.minBytes;
  for (const std::string& op : s.recomputeOps) {
    e.recomputeOps += (e.recomputeOps.empty() ? "" : ",") + op;
  }
  e.d2hGbps = s.d2hBytesPerMs / 1e6;
  e.h2dGbps = s.h2dBytesPerMs / 1e6;
  e.bidirGbps = s.bidirBytesPerMs / 1e6;
  e.fixedBytes = run.profile.fixedBytes;
  e.turnMs = run.profile.turnMs;
  e.layerForwardMs = run.profile.layerForwardMs;
  e.layerBackwardMs = run.profile.layerBackwardMs;
  e.layerOtherBytes = run.profile.layerOtherBytes;
  e.layerRecomputeMs = run.profile.layerRecomputeMs;
  e.recomputeMsMeasured = true;
  for (size_t i = 0; i < run.profile.tensors.size(); ++i) {
    const engine::SwapTensor& t = run.profile.tensors[i];
    const engine::SwapDecision& d = run.plan.decisions[i];
    e.tensorLayer.push_back(t.layer);
    e.tensorOp.push_back(t.op);
    e.tensorBytes.push_back(t.bytes);
    e.tensorSwapped.push_back(d.action == engine::SwapAction::kSwap);
    e.tensorRecomputed.push_back(d.action == engine::SwapAction::kRecompute);
    e.tensorReason.push_back(d.reason);
  }
  e.predictedPeakBytes = run.plan.peakBytes;
  e.predictedPeakNoSwapBytes = run.plan.peakNoSwapBytes;
  e.predictedExposedMs = run.plan.exposedMs;
  e.summary = run.plan.summary;
  return e;
}

Result<RecomputeRun> writeRecomputeTrace(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(RecomputeRun run, recomputeRun());
  storage::WriterOptions options;
  options.overwrite = true;
  MOEWB_ASSIGN_OR_RETURN(auto writer, storage::TraceWriter::create(path, options));
  {
    profiler::HostTracer tracer(writer.get());
    tracer.onRunStart({.name = "recompute", .backend = "cuda", .worldSize = 1,
                       .startNs = TestTrace::kOriginNs});
    tracer.onSwapPlan(recomputePlanEvent(run));
    tracer.onStep({.step = 0, .rank = 0, .startNs = TestTrace::kOriginNs,
                   .endNs = TestTrace::kOriginNs + TestTrace::kStepNs});
    tracer.onRunEnd({.outcome = engine::RunOutcome::kCompleted,
                     .endNs = TestTrace::kOriginNs + TestTrace::kStepNs, .stepsDone = 1});
  }
  MOEWB_RETURN_IF_ERROR(writer->close());
  return run;
}

}  // namespace moewb::gui::testing
