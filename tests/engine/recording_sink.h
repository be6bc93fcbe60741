// RecordingSink: an EventSink for tests that keeps every event in arrival order.
#pragma once

#include <string>
#include <vector>

#include "moewb/engine/event_sink.h"

namespace moewb::engine::test {

class RecordingSink : public EventSink {
 public:
  enum class Kind { kRunStart, kPhase, kExpertLoad, kCounter, kStep, kRunEnd, kConfigChange, kSwapPlan, kSwap,
                    kSwapStep };

  void onRunStart(const RunStartEvent& e) override {
    order.push_back(Kind::kRunStart);
    runStarts.push_back(e);
  }
  void onPhase(const PhaseEvent& e) override {
    order.push_back(Kind::kPhase);
    phases.push_back(e);
  }
  void onExpertLoad(const ExpertLoadEvent& e) override {
    order.push_back(Kind::kExpertLoad);
    loads.push_back(e);
  }
  void onCounter(const CounterEvent& e) override {
    order.push_back(Kind::kCounter);
    counters.push_back(e);
  }
  void onStep(const StepEvent& e) override {
    order.push_back(Kind::kStep);
    steps.push_back(e);
  }
  void onConfigChange(const ConfigChangeEvent& e) override {
    order.push_back(Kind::kConfigChange);
    configChanges.push_back(e);
  }
  void onSwapPlan(const SwapPlanEvent& e) override {
    order.push_back(Kind::kSwapPlan);
    swapPlans.push_back(e);
  }
  void onSwap(const SwapEvent& e) override {
    order.push_back(Kind::kSwap);
    swaps.push_back(e);
  }
  void onSwapStep(const SwapStepEvent& e) override {
    order.push_back(Kind::kSwapStep);
    swapSteps.push_back(e);
  }
  void onRunEnd(const RunEndEvent& e) override {
    order.push_back(Kind::kRunEnd);
    runEnds.push_back(e);
  }

  std::vector<Kind> order;
  std::vector<RunStartEvent> runStarts;
  std::vector<PhaseEvent> phases;
  std::vector<ExpertLoadEvent> loads;
  std::vector<CounterEvent> counters;
  std::vector<StepEvent> steps;
  std::vector<RunEndEvent> runEnds;
  std::vector<ConfigChangeEvent> configChanges;
  std::vector<SwapPlanEvent> swapPlans;
  std::vector<SwapEvent> swaps;
  std::vector<SwapStepEvent> swapSteps;
};

}  // namespace moewb::engine::test
