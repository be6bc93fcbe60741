// Live settings: accepted ranges, TOML values and number text for the Live control panel.
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

// The whole of `text` as a number (C locale), or nullopt.
std::optional<double> number(const std::string& text) {
  return parseNumber(QString::fromStdString(text));
}

QString shortNumber(double v) {
  return QString::number(v, 'g', 10);
}

}  // namespace

bool AcceptedRange::accepts(double value) const {
  if (!std::isfinite(value)) return false;
  if (!known) return true;
  const bool aboveMin = minExclusive ? value > min : value >= min;
  return aboveMin && value <= max;
}

QString AcceptedRange::describe() const {
  if (!known) return {};
  const bool bounded = std::isfinite(max);
  if (minExclusive) {
    return bounded ? QStringLiteral("> %1 and <= %2").arg(shortNumber(min), shortNumber(max))
                   : QStringLiteral("> %1").arg(shortNumber(min));
  }
  return bounded ? QStringLiteral("%1 .. %2").arg(shortNumber(min), shortNumber(max))
                 : QStringLiteral(">= %1").arg(shortNumber(min));
}

AcceptedRange parseAcceptedRange(const std::string& accepted) {
  AcceptedRange range;
  const std::string text = trim(accepted);
  if (text.rfind('>', 0) == 0) {
    // "> lo" or "> lo and <= hi"
    const size_t andPos = text.find(" and <=");
    const auto lo =
        number(trim(text.substr(1, andPos == std::string::npos ? std::string::npos : andPos - 1)));
    if (!lo) return {};
    range.min = *lo;
    range.minExclusive = true;
    if (andPos != std::string::npos) {
      const auto hi = number(trim(text.substr(andPos + 7)));
      if (!hi) return {};
      range.max = *hi;
    }
    range.known = true;
    return range;
  }
  const size_t dots = text.find("..");
  if (dots == std::string::npos || dots == 0) return {};
  const auto lo = number(text.substr(0, dots));
  if (!lo) return {};
  range.min = *lo;
  const std::string hiText = trim(text.substr(dots + 2));
  if (!hiText.empty()) {
    const auto hi = number(hiText);
    if (!hi) return {};
    range.max = *hi;
  }
  range.known = true;
  return range;
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
