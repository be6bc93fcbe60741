#include "moewb/base/text.h"

#include <gtest/gtest.h>

#include <string>

namespace moewb {
namespace {

TEST(Text, ShortRunsAndWhitespaceAreKept) {
  const std::string message = "model.d_model must be an integer, got string 'wide'\n  next line";
  EXPECT_EQ(shortenLongRuns(message), message);
}

TEST(Text, AMegabyteValueIsCutToItsEndsAndLength) {
  const std::string value(1'000'000, 'A');
  const std::string shortened = shortenLongRuns("got string '" + value + "' in x.toml", 200);
  EXPECT_LT(shortened.size(), 300u);
  EXPECT_NE(shortened.find("'AAAA"), std::string::npos) << shortened;
  EXPECT_NE(shortened.find("...AAAA"), std::string::npos) << shortened;
  EXPECT_NE(shortened.find("(1000002 characters)"), std::string::npos) << shortened;
  EXPECT_NE(shortened.find(" in x.toml"), std::string::npos) << shortened;
}

TEST(Text, CutsNeverSplitAUtf8Character) {
  std::string value;
  for (int i = 0; i < 300; ++i) value += "\xC3\xA9";  // é, two bytes each
  const std::string shortened = shortenLongRuns(value, 101);
  const size_t dots = shortened.find("...");
  ASSERT_NE(dots, std::string::npos);
  EXPECT_EQ(dots % 2, 0u) << "the head ends inside a character";
  const size_t tail = shortened.find(" (");
  EXPECT_EQ((tail - dots - 3) % 2, 0u) << "the tail starts inside a character";
}

TEST(JoinText, PutsTheSeparatorBetweenParts) {
  EXPECT_EQ(joinText({}, ", "), "");
  EXPECT_EQ(joinText({"a"}, ", "), "a");
  EXPECT_EQ(joinText({"a", "b", "c"}, ", "), "a, b, c");
  EXPECT_EQ(joinText({"moe_act", "expert_fc2"}, ","), "moe_act,expert_fc2");
}

TEST(TomlKeyValues, ReadsSectionKeysAsTrimmedTomlText) {
  const auto values = tomlKeyValues(
      "# a comment\n"
      "top = 1\n"
      "\n"
      "[optim]\n"
      "  lr =  0.003 \r\n"
      "[loss]\n"
      "kind = \"cce\"\n"
      "kind = \"dense\"\n"
      "not a key line\n");
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values.at("top"), "1");
  EXPECT_EQ(values.at("optim.lr"), "0.003");
  EXPECT_EQ(values.at("loss.kind"), "\"dense\"");  // the last one wins
  EXPECT_TRUE(tomlKeyValues("").empty());
}

}  // namespace
}  // namespace moewb
