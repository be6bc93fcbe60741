// A live re-tune plan: which of a trial's settings go to a running run as one live patch
// (engine::TrainerCommand kApplyPatch, source "tuner"), which need a restart, and which the run
// already has. The GUI's Tuner window ("Apply live") and `moewb tune --apply` both use it.
//
// A trial's settings are its override list (tuner_trial.settings, "key=value,..."). Each is
// applied to a copy of the run's current config (engine::applyOverride) and compared with the
// current value as TOML text (engine::toToml), so "0.5" and "5e-1" are the same value. A key that
// differs is sent when the caller lists it as live (engine::Trainer::liveKeysFor(the run's
// config) for an in-process run, the `keys` answer of a run's control socket otherwise: on a run
// of several in-process ranks that includes the parallel layout, parallel.ep, .fsdp, .replicate
// and .a2a_chunks, which the run re-shards at the step boundary), and listed as needing a restart
// otherwise (the layout of a one-rank run; parallel.world_size; model shapes; anything that sets
// the shape of weights, buffers or the data). The engine's validation at the step boundary stays
// the one judge of the patch as a whole.
// The run's current config is its start config with the trace's config_change rows applied in
// order (configAfterChanges): what the run had at its last committed step.
// Pure functions; safe from any thread. Cost: one toToml per setting (microseconds each).
#pragma once

#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/storage/rows.h"

namespace moewb::tuner {

// One setting of a trial that differs from the run: its key, the run's value now and the
// trial's, both as TOML text ("0.003", "\"cce\"", "true").
struct LiveSetting {
  std::string key;
  std::string runValue;
  std::string trialValue;

  // "key=trialValue": the assignment a patch carries.
  std::string assignment() const { return key + "=" + trialValue; }
};

struct LiveRetunePlan {
  std::vector<LiveSetting> send;       // live keys that differ: ONE patch, in settings order
  std::vector<LiveSetting> restart;    // keys that differ but are not live: never sent
  std::vector<std::string> unchanged;  // keys the run already has at the trial's value
};

// The plan for applying the settings text `settings` ("k=v,...", tuner_trial.settings) to a run
// whose config is now `current`; `liveKeys` lists the keys a live patch may change. Errors:
// kDataLoss when `settings` is not an override list (parseSettingsText), kInvalidArgument
// with the engine's message when a setting names an unknown key or a value of the wrong type.
Result<LiveRetunePlan> planLiveRetune(const engine::RunConfig& current, const std::string& settings,
                                      const std::vector<std::string>& liveKeys);

// `start` with every row of `changes` applied in order (key = newValue, TOML text as the engine
// writes it). kDataLoss naming the step and key when a row's value cannot be applied.
Result<engine::RunConfig> configAfterChanges(engine::RunConfig start,
                                             const std::vector<storage::ConfigChangeRow>& changes);

}  // namespace moewb::tuner
