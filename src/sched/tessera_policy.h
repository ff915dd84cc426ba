// Tessera's own placement policy. See docs/placement.md for the idea and the measurements.
#pragma once

#include <memory>

#include "core/status.h"
#include "sched/cluster_state.h"
#include "sched/frag.h"
#include "sched/policy.h"

namespace tessera::sched {

core::Result<std::unique_ptr<Policy>> makeTesseraPolicy(const FragModel& frag,
                                                        const ClusterState& state);

// How much of the cluster's CPU the typical mix asks for by the time its GPU requests fill
// every GPU (CPU-only pods included); 0 when no typical pod asks for a GPU.
double cpuBinding(const FragModel& frag, const ClusterState& state);
// Whether CPU runs out before GPUs for the typical mix (cpuBinding above 1) with no CPU
// held for free GPUs: then the policy places by FGD's rule, with no CPU stranding term and no
// share prices (docs/placement.md, "When CPU binds"). With CPU held, CPU-only work cannot take
// what GPU work needs, GPUs bind again, and the terms stay.
bool cpuBinds(const FragModel& frag, const ClusterState& state);

}  // namespace tessera::sched
