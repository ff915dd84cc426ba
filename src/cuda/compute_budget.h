// The compute-share budget of one process: a token bucket of kernel time, with the clock passed
// in so that tests drive it without sleeping. Tokens (ns of kernel time) accrue at share x wall
// time up to one period's worth (share x period); each measured kernel takes its duration out,
// and may leave the balance negative (a debt the process waits out). Hence over any interval T
// the measured kernel time of the process is at most share x T + one period's share + what was
// in flight when the balance ran out, and a process that always has work queued gets share x T:
// the limit depends on wall time and the process's own kernel time only, not on SM counts, how
// many blocks a kernel has, or what else runs on the CPU.
//
//   ComputeBudget budget(30, 100'000'000, now);      // 30 % of every 100 ms
//   budget.refill(now);
//   if (budget.mayLaunch(in_flight)) launch();        // else wait: see interposer.cc
//   budget.charge(measured_ns);                        // when the kernel's end event completes
//
// Not thread-safe: the interposer guards it with its limiter mutex.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cuda {

class ComputeBudget {
 public:
  // At most this many launches are let into flight unmeasured, whatever the estimate says.
  static constexpr std::size_t kMaxInFlight = 256;

  // share_percent in [1, 100]; starts with a full bucket.
  ComputeBudget(int share_percent, std::int64_t period_ns, std::int64_t now_ns);

  // Adds what accrued since the last refill (time going backwards adds nothing).
  void refill(std::int64_t now_ns);

  // From now on accrues at share_percent ([1, 100]) into a bucket of share x period: what accrued
  // at the old share until now is kept, up to the new bucket's size.
  void setShare(int share_percent, std::int64_t now_ns);
  int sharePercent() const { return static_cast<int>(share_percent_); }

  // Takes a measured kernel's duration out of the balance and updates the estimate.
  void charge(std::int64_t kernel_ns);

  // Whether one more launch may start while in_flight launches are not measured yet: the balance
  // less their estimated duration must stay positive. Before any kernel was measured, launches go
  // one at a time so that the first measurement comes quickly.
  bool mayLaunch(std::size_t in_flight) const;

  // With nothing in flight: how long until the balance is positive again (0 if it is).
  std::int64_t waitNs() const;

  std::int64_t balanceNs() const { return balance_ns_; }
  std::int64_t capacityNs() const { return capacity_ns_; }
  // The moving average of measured durations (1/8 weight to each new one); -1 before the first.
  std::int64_t estimateNs() const { return estimate_ns_; }

 private:
  const std::int64_t period_ns_;
  std::int64_t share_percent_;
  std::int64_t capacity_ns_;
  std::int64_t balance_ns_;
  std::int64_t last_refill_ns_;
  std::int64_t accrual_remainder_ = 0;  // share x ns not yet a whole ns (in 1/100 ns).
  std::int64_t estimate_ns_ = -1;
};

}  // namespace tessera::cuda
