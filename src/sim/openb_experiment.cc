#include "sim/openb_experiment.h"

#include <chrono>
#include <cmath>
#include <numeric>

#include "core/rng.h"
#include "sched/cluster_state.h"
#include "sched/placer.h"
#include "sched/policy.h"

namespace tessera::sim {

double RunResult::unallocAt(int pct) const {
  if (pct < 0 || pct >= static_cast<int>(curve.size()) || !curve[pct].present) {
    return std::nan("");
  }
  return curve[pct].unalloc_pct;
}

core::Result<std::unique_ptr<OpenbExperiment>> OpenbExperiment::load(const std::string& nodes_path,
                                                                     const std::string& pods_path) {
  std::unique_ptr<OpenbExperiment> e(new OpenbExperiment());
  e->catalogue_ = model::GpuCatalogue::builtin();
  TESSERA_ASSIGN_OR_RETURN(e->nodes_, readOpenbNodes(nodes_path, e->catalogue_));
  TESSERA_ASSIGN_OR_RETURN(e->pods_, readOpenbPods(pods_path, e->catalogue_, e->nodes_));
  for (const model::Node& n : e->nodes_) {
    e->total_gpus_ += static_cast<int64_t>(n.gpus.size());
  }
  if (e->total_gpus_ == 0) {
    return core::invalidArgument(nodes_path + ": the cluster has no GPUs");
  }
  std::vector<sched::PodShape> shapes;
  shapes.reserve(e->pods_.size());
  for (const OpenbPod& p : e->pods_) {
    shapes.push_back(p.shape());
  }
  e->frag_ = std::make_unique<sched::FragModel>(sched::typicalPods(shapes), e->catalogue_.size());
  return e;
}

std::vector<OpenbPod> tunePodList(std::vector<OpenbPod> pods, const std::vector<OpenbPod>& original,
                                  double target_milli, core::Rng& rng) {
  int64_t total = 0;
  for (const OpenbPod& p : pods) {
    total += p.totalGpuMilli();
  }
  if (static_cast<double>(total) < target_milli && !original.empty()) {
    for (size_t i = 0;; ++i) {
      const OpenbPod& drawn = original[rng.uniform(original.size())];
      // The artifact compares the per-GPU share of the drawn pod, not its total: kept as is so
      // the tuned lists have the same composition as the paper's.
      if (static_cast<double>(total + drawn.gpu_milli) > target_milli) {
        break;
      }
      OpenbPod p = drawn;
      p.name += "-tuned-" + std::to_string(i);
      total += p.totalGpuMilli();
      pods.push_back(std::move(p));
    }
  } else {
    while (static_cast<double>(total) > target_milli && !pods.empty()) {
      const size_t idx = rng.uniform(pods.size());
      total -= pods[idx].totalGpuMilli();
      pods.erase(pods.begin() + static_cast<std::ptrdiff_t>(idx));
    }
  }
  return pods;
}

std::vector<OpenbPod> OpenbExperiment::tunedPods(core::Rng& rng, double tune) const {
  std::vector<OpenbPod> pods = pods_;
  rng.shuffle(std::span<OpenbPod>(pods));
  return tunePodList(std::move(pods), pods_, tune * 1000.0 * static_cast<double>(total_gpus_), rng);
}

std::vector<CurvePoint> binCurve(const std::vector<PodEvent>& events, int64_t total_gpus) {
  struct Acc {
    int64_t n = 0;
    double alloc = 0;
    double frag = 0;
    double rate = 0;
  };
  std::vector<Acc> bins(kMaxArrivedBin + 1);
  std::vector<int> bin_of(events.size(), -1);
  const double total = static_cast<double>(total_gpus);
  auto round2 = [](double x) { return std::nearbyint(x * 100) / 100; };
  for (size_t i = 0; i < events.size(); ++i) {
    const PodEvent& e = events[i];
    // Python's round(): half to even, which nearbyint does in the default rounding mode.
    const double arrived = std::nearbyint(static_cast<double>(e.arrived_milli) / total / 10);
    if (arrived < 0 || arrived > kMaxArrivedBin) {
      continue;
    }
    Acc& a = bins[static_cast<size_t>(arrived)];
    ++a.n;
    a.alloc += round2(static_cast<double>(e.used_milli) / total / 10);
    a.frag += 100 * e.frag_milli / 1000 / total;
    const double idle = 1000 * total - static_cast<double>(e.used_milli);
    a.rate += idle > 0 ? 100 * e.frag_milli / idle : 0;
  }
  std::vector<CurvePoint> curve(kMaxArrivedBin + 1);
  for (int k = 0; k <= kMaxArrivedBin; ++k) {
    Acc sum = bins[k];
    if (sum.n == 0) {
      for (int j : {k - 1, k + 1}) {
        if (j >= 0 && j <= kMaxArrivedBin) {
          sum.n += bins[j].n;
          sum.alloc += bins[j].alloc;
          sum.frag += bins[j].frag;
          sum.rate += bins[j].rate;
        }
      }
    }
    CurvePoint& p = curve[k];
    p.arrived_pct = k;
    if (sum.n == 0) {
      continue;
    }
    const auto n = static_cast<double>(sum.n);
    p.present = true;
    p.alloc_pct = round2(sum.alloc / n);
    p.unalloc_pct = 100 - p.alloc_pct;
    p.frag_pct = sum.frag / n;
    p.frag_rate_pct = sum.rate / n;
  }
  return curve;
}

core::Result<RunResult> OpenbExperiment::run(const std::string& policy_name, uint64_t seed,
                                             double tune, const ProgressFn& progress) const {
  RunResult result;
  result.policy = policy_name;
  result.seed = seed;
  core::Rng rng(seed);
  result.pods = tunedPods(rng, tune);
  std::vector<uint32_t> rank(nodes_.size());
  std::iota(rank.begin(), rank.end(), 0);
  rng.shuffle(std::span<uint32_t>(rank));

  sched::ClusterState state(catalogue_, nodes_);
  sched::PolicyContext ctx{frag_.get(), &rng};
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy,
                           sched::makePolicy(policy_name, ctx, state));
  sched::Placer placer(state, *policy, std::move(rank));

  const auto start = std::chrono::steady_clock::now();
  std::vector<double> node_frag(nodes_.size());
  double frag_sum = 0;
  for (sched::NodeIndex n = 0; n < nodes_.size(); ++n) {
    node_frag[n] = frag_->nodeFrag(state, n);
    frag_sum += node_frag[n];
  }
  std::vector<PodEvent> events;
  events.reserve(result.pods.size());
  result.outcomes.reserve(result.pods.size());
  int64_t arrived = 0;
  const size_t total = result.pods.size();
  for (size_t i = 0; i < total; ++i) {
    const OpenbPod& pod = result.pods[i];
    arrived += pod.totalGpuMilli();
    sched::Placer::Decision d = placer.place(pod.toRequest());
    PodOutcome out{static_cast<uint32_t>(i), -1, 0};
    if (d.placed) {
      const sched::NodeIndex n = d.placement.node;
      out.node = static_cast<int32_t>(n);
      out.gpus = d.placement.gpus;
      frag_sum -= node_frag[n];
      node_frag[n] = frag_->nodeFrag(state, n);
      frag_sum += node_frag[n];
    } else {
      ++result.failed;
    }
    result.outcomes.push_back(out);
    events.push_back({arrived, state.usedGpuMilli(), frag_sum});
    if (progress && (i % 512 == 0 || i + 1 == total)) {
      progress(i + 1, total);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.curve = binCurve(events, total_gpus_);
  return result;
}

}  // namespace tessera::sim
