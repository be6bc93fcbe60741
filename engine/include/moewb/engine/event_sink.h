// EventSink: the only way the engine reports what it does. The trainer calls these from its
// training thread, in time order within a step: onRunStart once, then per step any number of
// onPhase / onExpertLoad / onCounter calls followed by exactly one onStep, and onRunEnd once.
// The engine knows nothing of SQLite, CUPTI or Qt; the profiler implements this interface.
// Implementations must be cheap (they run on the engine's hot path): copy and queue, never block
// on I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moewb::engine {

// What part of the step a time range covers. Pass ranges (forward, backward, optimizer) contain
// the per-layer phases; see phaseDepth.
enum class Phase : uint8_t {
  kForward,    // whole forward pass (layer -1)
  kBackward,   // whole backward pass (layer -1)
  kOptimizer,  // AdamW update incl. gradient clipping (layer -1)
  kEmbedding,  // token embedding lookup / its gradient scatter (layer -1)
  kAttention,  // RMSNorm + causal softmax attention of one layer (mixer 'A')
  kRouter,     // MoE RMSNorm + router logits, softmax, top-k, aux loss
  kPermute,    // gather tokens into expert-major order
  kExperts,    // per-expert SwiGLU FFNs
  kCombine,    // unpermute + weighted sum + residual
  kLoss,       // final norm + LM head + cross-entropy (layer -1)
  kKda,        // RMSNorm + KDA linear attention of one layer (mixer 'K')
  kSparseAttention,  // RMSNorm + gated sparse attention + indexer loss of one layer (mixer 'S')
};

enum class Pass : uint8_t { kNone, kForward, kBackward };

// "attention", "router", ... (stable names; they are stored in traces).
const char* phaseName(Phase phase);
// Slice name as stored: "forward", "backward", "optimizer" for pass ranges, otherwise
// phaseName + ".fwd" / ".bwd", e.g. "experts.bwd".
std::string phaseSliceName(Phase phase, Pass pass);
// Nesting depth on the timeline: step = 0, pass ranges = 1, everything else = 2.
int32_t phaseDepth(Phase phase);

// One part of a run's start-up (building the host model, the device's context, the upload of
// the weights), timed on the steady clock.
struct StartupPhase {
  std::string name;  // "host model allocation", "CUDA context", ...
  int64_t ns = 0;
};

// "8.07 s: host model allocation 1.45 ms, weight initialisation 5.14 s, ..." (the total, then
// each phase in order); "" when `phases` is empty.
std::string describeStartup(const std::vector<StartupPhase>& phases);
// The sum of the phases' times, ns.
int64_t startupTotalNs(const std::vector<StartupPhase>& phases);

struct RunStartEvent {
  std::string name;        // run.name
  std::string configToml;  // the full validated config as TOML
  std::string backend;     // "cpu"
  int32_t worldSize = 1;   // ranks
  int32_t numLayers = 0;
  int32_t numExperts = 0;
  int64_t startNs = 0;     // steadyNowNs() at start
  std::vector<StartupPhase> startup;  // where the time before the first step went, in order
  std::string device;  // what the run trains on: "CPU, 8 threads", "NVIDIA H200 (...; driver ...)"
};

struct PhaseEvent {
  int64_t step = 0;        // 0-based optimizer step
  int32_t layer = -1;      // decoder layer, -1 for whole-model phases
  Phase phase = Phase::kForward;
  Pass pass = Pass::kNone;
  int64_t startNs = 0;     // steady clock
  int64_t endNs = 0;
};

struct ExpertLoadEvent {
  int64_t step = 0;
  int32_t layer = 0;
  int32_t rank = 0;
  std::vector<int64_t> tokensPerExpert;  // [num_experts] (token, expert) assignments routed
  std::vector<int64_t> droppedPerExpert; // [num_experts] assignments dropped by capacity (0s if dropless)
  std::vector<double> biasPerExpert;     // [num_experts] aux-loss-free selection bias (empty or 0s if unused)
};

struct CounterEvent {
  std::string name;        // "memory.activations_bytes", "lr", ...
  int64_t tsNs = 0;
  double value = 0;
};

struct StepEvent {
  int64_t step = 0;
  int32_t rank = 0;
  int64_t startNs = 0;
  int64_t endNs = 0;
  double loss = 0;         // mean cross-entropy over the step's tokens (nats)
  double auxLoss = 0;      // sum over layers of the weighted switch aux loss
  int64_t tokens = 0;      // tokens processed this step
  double tokensPerSecond = 0;
  int64_t peakBytes = 0;   // peak bytes of engine-owned tensors during the step
  double gradNorm = 0;     // global L2 gradient norm before clipping
  double lr = 0;           // learning rate used
};

// A setting changed while the run goes on (a live patch), effective from `step` on.
struct ConfigChangeEvent {
  int64_t step = 0;        // first step that uses the new value
  int64_t tsNs = 0;
  std::string key;         // "optim.lr"
  std::string oldValue;    // TOML text
  std::string newValue;
  std::string source;      // "cli", "gui", "tuner", "test"
};

// One collective of one rank (parallel runs): an all-gather, reduce-scatter, all-to-all, ...
struct CollectiveEvent {
  int64_t step = 0;
  int32_t layer = -1;           // decoder layer it served, -1 outside the layers
  int32_t rank = 0;             // global rank that ran it
  std::string op;               // "all_to_all_v", "all_gather", "reduce_scatter", ...
  std::string group;            // "world", "ep", "expert_dp", "fsdp", "replicate"
  std::string phase;            // EP all-to-all: "dispatch", "combine", "combine.bwd", ...; else ""
  uint64_t seq = 0;             // per-group sequence number, from 1 (equal on every peer)
  int64_t bytesSent = 0;        // payload to other ranks, bytes
  int64_t bytesReceived = 0;    // payload from other ranks, bytes
  std::vector<int32_t> peers;   // global ranks of the group, in group order
  int64_t startNs = 0;          // steady clock
  int64_t endNs = 0;
  bool ok = true;               // false when the collective failed
};

// Bytes one rank sent to each peer in one expert-parallel all-to-all (a row of the traffic
// matrix of that layer, step and phase).
struct A2aTrafficEvent {
  int64_t step = 0;
  int32_t layer = 0;
  int32_t srcRank = 0;                // global rank
  std::vector<int32_t> dstRanks;      // global ranks of the EP group
  std::vector<int64_t> bytes;         // [dstRanks] bytes sent to each (incl. itself)
  std::string phase;                  // "dispatch", "combine", "combine.bwd", "dispatch.bwd"
};

// One device-memory allocation or free of the CUDA backend's caching allocator (the memory
// timeline). Events of one rank arrive in time order. `categoryInUseBytes` is the category's
// total after the event, so a timeline needs no running sum. At the first step the allocator's
// blocks already in use (weights, grads, optimizer state) arrive as one allocation per category
// with address 0 ("baseline"), so the per-category totals start right.
struct MemoryEvent {
  int64_t tsNs = 0;                // steady clock
  int64_t step = 0;                // the step the event happened in
  int32_t rank = 0;
  bool isAllocation = true;        // false: a free
  int64_t bytes = 0;               // block size (rounded by the allocator)
  uint64_t address = 0;            // device address (0 for baseline events)
  std::string category;            // "weights", "grads", "optimizer", "activations", "workspace"
  int64_t categoryInUseBytes = 0;  // bytes in use in the category after the event
};

// Swap (moewb/engine/swap.h). A plan: made at the first step with swap on and again after a
// live change of [swap] or when the measured times moved; it carries the profile it was made
// from, so a reader can re-plan it under other settings (the workbench's what-if).
struct SwapPlanEvent {
  int64_t step = 0;               // first step that runs the plan
  int32_t rank = 0;
  std::string mode;               // "off", "manual", "auto"
  int64_t hbmTargetBytes = 0;
  int64_t pinnedBudgetBytes = 0;
  int32_t prefetchLayers = 1;
  int32_t freeLagLayers = 1;      // swap.free_lag_layers
  std::string ops;                // swap.ops as a comma list; "" = all of swapOpNames()
  int64_t minBytes = 0;           // swap.min_bytes
  std::string recomputeOps;       // swap.recompute_ops as a comma list; "" = none
  double d2hGbps = 0, h2dGbps = 0, bidirGbps = 0;
  int64_t fixedBytes = 0;
  double turnMs = 0;
  std::vector<double> layerForwardMs;    // [L]
  std::vector<double> layerBackwardMs;   // [L]
  std::vector<int64_t> layerOtherBytes;  // [L]
  std::vector<double> layerRecomputeMs;  // [L] recompute cost the plan used (empty: none known)
  bool recomputeMsMeasured = false;      // layerRecomputeMs: the measured mean of the layers
                                         //   that recomputed (true) or the FLOPs estimate
  std::vector<int32_t> tensorLayer;      // [tensors] the profile's candidates
  std::vector<std::string> tensorOp;     // [tensors]
  std::vector<int64_t> tensorBytes;      // [tensors]
  std::vector<bool> tensorSwapped;       // [tensors] the decision: swapped
  std::vector<bool> tensorRecomputed;    // [tensors] the decision: recomputed (empty: none)
  std::vector<std::string> tensorReason; // [tensors]
  int64_t predictedPeakBytes = 0;
  int64_t predictedPeakNoSwapBytes = 0;
  double predictedExposedMs = 0;
  std::string summary;
};

// One copy of one swapped tensor: an offload (D2H) or a reload (H2D). CUDA backend: measured
// with events on the copy streams; CPU backend: `simulated`, the plan's moves placed on the
// step's measured phases.
struct SwapEvent {
  int64_t step = 0;
  int32_t rank = 0;
  int32_t layer = 0;
  std::string op;                 // one of swapOpNames()
  int64_t bytes = 0;
  bool toHost = true;             // true: D2H offload; false: H2D reload
  int64_t startNs = 0;            // steady clock
  int64_t endNs = 0;
  int64_t neededNs = 0;           // reload: when its consumer was ready to run; offload: when
                                  //   compute reached its free-lag wait (when it waited, else 0)
  int64_t stallNs = 0;            // reload: how long the consumer waited (late when > 0);
                                  //   offload: how long compute waited for it to free memory
  bool simulated = false;
};

// Per step and rank, after the step's swap events: the watermarks and totals.
struct SwapStepEvent {
  int64_t step = 0;
  int32_t rank = 0;
  int64_t hbmPeakBytes = 0;        // device peak with swap (simulated on the CPU backend)
  int64_t hbmPeakNoSwapBytes = 0;  // the same step's peak had every swapped tensor stayed
  int64_t pinnedPeakBytes = 0;     // pinned host bytes in use at most
  int64_t pinnedCapacityBytes = 0; // the pool's size
  int32_t offloads = 0;
  int32_t reloads = 0;
  int32_t lateReloads = 0;
  int64_t swappedBytes = 0;        // bytes offloaded this step
  double copyMs = 0;               // sum of copy durations, both directions
  double exposedMs = 0;            // sum of stalls: reload stalls + offload waits
  bool simulated = false;
};

enum class RunOutcome : uint8_t { kCompleted, kStopped, kFailed };

struct RunEndEvent {
  RunOutcome outcome = RunOutcome::kCompleted;
  std::string message;     // failure message, empty otherwise
  int64_t endNs = 0;
  int64_t stepsDone = 0;
};

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void onRunStart(const RunStartEvent& event) = 0;
  virtual void onPhase(const PhaseEvent& event) = 0;
  virtual void onExpertLoad(const ExpertLoadEvent& event) = 0;
  virtual void onCounter(const CounterEvent& event) = 0;
  // Called once per step after all its other events; the step is complete.
  virtual void onStep(const StepEvent& event) = 0;
  // A device allocation or free (CUDA backend only; none on the CPU reference).
  virtual void onMemory(const MemoryEvent& event) { (void)event; }
  // A live config patch was applied at a step boundary (one call per changed key).
  virtual void onConfigChange(const ConfigChangeEvent& event) { (void)event; }
  // Parallel runs: a finished collective, and the traffic row of an EP all-to-all.
  virtual void onCollective(const CollectiveEvent& event) { (void)event; }
  virtual void onA2aTraffic(const A2aTrafficEvent& event) { (void)event; }
  // Swap: a plan, each copy, and the step's totals (after its copies, before onStep).
  virtual void onSwapPlan(const SwapPlanEvent& event) { (void)event; }
  virtual void onSwap(const SwapEvent& event) { (void)event; }
  virtual void onSwapStep(const SwapStepEvent& event) { (void)event; }
  virtual void onRunEnd(const RunEndEvent& event) = 0;
};

// Forwards every call to several sinks in order (e.g. the tracer and a progress printer).
class FanOutSink final : public EventSink {
 public:
  explicit FanOutSink(std::vector<EventSink*> sinks) : m_sinks(std::move(sinks)) {}
  void onRunStart(const RunStartEvent& e) override { for (auto* s : m_sinks) s->onRunStart(e); }
  void onPhase(const PhaseEvent& e) override { for (auto* s : m_sinks) s->onPhase(e); }
  void onExpertLoad(const ExpertLoadEvent& e) override { for (auto* s : m_sinks) s->onExpertLoad(e); }
  void onCounter(const CounterEvent& e) override { for (auto* s : m_sinks) s->onCounter(e); }
  void onStep(const StepEvent& e) override { for (auto* s : m_sinks) s->onStep(e); }
  void onMemory(const MemoryEvent& e) override { for (auto* s : m_sinks) s->onMemory(e); }
  void onConfigChange(const ConfigChangeEvent& e) override {
    for (auto* s : m_sinks) s->onConfigChange(e);
  }
  void onCollective(const CollectiveEvent& e) override {
    for (auto* s : m_sinks) s->onCollective(e);
  }
  void onA2aTraffic(const A2aTrafficEvent& e) override {
    for (auto* s : m_sinks) s->onA2aTraffic(e);
  }
  void onSwapPlan(const SwapPlanEvent& e) override { for (auto* s : m_sinks) s->onSwapPlan(e); }
  void onSwap(const SwapEvent& e) override { for (auto* s : m_sinks) s->onSwap(e); }
  void onSwapStep(const SwapStepEvent& e) override { for (auto* s : m_sinks) s->onSwapStep(e); }
  void onRunEnd(const RunEndEvent& e) override { for (auto* s : m_sinks) s->onRunEnd(e); }

 private:
  std::vector<EventSink*> m_sinks;
};

}  // namespace moewb::engine
