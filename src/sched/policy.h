// Placement policies: how the placer ranks the nodes that passed the filters, and which GPUs
// on the chosen node a task gets.
//
// Policies by name (`makePolicy`):
//   random        a uniformly random feasible node, random fitting GPU.
//   dotprod       Tetris-style: smallest dot product of free (CPU, GPU) and request.
//   bestfit       least free CPU and GPU left after placement.
//   gpupacking    shared GPUs first, then partly used nodes, then idle nodes.
//   gpuclustering nodes already running tasks of the same GPU shape.
//   fgd           least growth of FGD fragmentation (Weng et al., ATC'23).
//   tessera       ours; see docs/placement.md.
// The baselines follow the FGD artifact's definitions exactly, including integer score
// truncation (see docs/placement.md for sources).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "model/node.h"
#include "sched/cluster_state.h"
#include "sched/filter.h"
#include "sched/frag.h"

namespace tessera::sched {

// A scored candidate: higher `score` wins; `gpus` and `mig_start` say what the task would get.
struct Choice {
  int64_t score = 0;
  uint64_t gpus = 0;
  int mig_start = -1;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;

  // Scores a node that passed the filters. `eligible` is the mask of its GPUs that can each host
  // one share of the task (empty for CPU-only tasks).
  virtual Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
                       uint64_t eligible) = 0;

  // True when `score` depends only on the node's state and the request, so the placer may
  // cache it until the node's version changes.
  virtual bool cacheable() const { return true; }
  // True when two nodes in equal states (resources, GPUs and their tenants, capacity) get equal
  // scores and GPUs for one request, so the placer may score a state once for all its nodes.
  // False for policies that keep per-node state of their own.
  virtual bool scoresByState() const { return cacheable(); }

  // Called after a placement chosen by this policy (or any other) is applied or released.
  virtual void onApplied(const ClusterState& /*state*/, const ResolvedRequest& /*r*/,
                         const Placement& /*p*/) {}
  virtual void onReleased(const ClusterState& /*state*/, const ResolvedRequest& /*r*/,
                          const Placement& /*p*/) {}
  // Nodes were added to the state (ClusterState::addNode): per-node caches grow.
  virtual void nodesAdded(const ClusterState& /*state*/) {}
};

// What policies may need beyond the cluster: the workload's typical pods (fgd, tessera) and a
// random source (random).
struct PolicyContext {
  const FragModel* frag = nullptr;
  core::Rng* rng = nullptr;
};

// Names accepted by `makePolicy`, in the order the docs list them.
const std::vector<std::string>& policyNames();

core::Result<std::unique_ptr<Policy>> makePolicy(std::string_view name, const PolicyContext& ctx,
                                                 const ClusterState& state);

// The milli-GPU a task takes on `gpu`: its share, or for MIG the profile's compute share.
int32_t milliTaken(const ClusterState& state, const GpuState& gpu, const ResolvedRequest& r);

// Where a MIG instance of `profile` at `start` on `gpu` stands with the GPU's layout:
// 2 it is an idle instance of the layout (no re-layout), 1 it takes slices no instance holds,
// 0 it destroys idle instances.
int migLayoutTier(const model::GpuModelInfo& info, const GpuState& gpu, int profile, int start);

// GPU choices shared by the policies.
// The `k` lowest-index GPUs of `eligible`.
uint64_t lowestGpus(uint64_t eligible, int k);
// The eligible GPU with the least free share (ties: lowest index); for one shared GPU.
uint64_t tightestGpu(const ClusterState& state, NodeIndex node, uint64_t eligible);
// The GPUs and MIG start a task gets when a policy has no preference beyond packing: whole GPUs
// lowest index first, a share on the tightest GPU, a MIG slice in an idle instance of its
// profile if there is one (no re-layout), else on the fullest partitioned GPU, in slices no idle
// instance holds if it can.
Choice defaultGpus(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
                   uint64_t eligible);

// For a share: calls `score_of(i)` once per distinct free share among the `eligible` GPUs (equal
// free share scores equally), and returns the GPU with the highest score, ties to the lowest
// index.
template <typename ScoreOf>
Choice bestShareGpu(std::span<const GpuState> gpus, uint64_t eligible, ScoreOf score_of) {
  Choice best;
  bool found = false;
  int32_t seen[model::kMaxGpusPerNode];
  int seen_n = 0;
  for (uint64_t m = eligible; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    const int32_t free = gpus[i].free_milli;
    if (std::find(seen, seen + seen_n, free) != seen + seen_n) {
      continue;
    }
    seen[seen_n++] = free;
    const int64_t s = score_of(i);
    if (!found || s > best.score) {
      best = Choice{s, uint64_t{1} << i, -1};
      found = true;
    }
  }
  return best;
}

}  // namespace tessera::sched
