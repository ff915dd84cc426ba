// Reservations (docs/fairness.md): the nodes held for the workload at the head of the line, and
// which others may backfill them.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>
#include <string>
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
  // Nodes in the order they drain (`drain_order_`, kept as tasks come and go): the first that
  // can hold tasks of `w`, until they hold all it needs. A node whose known tasks should have
  // ended already sorts by that time, before those still running.
  std::vector<NodeIndex> nodes;
  reservation_start_ = now;
  int covered = 0;
  for (const auto& [drained, used, n] : drain_order_) {
    if (covered >= needed) {
      break;
    }
    const model::Node& node = state_.node(n);
    // The GPUs whose MIG mode suits the work: the rest never hold it, however long one waits.
    const auto usable = static_cast<int>(
        std::count_if(node.gpus.begin(), node.gpus.end(), [&](const model::GpuDevice& g) {
          return g.mig != (r.isMig() ? model::MigMode::kOff : model::MigMode::kOn);
        }));
    if (usable < r.gpu_count ||
        (r.gpu_count > 0 && !r.models.empty() &&
         std::find(r.models.begin(), r.models.end(), node.gpus[0].model) == r.models.end())) {
      continue;
    }
    int holds = INT32_MAX;
    if (r.gpu_count > 0) {
      const int64_t per_gpu =
          r.isFractional() ? 1000 / std::max<int64_t>(1, r.gpu_milli.value()) : 1;
      holds = static_cast<int>(static_cast<int64_t>(usable) / r.gpu_count * per_gpu);
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
    nodes.push_back(n);
    reservation_start_ = std::max(reservation_start_, drained);
    covered += holds;
  }
  setReservation(w, std::move(nodes));
}

namespace {

std::string roughly(core::Duration d) {
  const double s = std::chrono::duration<double>(d).count();
  if (s < 90 * 60) {
    return fmt::format("{:.0f} min", std::max(1.0, s / 60));
  }
  if (s < 48 * 3600) {
    return fmt::format("{:.1f} h", s / 3600);
  }
  return fmt::format("{:.1f} days", s / 86400);
}

}  // namespace

std::string Scheduler::reservationNote() const {
  if (reserved_nodes_.empty()) {
    return "; no node could ever hold it, so none is held for it";
  }
  std::string names;
  for (size_t i = 0; i < reserved_nodes_.size() && i < 3; ++i) {
    names += (i > 0 ? ", " : "") + state_.node(reserved_nodes_[i]).name;
  }
  if (reserved_nodes_.size() > 3) {
    names += fmt::format(" and {} more", reserved_nodes_.size() - 3);
  }
  std::string note = fmt::format("; {} node(s) held for it ({})", reserved_nodes_.size(), names);
  const core::TimePoint now = clock_.now();
  if (reservation_start_ == core::TimePoint::max()) {
    note += ", when they drain is unknown: tasks there declare no maxRuntime";
  } else if (reservation_start_ <= now) {
    note += ", which should be free by now";
  } else {
    note += fmt::format(", drained in at most {} by the maxRuntime of the tasks there",
                        roughly(reservation_start_ - now));
  }
  return note;
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
