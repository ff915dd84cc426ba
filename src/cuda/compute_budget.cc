#include "cuda/compute_budget.h"

#include <algorithm>

namespace tessera::cuda {

ComputeBudget::ComputeBudget(int share_percent, std::int64_t period_ns, std::int64_t now_ns)
    : period_ns_(period_ns),
      share_percent_(std::clamp(share_percent, 1, 100)),
      capacity_ns_(period_ns * share_percent_ / 100),
      balance_ns_(capacity_ns_),
      last_refill_ns_(now_ns) {}

void ComputeBudget::refill(std::int64_t now_ns) {
  if (now_ns <= last_refill_ns_) {
    return;
  }
  // Past the time a full refill takes, more elapsed time changes nothing (and cannot overflow).
  const std::int64_t elapsed =
      std::min(now_ns - last_refill_ns_, (capacity_ns_ - balance_ns_) * 100 / share_percent_ + 1);
  last_refill_ns_ = now_ns;
  const std::int64_t accrued = elapsed * share_percent_ + accrual_remainder_;
  balance_ns_ += accrued / 100;
  accrual_remainder_ = accrued % 100;
  if (balance_ns_ >= capacity_ns_) {
    balance_ns_ = capacity_ns_;
    accrual_remainder_ = 0;
  }
}

void ComputeBudget::setShare(int share_percent, std::int64_t now_ns) {
  refill(now_ns);
  last_refill_ns_ = std::max(last_refill_ns_, now_ns);
  share_percent_ = std::clamp(share_percent, 1, 100);
  capacity_ns_ = period_ns_ * share_percent_ / 100;
  balance_ns_ = std::min(balance_ns_, capacity_ns_);
  accrual_remainder_ = 0;
}

void ComputeBudget::charge(std::int64_t kernel_ns) {
  kernel_ns = std::max<std::int64_t>(kernel_ns, 0);
  balance_ns_ -= kernel_ns;
  estimate_ns_ = estimate_ns_ < 0 ? kernel_ns : estimate_ns_ + (kernel_ns - estimate_ns_) / 8;
}

bool ComputeBudget::mayLaunch(std::size_t in_flight) const {
  if (in_flight == 0) {
    return balance_ns_ > 0;
  }
  if (in_flight >= kMaxInFlight || estimate_ns_ < 0) {
    return false;
  }
  return balance_ns_ - static_cast<std::int64_t>(in_flight) * estimate_ns_ > 0;
}

std::int64_t ComputeBudget::waitNs() const {
  if (balance_ns_ > 0) {
    return 0;
  }
  // The balance must reach 1 ns: (1 - balance) x 100 / share, rounded up, less what is accrued.
  const std::int64_t needed = (1 - balance_ns_) * 100 - accrual_remainder_;
  return (needed + share_percent_ - 1) / share_percent_;
}

}  // namespace tessera::cuda
