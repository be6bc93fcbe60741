// Live settings: the text helpers behind the Live control panel's editors. The engine describes
// each config key as text (engine::ConfigKeyInfo: type "integer" | "float" | "string", accepted
// "0..10", "> 0 and <= 1", "0.."; values as TOML); these turn that text into ranges an editor can
// check, read a whole config's values out of its TOML (engine::toToml), and write a user's number
// back as a TOML float. The engine's validateConfig stays the one judge of a patch: the panel
// only uses the range to flag a value before it is sent.
// Pure functions, no widgets and no engine dependency; safe from any thread. O(text length).
#pragma once

#include <QString>
#include <limits>
#include <map>
#include <optional>
#include <string>

namespace moewb::gui {

// The numeric range of an accepted-values text.
struct AcceptedRange {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool minExclusive = false;  // "> min" rather than ">= min"
  bool known = false;         // false when the text is not a numeric range (choices, "any")

  // True when `value` is finite and inside the range (always true for an unknown range).
  bool accepts(double value) const;
  // The range as people read it: "0 .. 10", "> 0 and <= 1", ">= 0".
  QString describe() const;
};

// Parses engine::ConfigKeyInfo::accepted for numbers: "lo..hi", "lo.." (no upper bound),
// "> lo", "> lo and <= hi". Anything else gives an unknown range.
AcceptedRange parseAcceptedRange(const std::string& accepted);

// "section.key" -> value text for every `key = value` line under a `[section]` header of
// `toml` (the layout engine::toToml writes). Values are trimmed and kept as TOML text.
std::map<std::string, std::string> tomlKeyValues(const std::string& toml);

// The number in `text` (C locale, e.g. "1e-3", "0.5", " 3 "), or nullopt.
std::optional<double> parseNumber(const QString& text);

// `value` as a TOML float with the fewest digits that read back exactly: "0.001", "2.0",
// "1e-08". Not finite values give "nan" / "inf" / "-inf".
std::string floatToToml(double value);

}  // namespace moewb::gui
