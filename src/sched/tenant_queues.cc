#include "sched/tenant_queues.h"

#include <fmt/format.h>

namespace tessera::sched {

std::pair<Amounts, Amounts> gpuAmounts(const ResourceSpace& space, int64_t quota_milli_gpu,
                                       int64_t limit_milli_gpu) {
  Amounts quota = space.zeros();
  quota[kGpuDim] = quota_milli_gpu;
  Amounts limit = space.unlimited();
  if (limit_milli_gpu >= 0) {
    limit[kGpuDim] = limit_milli_gpu;
  }
  return {quota, limit};
}

QueueSpec rootQueueSpec() { return {std::string(kRootQueue), "", {}, {}, 1, 100}; }

QueueSpec tenantQueueSpec(const ResourceSpace& space, const std::string& tenant,
                          const GpuQueueNumbers& n) {
  auto [quota, limit] = gpuAmounts(space, n.quota_milli_gpu, n.limit_milli_gpu);
  return {tenant, std::string(kRootQueue), quota, limit, n.weight, n.priority, n.max_unsaved_gpu_s};
}

QueueSpec tenantDefaultQueueSpec(const ResourceSpace& space, const std::string& tenant,
                                 const GpuQueueNumbers& n) {
  auto [quota, limit] = gpuAmounts(space, n.quota_milli_gpu, n.limit_milli_gpu);
  return {tenant + "/default", tenant, quota, limit, 1, 100};
}

QueueSpec teamQueueSpec(const ResourceSpace& space, const std::string& tenant,
                        const std::string& team, const GpuQueueNumbers& n) {
  auto [quota, limit] = gpuAmounts(space, n.quota_milli_gpu, n.limit_milli_gpu);
  return {tenant + "/" + team, tenant, quota, limit, n.weight, n.priority, n.max_unsaved_gpu_s};
}

std::string evictionEvent(const Scheduler& s, const EvictDecision& e,
                          std::string_view preemptor_name) {
  const TaskInfo& task = s.task(e.task);
  const std::string where = fmt::format(" (task {} on node {})", task.index,
                                        s.cluster().node(task.assignment.placement.node).name);
  if (e.moved) {  // Consolidation: who it made room for is not the victim's business.
    return fmt::format("moved to make room for other work; it restarts on another node{}", where);
  }
  if (!e.reclaim) {  // Inside one leaf queue: the preemptor is of the victim's own tenant.
    return fmt::format("preempted by workload {} (priority {}){}", preemptor_name,
                       s.workload(e.preemptor).spec.priority, where);
  }
  // Reclaim: the queue that gives GPUs back is the victim's side of the split between the two
  // queues (the victim's tenant, when the preemptor is of another tenant). Another tenant's
  // workload names are not the victim's business; its queue is.
  const QueueTree& tree = s.queues();
  auto path = [&](QueueId q) {
    std::vector<QueueId> up;
    for (; q != kNoQueue; q = tree.queue(q).parent) {
      up.insert(up.begin(), q);
    }
    return up;
  };
  const std::vector<QueueId> mine = path(s.workload(e.victim).spec.queue);
  const std::vector<QueueId> theirs = path(s.workload(e.preemptor).spec.queue);
  size_t split = 0;
  while (split + 1 < mine.size() && split < theirs.size() && mine[split] == theirs[split]) {
    ++split;
  }
  const Queue& held = tree.queue(mine[split]);
  auto gpus = [](int64_t milli) {
    std::string text = fmt::format("{:.3f}", static_cast<double>(milli) / 1000.0);
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') {
      text.pop_back();
    }
    return text;
  };
  return fmt::format("reclaimed by queue {}: {} held {} GPUs, fair share {}{}",
                     tree.queue(theirs.back()).name, held.name, gpus(held.allocated[kGpuDim]),
                     gpus(held.fair_share[kGpuDim]), where);
}

}  // namespace tessera::sched
