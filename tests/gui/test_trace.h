// TestTrace: writes small, deterministic traces for the GUI tests through storage::TraceWriter,
// shaped like the engine's: per step a depth-0 "step" slice, depth-1 forward/backward/optimizer
// ranges, depth-2 per-layer phases, expert loads per (layer, expert), optionally the memory
// account counters (memory.*_bytes at the step end) and one step row. Steps can be added after a
// reader opened the file, to test live refreshes.
#pragma once

#include <memory>
#include <string>

#include "moewb/base/status.h"
#include "moewb/engine/event_sink.h"
#include "moewb/engine/swap.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::gui::testing {

class TestTrace {
 public:
  // Creates (overwrites) `path` with a run row and one thread track.
  static Result<std::unique_ptr<TestTrace>> create(const std::string& path, int layers,
                                                   int experts);
  // Writes step `step` (all its slices, expert loads and the committing step row) and flushes.
  Status addStep(int64_t step);
  // Queues a config_change row effective from `step`, stamped at that step's start; it is
  // committed with the next addStep, flush or finish.
  void addConfigChange(int64_t step, const std::string& key, const std::string& oldValue,
                       const std::string& newValue, const std::string& source = "gui");
  // From now on addStep also writes the four memory counters (memoryBytes) on a counter track,
  // created on first use; off by default (traces from before the memory account).
  void setMemoryCounters(bool on) { m_memory = on; }
  // From now on addStep also writes device-memory events on a "device memory" track (kind
  // memory, created on first use): at the first such step the baseline (weights 8 MiB and
  // optimizer 16 MiB, address 0); per step activations +4 MiB at +100 us, workspace +1 MiB at
  // +700 us and -1 MiB at +800 us, activations -4 MiB at +1500 us.
  void setDeviceMemory(bool on) { m_deviceMemory = on; }
  // From now on addStep also writes GPU capture rows: a "CUDA API thread" track (kind cuda_api)
  // and two stream tracks, "GPU 0 stream 7" and "GPU 0 stream 13" (kind stream). Per step and
  // layer l: cudaLaunchKernel at +100 us + l * 300 us (5 us) launching grouped_gemm_fwd_kernel on
  // stream 7 at kGpuKernelOffsetNs + l * kGpuLayerStrideNs for kGpuKernelNs (grid 64 x (l+1),
  // block 256, 96 registers, 4 KiB static + 16 KiB dynamic shared, phase experts.fwd, layer l);
  // per step a 4 MiB HtoD memcpy on stream 13 at +20 us (50 us, launched by cudaMemcpyAsync at
  // +10 us), a memset on stream 13 at +1500 us (10 us) and 20 elementwise kernels of 1 us on
  // stream 7 every 2 us from +1600 us. Correlation ids: step * 1000 + l * 10 + 1 (kernels),
  // step * 1000 + 999 (memcpy).
  void setGpuActivity(bool on) { m_gpu = on; }
  // From now on addStep also writes swap rows (simulated ones when `simulated`): per layer l one
  // offload of "expert_fc1" ((l + 1) MiB) from the end of its forward (20 us) and one reload
  // ending kSwapLeadNs before its backward starts (needed = that start), except layer
  // kLateLayer's, which ends kSwapStallNs after it (stall kSwapStallNs); a swap_step row; and at
  // the first such step a plan (swapPlanRow) of mode auto.
  void setSwap(bool on, bool simulated = false) {
    m_swap = on;
    m_swapSimulated = simulated;
  }
  static constexpr int kLateLayer = 1;
  static constexpr int64_t kSwapCopyNs = 20'000;
  static constexpr int64_t kSwapLeadNs = 5'000;
  static constexpr int64_t kSwapStallNs = 15'000;
  // When layer l's backward starts in step `step` (the reload's needed time) and ends.
  int64_t backwardStartNs(int64_t step, int layer) const;
  // The plan addStep writes with setSwap: `layers` layers of 10 ms forward and 20 ms backward
  // (room to hide the 0.9 ms copies), turn 2 ms, 100 MB other saved bytes each, 1 GB fixed; per
  // layer the seven swap ops of 50 MB (attn_norm refused as "op not in swap.ops", moe_norm 1000
  // bytes "below swap.min_bytes"), HBM target 2.5 GB, pinned budget 10 GB, 55/55/36 GB/s.
  static storage::SwapPlanRow swapPlanRow(int layers, int64_t step = 0);
  static constexpr int64_t kGpuKernelOffsetNs = 110'000;
  static constexpr int64_t kGpuLayerStrideNs = 300'000;
  static constexpr int64_t kGpuKernelNs = 200'000;
  static constexpr int64_t kMiB = 1 << 20;
  // Bytes addStep reports for memory category `category` (0 weights, 1 grads, 2 optimizer,
  // 3 activations) at `step`.
  static double memoryBytes(int64_t step, int category);
  // Commits everything queued so far (e.g. config changes without a step).
  Status flush();
  // Marks the run completed and closes the file.
  Status finish();

  int layers() const { return m_layers; }
  int experts() const { return m_experts; }
  // Tokens routed to (layer, expert) at `step` (what addStep writes).
  static int64_t tokensFor(int64_t step, int layer, int expert);
  // Slices addStep writes per step.
  int64_t slicesPerStep() const { return 1 + 3 + int64_t(m_layers) * 10 + 2; }
  static constexpr int64_t kStepNs = 2'000'000;        // each step lasts 2 ms
  static constexpr int64_t kOriginNs = 5'000'000'000;  // steady-clock time of step 0

 private:
  // Queues the step's slices (step, passes, per-layer phases) starting at `start`.
  void writeSlices(int64_t step, int64_t start);
  // Queues the step's device-memory events (see setDeviceMemory).
  void writeDeviceMemory(int64_t step, int64_t start);
  // Queues the step's GPU capture rows (see setGpuActivity).
  void writeGpu(int64_t step, int64_t start);
  // Queues the step's swap rows (see setSwap).
  void writeSwap(int64_t step, int64_t start);

  std::unique_ptr<storage::TraceWriter> m_writer;
  RunId m_run;
  TrackId m_track;
  TrackId m_counters;
  bool m_memory = false;
  bool m_deviceMemory = false;
  TrackId m_deviceTrack;
  bool m_gpu = false;
  bool m_swap = false;
  bool m_swapSimulated = false;
  bool m_swapPlanned = false;
  TrackId m_apiTrack, m_stream7, m_stream13;
  int m_layers = 0;
  int m_experts = 0;
};

// A recompute run for the what-if tests: the engine's auto policy (planSwap) with
// swap.recompute_ops = moe_act, expert_fc2 on kRecomputeLayers layers of 10 ms forward and 20 ms
// backward whose copies cannot hide (a 1 GB/s link: a 50 MB copy takes 50 ms) and whose
// recompute is cheap (kRecomputeMs a layer, measured), at a target kRecomputeRunFreeBytes under
// the peak without swap, so the run's plan recomputes some layers. Per layer the seven swap ops
// of 50 MB (moe_act 100 MB), 100 MB other saved bytes; 1 GB fixed; pinned budget 10 GB.
struct RecomputeRun {
  engine::SwapSettings settings;
  engine::SwapProfile profile;
  engine::SwapPrediction plan;
};
inline constexpr int kRecomputeLayers = 6;
inline constexpr double kRecomputeMs = 1.0;
inline constexpr int64_t kRecomputeRunFreeBytes = 250'000'000;
Result<RecomputeRun> recomputeRun();
// The plan event of `run` at step 0, field by field as engine::SwapController emits it.
engine::SwapPlanEvent recomputePlanEvent(const RecomputeRun& run);
// Writes a trace at `path` (overwritten) of one step with recomputeRun()'s plan, through
// profiler::HostTracer as a run writes it; returns the run.
Result<RecomputeRun> writeRecomputeTrace(const std::string& path);

}  // namespace moewb::gui::testing
