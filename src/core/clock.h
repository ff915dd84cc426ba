// Injected time. Components never read the system clock directly: they take a `Clock&`, so
// tests drive time with `FakeClock::advance` instead of sleeping.
//
// `now()` is monotonic and measures intervals (TTLs, timeouts). `wallNow()` is calendar time in
// UTC for timestamps people read (audit records, API responses); it may jump when the system
// clock is set, so never subtract two wall times to measure a duration.
#pragma once

#include <chrono>
#include <cstdint>

namespace tessera::core {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;
using WallTime = std::chrono::time_point<std::chrono::system_clock, Duration>;

// Wall times as Unix milliseconds, the form stored records keep them in.
inline int64_t unixMillis(WallTime t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}
inline WallTime fromUnixMillis(int64_t ms) {
  return WallTime(std::chrono::duration_cast<Duration>(std::chrono::milliseconds(ms)));
}

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time; thread-safe for the real clock.
  virtual TimePoint now() const = 0;
  // Calendar time (UTC, Unix epoch); thread-safe for the real clock.
  virtual WallTime wallNow() const = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
  WallTime wallNow() const override { return std::chrono::system_clock::now(); }
};

// A clock that moves only when told. Not thread-safe. Its wall time is `wall_start` plus the time
// advanced since construction, so both readings move together.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{}, WallTime wall_start = WallTime{})
      : now_(start), wall_offset_(wall_start.time_since_epoch() - start.time_since_epoch()) {}
  TimePoint now() const override { return now_; }
  WallTime wallNow() const override { return WallTime(now_.time_since_epoch() + wall_offset_); }
  void advance(Duration d) { now_ += d; }

 private:
  TimePoint now_;
  Duration wall_offset_;
};

}  // namespace tessera::core
