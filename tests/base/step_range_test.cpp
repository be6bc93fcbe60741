// parseStepRange: the accepted forms, every refused one with the option named.
#include "moewb/base/step_range.h"

#include <gtest/gtest.h>

namespace moewb {
namespace {

TEST(StepRange, RangesAndSingleSteps) {
  Result<StepRange> range = parseStepRange("10:15", "--trace-steps");
  ASSERT_TRUE(range.isOk());
  EXPECT_EQ(range->first, 10);
  EXPECT_EQ(range->end, 15);
  range = parseStepRange("7", "--dump-steps");
  ASSERT_TRUE(range.isOk());
  EXPECT_EQ(range->first, 7);
  EXPECT_EQ(range->end, 8);
}

TEST(StepRange, RefusesWhatIsNotARange) {
  for (const char* text : {"", ":", "5:", ":5", "5:5", "6:5", "-1:3", "a", "1:b", "1:2:3", " 1:2",
                           "1 :2", "1:2 ", "99999999999999999999:1", "9223372036854775807"}) {
    Result<StepRange> range = parseStepRange(text, "--dump-steps");
    EXPECT_FALSE(range.isOk()) << "'" << text << "'";
    if (range.isOk()) continue;
    EXPECT_EQ(range.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(range.status().message().find("--dump-steps '" + std::string(text) + "'"),
              std::string::npos)
        << range.status().message();
  }
}

TEST(StepNumber, TakesWholeNonNegativeNumbersOnly) {
  EXPECT_EQ(*parseStepNumber("0"), 0);
  EXPECT_EQ(*parseStepNumber("300"), 300);
  for (const char* text : {"", "abc", "-1", "+3", " 3", "3 ", "3x", "99999999999999999999"}) {
    Result<int64_t> step = parseStepNumber(text);
    EXPECT_FALSE(step.isOk()) << "'" << text << "'";
    if (!step.isOk()) {
      EXPECT_NE(step.status().message().find("not a step number"), std::string::npos);
    }
  }
  // A huge value is cut in the message, not echoed in full.
  Result<int64_t> huge = parseStepNumber(std::string(100000, 'x'));
  ASSERT_FALSE(huge.isOk());
  EXPECT_LT(huge.status().message().size(), 120u);
}

}  // namespace
}  // namespace moewb
