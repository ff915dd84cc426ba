#include "sched/usage_history.h"

#include <cmath>

namespace tessera::sched {

UsageHistory::UsageHistory(size_t queue_count, core::Duration half_life)
    : half_life_(half_life), usage_(queue_count, 0.0) {}

void UsageHistory::advance(const QueueTree& tree, core::TimePoint now) {
  if (!started_) {
    started_ = true;
    last_ = now;
    return;
  }
  const double dt = std::chrono::duration<double>(now - last_).count();
  if (dt <= 0) {
    return;
  }
  const double half = std::chrono::duration<double>(half_life_).count();
  const double decay = half > 0 ? std::exp2(-dt / half) : 0.0;
  for (QueueId q = 0; q < usage_.size(); ++q) {
    // The allocation held over the interval is the one now (it changes only at passes).
    const double gpus = static_cast<double>(tree.queue(q).allocated[kGpuDim]) / 1000.0;
    usage_[q] = usage_[q] * decay + gpus * dt;
  }
  last_ = now;
}

std::vector<int64_t> UsageHistory::tiltedWeights(const QueueTree& tree, double k) const {
  std::vector<int64_t> out(tree.size(), 0);
  auto tilt = [&](const std::vector<QueueId>& siblings) {
    double wsum = 0;
    double usum = 0;
    for (QueueId q : siblings) {
      wsum += static_cast<double>(tree.queue(q).weight);
      usum += usage_[q];
    }
    for (QueueId q : siblings) {
      const double w = static_cast<double>(tree.queue(q).weight);
      if (wsum <= 0 || usum <= 0) {
        out[q] = tree.queue(q).weight * 1'000'000;
        continue;
      }
      const double nw = w / wsum;
      const double nu = usage_[q] / usum;
      out[q] =
          w <= 0 ? 0 : static_cast<int64_t>(std::llround(std::max(0.0, nw + k * (nw - nu)) * 1e6));
    }
  };
  tilt(tree.roots());
  for (QueueId q = 0; q < tree.size(); ++q) {
    if (!tree.queue(q).isLeaf()) {
      tilt(tree.queue(q).children);
    }
  }
  return out;
}

}  // namespace tessera::sched
