// The live-control protocol's text side: request parsing (verbs, set's and apply's assignments,
// junk), UTF-8 checks and answer lines.
#include "moewb/run/control_protocol.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moewb/base/text.h"

namespace moewb::run {
namespace {

TEST(ControlProtocol, ParsesEveryVerb) {
  const std::pair<const char*, ControlVerb> cases[] = {
      {"status", ControlVerb::kStatus}, {"pause", ControlVerb::kPause},
      {"resume", ControlVerb::kResume}, {"step", ControlVerb::kStep},
      {"stop", ControlVerb::kStop},     {"keys", ControlVerb::kKeys},
  };
  for (const auto& [line, verb] : cases) {
    Result<ControlRequest> request = parseControlRequest(line);
    ASSERT_TRUE(request.isOk()) << line << ": " << request.status().toString();
    EXPECT_EQ(request->verb, verb) << line;
    EXPECT_TRUE(request->assignments.empty());
  }
  // Surrounding blanks and a CRLF line end are accepted.
  Result<ControlRequest> padded = parseControlRequest("  \tpause \r");
  ASSERT_TRUE(padded.isOk()) << padded.status().toString();
  EXPECT_EQ(padded->verb, ControlVerb::kPause);
}

TEST(ControlProtocol, SetTakesAssignmentsAndJoinsSpacedValues) {
  Result<ControlRequest> request =
      parseControlRequest("set optim.lr=1e-3  moe.top_k=1 swap.ops=[\"moe_act\", \"attn\"]");
  ASSERT_TRUE(request.isOk()) << request.status().toString();
  EXPECT_EQ(request->verb, ControlVerb::kSet);
  ASSERT_EQ(request->assignments.size(), 3u);
  EXPECT_EQ(request->assignments[0], "optim.lr=1e-3");
  EXPECT_EQ(request->assignments[1], "moe.top_k=1");
  EXPECT_EQ(request->assignments[2], "swap.ops=[\"moe_act\", \"attn\"]");
}

TEST(ControlProtocol, ApplyIsSetWithSourceTuner) {
  Result<ControlRequest> apply =
      parseControlRequest("apply moe.capacity_factor=0.5 moe.drop_policy=\"position\"");
  ASSERT_TRUE(apply.isOk()) << apply.status().toString();
  EXPECT_EQ(apply->verb, ControlVerb::kApply);
  EXPECT_EQ(apply->source, "tuner");
  ASSERT_EQ(apply->assignments.size(), 2u);
  EXPECT_EQ(apply->assignments[0], "moe.capacity_factor=0.5");
  EXPECT_EQ(apply->assignments[1], "moe.drop_policy=\"position\"");
  // `set` keeps the server's source ("" here: the server fills in "cli").
  Result<ControlRequest> set = parseControlRequest("set optim.lr=1e-3");
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->source, "");
  // The same refusals as set, naming apply.
  Result<ControlRequest> empty = parseControlRequest("apply");
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("apply needs at least one KEY=VALUE"),
            std::string::npos)
      << empty.status().message();
  Result<ControlRequest> word = parseControlRequest("apply now optim.lr=1");
  ASSERT_FALSE(word.isOk());
  EXPECT_NE(word.status().message().find("apply: 'now' is not an assignment"), std::string::npos)
      << word.status().message();
  EXPECT_FALSE(parseControlRequest("APPLY optim.lr=1").isOk());
  EXPECT_NE(std::string(controlRequestList()).find("apply KEY=VALUE"), std::string::npos);
}

TEST(ControlProtocol, ReadsTheTraceOfAStatusAndTheKeysOfAKeysAnswer) {
  Result<std::string> trace = controlStatusTrace(
      "ok state=paused step=4 planned=9 committed=4 backend=cpu trace=/tmp/my runs/t.sqlite");
  ASSERT_TRUE(trace.isOk()) << trace.status().toString();
  EXPECT_EQ(*trace, "/tmp/my runs/t.sqlite");
  EXPECT_FALSE(controlStatusTrace("ok state=running step=1").isOk());
  EXPECT_FALSE(controlStatusTrace("ok state=running trace=").isOk());
  EXPECT_FALSE(controlStatusTrace("error: x trace=/a").isOk());

  Result<std::vector<std::string>> keys = controlKeyList("ok optim.lr  moe.capacity_factor");
  ASSERT_TRUE(keys.isOk()) << keys.status().toString();
  EXPECT_EQ(*keys, (std::vector<std::string>{"optim.lr", "moe.capacity_factor"}));
  ASSERT_TRUE(controlKeyList("ok").isOk());
  EXPECT_TRUE(controlKeyList("ok")->empty());
  EXPECT_FALSE(controlKeyList("error: no").isOk());
}

TEST(ControlProtocol, RefusesBadRequestsWithPlainWords) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "empty request"},
      {"   ", "empty request"},
      {"bogus", "unknown command 'bogus'"},
      {"STATUS", "unknown command 'STATUS'"},
      {"pause now", "pause takes no arguments"},
      {"set", "set needs at least one KEY=VALUE"},
      {"set lr", "'lr' is not an assignment"},
      {"set =3", "'=3' is not an assignment"},
      {std::string("status\0x", 8), "control characters"},
      {"st\x1b[2Jatus", "control characters"},
      {"\xff\xfe status", "not UTF-8"},
      {"caf\xc3", "not UTF-8"},             // cut short
      {"\xc0\xaf", "not UTF-8"},            // overlong '/'
      {"\xed\xa0\x80", "not UTF-8"},        // a surrogate
      {std::string(kControlMaxLineBytes + 1, 'a'), "at most 4096"},
  };
  for (const auto& [line, expected] : cases) {
    Result<ControlRequest> request = parseControlRequest(line);
    ASSERT_FALSE(request.isOk()) << "accepted: " << line;
    EXPECT_EQ(request.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(request.status().message().find(expected), std::string::npos)
        << request.status().message();
  }
  // The accepted requests are named where a verb is unknown.
  EXPECT_NE(parseControlRequest("x").status().message().find(controlRequestList()),
            std::string::npos);
}

TEST(ControlProtocol, Utf8TextIsAcceptedAsAValue) {
  EXPECT_TRUE(isValidUtf8("run.name=caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  Result<ControlRequest> request = parseControlRequest("set run.name=caf\xc3\xa9");
  ASSERT_TRUE(request.isOk()) << request.status().toString();
  EXPECT_FALSE(isValidUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(ControlProtocol, AnswersAreOneLine) {
  EXPECT_EQ(controlOk(), "ok");
  EXPECT_EQ(controlOk("state=running"), "ok state=running");
  EXPECT_EQ(controlError(invalidArgument("two\nlines")), "error: two lines");
  const std::string huge = controlError(invalidArgument(std::string(10000, 'x')));
  EXPECT_EQ(huge.size(), kControlMaxLineBytes);
  EXPECT_EQ(huge.find('\n'), std::string::npos);
  EXPECT_TRUE(isControlOk("ok"));
  EXPECT_TRUE(isControlOk("ok state=paused"));
  EXPECT_FALSE(isControlOk("okay"));
  EXPECT_FALSE(isControlOk("error: ok"));
}

}  // namespace
}  // namespace moewb::run
