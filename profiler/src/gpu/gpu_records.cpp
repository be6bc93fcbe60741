// Display names of GPU records (see gpu_records.h).
#include "gpu/gpu_records.h"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <memory>

namespace moewb::profiler::gpu {

std::string apiShortName(const std::string& callbackName) {
  const size_t v = callbackName.rfind("_v");
  if (v == std::string::npos || v + 2 >= callbackName.size()) return callbackName;
  for (size_t i = v + 2; i < callbackName.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(callbackName[i]))) return callbackName;
  }
  return callbackName.substr(0, v);
}

std::string demangle(const std::string& mangled) {
  if (!mangled.starts_with("_Z")) return mangled;
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(
      abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  return status == 0 && text ? std::string(text.get()) : mangled;
}

namespace {

// Index of the bracket that opens the group closed at `close` (')' or '>'), or npos.
size_t openingBracket(const std::string& s, size_t close) {
  const char closeChar = s[close];
  const char openChar = closeChar == ')' ? '(' : '<';
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (s[i] == closeChar) ++depth;
    if (s[i] == openChar && --depth == 0) return i;
  }
  return std::string::npos;
}

}  // namespace

std::string kernelShortName(const std::string& demangled) {
  std::string s = demangled;
  // Trailing qualifiers and the parameter list, then template arguments, from the right.
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (!s.empty() && s.back() == ')') {
    const size_t open = openingBracket(s, s.size() - 1);
    if (open != std::string::npos) s.resize(open);
  }
  while (!s.empty() && s.back() == '>') {
    const size_t open = openingBracket(s, s.size() - 1);
    if (open == std::string::npos) break;
    s.resize(open);
  }
  size_t cut = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == ' ') cut = i + 1;
    if (s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') cut = i + 2;
  }
  std::string base = s.substr(cut);
  return base.empty() ? demangled : base;
}

}  // namespace moewb::profiler::gpu
