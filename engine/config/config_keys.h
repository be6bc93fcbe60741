// The table of config keys: for each dotted key its type, accepted range or choices, description
// and an accessor to the RunConfig field. Parsing, overrides, validation, serialisation, the
// config reference (docs/CONFIG.md) and the typed bounds of configKeys() all walk this one table,
// so a key is declared exactly once; its accepted text is written from its typed bounds.
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
  double minValue;               // numbers: lowest accepted value (inclusive unless minExclusive)
  double maxValue;               // numbers: highest accepted value; +infinity (kNoMax in the
                                 // table) = as large as the field holds
  bool minExclusive;             // true: value must be > minValue
  std::vector<std::string> choices;  // for strings; empty = any
  const char* description;

  std::string key() const { return std::string(section) + "." + name; }
  const char* typeName() const;
  // The key as configKeys() lists it: typed bounds copied from this spec, `accepted` written from
  // those bounds, the default read from RunConfig{}. Allocates; configKeys() caches the results.
  ConfigKeyInfo info() const;
  // The accepted values as text (info().accepted), for messages.
  std::string acceptedText() const;
};

// The text of `info`'s typed bounds, as docs/CONFIG.md shows it: "lo..hi", "lo.." (no max),
// "> lo and <= hi", "> lo", the quoted choices joined by " | ", "any string", "true | false".
std::string acceptedText(const ConfigKeyInfo& info);

// Every key, in file order.
const std::vector<KeySpec>& keySpecs();
// The spec of "section.name", or nullptr.
const KeySpec* findKey(const std::string& dottedKey);
// Accepted keys of one section as "a, b, c" (all keys when the section is unknown).
std::string acceptedKeysText(const std::string& section);
// A field's current value as TOML text.
std::string fieldToToml(const KeySpec& spec, const RunConfig& config);

}  // namespace moewb::engine::detail
