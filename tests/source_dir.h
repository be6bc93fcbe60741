// sourceDir(): the source tree a test reads its data from (sample configs, docs): the environment
// variable MOEWB_SOURCE_DIR when set (a test bundle run on another machine, see
// scripts/gpu-test.sh), else the tree the test was built from (the compile definition of the same
// name).
#pragma once

#include <cstdlib>
#include <string>

namespace moewb::test {

inline std::string sourceDir() {
  const char* fromEnvironment = std::getenv("MOEWB_SOURCE_DIR");
  return fromEnvironment != nullptr && *fromEnvironment != '\0' ? fromEnvironment : MOEWB_SOURCE_DIR;
}

}  // namespace moewb::test
