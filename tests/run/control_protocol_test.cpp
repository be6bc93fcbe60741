// The live-control protocol's text side: request parsing (verbs, set's assignments, junk),
// UTF-8 checks and answer lines.
#include "moewb/run/control_protocol.h"

#include <gtest/gtest.h>

#include <string>

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
  EXPECT_TRUE(isUtf8("run.name=caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  Result<ControlRequest> request = parseControlRequest("set run.name=caf\xc3\xa9");
  ASSERT_TRUE(request.isOk()) << request.status().toString();
  EXPECT_FALSE(isUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
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
