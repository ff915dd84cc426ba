#include "core/status.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

Result<int> half(int x) {
  if (x % 2 != 0) {
    return invalidArgument(std::to_string(x) + " is odd");
  }
  return x / 2;
}

Result<int> quarter(int x) {
  TESSERA_ASSIGN_OR_RETURN(int h, half(x));
  TESSERA_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status checkEven(int x) {
  TESSERA_RETURN_IF_ERROR(half(x).status());
  return Status::ok();
}

TEST(StatusTest, OkAndError) {
  EXPECT_TRUE(Status::ok().isOk());
  Status s = notFound("tenant 'a' not found");
  EXPECT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.toString(), "NOT_FOUND: tenant 'a' not found");
  EXPECT_EQ(s.withContext("load").message(), "load: tenant 'a' not found");
  EXPECT_TRUE(Status::ok().withContext("x").isOk());
  EXPECT_EQ(outOfRange("revision 3 is compacted").toString(),
            "OUT_OF_RANGE: revision 3 is compacted");
}

TEST(StatusTest, MacrosPropagateFirstError) {
  EXPECT_EQ(quarter(8).value(), 2);
  Result<int> r = quarter(6);  // 6/2 = 3 is odd.
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().message(), "3 is odd");
  EXPECT_TRUE(checkEven(4).isOk());
  EXPECT_EQ(checkEven(5).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::core
