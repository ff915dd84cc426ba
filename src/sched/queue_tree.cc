#include "sched/queue_tree.h"

#include <functional>

namespace tessera::sched {

core::Result<QueueTree> QueueTree::create(ResourceSpace space, std::vector<QueueSpec> specs) {
  QueueTree t;
  t.space_ = std::move(space);
  const size_t dims = t.space_.size();
  for (size_t i = 0; i < specs.size(); ++i) {
    QueueSpec& s = specs[i];
    if (s.name.empty()) {
      return core::invalidArgument("queue " + std::to_string(i) + " has an empty name");
    }
    if (!t.by_name_.emplace(s.name, static_cast<QueueId>(i)).second) {
      return core::invalidArgument("queue '" + s.name + "' is declared twice");
    }
    if (s.quota.empty()) {
      s.quota = t.space_.zeros();
    }
    if (s.limit.empty()) {
      s.limit = t.space_.unlimited();
    }
    if (s.quota.size() != dims || s.limit.size() != dims) {
      return core::internalError("queue '" + s.name + "': amounts of the wrong dimension");
    }
    for (size_t d = 0; d < dims; ++d) {
      const std::string field = t.space_.name(d);
      if (s.quota[d] < 0) {
        return core::invalidArgument("queue '" + s.name + "': quota." + field + " is negative");
      }
      if (s.limit[d] < 0) {
        return core::invalidArgument("queue '" + s.name + "': limit." + field + " is negative");
      }
      if (s.limit[d] < s.quota[d]) {
        return core::invalidArgument("queue '" + s.name + "': limit." + field + " (" +
                                     std::to_string(s.limit[d]) + ") is below quota." + field +
                                     " (" + std::to_string(s.quota[d]) + ")");
      }
    }
    if (s.over_quota_weight < 0) {
      return core::invalidArgument("queue '" + s.name + "': overQuotaWeight is negative");
    }
    if (s.max_unsaved_gpu_s < -1) {
      return core::invalidArgument("queue '" + s.name + "': maxUnsavedGpuTime is negative");
    }
    Queue q;
    q.name = s.name;
    q.quota = s.quota;
    q.limit = s.limit;
    q.weight = s.over_quota_weight;
    q.priority = s.priority;
    q.max_unsaved_gpu_s = s.max_unsaved_gpu_s;
    q.allocated = t.space_.zeros();
    q.pending = t.space_.zeros();
    q.fair_share = t.space_.zeros();
    q.deserved = t.space_.zeros();
    t.queues_.push_back(std::move(q));
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
  std::vector<QueueSpec> all = specs();
  all.push_back(std::move(spec));
  TESSERA_RETURN_IF_ERROR(rebuild(std::move(all)));
  return static_cast<QueueId>(queues_.size() - 1);
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
