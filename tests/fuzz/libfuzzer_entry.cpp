// The libFuzzer entry point of one fuzz target: MOEWB_FUZZ_TARGET names the function of
// fuzz_targets.h this executable fuzzes (set per executable in tests/fuzz/CMakeLists.txt).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return moewb::fuzz::MOEWB_FUZZ_TARGET(data, size);
}
