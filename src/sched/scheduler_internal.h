// What the scheduler's source files share (scheduler.cc, scheduler_queue.cc, scheduler_reserve.cc,
// scheduler_evict.cc): exact ratios of amounts to fair shares. Internal to src/sched.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "sched/queue_tree.h"
#include "sched/resources.h"

namespace tessera::sched::internal {

__extension__ typedef __int128 Int128;  // NOLINT(modernize-use-using)

// allocated / fair share as an exact fraction; den == 0 with num > 0 is "infinitely over".
struct Ratio {
  Int128 num = 0;
  Int128 den = 1;
};

inline bool lessThan(const Ratio& a, const Ratio& b) {
  if (a.den == 0 || b.den == 0) {
    return a.den != 0 && b.den == 0;  // Finite < infinite; infinite is not < anything.
  }
  return a.num * b.den < b.num * a.den;
}

inline bool greaterThanOne(const Ratio& r) { return r.den == 0 ? r.num > 0 : r.num > r.den; }

// |r - 1|, for comparing how far two queues are from their shares (infinite: 1e18).
inline double distanceFromOne(const Ratio& r) {
  if (r.den == 0) {
    return r.num > 0 ? 1e18 : 1;
  }
  const double v = static_cast<double>(r.num) / static_cast<double>(r.den);
  return v > 1 ? v - 1 : 1 - v;
}

// The dominant share of a queue: the largest allocated / fair share over its dimensions.
inline Ratio dominantShare(const Amounts& allocated, const Amounts& fair) {
  Ratio best{0, 1};
  for (size_t d = 0; d < allocated.size(); ++d) {
    if (allocated[d] <= 0) {
      continue;
    }
    if (fair[d] <= 0) {
      return Ratio{1, 0};
    }
    const Ratio r{allocated[d], fair[d]};
    if (lessThan(best, r)) {
      best = r;
    }
  }
  return best;
}

// The dominant share of `allocated` + `add` against `fair`, without building the sum.
inline Ratio dominantShareWith(const Amounts& allocated, const Amounts& add, const Amounts& fair) {
  Ratio best{0, 1};
  for (size_t d = 0; d < allocated.size(); ++d) {
    const int64_t a = allocated[d] + add[d];
    if (a <= 0) {
      continue;
    }
    if (fair[d] <= 0) {
      return Ratio{1, 0};
    }
    const Ratio r{a, fair[d]};
    if (lessThan(best, r)) {
      best = r;
    }
  }
  return best;
}

// What the queue order compares for one queue (docs/fairness.md, "Queue order").
struct QueueOrderKey {
  bool over = false;          // Above its fair share.
  bool within_quota = false;  // Within its quota with its next job added.
  int32_t priority = 0;
  bool no_share = false;  // Its next job needs something of which it has no fair share.
  Ratio with_job;         // Dominant share with the job added.
  Ratio without;          // And without.
};

inline std::string shareText(const Queue& q, const Amounts& allocated) {
  return fmt::format("{} gpu {}/{}", q.name, allocated[kGpuDim], q.fair_share[kGpuDim]);
}

}  // namespace tessera::sched::internal
