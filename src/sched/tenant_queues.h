// The queue tree the server keeps for its tenants, in one place so that the simulator builds the
// same one for a scenario with tenants (docs/fairness.md): under the root, one queue per tenant
// with its GPU quota, limit, weight and priority; under it the tenant's leaves, its default
// queue "<tenant>/default" (the tenant's quota and limit, weight 1, priority 100) and one queue
// per team, "<tenant>/<team>", with the team's own numbers. And what a tenant is told of an
// eviction of its task, in the same words by the server and the simulator.
//
//   tree.add(rootQueueSpec());
//   tree.add(tenantQueueSpec(space, "team-1", {.quota_milli_gpu = 8000}));
//   tree.add(tenantDefaultQueueSpec(space, "team-1", {.quota_milli_gpu = 8000}));
//   tree.add(teamQueueSpec(space, "team-1", "research", {.quota_milli_gpu = 2000}));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "sched/queue_tree.h"
#include "sched/resources.h"
#include "sched/scheduler.h"

namespace tessera::sched {

inline constexpr std::string_view kRootQueue = "tessera";
// A GPU limit that is none. A limit of 0 is zero: the queue's subtree holds no GPU at all (a
// frozen tenant). Before issue #36 the API took 0 for none; docs/server.md says what a stored 0
// from then became.
inline constexpr int64_t kNoGpuLimit = -1;

// A tenant's or a team's numbers, as the API takes them.
struct GpuQueueNumbers {
  int64_t quota_milli_gpu = 0;
  int64_t limit_milli_gpu = kNoGpuLimit;  // >= 0: at most that many milli-GPU.
  int64_t weight = 1;
  int32_t priority = 100;
  // Reclaim's bound on a unit's unsaved work, GPU-seconds, for all the tenant's (or team's)
  // queues; -1: the server's (QueueSpec::max_unsaved_gpu_s).
  int64_t max_unsaved_gpu_s = -1;
};

QueueSpec rootQueueSpec();
QueueSpec tenantQueueSpec(const ResourceSpace& space, const std::string& tenant,
                          const GpuQueueNumbers& n);
QueueSpec tenantDefaultQueueSpec(const ResourceSpace& space, const std::string& tenant,
                                 const GpuQueueNumbers& n);
QueueSpec teamQueueSpec(const ResourceSpace& space, const std::string& tenant,
                        const std::string& team, const GpuQueueNumbers& n);
// A quota and a limit in milli-GPU (kNoGpuLimit: none; 0: zero) as amounts of `space`.
std::pair<Amounts, Amounts> gpuAmounts(const ResourceSpace& space, int64_t quota_milli_gpu,
                                       int64_t limit_milli_gpu);

// The victim's event for eviction `e`: "preempted by workload x (priority 10) (task 0 on node
// n)" inside one queue (`preemptor_name` is the preemptor's name in its tenant), or "reclaimed by
// queue team-2/default: team-1 held 13.25 GPUs, fair share 12 (task ...)" between queues: the
// victim's side of the split between the two queues, never another tenant's workload names.
// Call it right after the pass that decided `e`.
std::string evictionEvent(const Scheduler& s, const EvictDecision& e,
                          std::string_view preemptor_name);

}  // namespace tessera::sched
