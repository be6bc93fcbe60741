#include "moewb/base/status.h"

#include <gtest/gtest.h>

#include "moewb/base/ids.h"

namespace moewb {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) return invalidArgument("x = " + std::to_string(x) + " is odd; accepted: even");
  return x / 2;
}

Status quarter(int x, int* out) {
  MOEWB_ASSIGN_OR_RETURN(int h, half(x));
  MOEWB_ASSIGN_OR_RETURN(int q, half(h));
  *out = q;
  return Status::ok();
}

TEST(Status, OkAndErrorFormatting) {
  EXPECT_TRUE(Status::ok().isOk());
  EXPECT_EQ(Status::ok().toString(), "ok");
  Status s = notFound("runs/demo.sqlite");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.toString(), "not found: runs/demo.sqlite");
  EXPECT_EQ(s.withContext("open").message(), "open: runs/demo.sqlite");
}

TEST(Result, PropagatesThroughMacros) {
  int out = 0;
  EXPECT_TRUE(quarter(8, &out).isOk());
  EXPECT_EQ(out, 2);
  Status err = quarter(6, &out);
  EXPECT_EQ(err.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(err.message().find("x = 3 is odd"), std::string::npos);
}

TEST(Result, ValueOnErrorAborts) {
  Result<int> r = half(3);
  EXPECT_DEATH((void)r.value(), "x = 3 is odd");
}

TEST(TypedId, DistinctTypesAndValidity) {
  TrackId t;
  EXPECT_FALSE(t.isValid());
  TrackId a(3), b(4);
  EXPECT_LT(a, b);
  static_assert(!std::is_convertible_v<TrackId, StringId>);
}

}  // namespace
}  // namespace moewb
