// Filters: can a task go on a node, and on which of its GPUs?
//
// `resolveRequest` turns a `TaskRequest` into the flat form the hot path reads (per-model
// acceptance and MIG profile tables). `checkNode` then runs every filter on one node:
//   CPU, memory, GPU model, MIG profile and slot, GPU share and memory, sharing mode
//   (a shared GPU keeps one isolation kind), trust boundary (a softly shared GPU hosts one
//   tenant, or tenants of one trust group), and finally GPU count.
// It returns the mask of GPUs that could each host one share of the task, or the filter that
// failed, which the placer aggregates into an explanation.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "model/task.h"
#include "sched/cluster_state.h"

namespace tessera::sched {

// In order of how close a node came to fitting: a later reason means more filters passed.
enum class FilterReason : uint8_t {
  kNone = 0,
  kCpu,
  kMemory,
  kGpuModel,
  kMigProfile,   // The GPU model has no such MIG profile (or no MIG at all).
  kMigMode,      // MIG mode off for a MIG slice, or on for other work.
  kSharingMode,  // The GPU is in a mode the task cannot join.
  kGpuShare,     // Not enough free compute share on the GPU.
  kMigSlot,      // No free valid slot for the profile in the GPU's layout.
  kGpuMemory,
  kTrustBoundary,   // Another tenant outside the task's trust group shares the GPU.
  kGpuCount,        // Some GPUs fit, but fewer than the task needs.
  kReserved,        // The node is held for a waiting gang.
  kNodeDown,        // The node's agent is lost: it takes no tasks.
  kCordoned,        // An operator cordoned (or is draining) the node.
  kDedicated,       // The node's pool is dedicated to another tenant.
  kNodeSelector,    // The node lacks a label the workload selects.
  kCpuHeldForGpus,  // A task with no GPU would take CPU the node holds for its free GPUs.
  kRemoved,         // The node was removed: no reason counts it among the nodes.
};
inline constexpr size_t kFilterReasonCount = 19;

std::string_view filterReasonName(FilterReason r);
// The reason after a count of nodes: "1 node down", "2 nodes down", "2 nodes lack the selected
// labels" (the others read the same for any count: "3 insufficient free GPU share").
std::string_view filterReasonCounted(FilterReason r, size_t nodes);

struct ResolvedRequest {
  model::TaskRequest req;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpu_count = 0;
  int32_t milli = 0;  // Per GPU; 1000 for whole GPUs.
  bool whole = false;
  bool fractional = false;
  bool mig = false;
  std::vector<uint8_t> model_ok;     // By GPU model id.
  std::vector<int16_t> mig_profile;  // By GPU model id: profile index, or -1.
  std::vector<uint8_t> node_ok;      // By node, with a node selector: it has the labels.
};

// Whether `node` carries every label of `selector` with its value.
bool matchesSelector(const model::Node& node,
                     const std::vector<std::pair<std::string, std::string>>& selector);

ResolvedRequest resolveRequest(const ClusterState& state, const model::TaskRequest& req);

struct NodeFit {
  FilterReason reason = FilterReason::kNone;  // kNone when the node fits.
  uint64_t eligible = 0;                      // GPUs that can each host one share.
  bool fits() const { return reason == FilterReason::kNone; }
};

// Every filter: the node's rules (down, cordoned, dedicated, the selector), then its resources.
NodeFit checkNode(const ClusterState& state, NodeIndex node, const ResolvedRequest& r);
// The node's rules only, the part of `checkNode` that is about the node's identity and not its
// resources: kNone when they let the task in.
FilterReason checkNodeRules(const ClusterState& state, NodeIndex node, const ResolvedRequest& r);
// The node's resources only (and whether it is up): what a task already placed there needs,
// whatever the rules for new placements say (a restored task on a node cordoned since).
NodeFit checkNodeResources(const ClusterState& state, NodeIndex node, const ResolvedRequest& r);

// Why one GPU cannot host one share of the task; kNone if it can.
FilterReason checkGpu(const ClusterState& state, const GpuState& gpu, const ResolvedRequest& r);

}  // namespace tessera::sched
