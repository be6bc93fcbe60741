// StepRange and its parser: the "A:B" step windows of the command line (--dump-steps,
// --trace-steps), written once for every option that takes one.
#pragma once

#include <cstdint>
#include <string>

#include "moewb/base/status.h"

namespace moewb {

// Steps [first, end): 0 <= first < end.
struct StepRange {
  int64_t first = 0;
  int64_t end = 0;
};

// "A:B" (0 <= A < B, steps A..B-1) or a single step "A" (= A:A+1). Errors: kInvalidArgument
// naming `option` and the text, and saying what is accepted.
Result<StepRange> parseStepRange(const std::string& text, const std::string& option);

}  // namespace moewb
