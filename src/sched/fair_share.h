// Fair share: how much of each resource every queue deserves right now.
//
// Per resource dimension, top-down: the cluster's capacity is divided among the top-level
// queues, and each queue's share among its children, by `divide`:
//   1. Quota first: each child gets min(quota, demand), where demand = min(limit, allocated +
//      pending) of its subtree (a queue that wants nothing holds nothing). If the quotas asked
//      for exceed what there is to divide (quotas above capacity, or a node lost), every child's
//      guarantee is scaled down in proportion, and nothing is left for surplus.
//   2. Surplus by priority: children of the highest priority are served first; the next
//      priority gets only what they leave.
//   3. Within one priority, by weight (water-filling): each child gets surplus in proportion to
//      its over-quota weight until its demand is met; what a satisfied child does not need is
//      shared again among the others. Weight 0 means no surplus.
//   4. Exact remainders: shares are integers (milli-GPU, milli-CPU, MiB); the units lost to
//      rounding down go one each to the largest remainders, ties to the child declared first.
// Usage history may tilt the weights (see `UsageTilt`).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sched/queue_tree.h"

namespace tessera::sched {

struct Claimant {
  int64_t demand = 0;  // What the child can use (already clipped by its limit).
  int64_t quota = 0;   // Deserved.
  int64_t weight = 1;  // Over-quota weight.
  int32_t priority = 100;
};

// Divides `total` among `claimants` as described above. Returns one share per claimant; the
// shares never exceed their demands and never sum above `total`.
std::vector<int64_t> divide(int64_t total, std::span<const Claimant> claimants);

// Computes `fair_share` of every queue in `tree` from the cluster's `capacity`. `weights`, if
// not empty, replaces each queue's over-quota weight (indexed by QueueId), e.g. with weights
// tilted by usage history.
void computeFairShare(QueueTree& tree, const Amounts& capacity,
                      std::span<const int64_t> weights = {});

}  // namespace tessera::sched
