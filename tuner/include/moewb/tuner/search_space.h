// SearchSpace: the settings a study may try, built from the engine's own key table.
//
// A knob is one config key with its candidate values (TOML text). Values come from the key's
// typed bounds in engine::configKeys() (booleans: false/true; strings: the key's choices; numbers:
// a per-key ladder clipped to the bounds) or from the user (`--knobs key=v1|v2`, each value checked
// against the same bounds). The base config's own value is always a candidate, so the base is
// always in the space. Candidates are the cartesian product of the knobs; each is validated by
// engine::validateConfig (the one place for rules that tie keys together), and a combination it
// refuses keeps that message as its rejection: the tuner never runs or proposes it.
//
// Only keys in tunableKeys() may be knobs: settings that change speed or memory but not the model
// being trained. Knobs that may change numerics beyond rounding (fusion variants, loss kind and
// block sizes, chunk sizes, the parallel layout) are `gated`: a candidate that moves one of them
// away from the base is checked by the precision gate against its reference (precision_gate.h).
// Cost: O(product of knob sizes) validations; building refuses spaces above kMaxCandidates.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"

namespace moewb::tuner {

// The most candidates one space may hold (the cartesian product of its knobs).
inline constexpr size_t kMaxCandidates = 4096;

// A knob as the user names it: a key and, optionally, its values (TOML text); none = generated.
struct KnobSpec {
  std::string key;                  // "moe.capacity_factor"
  std::vector<std::string> values;  // {"0.0", "1.25"}; empty = from the key table
};

struct Knob {
  std::string key;                  // "fusion.permute_into_experts"
  std::vector<std::string> values;  // canonical TOML text, base value first, no duplicates
  bool gated = false;               // may change numerics: checked by the precision gate
};

// One setting of every knob, in knob order.
using Settings = std::vector<std::pair<std::string, std::string>>;  // (key, TOML value)

struct Candidate {
  Settings settings;
  std::string rejection;  // empty: valid; otherwise validateConfig's message
  bool valid() const { return rejection.empty(); }
};

struct SearchSpace {
  engine::RunConfig base;  // the config every candidate starts from (valid)
  std::vector<Knob> knobs;
  std::vector<Candidate> candidates;  // base first; then those that move no gated knob away
                                      // from the base (the gate's references), then the rest
  size_t validCount() const;
};

// Keys a study may tune, in the order `moewb tune --help` lists them.
const std::vector<std::string>& tunableKeys();
// The knobs used when the user names none: fusion flags and the loss kind, plus the KDA chunk
// when `base` has KDA layers and the EP degree when it has more than one rank.
std::vector<KnobSpec> defaultKnobs(const engine::RunConfig& base);

// Parses "k1,k2=v1|v2,..." (the CLI's --knobs). kInvalidArgument for an empty item, an empty value
// or a key given twice; keys and values are checked by buildSearchSpace.
Result<std::vector<KnobSpec>> parseKnobList(const std::string& text);

// Builds the space over `base` (must pass validateConfig). kInvalidArgument naming the key when a
// knob is not in tunableKeys(), a value is outside the key's bounds or choices, or the space would
// exceed kMaxCandidates. Pure; no I/O.
Result<SearchSpace> buildSearchSpace(const engine::RunConfig& base,
                                     const std::vector<KnobSpec>& knobs);

// "k1=v1,k2=v2": the override list stored in tuner_trial.settings.
std::string settingsText(const Settings& settings);
// The inverse of settingsText; kDataLoss for text that is not such a list.
Result<Settings> parseSettingsText(const std::string& text);

// `base` with `settings` applied through engine::applyOverride and validated by
// engine::ValidConfig::validate: kInvalidArgument with the engine's message when refused.
Result<engine::ValidConfig> applySettings(const engine::RunConfig& base, const Settings& settings);

// True when `key` may change numerics (see Knob::gated).
bool isGatedKey(const std::string& key);

}  // namespace moewb::tuner
