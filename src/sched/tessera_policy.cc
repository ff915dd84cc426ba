// Tessera's placement policy: FGD's fragmentation, extended with CPU stranding, and GPU shares
// packed by the prices of the cutting-stock LP over the workload's typical shares.
//
// The idea, from what is left when the Alibaba cluster fills under FGD (default trace, seed 42,
// ~295 GPUs free at arrived = 100%): ~184 GPU-equivalents are 190-milli gaps beside lone 810
// shares (a floor: few shares are small enough to fill them); ~90 are GPUs and gaps on nodes
// whose CPU is exhausted, so no task can use them; ~95 are gaps that shares left badly paired
// (470 + 320 leaves 210, which no typical share fills). Two changes address the last two, and a
// third the GPU models that model-restricted tasks need:
//
// 1. CPU stranding. A node's free GPU share needs CPU to be used: on average `cpu_per_milli_` of
//    the typical GPU tasks. When a placement leaves a node with less free CPU than its free GPU
//    share needs, the uncovered part of that share is stranded. We add the stranding a placement
//    *creates* (growth over the node's current stranding, never a reward for reducing it) to
//    FGD's fragmentation growth, in the same unit (milli-GPU). FGD sees CPU only through whether
//    each typical task fits right now, so it lets CPU-only and CPU-heavy tasks drain GPU nodes.
//
// 2. Share packing by LP prices (`ShareValues`). A share goes to the GPU where it destroys the
//    least packing value: reduced cost V(gap) - V(gap - size) - price(size), zero when the
//    placement is part of an optimal packing of the typical share mix. FGD's score breaks ties.
//
// 3. GPU models. Tasks restricted to some models need a share of those models' GPUs
//    (`reserveModels`); taking that share for a task with a choice adds to the growth of (1).
//
// Whole-GPU, multi-GPU and CPU-only tasks are scored as FGD with the terms of (1) and (3). Scores
// keep FGD's integer truncation, and ties go to the lowest node rank: coarse scores with a fixed
// order consolidate load onto the same nodes (the same scores at full precision do much worse).
// Everything the policy uses comes from the typical pods of the original pod list (as FGD) and
// the node's own state: no tuning constants, nothing about the future sequence, and scores depend
// only on the node, so the placer caches them.
#include "sched/tessera_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "sched/share_values.h"

namespace tessera::sched {
namespace {

constexpr int32_t kFullGpu = 1000;
// FGD scores are integers in [0, 100]; a share's packing cost ranks above them.
constexpr int64_t kFgdRange = 101;

class TesseraPolicy final : public Policy {
 public:
  // `cpu_binds`: cpuBinds(frag, state), which turns the stranding term off.
  TesseraPolicy(const FragModel& frag, const ClusterState& state, ShareValues values,
                bool cpu_binds)
      : frag_(frag),
        values_(std::move(values)),
        node_frag_(frag, state.nodeCount()),
        cpu_per_milli_(cpu_binds ? 0.0 : frag.cpuPerGpuMilli()) {
    reserveModels(state);
  }

  void nodesAdded(const ClusterState& state) override {
    node_frag_.resize(state.nodeCount());
    reserveModels(state);
  }

  std::string_view name() const override { return "tessera"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    std::span<const GpuState> gpus = state.gpus(node);
    const size_t n = gpus.size();
    int32_t left[model::kMaxGpusPerNode];
    for (size_t i = 0; i < n; ++i) {
      left[i] = gpus[i].free_milli;
    }
    const NodeState& ns = state.nodeState(node);
    const int64_t cpu_after = ns.free_cpu_milli - r.cpu_milli;
    const double frag_before = node_frag_.get(state, node);
    const double stranded_before =
        stranded(ns.free_cpu_milli, static_cast<double>(ns.free_gpu_milli));
    const model::GpuModelId model = n > 0 ? gpus[0].model : model::GpuModelId{0};
    double taken_reserved = 0;  // GPU share taken that pods restricted to this model need.
    // FGD's integer score of the node after the placement, with the stranding it creates.
    auto score_after = [&]() {
      double free_after = 0;
      for (size_t i = 0; i < n; ++i) {
        free_after += left[i];
      }
      const double frag_after = frag_.frag(cpu_after, {left, n}, model);
      const double created = std::max(0.0, stranded(cpu_after, free_after) - stranded_before);
      const double growth = frag_after - frag_before + created + taken_reserved;
      return static_cast<int64_t>(100.0 / (1.0 + std::exp(growth / 1000.0)));
    };
    if (!r.fractional) {
      Choice c = defaultGpus(state, node, r, eligible);
      for (uint64_t m = c.gpus; m != 0; m &= m - 1) {
        const int i = std::countr_zero(m);
        const int32_t taken = milliTaken(state, gpus[i], r);
        left[i] -= taken;
        taken_reserved += taken * reservedShare(gpus[i].model);
      }
      c.score = score_after();
      if (r.mig && c.gpus != 0) {
        // A node whose layout already holds the slice (or spares its idle instances) first: a
        // re-layout costs the GPU's time (instances destroyed and made) and any work there.
        const GpuState& g = gpus[std::countr_zero(c.gpus)];
        // A new instance in free slices scores as before (the simulator compares it with a
        // share's score); reusing one ranks above, destroying idle ones below.
        c.score += kFgdRange * (migLayoutTier(state.catalogue().model(g.model), g,
                                              r.mig_profile[g.model.value()], c.mig_start) -
                                1);
      }
      return c;
    }
    // A share: the GPU with the least packing cost, then the best score above, then the lowest
    // index.
    return bestShareGpu(gpus, eligible, [&](int i) {
      const auto cost = static_cast<int64_t>(
          std::llround(values_.reducedCost(left[i], r.milli) * kFullGpu));  // In milli-GPU.
      left[i] -= r.milli;
      taken_reserved = r.milli * reservedShare(gpus[i].model);
      const int64_t s = -cost * kFgdRange + score_after();
      left[i] += r.milli;
      return s;
    });
  }

 private:
  // For each GPU model: the share of its GPUs that the typical pods restricted to a subset of
  // models need when the workload fills the cluster. A typical pod's demand is spread over the
  // models it accepts in proportion to their GPU counts, so a model that restricted pods favour
  // (the T4s of `gpuspec10`: a third of them) is reserved more than one they merely accept.
  void reserveModels(const ClusterState& state) {
    std::vector<double> gpus_of;  // By model id.
    double total_gpus = 0;
    for (NodeIndex node = 0; node < state.nodeCount(); ++node) {
      for (const GpuState& g : state.gpus(node)) {
        if (g.model.value() >= gpus_of.size()) {
          gpus_of.resize(g.model.value() + 1, 0.0);
        }
        gpus_of[g.model.value()] += 1;
        total_gpus += 1;
      }
    }
    double demand = 0;  // Of all typical GPU pods, in GPUs per pod.
    for (const TypicalPod& t : frag_.typical()) {
      demand += t.freq * t.shape.gpu_count * t.shape.milli / double{kFullGpu};
    }
    reserved_.assign(gpus_of.size(), 0.0);
    if (demand <= 0 || total_gpus <= 0) {
      return;
    }
    for (const TypicalPod& t : frag_.typical()) {
      if (t.shape.models.empty() || t.shape.gpu_count == 0) {
        continue;
      }
      std::vector<model::GpuModelId> models = t.shape.models;  // A list may repeat a model.
      std::sort(models.begin(), models.end());
      models.erase(std::unique(models.begin(), models.end()), models.end());
      double accepted = 0;  // GPUs of the models it accepts.
      for (model::GpuModelId m : models) {
        accepted += m.value() < gpus_of.size() ? gpus_of[m.value()] : 0;
      }
      if (accepted <= 0) {
        continue;
      }
      // Its share of the demand, over its share of the capacity: the share of each accepted
      // model's GPUs it needs.
      const double need = (t.freq * t.shape.gpu_count * t.shape.milli / double{kFullGpu} / demand) /
                          (accepted / total_gpus);
      for (model::GpuModelId m : models) {
        if (m.value() < reserved_.size()) {
          reserved_[m.value()] = std::min(1.0, reserved_[m.value()] + need);
        }
      }
    }
  }

  double reservedShare(model::GpuModelId m) const {
    return m.value() < reserved_.size() ? reserved_[m.value()] : 0.0;
  }

  // GPU share (milli) a node cannot use for want of CPU: the part of `free_gpu_milli` whose
  // expected CPU need exceeds `cpu_left`.
  double stranded(int64_t cpu_left, double free_gpu_milli) const {
    if (cpu_per_milli_ <= 0) {
      return 0;
    }
    const double deficit = free_gpu_milli * cpu_per_milli_ - static_cast<double>(cpu_left);
    return deficit <= 0 ? 0 : std::min(free_gpu_milli, deficit / cpu_per_milli_);
  }

  const FragModel& frag_;
  const ShareValues values_;
  NodeFragCache node_frag_;
  double cpu_per_milli_ = 0;      // CPU the typical GPU task needs per milli-GPU.
  std::vector<double> reserved_;  // By model id: see reserveModels.
};

}  // namespace

double cpuBinding(const FragModel& frag, const ClusterState& state) {
  double cpu = 0;  // Per typical pod, frequency-weighted.
  double gpu = 0;
  for (const TypicalPod& t : frag.typical()) {
    cpu += t.freq * static_cast<double>(t.shape.cpu_milli);
    gpu += t.freq * t.shape.gpu_count * static_cast<double>(t.shape.milli);
  }
  double cluster_cpu = 0;
  double cluster_gpu = 0;
  for (NodeIndex n = 0; n < state.nodeCount(); ++n) {
    cluster_cpu += static_cast<double>(state.node(n).cpu.value());
    cluster_gpu += static_cast<double>(state.gpus(n).size()) * kFullGpu;
  }
  if (gpu <= 0 || cluster_cpu <= 0) {
    return 0;
  }
  return cpu / gpu * cluster_gpu / cluster_cpu;
}

bool cpuBinds(const FragModel& frag, const ClusterState& state) {
  return state.cpuPerFreeGpu() == 0 && cpuBinding(frag, state) > 1;
}

core::Result<std::unique_ptr<Policy>> makeTesseraPolicy(const FragModel& frag,
                                                        const ClusterState& state) {
  std::vector<std::pair<int32_t, double>> shares;
  for (const TypicalPod& t : frag.typical()) {
    if (t.shape.gpu_count == 1 && t.shape.milli > 0 && t.shape.milli < kFullGpu) {
      shares.emplace_back(t.shape.milli, t.freq);
    }
  }
  const bool cpu_binds = cpuBinds(frag, state);
  if (cpu_binds) {
    // CPU, not GPUs, runs out first for this mix: packing GPU shares and keeping CPU beside
    // free GPUs serve a constraint that does not bind, and cost GPUs where CPU does
    // (docs/placement.md, "When CPU binds"). FGD's own rule, which counts whether each typical
    // pod's CPU fits, places; the model term stays.
    shares.clear();
  }
  TESSERA_ASSIGN_OR_RETURN(ShareValues values, ShareValues::fromShares(shares));
  return std::unique_ptr<Policy>(
      std::make_unique<TesseraPolicy>(frag, state, std::move(values), cpu_binds));
}

}  // namespace tessera::sched
