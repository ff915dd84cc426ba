// Reservations (docs/fairness.md): the nodes held for the workload at the head of the line, and
// which others may backfill them.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <unordered_map>

#include "sched/fair_share.h"
#include "sched/scheduler.h"
#include "sched/scheduler_internal.h"

namespace tessera::sched {

using namespace internal;  // NOLINT(google-build-using-namespace): exact share ratios.

bool Scheduler::mayBackfill(WorkloadId w) const {
  const core::Duration max_runtime = workloads_[w].spec.max_runtime;
  return max_runtime.count() > 0 && reservation_start_ != core::TimePoint::max() &&
         clock_.now() + max_runtime <= reservation_start_;
}

void Scheduler::reserveFor(WorkloadId w) {
  const WorkloadInfo& info = workloads_[w];
  const model::TaskRequest& r = info.spec.request;
  const int needed = std::max(1, info.spec.min_available - info.running);
  const core::TimePoint now = clock_.now();
  struct Candidate {
    core::TimePoint drained;  // When its known tasks have all ended; max() = unknown.
    int64_t used_milli;
    NodeIndex node;
    int holds;  // Tasks of `w` the node holds when empty.
  };
  std::vector<Candidate> candidates;
  for (NodeIndex n = 0; n < state_.nodeCount(); ++n) {
    const model::Node& node = state_.node(n);
    if (static_cast<int>(node.gpus.size()) < r.gpu_count ||
        (r.gpu_count > 0 && !r.models.empty() &&
         std::find(r.models.begin(), r.models.end(), node.gpus[0].model) == r.models.end())) {
      continue;
    }
    int holds = INT32_MAX;
    if (r.gpu_count > 0) {
      const int64_t per_gpu =
          r.isFractional() ? 1000 / std::max<int64_t>(1, r.gpu_milli.value()) : 1;
      holds = static_cast<int>(static_cast<int64_t>(node.gpus.size()) / r.gpu_count * per_gpu);
    }
    if (r.cpu.value() > 0) {
      holds = std::min<int64_t>(holds, node.cpu.value() / r.cpu.value());
    }
    if (r.memory.value() > 0) {
      holds = std::min<int64_t>(holds, node.memory.value() / r.memory.value());
    }
    if (holds <= 0 || holds == INT32_MAX) {
      continue;
    }
    core::TimePoint drained = now;
    for (TaskId t : node_tasks_[n]) {
      const core::Duration max_runtime = workloads_[tasks_[t].workload].spec.max_runtime;
      if (max_runtime.count() <= 0) {
        drained = core::TimePoint::max();
        break;
      }
      drained = std::max(drained, tasks_[t].started + max_runtime);
    }
    candidates.push_back(
        {drained,
         1000LL * static_cast<int64_t>(node.gpus.size()) - state_.nodeState(n).free_gpu_milli, n,
         holds});
  }
  // Each candidate holds at least one task: the first `needed` in order are all that can be used.
  const auto used = static_cast<ptrdiff_t>(std::min<size_t>(candidates.size(), needed));
  std::partial_sort(candidates.begin(), candidates.begin() + used, candidates.end(),
                    [](const Candidate& a, const Candidate& b) {
                      if (a.drained != b.drained) {
                        return a.drained < b.drained;
                      }
                      if (a.used_milli != b.used_milli) {
                        return a.used_milli < b.used_milli;
                      }
                      return a.node < b.node;
                    });
  std::vector<NodeIndex> nodes;
  reservation_start_ = now;
  int covered = 0;
  for (auto c = candidates.begin(); c != candidates.begin() + used && covered < needed; ++c) {
    nodes.push_back(c->node);
    reservation_start_ = std::max(reservation_start_, c->drained);
    covered += c->holds;
  }
  setReservation(w, std::move(nodes));
}

void Scheduler::setReservation(WorkloadId w, std::vector<NodeIndex> nodes) {
  if (w == reserved_for_ && nodes == reserved_nodes_) {
    return;
  }
  for (NodeIndex n : reserved_nodes_) {
    reserved_mask_[n] = 0;
  }
  reserved_for_ = w;
  reserved_nodes_ = std::move(nodes);
  for (NodeIndex n : reserved_nodes_) {
    reserved_mask_[n] = 1;
  }
  // The nodes closed to most work moved: verdicts taken without them no longer hold.
  std::erase_if(blocked_, [](const auto& entry) { return entry.first.restricted; });
}

}  // namespace tessera::sched
