// The fair-share tree: organisation -> tenant -> team queues, any depth. Only leaf queues hold
// workloads. Each queue has, per resource dimension (see resources.h), a `quota` (deserved,
// granted first), a `limit` (hard cap on the subtree), an over-quota weight and a priority for
// the surplus. The tree also keeps, per queue, the subtree's allocated and pending amounts, updated
// incrementally along the leaf's path, and the fair share computed by `computeFairShare`.
//
//   auto tree = QueueTree::create(space, {{"org", "", ...}, {"a", "org", ...}});
//   tree->addAllocated(a, task_amounts, +1);   // a task of queue a started
//
// Single-threaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "sched/resources.h"

namespace tessera::sched {

using QueueId = uint32_t;
inline constexpr QueueId kNoQueue = UINT32_MAX;

struct QueueSpec {
  std::string name;
  std::string parent;  // Empty: a top-level queue.
  Amounts quota;       // By dimension; empty = nothing guaranteed.
  Amounts limit;       // By dimension; empty = unlimited.
  int64_t over_quota_weight = 1;
  int32_t priority = 100;
  // Reclaim takes a unit of this (leaf) queue's work only while the unit's unsaved GPU-time is
  // below this many GPU-seconds; -1: the scheduler's default (docs/fairness.md).
  int64_t max_unsaved_gpu_s = -1;
};

struct Queue {
  std::string name;
  QueueId parent = kNoQueue;
  std::vector<QueueId> children;
  int depth = 0;
  Amounts quota;
  Amounts limit;
  int64_t weight = 1;
  int32_t priority = 100;
  int64_t max_unsaved_gpu_s = -1;  // See QueueSpec.
  // Subtree totals, kept incrementally.
  Amounts allocated;
  Amounts pending;
  // Computed by computeFairShare: the fair share, and the part of it that is guaranteed
  // (min(quota, demand), scaled down like the quotas when they exceed what there is).
  Amounts fair_share;
  Amounts deserved;

  bool isLeaf() const { return children.empty(); }
};

class QueueTree {
 public:
  // Validates names (unique, non-empty), parents (exist, no cycles), amounts (non-negative,
  // quota <= limit) and weights (non-negative). Errors name the queue and the field.
  static core::Result<QueueTree> create(ResourceSpace space, std::vector<QueueSpec> specs);

  const ResourceSpace& space() const { return space_; }
  size_t size() const { return queues_.size(); }
  const Queue& queue(QueueId q) const { return queues_[q]; }
  std::optional<QueueId> find(const std::string& name) const;
  // Top-level queues in declaration order.
  const std::vector<QueueId>& roots() const { return roots_; }
  // Queues in an order where parents come before children.
  const std::vector<QueueId>& topDown() const { return top_down_; }
  // The queues from `q` up to its root, `q` first.
  std::vector<QueueId> pathToRoot(QueueId q) const;

  // Adds a queue (validated as in `create`; its parent, if any, must exist). A parent that is a
  // leaf must hold no work, since work lives only in leaves. Existing ids and totals are kept;
  // the new queue's id is returned.
  core::Result<QueueId> add(QueueSpec spec);
  // Changes queue `q`'s quota, limit, weight and priority (validated as in `create`; name and
  // parent stay). Totals are kept.
  core::Status update(QueueId q, const Amounts& quota, const Amounts& limit, int64_t weight,
                      int32_t priority);
  // Renames queue `q` (the name validated as in `create`); its id, place, numbers and totals
  // stay, and its children follow it.
  core::Status rename(QueueId q, std::string name);
  // Sets QueueSpec::max_unsaved_gpu_s (-1 or more).
  core::Status setMaxUnsaved(QueueId q, int64_t gpu_seconds);

  // Adds (sign +1) or removes (sign -1) `amounts` to the allocated or pending totals of `leaf`
  // and all its ancestors. O(depth).
  void addAllocated(QueueId leaf, const Amounts& amounts, int sign);
  void addPending(QueueId leaf, const Amounts& amounts, int sign);

  // Mutable access for the fair-share computation.
  Queue& mutableQueue(QueueId q) { return queues_[q]; }

 private:
  // The specs the tree was built from, as it stands.
  std::vector<QueueSpec> specs() const;
  // Replaces the tree with one built from `specs` (validated as in `create`), whose first
  // queues are this tree's in order; their totals are kept.
  core::Status rebuild(std::vector<QueueSpec> specs);

  ResourceSpace space_;
  std::vector<Queue> queues_;
  std::vector<QueueId> roots_;
  std::vector<QueueId> top_down_;
  std::unordered_map<std::string, QueueId> by_name_;
};

}  // namespace tessera::sched
