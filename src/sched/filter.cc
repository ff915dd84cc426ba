#include "sched/filter.h"

#include <bit>

namespace tessera::sched {

std::string_view filterReasonName(FilterReason r) {
  switch (r) {
    case FilterReason::kNone:
      return "fits";
    case FilterReason::kCpu:
      return "insufficient CPU";
    case FilterReason::kMemory:
      return "insufficient memory";
    case FilterReason::kGpuModel:
      return "GPU model not accepted";
    case FilterReason::kMigProfile:
      return "MIG profile not offered by the GPU model";
    case FilterReason::kMigMode:
      return "GPU's MIG mode does not suit (MIG slices need it on, other work off)";
    case FilterReason::kSharingMode:
      return "GPU in an incompatible sharing mode";
    case FilterReason::kGpuShare:
      return "insufficient free GPU share";
    case FilterReason::kMigSlot:
      return "no free MIG slot";
    case FilterReason::kGpuMemory:
      return "insufficient GPU memory";
    case FilterReason::kTrustBoundary:
      return "GPU shared with an untrusted tenant";
    case FilterReason::kGpuCount:
      return "too few fitting GPUs";
    case FilterReason::kReserved:
      return "reserved for a waiting gang";
    case FilterReason::kNodeDown:
      return "node down";
    case FilterReason::kCordoned:
      return "node cordoned";
    case FilterReason::kDedicated:
      return "node's pool dedicated to another tenant";
    case FilterReason::kNodeSelector:
      return "node lacks the selected labels";
    case FilterReason::kCpuHeldForGpus:
      return "CPU held for the node's free GPUs";
    case FilterReason::kRemoved:
      return "node removed";
  }
  return "unknown";
}

std::string_view filterReasonCounted(FilterReason r, size_t nodes) {
  if (nodes != 1) {
    switch (r) {
      case FilterReason::kNodeDown:
        return "nodes down";
      case FilterReason::kCordoned:
        return "nodes cordoned";
      case FilterReason::kDedicated:
        return "nodes' pools dedicated to another tenant";
      case FilterReason::kNodeSelector:
        return "nodes lack the selected labels";
      default:
        break;
    }
  }
  return filterReasonName(r);
}

ResolvedRequest resolveRequest(const ClusterState& state, const model::TaskRequest& req) {
  ResolvedRequest r;
  r.req = req;
  r.cpu_milli = req.cpu.value();
  r.memory_mib = req.memory.value();
  r.gpu_count = req.gpu_count;
  r.mig = req.isMig();
  r.fractional = req.isFractional();
  r.whole = !r.mig && req.gpu_count > 0 && !r.fractional;
  r.milli = r.whole ? 1000 : static_cast<int32_t>(req.gpu_milli.value());
  const model::GpuCatalogue& cat = state.catalogue();
  r.model_ok.assign(cat.size(), req.models.empty() ? 1 : 0);
  for (model::GpuModelId m : req.models) {
    if (m.value() < r.model_ok.size()) {
      r.model_ok[m.value()] = 1;
    }
  }
  r.mig_profile.assign(cat.size(), -1);
  if (r.mig) {
    for (size_t m = 0; m < cat.size(); ++m) {
      r.mig_profile[m] = static_cast<int16_t>(
          cat.model(model::GpuModelId{static_cast<uint16_t>(m)}).findMigProfile(req.mig_profile));
    }
  }
  if (!req.node_selector.empty()) {
    r.node_ok.resize(state.nodeCount());
    for (NodeIndex n = 0; n < state.nodeCount(); ++n) {
      r.node_ok[n] = matchesSelector(state.node(n), req.node_selector) ? 1 : 0;
    }
  }
  return r;
}

bool matchesSelector(const model::Node& node,
                     const std::vector<std::pair<std::string, std::string>>& selector) {
  for (const auto& [key, value] : selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) {
      return false;
    }
  }
  return true;
}

FilterReason checkGpu(const ClusterState& state, const GpuState& g, const ResolvedRequest& r) {
  if (r.model_ok[g.model.value()] == 0) {
    return FilterReason::kGpuModel;
  }
  if (r.mig) {
    const int profile = r.mig_profile[g.model.value()];
    if (profile < 0) {
      return FilterReason::kMigProfile;
    }
    if (g.mig_mode == model::MigMode::kOff) {
      return FilterReason::kMigMode;
    }
    if (!g.idle() && g.mode != GpuMode::kMig) {
      return FilterReason::kSharingMode;
    }
    if (model::chooseMigSlot(state.catalogue().model(g.model), g.mig, profile) < 0) {
      return FilterReason::kMigSlot;
    }
    return FilterReason::kNone;  // MIG slices are hardware-isolated: no trust rule.
  }
  if (g.mig_mode == model::MigMode::kOn) {
    return FilterReason::kMigMode;
  }
  if (r.whole) {
    return g.idle() ? FilterReason::kNone : FilterReason::kGpuShare;
  }
  // A fractional share.
  if (!g.idle() && (g.mode != GpuMode::kShared || g.shared_isolation != r.req.isolation)) {
    return FilterReason::kSharingMode;
  }
  if (g.free_milli < r.milli) {
    return FilterReason::kGpuShare;
  }
  if (r.req.gpu_memory.value() > 0 || g.memory.value() > 0) {
    if (g.free_memory_mib < ClusterState::gpuMemoryFor(r.req, g)) {
      return FilterReason::kGpuMemory;
    }
  }
  for (const auto& [tenant, count] : g.tenants) {
    if (!state.trust().mayShare(tenant, r.req.tenant)) {
      return FilterReason::kTrustBoundary;
    }
  }
  return FilterReason::kNone;
}

FilterReason checkNodeRules(const ClusterState& state, NodeIndex node, const ResolvedRequest& r) {
  if (!state.up(node)) {
    return state.removed(node) ? FilterReason::kRemoved : FilterReason::kNodeDown;
  }
  if (state.cordoned(node)) {
    return FilterReason::kCordoned;
  }
  if (!state.admits(node, r.req.tenant)) {
    return FilterReason::kDedicated;
  }
  if (!r.node_ok.empty() && r.node_ok[node] == 0) {
    return FilterReason::kNodeSelector;
  }
  return FilterReason::kNone;
}

NodeFit checkNode(const ClusterState& state, NodeIndex node, const ResolvedRequest& r) {
  const FilterReason rule = checkNodeRules(state, node, r);
  if (rule != FilterReason::kNone) {
    return {rule, 0};
  }
  return checkNodeResources(state, node, r);
}

NodeFit checkNodeResources(const ClusterState& state, NodeIndex node, const ResolvedRequest& r) {
  if (!state.up(node)) {
    return {state.removed(node) ? FilterReason::kRemoved : FilterReason::kNodeDown, 0};
  }
  const NodeState& ns = state.nodeState(node);
  if (ns.free_cpu_milli < r.cpu_milli) {
    return {FilterReason::kCpu, 0};
  }
  if (ns.free_memory_mib < r.memory_mib) {
    return {FilterReason::kMemory, 0};
  }
  if (r.gpu_count == 0) {
    // What is left must cover the CPU held for the free GPUs (in milli-CPU x milli-GPU / 1000).
    const int64_t held = state.cpuPerFreeGpu();
    if (held > 0 && ns.gpu_count > 0 &&
        (ns.free_cpu_milli - r.cpu_milli) * 1000 < held * ns.free_gpu_milli) {
      return {FilterReason::kCpuHeldForGpus, 0};
    }
    return {FilterReason::kNone, 0};
  }
  if (ns.gpu_count < r.gpu_count) {
    return {FilterReason::kGpuCount, 0};
  }
  if (!ns.mixed_models && r.model_ok[ns.model.value()] == 0) {
    return {FilterReason::kGpuModel, 0};
  }
  // Fast reject: whole GPUs need idle ones; shares need some free share.
  if (r.whole && ns.idle_gpus < r.gpu_count) {
    return {FilterReason::kGpuShare, 0};
  }
  // (A MIG request is checked by its slots: its share field may say 1000 while a free slot
  // needs only the slices' part of a GPU.)
  if (!r.mig && ns.free_gpu_milli < static_cast<int64_t>(r.milli)) {
    return {FilterReason::kGpuShare, 0};
  }
  uint64_t eligible = 0;
  FilterReason worst = FilterReason::kNone;
  std::span<const GpuState> gpus = state.gpus(node);
  for (size_t i = 0; i < gpus.size(); ++i) {
    FilterReason why = checkGpu(state, gpus[i], r);
    if (why == FilterReason::kNone) {
      eligible |= uint64_t{1} << i;
    } else if (why > worst) {
      worst = why;
    }
  }
  const int n = std::popcount(eligible);
  if (n >= r.gpu_count) {
    return {FilterReason::kNone, eligible};
  }
  return {n > 0 ? FilterReason::kGpuCount : worst, 0};
}

}  // namespace tessera::sched
