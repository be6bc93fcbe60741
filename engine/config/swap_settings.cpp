// The [swap] section in typed form (moewb/engine/swap.h): the swap op names and
// swapSettingsFrom. They live in the config layer because validateConfig checks swap.ops against
// the names; the planner and simulator are in model/swap/swap_plan.cpp.
#include <algorithm>

#include "moewb/engine/swap.h"

namespace moewb::engine {
namespace {

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const size_t end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

}  // namespace

std::vector<std::string> splitSwapOpList(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    out.push_back(trimmed(list.substr(begin, end - begin)));
    begin = end + 1;
  }
  return out;
}

const std::vector<std::string>& swapOpNames() {
  static const std::vector<std::string> kNames = {"attn_norm", "mixer_input", "moe_norm",
                                                  "moe_input", "expert_fc1",  "moe_act",
                                                  "expert_fc2"};
  return kNames;
}

const std::vector<std::string>& swapRecomputeOpNames() {
  static const std::vector<std::string> kNames = {"moe_act", "expert_fc2"};
  return kNames;
}

SwapSettings swapSettingsFrom(const SwapSection& section, int64_t deviceBytes) {
  SwapSettings s;
  s.mode = section.mode == "manual" ? SwapMode::kManual
           : section.mode == "auto" ? SwapMode::kAuto
                                    : SwapMode::kOff;
  if (trimmed(section.ops).empty()) {
    s.ops = swapOpNames();
  } else {
    for (const auto& op : splitSwapOpList(section.ops)) {
      if (!op.empty() && std::find(s.ops.begin(), s.ops.end(), op) == s.ops.end()) {
        s.ops.push_back(op);
      }
    }
  }
  for (const auto& op : splitSwapOpList(section.recomputeOps)) {
    if (!op.empty() && std::find(s.recomputeOps.begin(), s.recomputeOps.end(), op) ==
                           s.recomputeOps.end()) {
      s.recomputeOps.push_back(op);
    }
  }
  s.minBytes = std::max<int64_t>(0, section.minBytes);
  s.hbmTargetBytes = section.hbmTargetGb > 0 ? int64_t(section.hbmTargetGb * 1e9)
                                             : std::max<int64_t>(0, deviceBytes);
  s.pinnedBudgetBytes = int64_t(std::max(0.0, section.pinnedBudgetGb) * 1e9);
  s.prefetchLayers = std::max(0, section.prefetchLayers);
  s.freeLagLayers = std::max(0, section.freeLagLayers);
  s.d2hBytesPerMs = section.d2hGbps * 1e6;
  s.h2dBytesPerMs = section.h2dGbps * 1e6;
  s.bidirBytesPerMs = section.bidirGbps * 1e6;
  return s;
}

}  // namespace moewb::engine
