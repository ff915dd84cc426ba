// Usage history: each queue's GPU use, decayed exponentially with a half-life, so that a queue
// that used a lot recently gets a smaller part of the surplus for a while (KAI's time-based
// fair share, without Prometheus). It changes only the surplus split, never quota or priority.
//
//   UsageHistory h(tree.size(), std::chrono::hours(24));
//   h.advance(tree, clock.now());                      // before each pass
//   computeFairShare(tree, capacity, h.tiltedWeights(tree, /*k=*/1.0));
#pragma once

#include <cstdint>
#include <vector>

#include "core/clock.h"
#include "sched/queue_tree.h"

namespace tessera::sched {

class UsageHistory {
 public:
  UsageHistory(size_t queue_count, core::Duration half_life);

  // Decays the history to `now` and adds each queue's allocated GPU share since the last call.
  void advance(const QueueTree& tree, core::TimePoint now);

  // Decayed usage of a queue, in GPU-seconds.
  double usage(QueueId q) const { return usage_[q]; }
  // Makes room for queues added to the tree (with no history).
  void resize(size_t queue_count) { usage_.resize(queue_count, 0.0); }
  // Queue `q` starts again with no history (its id now names another queue).
  void forget(QueueId q) { usage_[q] = 0; }

  // Over-quota weights tilted by usage, per queue, in millionths: among siblings with
  // normalised weight nW and normalised usage nU, max(0, nW + k (nW - nU)). Siblings with no
  // usage at all keep their plain weights. A weight of 0 stays 0.
  std::vector<int64_t> tiltedWeights(const QueueTree& tree, double k) const;

 private:
  core::Duration half_life_;
  bool started_ = false;
  core::TimePoint last_{};
  std::vector<double> usage_;
};

}  // namespace tessera::sched
