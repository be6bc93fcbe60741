// The NVIDIA driver's release from /proc/driver/nvidia/version (see driver_release.h).
#include "runtime/driver_release.h"

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>

namespace moewb::engine {
namespace {

// Digits and dots, at least one dot, starting and ending with a digit.
bool isRelease(const std::string& token) {
  if (token.empty() || !std::isdigit(static_cast<unsigned char>(token.front())) ||
      !std::isdigit(static_cast<unsigned char>(token.back()))) {
    return false;
  }
  bool dot = false;
  for (char c : token) {
    if (c == '.') {
      dot = true;
    } else if (!std::isdigit(static_cast<unsigned char>(c))) {
      return false;
    }
  }
  return dot;
}

}  // namespace

std::string nvidiaDriverReleaseFrom(const std::string& versionText) {
  const std::string marker = "Kernel Module";
  const size_t at = versionText.find(marker);
  if (at == std::string::npos) return "";
  std::istringstream rest(versionText.substr(at + marker.size()));
  std::string token;
  while (rest >> token) {
    if (isRelease(token)) return token;
  }
  return "";
}

std::string nvidiaDriverRelease() {
  std::ifstream file("/proc/driver/nvidia/version");
  if (!file) return "";
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return nvidiaDriverReleaseFrom(text);
}

}  // namespace moewb::engine
