#include "core/clock.h"

#include <gtest/gtest.h>

namespace tessera::core {
namespace {

using std::chrono::seconds;

TEST(FakeClockTest, WallTimeStartsWhereToldAndMovesWithAdvance) {
  const WallTime wall_start{seconds(1'700'000'000)};
  FakeClock clock(TimePoint{seconds(5)}, wall_start);
  EXPECT_EQ(clock.now(), TimePoint{seconds(5)});
  EXPECT_EQ(clock.wallNow(), wall_start);
  clock.advance(seconds(90));
  EXPECT_EQ(clock.now(), TimePoint{seconds(95)});
  EXPECT_EQ(clock.wallNow(), wall_start + seconds(90));
}

TEST(RealClockTest, WallTimeIsCalendarTime) {
  RealClock clock;
  // 2020-01-01T00:00:00Z: a steady_clock reading (time since boot) would be far below it.
  EXPECT_GT(clock.wallNow(), WallTime{seconds(1'577'836'800)});
}

}  // namespace
}  // namespace tessera::core
