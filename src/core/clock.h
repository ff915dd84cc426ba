// Injected time. Components never read the system clock directly: they take a `Clock&`, so
// tests drive time with `FakeClock::advance` instead of sleeping.
#pragma once

#include <chrono>

namespace tessera::core {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time; thread-safe for the real clock.
  virtual TimePoint now() const = 0;
};

class RealClock final : public Clock {
 public:
  TimePoint now() const override { return std::chrono::steady_clock::now(); }
};

// A clock that moves only when told. Not thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(TimePoint start = TimePoint{}) : now_(start) {}
  TimePoint now() const override { return now_; }
  void advance(Duration d) { now_ += d; }

 private:
  TimePoint now_;
};

}  // namespace tessera::core
