// Candidate values of the tunable keys: the per-key ladders the search space starts from, and the
// canonical text of a value (what toToml writes back after applyOverride), so "1.0", "1" and
// "1.00" name the same setting. Private to the tuner.
#pragma once

#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"

namespace moewb::tuner::detail {

// The key's value in `config` as the settings list writes it: toToml's text, strings unquoted.
// Empty when `key` is not a config key.
std::string currentValue(const engine::RunConfig& config, const std::string& key);

// `text` applied to a copy of `base` and read back with currentValue: the canonical text.
// kInvalidArgument (the engine's message) when the key refuses the text.
Result<std::string> canonicalValue(const engine::RunConfig& base, const std::string& key,
                                   const std::string& text);

// Generated candidate values of a tunable key over `base` (TOML text, not yet canonical); the
// caller adds the base value and checks each against the key's bounds.
std::vector<std::string> generatedValues(const engine::RunConfig& base,
                                         const engine::ConfigKeyInfo& info);

// The key's entry of engine::configKeys(), or nullptr.
const engine::ConfigKeyInfo* findKeyInfo(const std::string& key);

// ok when `text` is inside the key's typed bounds (numbers, choices, booleans); otherwise
// kInvalidArgument naming the key, the value and the accepted text.
Status checkAgainstBounds(const engine::ConfigKeyInfo& info, const std::string& text);

}  // namespace moewb::tuner::detail
