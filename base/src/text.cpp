#include "moewb/base/text.h"

#include <cctype>
#include <sstream>

namespace moewb {
namespace {

bool isSpace(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

// Moves `pos` back to the start of the UTF-8 character it falls in (never before `begin`).
size_t characterStart(const std::string& text, size_t pos, size_t begin) {
  while (pos > begin && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}

// `text` without leading and trailing spaces, tabs and carriage returns.
std::string trimmedLine(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return {};
  const size_t last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

}  // namespace

std::string shortenLongRuns(const std::string& message, size_t maxRunChars) {
  constexpr size_t kTailChars = 16;
  if (maxRunChars < 2 * kTailChars) maxRunChars = 2 * kTailChars;
  std::string out;
  out.reserve(message.size() < 4 * maxRunChars ? message.size() : 4 * maxRunChars);
  size_t i = 0;
  while (i < message.size()) {
    size_t end = i;
    const bool space = isSpace(message[i]);
    while (end < message.size() && isSpace(message[end]) == space) ++end;
    const size_t length = end - i;
    if (space || length <= maxRunChars) {
      out.append(message, i, length);
    } else {
      const size_t headEnd = characterStart(message, i + maxRunChars / 2, i);
      const size_t tailStart = characterStart(message, end - kTailChars, headEnd);
      out.append(message, i, headEnd - i);
      out += "...";
      out.append(message, tailStart, end - tailStart);
      out += " (" + std::to_string(length) + " characters)";
    }
    i = end;
  }
  return out;
}

std::string joinText(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : separator) + part;
  return out;
}

std::map<std::string, std::string> tomlKeyValues(const std::string& toml) {
  std::map<std::string, std::string> values;
  std::istringstream in(toml);
  std::string line, section;
  while (std::getline(in, line)) {
    line = trimmedLine(line);
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = trimmedLine(line.substr(1, line.size() - 2));
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = trimmedLine(line.substr(0, eq));
    values[section.empty() ? key : section + "." + key] = trimmedLine(line.substr(eq + 1));
  }
  return values;
}

bool isValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const unsigned char* end = p + text.size();
  while (p < end) {
    const unsigned char c = *p;
    int more = 0;
    unsigned char low = 0x80, high = 0xBF;  // the range of the byte after the lead byte
    if (c < 0x80) {
      ++p;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      more = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      more = 2;
      if (c == 0xE0) low = 0xA0;
      if (c == 0xED) high = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      more = 3;
      if (c == 0xF0) low = 0x90;
      if (c == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (end - p <= more || p[1] < low || p[1] > high) return false;
    for (int i = 2; i <= more; ++i) {
      if (p[i] < 0x80 || p[i] > 0xBF) return false;
    }
    p += more + 1;
  }
  return true;
}

}  // namespace moewb
