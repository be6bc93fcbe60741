// Live settings: typed key bounds and number text for the Live control panel.
#include "moewb/gui/live_settings.h"

#include <QLocale>
#include <charconv>
#include <cmath>

namespace moewb::gui {

bool KeyBounds::acceptsNumber(double value) const {
  if (!std::isfinite(value)) return false;
  if (min && (minExclusive ? !(value > *min) : !(value >= *min))) return false;
  if (max && value > *max) return false;
  return !integer || value == std::floor(value);
}

bool KeyBounds::acceptsText(const QString& text) const {
  return choices.isEmpty() || choices.contains(text);
}

std::optional<double> parseNumber(const QString& text) {
  bool ok = false;
  const double value = QLocale::c().toDouble(text.trimmed(), &ok);
  if (!ok) return std::nullopt;
  return value;
}

std::string floatToToml(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value);
  std::string text(buf, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace moewb::gui
