// The table of config keys: for each dotted key its type, accepted range or choices, description
// and an accessor to the RunConfig field. Parsing, overrides, validation, serialisation and the
// config reference (docs/CONFIG.md) all walk this one table, so a key is declared exactly once.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "moewb/engine/config.h"

namespace moewb::engine::detail {

using FieldRef = std::variant<int32_t& (*)(RunConfig&), int64_t& (*)(RunConfig&),
                              uint64_t& (*)(RunConfig&), double& (*)(RunConfig&),
                              std::string& (*)(RunConfig&), bool& (*)(RunConfig&)>;

struct KeySpec {
  const char* section;           // "moe"
  const char* name;              // "top_k"
  FieldRef field;
  double minValue;               // inclusive bounds for numbers
  double maxValue;
  bool minExclusive;             // true: value must be > minValue
  std::vector<std::string> choices;  // for strings; empty = any
  const char* description;

  std::string key() const { return std::string(section) + "." + name; }
  const char* typeName() const;
  std::string acceptedText() const;
};

// Every key, in file order.
const std::vector<KeySpec>& keySpecs();
// The spec of "section.name", or nullptr.
const KeySpec* findKey(const std::string& dottedKey);
// Accepted keys of one section as "a, b, c" (all keys when the section is unknown).
std::string acceptedKeysText(const std::string& section);
// A field's current value as TOML text.
std::string fieldToToml(const KeySpec& spec, const RunConfig& config);

}  // namespace moewb::engine::detail
