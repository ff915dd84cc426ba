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

}  // namespace tessera::sched
