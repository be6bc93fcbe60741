// fuzzConfig (see fuzz_targets.h): the config parser and the one validation function.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_targets.h"
#include "moewb/engine/config.h"

namespace moewb::fuzz {

int fuzzConfig(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto parsed = engine::parseConfigToml(text, "fuzz.toml");
  if (!parsed.isOk()) return 0;
  const bool valid = engine::validateConfig(*parsed).isOk();
  // Every parsed config prints to TOML that parses back and prints the same; a valid one (no NaN
  // can pass validation) also compares equal field by field.
  const std::string printed = engine::toToml(*parsed);
  auto again = engine::parseConfigToml(printed, "printed.toml");
  const char* broken = nullptr;
  if (!again.isOk())
    broken = "the printed config does not parse";
  else if (engine::toToml(*again) != printed)
    broken = "the reparsed config prints differently";
  else if (valid && !(*again == *parsed))
    broken = "the reparsed config differs";
  if (broken != nullptr) {
    std::fprintf(stderr, "config round trip broken: %s (%s)\nprinted:\n%s\n", broken,
                 again.isOk() ? "" : again.status().toString().c_str(), printed.c_str());
    std::abort();
  }
  return 0;
}

}  // namespace moewb::fuzz
