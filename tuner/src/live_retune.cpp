// The live re-tune plan (live_retune.h).
#include "moewb/tuner/live_retune.h"

#include <algorithm>
#include <map>

#include "moewb/base/text.h"
#include "moewb/tuner/search_space.h"

namespace moewb::tuner {

Result<LiveRetunePlan> planLiveRetune(const engine::RunConfig& current, const std::string& settings,
                                      const std::vector<std::string>& liveKeys) {
  MOEWB_ASSIGN_OR_RETURN(const Settings parsed, parseSettingsText(settings));
  const std::map<std::string, std::string> now = tomlKeyValues(engine::toToml(current));
  LiveRetunePlan plan;
  for (const auto& [key, value] : parsed) {
    engine::RunConfig changed = current;
    MOEWB_RETURN_IF_ERROR(engine::applyOverride(changed, key + "=" + value));
    const std::map<std::string, std::string> after = tomlKeyValues(engine::toToml(changed));
    const auto before = now.find(key);
    const auto trial = after.find(key);
    if (trial == after.end()) {
      return invalidArgument("the trial's setting " + key + " is not a key of the run's config");
    }
    const std::string runValue = before == now.end() ? std::string() : before->second;
    if (runValue == trial->second) {
      plan.unchanged.push_back(key);
      continue;
    }
    LiveSetting setting{key, runValue, trial->second};
    const bool live = std::find(liveKeys.begin(), liveKeys.end(), key) != liveKeys.end();
    (live ? plan.send : plan.restart).push_back(std::move(setting));
  }
  return plan;
}

Result<engine::RunConfig> configAfterChanges(engine::RunConfig start,
                                             const std::vector<storage::ConfigChangeRow>& changes) {
  for (const storage::ConfigChangeRow& row : changes) {
    const Status applied = engine::applyOverride(start, row.key + "=" + row.newValue);
    if (!applied.isOk()) {
      return dataLoss("the trace's config change at step " + std::to_string(row.step) + " (" +
                      row.key + " = " + row.newValue + ") cannot be applied: " + applied.message());
    }
  }
  return start;
}

}  // namespace moewb::tuner
