// Live settings helpers: accepted-range texts as the engine writes them, config values out of
// TOML, numbers typed by people and the TOML floats sent back.
#include "moewb/gui/live_settings.h"

#include <gtest/gtest.h>

#include <cmath>

namespace moewb::gui {
namespace {

TEST(LiveSettings, ParsesAcceptedRanges) {
  const AcceptedRange closed = parseAcceptedRange("0..0.999999");
  ASSERT_TRUE(closed.known);
  EXPECT_TRUE(closed.accepts(0));
  EXPECT_TRUE(closed.accepts(0.9));
  EXPECT_FALSE(closed.accepts(2));
  EXPECT_FALSE(closed.accepts(-0.1));
  EXPECT_EQ(closed.describe(), "0 .. 0.999999");

  const AcceptedRange open = parseAcceptedRange("0..");
  ASSERT_TRUE(open.known);
  EXPECT_TRUE(open.accepts(1e12));
  EXPECT_FALSE(open.accepts(-1));
  EXPECT_EQ(open.describe(), ">= 0");

  const AcceptedRange exclusive = parseAcceptedRange("> 0 and <= 10");
  ASSERT_TRUE(exclusive.known);
  EXPECT_FALSE(exclusive.accepts(0));
  EXPECT_TRUE(exclusive.accepts(1e-9));
  EXPECT_TRUE(exclusive.accepts(10));
  EXPECT_FALSE(exclusive.accepts(10.5));
  EXPECT_EQ(exclusive.describe(), "> 0 and <= 10");

  const AcceptedRange above = parseAcceptedRange("> 0");
  ASSERT_TRUE(above.known);
  EXPECT_TRUE(above.accepts(5e30));
  EXPECT_FALSE(above.accepts(std::nan("")));

  for (const char* text : {"\"cpu\" | \"auto\"", "any string", "", "..3", "a..b", "> x"}) {
    const AcceptedRange r = parseAcceptedRange(text);
    EXPECT_FALSE(r.known) << text;
    EXPECT_TRUE(r.accepts(1)) << text;
  }
}

TEST(LiveSettings, ReadsValuesOutOfToml) {
  const auto values = tomlKeyValues(
      "[run]\nname = \"tiny\"\nsteps = 300\n\n[optim]\nlr = 0.0030000000000000001\n"
      "  beta1 = 0.9  \n# comment\n[data]\nskew = 1.0\n");
  EXPECT_EQ(values.at("run.name"), "\"tiny\"");
  EXPECT_EQ(values.at("run.steps"), "300");
  EXPECT_EQ(values.at("optim.lr"), "0.0030000000000000001");
  EXPECT_EQ(values.at("optim.beta1"), "0.9");
  EXPECT_EQ(values.at("data.skew"), "1.0");
  EXPECT_EQ(values.size(), 5u);
}

TEST(LiveSettings, NumbersInAndOut) {
  EXPECT_EQ(parseNumber(QStringLiteral("1e-3")), 1e-3);
  EXPECT_EQ(parseNumber(QStringLiteral(" 0.5 ")), 0.5);
  EXPECT_EQ(parseNumber(QStringLiteral(".5")), 0.5);
  EXPECT_FALSE(parseNumber(QStringLiteral("1,5")).has_value());
  EXPECT_FALSE(parseNumber(QStringLiteral("")).has_value());
  EXPECT_FALSE(parseNumber(QStringLiteral("lr")).has_value());

  EXPECT_EQ(floatToToml(1e-3), "0.001");
  EXPECT_EQ(floatToToml(2), "2.0");
  EXPECT_EQ(floatToToml(0.1), "0.1");
  EXPECT_EQ(floatToToml(1e-8), "1e-08");
  EXPECT_EQ(floatToToml(-3.5), "-3.5");
  EXPECT_EQ(floatToToml(std::nan("")), "nan");
  // Shortest text that reads back exactly.
  for (double v : {0.003, 1.0 / 3.0, 6.02e23, 0.999999}) {
    EXPECT_EQ(std::stod(floatToToml(v)), v);
  }
}

}  // namespace
}  // namespace moewb::gui
