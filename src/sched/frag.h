// GPU fragmentation as defined by FGD (Weng et al., USENIX ATC'23).
//
// The "typical pods" are the most popular task shapes of a workload (CPU, per-GPU share, GPU
// count, accepted models), most popular first, until they cover 95% of the tasks, with their
// frequencies renormalised to sum to 1. A node's fragmentation F is the expected amount of its
// free GPU share that a random typical pod could NOT use:
//   for each typical pod p with frequency f:
//     if p needs GPUs, the node's model is accepted, p's GPUs fit and p's CPU fits:
//       F += f * (free share on GPUs with less free than p needs)
//     else:
//       F += f * (all free GPU share on the node)
// Memory is not part of F (as in the paper's artifact).
//
//   FragModel fm(typicalPods(specs), catalogue);
//   double f = fm.nodeFrag(state, node);
//   double after = fm.fragAfter(state, node, cpu, gpu_index, milli);  // hypothetical
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "model/ids.h"
#include "sched/cluster_state.h"

namespace tessera::sched {

// A task shape as FGD keys it. `models` empty = any model.
struct PodShape {
  int64_t cpu_milli = 0;
  int32_t milli = 0;  // Per GPU; 0 for CPU-only.
  int gpu_count = 0;
  std::vector<model::GpuModelId> models;
  auto operator<=>(const PodShape&) const = default;
};

struct TypicalPod {
  PodShape shape;
  int64_t count = 0;
  double freq = 0;
};

// The typical pods of `shapes` (one entry per task of the workload): distinct shapes by
// decreasing count (ties: larger CPU, share, GPU count first) until they cover >= `coverage`
// of the tasks; frequencies renormalised over the kept shapes.
std::vector<TypicalPod> typicalPods(std::span<const PodShape> shapes, double coverage = 0.95);
// The same from distinct shapes with their weights (any scale: decayed counts, ShapeProfile);
// `count` is the weight rounded.
std::vector<TypicalPod> typicalPods(std::vector<std::pair<PodShape, double>> weighted,
                                    double coverage = 0.95);

class FragModel {
 public:
  FragModel(std::vector<TypicalPod> typical, size_t model_count);

  const std::vector<TypicalPod>& typical() const { return typical_; }
  // The milli-CPU the typical GPU task asks for per milli-GPU (frequency-weighted; 0 when no
  // typical task has a GPU).
  double cpuPerGpuMilli() const;

  // F of a node given its free CPU and the free share of each GPU. `model` is the node's GPU
  // model (nodes are homogeneous in F's definition; a mixed node uses its first GPU's model).
  double frag(int64_t cpu_left, std::span<const int32_t> gpu_left, model::GpuModelId model) const;

  // F of a node in `state` as it is now.
  double nodeFrag(const ClusterState& state, NodeIndex node) const;

 private:
  struct Entry {
    int64_t cpu_milli;
    int32_t milli;
    int gpu_count;
    double freq;
    uint32_t access_index;  // Into access_: which models it accepts; UINT32_MAX = any.
  };
  std::vector<TypicalPod> typical_;
  std::vector<Entry> entries_;                // GPU typical pods only.
  double cpu_only_freq_ = 0;                  // CPU-only typical pods always count all free share.
  std::vector<std::vector<uint8_t>> access_;  // Per distinct model list: accepted by model id.
};

// F of every node, recomputed only when the node's version changes. One per policy instance;
// not thread-safe.
class NodeFragCache {
 public:
  NodeFragCache(const FragModel& frag, size_t node_count)
      : frag_(frag), cached_(node_count, {0, 0.0}) {}

  double get(const ClusterState& state, NodeIndex node) {
    auto& [version, value] = cached_[node];
    if (version != state.version(node)) {
      value = frag_.nodeFrag(state, node);
      version = state.version(node);
    }
    return value;
  }
  // Nodes were added: their entries start unknown.
  void resize(size_t node_count) { cached_.resize(node_count, {0, 0.0}); }

 private:
  const FragModel& frag_;
  std::vector<std::pair<uint32_t, double>> cached_;  // (node version, F).
};

}  // namespace tessera::sched
