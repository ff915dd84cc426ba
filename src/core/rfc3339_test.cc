#include "core/rfc3339.h"

#include <gtest/gtest.h>

#include <regex>

#include "core/log.h"

namespace tessera::core {
namespace {

TEST(Rfc3339Test, FormatsUtcWithAndWithoutMilliseconds) {
  // 2026-12-02T05:12:42.007Z.
  const WallTime t = WallTime(std::chrono::seconds(1796188362)) + std::chrono::milliseconds(7) +
                     std::chrono::microseconds(900);
  EXPECT_EQ(formatRfc3339(t), "2026-12-02T05:12:42Z");
  EXPECT_EQ(formatRfc3339Millis(t), "2026-12-02T05:12:42.007Z");  // Truncated, not rounded.
  EXPECT_EQ(formatRfc3339Millis(WallTime{}), "1970-01-01T00:00:00.000Z");
}

TEST(Rfc3339Test, ParsesWhatItFormatsAndRefusesTheRest) {
  const WallTime t = WallTime(std::chrono::seconds(1796188362)) + std::chrono::milliseconds(7);
  EXPECT_EQ(parseRfc3339(formatRfc3339Millis(t)), t);
  EXPECT_EQ(parseRfc3339("2026-12-02T05:12:42Z"), WallTime(std::chrono::seconds(1796188362)));
  EXPECT_EQ(parseRfc3339("2026-12-02T05:12:42.0071234Z"), t);  // Read to the millisecond.
  EXPECT_EQ(parseRfc3339("2026-12-02T05:12:42.5Z"),
            WallTime(std::chrono::seconds(1796188362)) + std::chrono::milliseconds(500));
  for (const char* bad :
       {"", "2026-12-02", "2026-12-02T05:12:42", "2026-12-02T05:12:42+01:00",
        "2026-02-30T00:00:00Z", "2026-12-02T24:00:00Z", "2026-12-02T05:12:42.Z",
        "2026-12-02 05:12:42Z", "2026-12-02T05:12:42ZZ", "+026-12-02T05:12:42Z"}) {
    EXPECT_FALSE(parseRfc3339(bad).has_value()) << bad;
  }
}

TEST(LogTest, ALineStartsWithItsUtcTimeAndLevel) {
  ::testing::internal::CaptureStderr();
  logWarn("node {} lost after {} ms", "gpu-a", 15000);
  logError("{}", "the watch ended");
  const std::string out = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(std::regex_search(
      out,
      std::regex(
          R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z warning node gpu-a lost after 15000 ms\n)")))
      << out;
  EXPECT_NE(out.find("Z error the watch ended\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::core
