// Live settings: typed key bounds, TOML values and number text for the Live control panel.
#include "moewb/gui/live_settings.h"

#include <QLocale>
#include <charconv>
#include <cmath>
#include <sstream>

namespace moewb::gui {

namespace {

std::string trim(const std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return {};
  const size_t last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

}  // namespace

bool KeyBounds::acceptsNumber(double value) const {
  if (!std::isfinite(value)) return false;
  if (min && (minExclusive ? !(value > *min) : !(value >= *min))) return false;
  if (max && value > *max) return false;
  return !integer || value == std::floor(value);
}

bool KeyBounds::acceptsText(const QString& text) const {
  return choices.isEmpty() || choices.contains(text);
}

std::map<std::string, std::string> tomlKeyValues(const std::string& toml) {
  std::map<std::string, std::string> values;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trim(line.substr(0, eq));
    values[section.empty() ? key : section + "." + key] = trim(line.substr(eq + 1));
  }
  return values;
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
