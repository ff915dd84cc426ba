// The published baseline policies, written from the definitions in the FGD artifact
// (hkust-adsl/kubernetes-scheduler-simulator, pkg/simulator/plugin/). Scores are truncated to
// integers in [0, 100] exactly as there, because the truncation decides which nodes tie.
#include <algorithm>
#include <bit>
#include <cmath>

#include "sched/policy.h"
#include "sched/tessera_policy.h"

namespace tessera::sched {

int32_t milliTaken(const ClusterState& state, const GpuState& gpu, const ResolvedRequest& r) {
  if (!r.mig) {
    return r.milli;
  }
  const model::GpuModelInfo& info = state.catalogue().model(gpu.model);
  return static_cast<int32_t>(
      info.mig_profiles[r.mig_profile[gpu.model.value()]].computeShare().value());
}

uint64_t lowestGpus(uint64_t eligible, int k) {
  uint64_t out = 0;
  for (int taken = 0; taken < k && eligible != 0; ++taken) {
    const uint64_t bit = eligible & (~eligible + 1);
    out |= bit;
    eligible &= eligible - 1;
  }
  return out;
}

uint64_t tightestGpu(const ClusterState& state, NodeIndex node, uint64_t eligible) {
  std::span<const GpuState> gpus = state.gpus(node);
  int best = -1;
  for (uint64_t m = eligible; m != 0; m &= m - 1) {
    const int i = std::countr_zero(m);
    if (best < 0 || gpus[i].free_milli < gpus[best].free_milli) {
      best = i;
    }
  }
  return best < 0 ? 0 : uint64_t{1} << best;
}

int migLayoutTier(const model::GpuModelInfo& info, const GpuState& gpu, int profile, int start) {
  const unsigned slices = model::migSlices(info, profile, start);
  int tier = 1;
  for (const model::MigInstance& idle : gpu.mig_idle) {
    if (idle.profile == profile && idle.start == start) {
      return 2;
    }
    if ((model::migSlices(info, idle.profile, idle.start) & slices) != 0) {
      tier = 0;
    }
  }
  return tier;
}

Choice defaultGpus(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
                   uint64_t eligible) {
  Choice c;
  if (r.gpu_count == 0) {
    return c;
  }
  if (r.mig) {
    std::span<const GpuState> gpus = state.gpus(node);
    int best_key = -1;
    for (uint64_t m = eligible; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      const GpuState& g = gpus[i];
      const model::GpuModelInfo& info = state.catalogue().model(g.model);
      const int profile = r.mig_profile[g.model.value()];
      int start = -1;
      for (const model::MigInstance& idle : g.mig_idle) {
        if (idle.profile == profile && model::migSlotFree(info, g.mig, profile, idle.start)) {
          start = idle.start;
          break;
        }
      }
      if (start < 0) {
        unsigned kept = 0;
        for (const model::MigInstance& idle : g.mig_idle) {
          kept |= model::migSlices(info, idle.profile, idle.start);
        }
        start = model::chooseMigSlot(info, g.mig, profile, kept);
      }
      if (start < 0) {
        continue;
      }
      // The layout first, then the fullest GPU (ties: the lowest index).
      const int key = migLayoutTier(info, g, profile, start) * 16 +
                      std::popcount(static_cast<unsigned>(g.mig.used_slices));
      if (key > best_key) {
        best_key = key;
        c.gpus = uint64_t{1} << i;
        c.mig_start = start;
      }
    }
    return c;
  }
  c.gpus = r.whole ? lowestGpus(eligible, r.gpu_count) : tightestGpu(state, node, eligible);
  return c;
}

namespace {

// The largest node's CPU and GPU share: the artifact's normalisers (128 cores, 8 GPUs on the
// Alibaba cluster), taken from the cluster so other shapes stay in range.
struct Normalisers {
  double cpu = 1;
  double gpu = 1;
  int64_t gpu_milli = 1;
};

Normalisers normalisers(const ClusterState& state) {
  Normalisers n;
  int64_t cpu = 1;
  int64_t gpu = 1;
  for (NodeIndex i = 0; i < state.nodeCount(); ++i) {
    cpu = std::max(cpu, state.node(i).cpu.value());
    gpu = std::max<int64_t>(gpu, 1000 * static_cast<int64_t>(state.node(i).gpus.size()));
  }
  n.cpu = static_cast<double>(cpu);
  n.gpu = static_cast<double>(gpu);
  n.gpu_milli = gpu;
  return n;
}

int64_t requestGpuMilli(const ResolvedRequest& r) {
  return static_cast<int64_t>(r.milli) * r.gpu_count;
}

class RandomPolicy final : public Policy {
 public:
  explicit RandomPolicy(core::Rng& rng) : rng_(rng) {}
  std::string_view name() const override { return "random"; }
  bool cacheable() const override { return false; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    Choice c;
    c.score = static_cast<int64_t>(rng_.next() >> 2);  // Uniform over feasible nodes.
    if (r.fractional) {
      // A uniformly random GPU among those that fit.
      const int n = std::popcount(eligible);
      if (n > 0) {
        uint64_t m = eligible;
        for (uint64_t skip = rng_.uniform(static_cast<uint64_t>(n)); skip > 0; --skip) {
          m &= m - 1;
        }
        c.gpus = m & (~m + 1);
      }
      return c;
    }
    Choice d = defaultGpus(state, node, r, eligible);
    d.score = c.score;
    return d;
  }

 private:
  core::Rng& rng_;
};

class DotProdPolicy final : public Policy {
 public:
  explicit DotProdPolicy(const ClusterState& state) : norm_(normalisers(state)) {}
  std::string_view name() const override { return "dotprod"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    const NodeState& ns = state.nodeState(node);
    const double dot = (static_cast<double>(ns.free_cpu_milli) / norm_.cpu) *
                           (static_cast<double>(r.cpu_milli) / norm_.cpu) +
                       (static_cast<double>(ns.free_gpu_milli) / norm_.gpu) *
                           (static_cast<double>(requestGpuMilli(r)) / norm_.gpu);
    Choice c = defaultGpus(state, node, r, eligible);
    c.score = static_cast<int64_t>(100 * (1 - dot / 2));
    return c;
  }

  void nodesAdded(const ClusterState& state) override { norm_ = normalisers(state); }

 private:
  Normalisers norm_;
};

class BestFitPolicy final : public Policy {
 public:
  explicit BestFitPolicy(const ClusterState& state) : norm_(normalisers(state)) {}
  std::string_view name() const override { return "bestfit"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    const NodeState& ns = state.nodeState(node);
    double s = static_cast<double>(ns.free_cpu_milli - r.cpu_milli) / norm_.cpu * 0.5;
    s += static_cast<double>(ns.free_gpu_milli - requestGpuMilli(r)) / norm_.gpu * 0.5;
    Choice c = defaultGpus(state, node, r, eligible);
    c.score = static_cast<int64_t>((1.0 - s) * 100);
    return c;
  }

  void nodesAdded(const ClusterState& state) override { norm_ = normalisers(state); }

 private:
  Normalisers norm_;
};

class GpuPackingPolicy final : public Policy {
 public:
  std::string_view name() const override { return "gpupacking"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    Choice c = defaultGpus(state, node, r, eligible);
    if (r.gpu_count == 0) {
      c.score = 0;
      return c;
    }
    std::span<const GpuState> gpus = state.gpus(node);
    const int n = static_cast<int>(gpus.size());
    int fully_free = 0;
    for (const GpuState& g : gpus) {
      fully_free += g.free_milli == 1000 ? 1 : 0;
    }
    if (fully_free == n) {
      c.score = std::max(33 - fully_free, fully_free);  // Idle node: fewer GPUs is better.
      return c;
    }
    // The GPUs the task would take, tightest first.
    int order[model::kMaxGpusPerNode];
    for (int i = 0; i < n; ++i) {
      order[i] = i;
    }
    std::stable_sort(order, order + n,
                     [&](int a, int b) { return gpus[a].free_milli < gpus[b].free_milli; });
    int taken = 0;
    int whole_taken = 0;
    int64_t r_sum = 0;
    for (int j = 0; j < n && taken < r.gpu_count; ++j) {
      const GpuState& g = gpus[order[j]];
      if (g.free_milli >= r.milli) {
        ++taken;
        whole_taken += g.free_milli == 1000 ? 1 : 0;
        r_sum += g.free_milli * 100 / 1000;
      }
    }
    if (whole_taken > 0) {
      c.score = std::max(50 - whole_taken, 33);  // Partly used node, idle GPUs.
    } else {
      c.score = std::max<int64_t>(100 - r_sum / 10, 50);  // Shared GPU: tightest first.
    }
    return c;
  }
};

class GpuClusteringPolicy final : public Policy {
 public:
  explicit GpuClusteringPolicy(const ClusterState& state)
      : norm_(normalisers(state)), classes_(state.nodeCount()) {}
  std::string_view name() const override { return "gpuclustering"; }
  bool scoresByState() const override { return false; }  // `classes_` is per node.

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    Choice c = defaultGpus(state, node, r, eligible);
    if (r.gpu_count == 0) {
      c.score = 0;
      return c;
    }
    const int64_t left = state.nodeState(node).free_gpu_milli;
    const int64_t base = 25 * (norm_.gpu_milli - left) / norm_.gpu_milli;
    const auto& present = classes_[node];
    const int want = classOf(r);
    bool has = false;
    for (const auto& [cls, count] : present) {
      has |= cls == want;
    }
    if (has) {
      c.score = base + (present.size() == 1 ? 75 : 50);
    } else {
      c.score = base + (present.empty() ? 25 : 0);
    }
    return c;
  }

  void onApplied(const ClusterState&, const ResolvedRequest& r, const Placement& p) override {
    if (r.gpu_count == 0) {
      return;
    }
    auto& present = classes_[p.node];
    const int want = classOf(r);
    for (auto& [cls, count] : present) {
      if (cls == want) {
        ++count;
        return;
      }
    }
    present.emplace_back(want, 1);
  }

  void onReleased(const ClusterState&, const ResolvedRequest& r, const Placement& p) override {
    if (r.gpu_count == 0) {
      return;
    }
    auto& present = classes_[p.node];
    for (size_t i = 0; i < present.size(); ++i) {
      if (present[i].first == classOf(r) && --present[i].second == 0) {
        present.erase(present.begin() + static_cast<std::ptrdiff_t>(i));
        return;
      }
    }
  }

  void nodesAdded(const ClusterState& state) override {
    norm_ = normalisers(state);
    classes_.resize(state.nodeCount());
  }

 private:
  // "share-gpu" = 0 (MIG slices count as shares), "<k>-gpu" = k.
  static int classOf(const ResolvedRequest& r) { return r.whole ? r.gpu_count : 0; }

  Normalisers norm_;
  std::vector<std::vector<std::pair<int, uint32_t>>> classes_;
};

class FgdPolicy final : public Policy {
 public:
  FgdPolicy(const FragModel& frag, const ClusterState& state)
      : frag_(frag), node_frag_(frag, state.nodeCount()) {}
  void nodesAdded(const ClusterState& state) override { node_frag_.resize(state.nodeCount()); }
  std::string_view name() const override { return "fgd"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    const double before = node_frag_.get(state, node);
    std::span<const GpuState> gpus = state.gpus(node);
    const size_t n = gpus.size();
    int32_t left[model::kMaxGpusPerNode];
    for (size_t i = 0; i < n; ++i) {
      left[i] = gpus[i].free_milli;
    }
    const int64_t cpu_after = state.nodeState(node).free_cpu_milli - r.cpu_milli;
    const model::GpuModelId model = n > 0 ? gpus[0].model : model::GpuModelId{0};
    auto score_of = [&](double after) {
      return static_cast<int64_t>(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
    };
    if (r.fractional) {
      // The first GPU to reach the best integer score wins.
      return bestShareGpu(gpus, eligible, [&](int i) {
        left[i] -= r.milli;
        const int64_t s = score_of(frag_.frag(cpu_after, {left, n}, model));
        left[i] += r.milli;
        return s;
      });
    }
    Choice c = defaultGpus(state, node, r, eligible);
    for (uint64_t m = c.gpus; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      left[i] -= milliTaken(state, gpus[i], r);
    }
    c.score = score_of(frag_.frag(cpu_after, {left, n}, model));
    return c;
  }

 private:
  const FragModel& frag_;
  NodeFragCache node_frag_;
};

}  // namespace

const std::vector<std::string>& policyNames() {
  static const std::vector<std::string> names = {
      "random", "dotprod", "bestfit", "gpupacking", "gpuclustering", "fgd", "tessera"};
  return names;
}

core::Result<std::unique_ptr<Policy>> makePolicy(std::string_view name, const PolicyContext& ctx,
                                                 const ClusterState& state) {
  if (name == "random") {
    if (ctx.rng == nullptr) {
      return core::invalidArgument("policy 'random' needs a random source");
    }
    return std::unique_ptr<Policy>(std::make_unique<RandomPolicy>(*ctx.rng));
  }
  if (name == "dotprod") {
    return std::unique_ptr<Policy>(std::make_unique<DotProdPolicy>(state));
  }
  if (name == "bestfit") {
    return std::unique_ptr<Policy>(std::make_unique<BestFitPolicy>(state));
  }
  if (name == "gpupacking") {
    return std::unique_ptr<Policy>(std::make_unique<GpuPackingPolicy>());
  }
  if (name == "gpuclustering") {
    return std::unique_ptr<Policy>(std::make_unique<GpuClusteringPolicy>(state));
  }
  if (name == "fgd" || name == "tessera") {
    if (ctx.frag == nullptr) {
      return core::invalidArgument("policy '" + std::string(name) +
                                   "' needs the workload's typical pods");
    }
    if (name == "fgd") {
      return std::unique_ptr<Policy>(std::make_unique<FgdPolicy>(*ctx.frag, state));
    }
    return makeTesseraPolicy(*ctx.frag, state);
  }
  std::string known;
  for (const std::string& n : policyNames()) {
    known += (known.empty() ? "" : ", ") + n;
  }
  return core::invalidArgument("unknown policy '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace tessera::sched
