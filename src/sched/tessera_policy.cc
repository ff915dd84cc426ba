// Tessera: FGD plus a cluster-wide sum-of-squares rule for GPU-sharing tasks.
//
// The idea. FGD (Weng et al., ATC'23) places every task where the node's fragmentation F grows
// least. For a task that takes a share of one GPU, F looks one arrival ahead: a gap counts as
// fragment if the next typical task could not use it. At the moment the cluster fills, almost all
// free GPU share left is in such gaps, and FGD's greedy "close the tightest gap now" pairs shares
// badly (e.g. 470 + 320 leaves 210, 650 + 230 leaves 120, while 470 + 470 and 650 + 320 leave 60
// and 30). That is online bin packing with a discrete size distribution, the setting of the
// Sum-of-Squares algorithm (Csirik, Johnson, Kenyon, Orlin, Shor, Weber, "On the Sum-of-Squares
// algorithm for bin packing", J. ACM 2006): keep N(h), the number of GPUs whose free share is h,
// and put each item where sum_h N(h)^2 grows least. That keeps the gap sizes balanced, so that
// an arriving share tends to find a gap it fills well instead of creating a new odd one.
//
// Two adaptations to GPUs:
//  * Only "live" gaps are counted: h at least the smallest typical GPU share (FGD's typical pods
//    of the original pod list). A smaller gap can never be used, so it is not a bin that is still
//    open; counting it (plain SS) makes every 470+470 pair look bad once many exist (5.83 % on
//    default instead of FGD's 4.75 %).
//  * Such a dead gap is real waste, so creating one costs kDeadWastePenalty per 10 milli.
// SS only decides the gap size class (which free share to use). Within a class, and for every
// task that is not a GPU share (whole GPUs, multi-GPU, CPU-only), FGD's integer score decides,
// with ties to the lowest node rank as in FGD. That keeps FGD's consolidation (the coarse,
// rank-ordered ties fill nodes one after another; full-precision scores are much worse).
//
// Only already-arrived state is used: N(h) is maintained from the applied placements; the typical
// pods come from the original pod list, as in FGD.
#include "sched/tessera_policy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

namespace tessera::sched {
namespace {

// Cost of creating a dead gap of h milli, in units of the SS potential, is kDeadWastePenalty*h/10.
// Swept 0, 1, 3, 4, 6, 16 on default: 4.63, 4.60, 4.53, 4.54, 4.65, 5.17 (see RESEARCH.md).
constexpr int64_t kDeadWastePenalty = 3;
constexpr int32_t kFullGpu = 1000;

class TesseraPolicy final : public Policy {
 public:
  TesseraPolicy(const FragModel& frag, const ClusterState& state)
      : frag_(frag), node_frag_(state.nodeCount(), {0, 0.0}), gaps_(kFullGpu + 1, 0) {
    for (const TypicalPod& t : frag_.typical()) {
      if (t.shape.gpu_count > 0 && t.shape.milli > 0) {
        min_live_ = std::min<int32_t>(min_live_, t.shape.milli);
      }
    }
    for (NodeIndex n = 0; n < state.nodeCount(); ++n) {
      for (const GpuState& g : state.gpus(n)) {
        addGap(g.free_milli, +1);
      }
    }
  }
  std::string_view name() const override { return "tessera"; }

  // Shares read the global gap counts, which change with every share placed: the placer must
  // not cache them. Other tasks' scores depend on their node only.
  bool cacheable() const override { return false; }
  bool cacheable(const ResolvedRequest& r) const override { return !r.fractional; }

  void onApplied(const ClusterState& state, const ResolvedRequest& r, const Placement& p) override {
    update(state, r, p, -1);
  }
  void onReleased(const ClusterState& state, const ResolvedRequest& r,
                  const Placement& p) override {
    update(state, r, p, +1);
  }

  Choice score(const ClusterState& state, NodeIndex node, const ResolvedRequest& r,
               uint64_t eligible) override {
    std::span<const GpuState> gpus = state.gpus(node);
    const size_t n = gpus.size();
    int32_t left[model::kMaxGpusPerNode];
    for (size_t i = 0; i < n; ++i) {
      left[i] = gpus[i].free_milli;
    }
    const int64_t cpu_after = state.nodeState(node).free_cpu_milli - r.cpu_milli;
    const model::GpuModelId model = n > 0 ? gpus[0].model : model::GpuModelId{0};
    const double before = nodeFrag(state, node);
    if (!r.fractional) {
      // FGD exactly: CPU-only, whole-GPU and multi-GPU tasks.
      Choice c = defaultGpus(state, node, r, eligible);
      for (uint64_t m = c.gpus; m != 0; m &= m - 1) {
        left[std::countr_zero(m)] -= r.milli;
      }
      c.score = fgdScore(before, frag_.frag(cpu_after, {left, n}, model));
      return c;
    }
    // A share: per GPU, the FGD score (cached per node version, it is the costly part) and
    // the SS growth (cheap, global). Lexicographic: least SS growth, then best FGD score.
    FgdEntry& e = shareCache(r, node);
    if (e.version != state.version(node)) {
      e.version = state.version(node);
      for (uint64_t m = eligible; m != 0; m &= m - 1) {
        const int i = std::countr_zero(m);
        left[i] -= r.milli;
        e.score[i] = fgdScore(before, frag_.frag(cpu_after, {left, n}, model));
        left[i] += r.milli;
      }
    }
    Choice best;
    bool found = false;
    for (uint64_t m = eligible; m != 0; m &= m - 1) {
      const int i = std::countr_zero(m);
      const int64_t s = -ssGrowth(left[i], r.milli) * kFgdRange + e.score[i];
      if (!found || s > best.score) {  // Ties: lowest GPU index, as FGD.
        best = Choice{s, uint64_t{1} << i, -1};
        found = true;
      }
    }
    return best;
  }

 private:
  static constexpr int64_t kFgdRange = 101;  // FGD scores are integers in [0, 100].

  struct FgdEntry {
    uint32_t version = 0;
    int64_t score[model::kMaxGpusPerNode] = {};
  };

  bool live(int32_t h) const { return h >= min_live_ && h < kFullGpu; }
  void addGap(int32_t h, int delta) {
    if (live(h)) {
      gaps_[h] += delta;
    }
  }
  void update(const ClusterState& state, const ResolvedRequest& r, const Placement& p, int sign) {
    if (!r.fractional || p.gpus == 0) {
      return;  // Whole GPUs go from 1000 to 0 free: no live gap changes.
    }
    const int32_t now = state.gpus(p.node)[std::countr_zero(p.gpus)].free_milli;
    const int32_t was = now - sign * r.milli;  // Free share before this apply/release.
    addGap(was, -1);
    addGap(now, +1);
  }

  // Growth of sum_h N(h)^2 (live h) when a GPU with free share g takes s; plus the dead-waste
  // cost if the remainder is too small for any typical share.
  int64_t ssGrowth(int32_t g, int32_t s) const {
    const int32_t h = g - s;
    int64_t d = 0;
    if (live(g)) {
      d += 1 - 2 * gaps_[g];
    }
    if (live(h)) {
      d += 2 * gaps_[h] + 1;
    } else if (h > 0 && h < min_live_) {
      d += kDeadWastePenalty * h / 10;
    }
    return d;
  }

  FgdEntry& shareCache(const ResolvedRequest& r, NodeIndex node) {
    // The placer scores all nodes for one class in a row: look the class up once per pass.
    if (&r != last_class_) {
      last_class_ = &r;
      last_cache_ = &share_cache_[&r];
      if (last_cache_->empty()) {
        last_cache_->resize(node_frag_.size());
      }
    }
    return (*last_cache_)[node];
  }

  // FGD's score: floor(100 * sigmoid(dF / 1000)).
  static int64_t fgdScore(double before, double after) {
    return static_cast<int64_t>(100.0 / (1.0 + std::exp(-(before - after) / 1000.0)));
  }
  double nodeFrag(const ClusterState& state, NodeIndex node) {
    auto& [version, value] = node_frag_[node];
    if (version != state.version(node)) {
      value = frag_.nodeFrag(state, node);
      version = state.version(node);
    }
    return value;
  }

  const FragModel& frag_;
  std::vector<std::pair<uint32_t, double>> node_frag_;  // F per node, by node version.
  std::vector<int64_t> gaps_;                           // N(h) for live h.
  int32_t min_live_ = kFullGpu;
  // Per share class (the placer keeps ResolvedRequests alive), per node.
  std::unordered_map<const ResolvedRequest*, std::vector<FgdEntry>> share_cache_;
  const ResolvedRequest* last_class_ = nullptr;
  std::vector<FgdEntry>* last_cache_ = nullptr;
};

}  // namespace

std::unique_ptr<Policy> makeTesseraPolicy(const FragModel& frag, const ClusterState& state) {
  return std::make_unique<TesseraPolicy>(frag, state);
}

}  // namespace tessera::sched
