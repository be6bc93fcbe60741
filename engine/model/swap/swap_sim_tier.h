// The CPU backend's simulated host tier: the swap events of one CPU step. Nothing is copied (the
// CPU model's activations stay where they are, so its numerics are untouched): the controller's
// decisions are simulated again (simulateSwap) with the step's own measured layer times, and the
// moves are placed on the step's steady-clock axis from the start of layer 0's forward. Stalls
// are what a device with the configured copy bandwidths would have waited; the CPU step itself
// does not wait. Cost: one simulateSwap per step.
#pragma once

#include <cstdint>
#include <vector>

#include "model/swap/swap_controller.h"

namespace moewb::engine {

struct SimulatedSwapStep {
  std::vector<SwapEvent> copies;   // offloads then reloads, each in issue order; simulated
  SwapStepEvent totals;            // simulated
  StepLayerTimes times;            // the step's layer times (feed recordStepTimes)
};

// The events of `step` from `controller`'s current plan and the step's phase events (`phases`,
// that step only). With no plan (off, or auto still measuring) `copies` is empty and `totals`
// all zero but `times` is filled. Errors: those of layerTimesFromPhases and simulateSwap.
Result<SimulatedSwapStep> simulateSwapStep(const SwapController& controller,
                                           const std::vector<PhaseEvent>& phases, int64_t step,
                                           int32_t rank);

// An EventSink that keeps the phase events it sees and forwards every call to `next` (may be
// null): how a backend collects one step's phases for simulateSwapStep. Not thread-safe.
class PhaseCaptureSink final : public EventSink {
 public:
  explicit PhaseCaptureSink(EventSink* next) : m_next(next) {}
  std::vector<PhaseEvent> phases;  // in arrival order; clear between steps

  void onRunStart(const RunStartEvent& e) override { if (m_next) m_next->onRunStart(e); }
  void onPhase(const PhaseEvent& e) override {
    phases.push_back(e);
    if (m_next) m_next->onPhase(e);
  }
  void onExpertLoad(const ExpertLoadEvent& e) override { if (m_next) m_next->onExpertLoad(e); }
  void onCounter(const CounterEvent& e) override { if (m_next) m_next->onCounter(e); }
  void onStep(const StepEvent& e) override { if (m_next) m_next->onStep(e); }
  void onMemory(const MemoryEvent& e) override { if (m_next) m_next->onMemory(e); }
  void onConfigChange(const ConfigChangeEvent& e) override {
    if (m_next) m_next->onConfigChange(e);
  }
  void onCollective(const CollectiveEvent& e) override { if (m_next) m_next->onCollective(e); }
  void onA2aTraffic(const A2aTrafficEvent& e) override { if (m_next) m_next->onA2aTraffic(e); }
  void onSwapPlan(const SwapPlanEvent& e) override { if (m_next) m_next->onSwapPlan(e); }
  void onSwap(const SwapEvent& e) override { if (m_next) m_next->onSwap(e); }
  void onSwapStep(const SwapStepEvent& e) override { if (m_next) m_next->onSwapStep(e); }
  void onRunEnd(const RunEndEvent& e) override { if (m_next) m_next->onRunEnd(e); }

 private:
  EventSink* m_next;
};

}  // namespace moewb::engine
