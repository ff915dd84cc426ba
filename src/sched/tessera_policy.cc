#include "sched/tessera_policy.h"

#include <bit>
#include <cmath>

namespace tessera::sched {
namespace {

class TesseraPolicy final : public Policy {
 public:
  TesseraPolicy(const FragModel& frag, const ClusterState& state)
      : frag_(frag), cached_(state.nodeCount(), {0, 0.0}) {}
  std::string_view name() const override { return "tessera"; }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    const double before = nodeFrag(state, node);
    std::span<const GpuState> gpus = state.gpus(node);
    const size_t n = gpus.size();
    int32_t left[model::kMaxGpusPerNode];
    for (size_t i = 0; i < n; ++i) {
      left[i] = gpus[i].free_milli;
    }
    const int64_t cpu_after = state.nodeState(node).free_cpu_milli - r.cpu_milli;
    const model::GpuModelId model = n > 0 ? gpus[0].model : model::GpuModelId{0};
    auto score_of = [&](double after) {
      return static_cast<int64_t>(std::llround((before - after) * 1000));
    };
    if (r.fractional) {
      Choice best;
      bool found = false;
      for (uint64_t m = eligible; m != 0; m &= m - 1) {
        const int i = std::countr_zero(m);
        left[i] -= r.milli;
        const int64_t s = score_of(frag_.frag(cpu_after, {left, n}, model));
        left[i] += r.milli;
        if (!found || s > best.score) {
          best = Choice{s, uint64_t{1} << i, -1};
          found = true;
        }
      }
      return best;
    }
    Choice c = defaultGpus(state, node, r, eligible);
    for (uint64_t m = c.gpus; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      left[i] -= r.milli;
    }
    c.score = score_of(frag_.frag(cpu_after, {left, n}, model));
    return c;
  }

 private:
  double nodeFrag(const ClusterState& state, NodeIndex node) {
    auto& [version, value] = cached_[node];
    if (version != state.version(node)) {
      value = frag_.nodeFrag(state, node);
      version = state.version(node);
    }
    return value;
  }

  const FragModel& frag_;
  std::vector<std::pair<uint32_t, double>> cached_;
};

}  // namespace

std::unique_ptr<Policy> makeTesseraPolicy(const FragModel& frag, const ClusterState& state) {
  return std::make_unique<TesseraPolicy>(frag, state);
}

}  // namespace tessera::sched
