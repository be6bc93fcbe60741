// Live settings: the helpers behind the Live control panel's editors. KeyBounds holds one config
// key's typed bounds as the engine gives them (engine::ConfigKeyInfo: min, max, whole numbers,
// choices; the panel copies them field by field, since this library does not link the engine)
// and checks a typed value against them; the rest writes a user's number back as a TOML float (a
// whole config's values come out of its TOML through moewb::tomlKeyValues, base/text.h). The
// engine's validateConfig stays the one judge of a patch (and of the rules between keys): the
// panel only uses the bounds to flag a value before it is sent.
// Pure functions and value types, no widgets and no engine dependency; safe from any thread.
#pragma once

#include <QString>
#include <QStringList>
#include <map>
#include <optional>
#include <string>

namespace moewb::gui {

// The values one config key accepts (engine::ConfigKeyInfo's typed bounds). A default KeyBounds
// (no min, no max, no choices) accepts every finite number and every text.
struct KeyBounds {
  std::optional<double> min;  // lowest accepted number; none = no lower bound
  bool minExclusive = false;  // "> min" rather than ">= min"
  std::optional<double> max;  // highest accepted number (inclusive); none = no upper bound
  bool integer = false;       // whole numbers only
  QStringList choices;        // accepted texts, exact; empty = any text

  // True when `value` is finite, inside the bounds and whole for an integer key.
  bool acceptsNumber(double value) const;
  // True when `text` is one of `choices`, or `choices` is empty.
  bool acceptsText(const QString& text) const;
};

// The number in `text` (C locale, e.g. "1e-3", "0.5", " 3 "), or nullopt.
std::optional<double> parseNumber(const QString& text);

// `value` as a TOML float with the fewest digits that read back exactly: "0.001", "2.0",
// "1e-08". Not finite values give "nan" / "inf" / "-inf".
std::string floatToToml(double value);

}  // namespace moewb::gui
