// Live settings helpers: typed key bounds as the engine gives them, config values out of TOML,
// numbers typed by people and the TOML floats sent back.
#include "moewb/gui/live_settings.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "moewb/base/text.h"

namespace moewb::gui {
namespace {

TEST(LiveSettings, KeyBoundsCheckNumbers) {
  KeyBounds closed;  // optim.beta1: 0..0.999999
  closed.min = 0;
  closed.max = 0.999999;
  EXPECT_TRUE(closed.acceptsNumber(0));
  EXPECT_TRUE(closed.acceptsNumber(0.9));
  EXPECT_TRUE(closed.acceptsNumber(0.999999));
  EXPECT_FALSE(closed.acceptsNumber(2));
  EXPECT_FALSE(closed.acceptsNumber(-0.1));

  KeyBounds open;  // optim.warmup_steps: 0.. (no max), whole numbers
  open.min = 0;
  open.integer = true;
  EXPECT_TRUE(open.acceptsNumber(1e12));
  EXPECT_FALSE(open.acceptsNumber(-1));
  EXPECT_FALSE(open.acceptsNumber(2.5));

  KeyBounds exclusive;  // optim.lr: > 0 and <= 10
  exclusive.min = 0;
  exclusive.minExclusive = true;
  exclusive.max = 10;
  EXPECT_FALSE(exclusive.acceptsNumber(0));
  EXPECT_TRUE(exclusive.acceptsNumber(1e-9));
  EXPECT_TRUE(exclusive.acceptsNumber(10));
  EXPECT_FALSE(exclusive.acceptsNumber(10.5));
  EXPECT_FALSE(exclusive.acceptsNumber(std::nan("")));
  EXPECT_FALSE(exclusive.acceptsNumber(std::numeric_limits<double>::infinity()));

  const KeyBounds none;  // a key the engine does not describe: any finite number
  EXPECT_TRUE(none.acceptsNumber(-5e30));
  EXPECT_FALSE(none.acceptsNumber(std::nan("")));
}

TEST(LiveSettings, KeyBoundsCheckChoices) {
  KeyBounds policy;  // moe.drop_policy
  policy.choices = {QStringLiteral("probs"), QStringLiteral("position")};
  EXPECT_TRUE(policy.acceptsText(QStringLiteral("position")));
  EXPECT_FALSE(policy.acceptsText(QStringLiteral("Position")));  // exact, as the engine checks
  EXPECT_FALSE(policy.acceptsText(QStringLiteral("")));
  EXPECT_TRUE(KeyBounds{}.acceptsText(QStringLiteral("any text")));
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
