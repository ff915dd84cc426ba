#include "sched/queue_tree.h"

#include <functional>

namespace tessera::sched {

namespace {

// Checks one queue's spec (not its parent) and fills its defaults (a quota of nothing, no
// limit); errors name the queue and the field. `index`: its place, for a nameless one.
core::Status checkSpec(const ResourceSpace& space, QueueSpec& s, size_t index) {
  if (s.name.empty()) {
    return core::invalidArgument("queue " + std::to_string(index) + " has an empty name");
  }
  const size_t dims = space.size();
  if (s.quota.empty()) {
    s.quota = space.zeros();
  }
  if (s.limit.empty()) {
    s.limit = space.unlimited();
  }
  if (s.quota.size() != dims || s.limit.size() != dims) {
    return core::internalError("queue '" + s.name + "': amounts of the wrong dimension");
  }
  for (size_t d = 0; d < dims; ++d) {
    const std::string field = space.name(d);
    if (s.quota[d] < 0) {
      return core::invalidArgument("queue '" + s.name + "': quota." + field + " is negative");
    }
    if (s.limit[d] < 0) {
      return core::invalidArgument("queue '" + s.name + "': limit." + field + " is negative");
    }
    if (s.limit[d] < s.quota[d]) {
      return core::invalidArgument("queue '" + s.name + "': limit." + field + " (" +
                                   std::to_string(s.limit[d]) + ") is below quota." + field + " (" +
                                   std::to_string(s.quota[d]) + ")");
    }
  }
  if (s.over_quota_weight < 0) {
    return core::invalidArgument("queue '" + s.name + "': overQuotaWeight is negative");
  }
  if (s.max_unsaved_gpu_s < -1) {
    return core::invalidArgument("queue '" + s.name + "': maxUnsavedGpuTime is negative");
  }
  return core::Status::ok();
}

Queue queueOf(const ResourceSpace& space, const QueueSpec& s) {
  Queue q;
  q.name = s.name;
  q.quota = s.quota;
  q.limit = s.limit;
  q.weight = s.over_quota_weight;
  q.priority = s.priority;
  q.max_unsaved_gpu_s = s.max_unsaved_gpu_s;
  q.allocated = space.zeros();
  q.pending = space.zeros();
  q.fair_share = space.zeros();
  q.deserved = space.zeros();
  return q;
}

}  // namespace

core::Result<QueueTree> QueueTree::create(ResourceSpace space, std::vector<QueueSpec> specs) {
  QueueTree t;
  t.space_ = std::move(space);
  for (size_t i = 0; i < specs.size(); ++i) {
    QueueSpec& s = specs[i];
    if (!s.name.empty() && !t.by_name_.emplace(s.name, static_cast<QueueId>(i)).second) {
      return core::invalidArgument("queue '" + s.name + "' is declared twice");
    }
    TESSERA_RETURN_IF_ERROR(checkSpec(t.space_, s, i));
    t.queues_.push_back(queueOf(t.space_, s));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const QueueSpec& s = specs[i];
    if (s.parent.empty()) {
      t.roots_.push_back(static_cast<QueueId>(i));
      continue;
    }
    auto it = t.by_name_.find(s.parent);
    if (it == t.by_name_.end()) {
      return core::invalidArgument("queue '" + s.name + "': parent '" + s.parent +
                                   "' is not declared");
    }
    t.queues_[i].parent = it->second;
    t.queues_[it->second].children.push_back(static_cast<QueueId>(i));
  }
  // Depths and a parents-first order; a queue not reached from a root is on a cycle.
  std::vector<bool> seen(t.queues_.size(), false);
  std::function<void(QueueId, int)> visit = [&](QueueId q, int depth) {
    seen[q] = true;
    t.queues_[q].depth = depth;
    t.top_down_.push_back(q);
    for (QueueId c : t.queues_[q].children) {
      visit(c, depth + 1);
    }
  };
  for (QueueId r : t.roots_) {
    visit(r, 0);
  }
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) {
      return core::invalidArgument("queue '" + t.queues_[i].name + "' is part of a parent cycle");
    }
  }
  return t;
}

std::vector<QueueSpec> QueueTree::specs() const {
  std::vector<QueueSpec> out;
  out.reserve(queues_.size() + 1);
  for (const Queue& q : queues_) {
    out.push_back({q.name, q.parent == kNoQueue ? "" : queues_[q.parent].name, q.quota, q.limit,
                   q.weight, q.priority, q.max_unsaved_gpu_s});
  }
  return out;
}

core::Status QueueTree::rebuild(std::vector<QueueSpec> specs) {
  TESSERA_ASSIGN_OR_RETURN(QueueTree t, create(space_, std::move(specs)));
  for (size_t i = 0; i < queues_.size(); ++i) {
    Queue& q = t.queues_[i];
    q.allocated = queues_[i].allocated;
    q.pending = queues_[i].pending;
    q.fair_share = queues_[i].fair_share;
    q.deserved = queues_[i].deserved;
  }
  *this = std::move(t);
  return core::Status::ok();
}

core::Result<QueueId> QueueTree::add(QueueSpec spec) {
  if (!spec.parent.empty()) {
    auto p = find(spec.parent);
    if (p && queues_[*p].isLeaf()) {
      const Amounts zero = space_.zeros();
      if (queues_[*p].allocated != zero || queues_[*p].pending != zero) {
        return core::failedPrecondition("queue '" + spec.parent +
                                        "' holds work, so it cannot become a parent of '" +
                                        spec.name + "'");
      }
    }
  }
  // In place, not rebuilt: a server adds a queue per tenant, and ten thousand tenants made
  // that quadratic.
  if (by_name_.contains(spec.name)) {
    return core::invalidArgument("queue '" + spec.name + "' is declared twice");
  }
  TESSERA_RETURN_IF_ERROR(checkSpec(space_, spec, queues_.size()));
  QueueId parent = kNoQueue;
  if (!spec.parent.empty()) {
    auto p = find(spec.parent);
    if (!p) {
      return core::invalidArgument("queue '" + spec.name + "': parent '" + spec.parent +
                                   "' is not declared");
    }
    parent = *p;
  }
  const auto id = static_cast<QueueId>(queues_.size());
  Queue q = queueOf(space_, spec);
  q.parent = parent;
  q.depth = parent == kNoQueue ? 0 : queues_[parent].depth + 1;
  queues_.push_back(std::move(q));
  by_name_.emplace(spec.name, id);
  if (parent == kNoQueue) {
    roots_.push_back(id);
  } else {
    queues_[parent].children.push_back(id);
  }
  top_down_.push_back(id);  // After its parent: parents still come first.
  return id;
}

core::Status QueueTree::update(QueueId q, const Amounts& quota, const Amounts& limit,
                               int64_t weight, int32_t priority) {
  if (q >= queues_.size()) {
    return core::notFound("no queue with id " + std::to_string(q));
  }
  std::vector<QueueSpec> all = specs();
  all[q].quota = quota;
  all[q].limit = limit;
  all[q].over_quota_weight = weight;
  all[q].priority = priority;
  return rebuild(std::move(all));
}

core::Status QueueTree::setMaxUnsaved(QueueId q, int64_t gpu_seconds) {
  if (q >= queues_.size()) {
    return core::notFound("no queue with id " + std::to_string(q));
  }
  if (gpu_seconds < -1) {
    return core::invalidArgument("queue '" + queues_[q].name + "': maxUnsavedGpuTime is negative");
  }
  queues_[q].max_unsaved_gpu_s = gpu_seconds;
  return core::Status::ok();
}

core::Status QueueTree::rename(QueueId q, std::string name) {
  if (q >= queues_.size()) {
    return core::notFound("no queue with id " + std::to_string(q));
  }
  std::vector<QueueSpec> all = specs();
  const std::string old = all[q].name;
  for (QueueSpec& s : all) {
    if (s.parent == old) {
      s.parent = name;
    }
  }
  all[q].name = std::move(name);
  return rebuild(std::move(all));
}

std::optional<QueueId> QueueTree::find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<QueueId> QueueTree::pathToRoot(QueueId q) const {
  std::vector<QueueId> path;
  for (; q != kNoQueue; q = queues_[q].parent) {
    path.push_back(q);
  }
  return path;
}

void QueueTree::addAllocated(QueueId leaf, const Amounts& amounts, int sign) {
  for (QueueId q = leaf; q != kNoQueue; q = queues_[q].parent) {
    Amounts& a = queues_[q].allocated;
    for (size_t d = 0; d < a.size(); ++d) {
      a[d] += sign * amounts[d];
    }
  }
}

void QueueTree::addPending(QueueId leaf, const Amounts& amounts, int sign) {
  for (QueueId q = leaf; q != kNoQueue; q = queues_[q].parent) {
    Amounts& a = queues_[q].pending;
    for (size_t d = 0; d < a.size(); ++d) {
      a[d] += sign * amounts[d];
    }
  }
}

}  // namespace tessera::sched
