// CaptureMode (no GPU): the steps each mode captures, its description, and parseCaptureMode's
// validation of the `moewb run` options, each error naming the option and what is accepted.
#include "moewb/profiler/capture_mode.h"

#include <gtest/gtest.h>

#include <vector>

namespace moewb::profiler {
namespace {

std::vector<int64_t> captured(const CaptureMode& mode, int64_t steps) {
  std::vector<int64_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    if (mode.capturesStep(s)) out.push_back(s);
  }
  return out;
}

CaptureModeArgs traced() {
  CaptureModeArgs args;
  args.gpuTrace = true;
  args.plannedSteps = 200;
  return args;
}

// The message of a rejected parse ("" when it was accepted).
std::string rejection(const CaptureModeArgs& args) {
  auto mode = parseCaptureMode(args);
  if (mode.isOk()) return "";
  EXPECT_EQ(mode.status().code(), StatusCode::kInvalidArgument);
  return mode.status().message();
}

TEST(CaptureMode, DefaultCapturesEveryStep) {
  auto mode = parseCaptureMode(traced());
  ASSERT_TRUE(mode.isOk());
  EXPECT_TRUE(mode->isEveryStep());
  EXPECT_EQ(captured(*mode, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(mode->describe(), "every step");
  // No mode option at all is fine without --gpu-trace too.
  EXPECT_TRUE(parseCaptureMode({}).isOk());
}

TEST(CaptureMode, EveryNthStep) {
  CaptureModeArgs args = traced();
  args.traceEvery = 3;
  auto mode = parseCaptureMode(args);
  ASSERT_TRUE(mode.isOk());
  EXPECT_FALSE(mode->isEveryStep());
  EXPECT_EQ(captured(*mode, 10), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(mode->describe(), "every 3rd step");
}

TEST(CaptureMode, StepWindowAndEveryNthInsideIt) {
  CaptureModeArgs args = traced();
  args.traceSteps = "100:120";
  auto window = parseCaptureMode(args);
  ASSERT_TRUE(window.isOk());
  EXPECT_EQ(window->firstStep, 100);
  EXPECT_EQ(window->endStep, 120);
  EXPECT_FALSE(window->capturesStep(99));
  EXPECT_TRUE(window->capturesStep(100));
  EXPECT_TRUE(window->capturesStep(119));
  EXPECT_FALSE(window->capturesStep(120));
  EXPECT_EQ(window->describe(), "every step of steps 100..119");

  args.traceEvery = 5;
  auto both = parseCaptureMode(args);
  ASSERT_TRUE(both.isOk());
  EXPECT_EQ(captured(*both, 200), (std::vector<int64_t>{100, 105, 110, 115}));

  CaptureModeArgs single = traced();
  single.traceSteps = "7";
  auto one = parseCaptureMode(single);
  ASSERT_TRUE(one.isOk());
  EXPECT_EQ(captured(*one, 20), (std::vector<int64_t>{7}));
}

TEST(CaptureMode, FlightRecorderCapturesEveryStepAndNamesItsTriggers) {
  CaptureModeArgs args = traced();
  args.flightRecorder = 8;
  args.triggerLoad = 4;
  args.triggerStepMs = 30;
  auto mode = parseCaptureMode(args);
  ASSERT_TRUE(mode.isOk());
  EXPECT_TRUE(mode->isFlightRecorder());
  EXPECT_EQ(mode->flightRecorderSteps, 8);
  EXPECT_EQ(captured(*mode, 3), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(mode->describe(),
            "flight recorder (last 8 steps; triggers: expert max/mean load > 4 step time > 30 ms)");
}

TEST(CaptureMode, ModeOptionsNeedGpuTrace) {
  CaptureModeArgs args;
  args.traceEvery = 2;
  EXPECT_NE(rejection(args).find("--trace-every"), std::string::npos);
  EXPECT_NE(rejection(args).find("needs --gpu-trace"), std::string::npos);
  CaptureModeArgs trigger;
  trigger.triggerStepMs = 5;
  EXPECT_NE(rejection(trigger).find("--trigger-step-ms"), std::string::npos);
}

TEST(CaptureMode, RejectsBadNumbersAndWindows) {
  CaptureModeArgs every = traced();
  every.traceEvery = 0;
  EXPECT_NE(rejection(every).find("--trace-every 0 is out of range; accepted: N >= 1"),
            std::string::npos);
  for (const char* text : {"", "5:5", "9:3", "-1:4", "a:b", "3:", ":4", "2:4x", "1.5"}) {
    CaptureModeArgs window = traced();
    window.traceSteps = text;
    EXPECT_NE(rejection(window).find("is not a step range; accepted: A:B"), std::string::npos)
        << text;
  }
  CaptureModeArgs late = traced();
  late.plannedSteps = 20;
  late.traceSteps = "100:120";
  EXPECT_NE(rejection(late).find("captures nothing: the run trains steps 0..19"),
            std::string::npos);
}

TEST(CaptureMode, RejectsBadFlightRecorderCombinations) {
  CaptureModeArgs noTrigger = traced();
  noTrigger.flightRecorder = 4;
  EXPECT_NE(rejection(noTrigger).find("has no trigger"), std::string::npos);

  CaptureModeArgs noRecorder = traced();
  noRecorder.triggerLoad = 3;
  EXPECT_NE(rejection(noRecorder).find("--trigger-load needs --flight-recorder"),
            std::string::npos);

  CaptureModeArgs cooldownAlone = traced();
  cooldownAlone.triggerCooldown = 5;
  EXPECT_NE(rejection(cooldownAlone).find("--trigger-cooldown needs --flight-recorder"),
            std::string::npos);
  CaptureModeArgs negativeCooldown = traced();
  negativeCooldown.flightRecorder = 4;
  negativeCooldown.triggerStepMs = 10;
  negativeCooldown.triggerCooldown = -1;
  EXPECT_NE(rejection(negativeCooldown).find("--trigger-cooldown -1 is out of range"),
            std::string::npos);
  CaptureModeArgs cooled = traced();
  cooled.flightRecorder = 4;
  cooled.triggerStepMs = 10;
  cooled.triggerCooldown = 100;
  auto mode = parseCaptureMode(cooled);
  ASSERT_TRUE(mode.isOk()) << mode.status().toString();
  EXPECT_EQ(mode->triggers.cooldownSteps, 100);
  EXPECT_NE(mode->describe().find("cooldown 100 steps"), std::string::npos) << mode->describe();

  CaptureModeArgs withWindow = traced();
  withWindow.flightRecorder = 4;
  withWindow.triggerStepMs = 10;
  withWindow.traceSteps = "1:3";
  EXPECT_NE(rejection(withWindow).find("cannot be combined with --trace-steps"), std::string::npos);

  CaptureModeArgs zero = traced();
  zero.flightRecorder = 0;
  zero.triggerStepMs = 10;
  EXPECT_NE(rejection(zero).find("--flight-recorder 0 is out of range"), std::string::npos);
  zero.flightRecorder = kMaxFlightRecorderSteps + 1;
  EXPECT_NE(rejection(zero).find("is out of range"), std::string::npos);

  CaptureModeArgs low = traced();
  low.flightRecorder = 4;
  low.triggerLoad = 1.0;  // max/mean is never below 1: this would fire every step
  EXPECT_NE(rejection(low).find("--trigger-load 1 is out of range; accepted: a max/mean expert "
                                "load X > 1"),
            std::string::npos);
  low.triggerLoad = std::nullopt;
  low.triggerStepMs = -2;
  EXPECT_NE(rejection(low).find("--trigger-step-ms -2 is out of range"), std::string::npos);
  low.triggerStepMs = std::nullopt;
  low.triggerMemoryGiB = 0;
  EXPECT_NE(rejection(low).find("--trigger-memory-gib 0 is out of range"), std::string::npos);
}

}  // namespace
}  // namespace moewb::profiler
