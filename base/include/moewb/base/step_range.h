// StepRange and its parser: the "A:B" step windows of the command line (--dump-steps,
// --trace-steps), written once for every option that takes one; and the parser of a single step
// number as files store it (checkpoint and dump metadata).
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

// A step number: the whole text is a base-10 integer >= 0 (no sign, spaces or suffix). Errors:
// kInvalidArgument saying the text (cut to 40 characters) is not a step number.
Result<int64_t> parseStepNumber(const std::string& text);

}  // namespace moewb
