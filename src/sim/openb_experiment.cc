#include "sim/openb_experiment.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/rng.h"
#include "sched/cluster_state.h"
#include "sched/placer.h"
#include "sched/policy.h"
#include "sim/report.h"

namespace tessera::sim {

double RunResult::unallocAt(int pct) const {
  if (pct < 0 || pct >= static_cast<int>(curve.size()) || !curve[pct].present) {
    return std::nan("");
  }
  return curve[pct].unalloc_pct;
}

double RunResult::unservedAt(int pct) const {
  if (pct < 0 || pct >= static_cast<int>(served_curve.size()) || !served_curve[pct].present) {
    return std::nan("");
  }
  return served_curve[pct].unalloc_pct;
}

namespace {

// Replaces node GPU models FROM by TO and the same models in pods' gpu_spec (`MigOptions::map`).
core::Status applyModelMap(const MigOptions& mig, const model::GpuCatalogue& catalogue,
                           std::vector<model::Node>& nodes, std::vector<OpenbPod>& pods) {
  for (const auto& [from_name, to_name] : mig.map) {
    const std::optional<model::GpuModelId> from = catalogue.find(from_name);
    const std::optional<model::GpuModelId> to = catalogue.find(to_name);
    if (!to) {
      return core::invalidArgument("--mig-map: '" + to_name +
                                   "' is not a known GPU model (MIG-capable: H100-80GB, "
                                   "H200-141GB, A100-40GB, A100-80GB)");
    }
    bool found = false;
    for (model::Node& n : nodes) {
      for (model::GpuDevice& g : n.gpus) {
        if (from && g.model == *from) {
          g.model = *to;
          g.memory = catalogue.model(*to).memory;
          found = true;
        }
      }
    }
    if (!found) {
      return core::invalidArgument("--mig-map: no node has GPU model '" + from_name + "'");
    }
    for (OpenbPod& p : pods) {
      auto it = std::find(p.models.begin(), p.models.end(), *from);
      if (it == p.models.end()) {
        continue;
      }
      if (std::find(p.models.begin(), p.models.end(), *to) != p.models.end()) {
        p.models.erase(it);
      } else {
        *it = *to;
      }
    }
  }
  return core::Status::ok();
}

bool migNode(const model::GpuCatalogue& catalogue, const model::Node& n) {
  return !n.gpus.empty() && std::all_of(n.gpus.begin(), n.gpus.end(), [&](const auto& g) {
    return catalogue.model(g.model).supportsMig() && g.model == n.gpus[0].model;
  });
}

}  // namespace

core::Result<std::unique_ptr<OpenbExperiment>> OpenbExperiment::load(const std::string& nodes_path,
                                                                     const std::string& pods_path,
                                                                     const MigOptions& mig) {
  std::unique_ptr<OpenbExperiment> e(new OpenbExperiment());
  e->catalogue_ = model::GpuCatalogue::builtin();
  TESSERA_ASSIGN_OR_RETURN(e->nodes_, readOpenbNodes(nodes_path, e->catalogue_));
  TESSERA_ASSIGN_OR_RETURN(e->pods_, readOpenbPods(pods_path, e->catalogue_, e->nodes_));
  e->mig_ = mig;
  TESSERA_RETURN_IF_ERROR(applyModelMap(mig, e->catalogue_, e->nodes_, e->pods_));
  TESSERA_RETURN_IF_ERROR(e->setUpMig(nodes_path));
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

core::Status OpenbExperiment::setUpMig(const std::string& nodes_path) {
  if (mig_.layout == MigLayout::kNone) {
    return core::Status::ok();
  }
  size_t mig_nodes = 0;
  for (const model::Node& n : nodes_) {
    if (migNode(catalogue_, n)) {
      ++mig_nodes;
      if (std::find(mig_models_.begin(), mig_models_.end(), n.gpus[0].model) == mig_models_.end()) {
        mig_models_.push_back(n.gpus[0].model);
      }
    }
  }
  if (mig_nodes == 0) {
    return core::invalidArgument(
        nodes_path +
        ": no node has a MIG-capable GPU model (the openb trace has none); map some "
        "with --mig-map, e.g. --mig-map G3=A100-80GB");
  }
  if (mig_.layout == MigLayout::kDynamic) {
    for (model::Node& n : nodes_) {
      for (model::GpuDevice& g : n.gpus) {
        g.mig = model::MigMode::kAny;
      }
    }
    return core::Status::ok();
  }
  if (!(mig_.fixed_share >= 0 && mig_.fixed_share <= 1)) {
    return core::invalidArgument("--mig-fixed-share " + std::to_string(mig_.fixed_share) +
                                 " is outside [0, 1]");
  }
  if (mig_.fixed_profiles.empty()) {
    return core::invalidArgument("--mig-fixed-profiles is empty");
  }
  const size_t layouts = mig_.fixed_profiles.size();
  fixed_profile_.assign(nodes_.size(), -1);
  fixed_slot_.assign(nodes_.size(), -1);
  size_t k = 0;      // MIG-capable nodes seen.
  size_t fixed = 0;  // Of them pre-partitioned.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    model::Node& n = nodes_[i];
    const bool capable = migNode(catalogue_, n);
    // Spread evenly: node k is fixed when the running count of share x k steps up.
    const bool take = capable && std::floor(static_cast<double>(k + 1) * mig_.fixed_share) >
                                     std::floor(static_cast<double>(k) * mig_.fixed_share);
    k += capable ? 1 : 0;
    if (take) {
      const size_t slot = fixed++ % layouts;
      const model::GpuModelInfo& info = catalogue_.model(n.gpus[0].model);
      const int profile = info.findMigProfile(mig_.fixed_profiles[slot]);
      if (profile < 0) {
        return core::invalidArgument("--mig-fixed-profiles: " + info.name +
                                     " has no MIG profile '" + mig_.fixed_profiles[slot] + "'");
      }
      fixed_profile_[i] = profile;
      fixed_slot_[i] = static_cast<int>(slot);
    }
    for (model::GpuDevice& g : n.gpus) {
      g.mig = take ? model::MigMode::kOn : model::MigMode::kOff;
    }
  }
  fixed_preference_.assign(layouts, std::vector<uint8_t>(nodes_.size(), 0));
  fixed_marked_.assign(layouts, {});
  for (size_t j = 0; j < layouts; ++j) {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (fixed_slot_[i] >= 0 && mig_.fixed_profiles[fixed_slot_[i]] != mig_.fixed_profiles[j]) {
        fixed_preference_[j][i] = sched::Placer::kForbidden;
        fixed_marked_[j].push_back(static_cast<uint32_t>(i));
      }
    }
  }
  return core::Status::ok();
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

bool OpenbExperiment::placeFractional(sched::ClusterState& state, sched::Placer& placer,
                                      sched::Policy& policy, const OpenbPod& pod, PodOutcome& out,
                                      MigRunStats& stats) const {
  constexpr size_t kNoLayout = SIZE_MAX;
  struct Candidate {
    model::TaskRequest req;
    size_t layout = kNoLayout;  // Fixed layout: index into mig_.fixed_profiles.
    sched::Placer::Decision d;
    int64_t score = 0;
  };
  std::vector<Candidate> cands;
  cands.push_back({pod.toRequest()});
  // One slice form per profile name, over the MIG models the pod accepts.
  for (model::GpuModelId id : mig_models_) {
    if (!pod.models.empty() &&
        std::find(pod.models.begin(), pod.models.end(), id) == pod.models.end()) {
      continue;
    }
    const model::GpuModelInfo& info = catalogue_.model(id);
    std::optional<int> profile;
    size_t layout = kNoLayout;
    if (mig_.layout == MigLayout::kFixed) {
      std::vector<int> allowed;
      for (const std::string& name : mig_.fixed_profiles) {
        if (const int p = info.findMigProfile(name); p >= 0) {
          allowed.push_back(p);
        }
      }
      if (!allowed.empty()) {
        profile = smallestMigProfile(info, pod.gpu_milli, allowed);
      }
      if (profile) {
        layout =
            static_cast<size_t>(std::find(mig_.fixed_profiles.begin(), mig_.fixed_profiles.end(),
                                          info.mig_profiles[*profile].name) -
                                mig_.fixed_profiles.begin());
      }
    } else {
      profile = smallestMigProfile(info, pod.gpu_milli);
    }
    if (!profile) {
      continue;
    }
    const std::string& name = info.mig_profiles[*profile].name;
    auto same = std::find_if(cands.begin() + 1, cands.end(),
                             [&](const Candidate& c) { return c.req.mig_profile == name; });
    if (same != cands.end()) {
      same->req.models.push_back(id);
      continue;
    }
    Candidate c{pod.toRequest(), layout, {}, 0};
    c.req.mig_profile = name;
    c.req.models = {id};
    c.req.isolation = model::Isolation::kHardware;
    cands.push_back(std::move(c));
  }
  Candidate* best = nullptr;
  size_t placed = 0;
  for (Candidate& c : cands) {
    if (c.layout != kNoLayout && !fixed_marked_[c.layout].empty()) {
      c.d = placer.decide(c.req, fixed_preference_[c.layout], fixed_marked_[c.layout]);
    } else {
      c.d = placer.decide(c.req);
    }
    placed += c.d.placed ? 1 : 0;
  }
  for (Candidate& c : cands) {
    if (!c.d.placed) {
      continue;
    }
    if (placed > 1) {
      // The policy's own score of the node the placer chose for this form.
      const sched::NodeIndex n = c.d.placement.node;
      const sched::ResolvedRequest r = sched::resolveRequest(state, c.req);
      c.score = policy.score(state, n, r, sched::checkNode(state, n, r).eligible).score;
    }
    if (best == nullptr || c.score > best->score) {
      best = &c;
    }
  }
  if (best == nullptr) {
    return false;
  }
  const sched::Assignment a = placer.applyAt(best->req, best->d.placement);
  out.node = static_cast<int32_t>(best->d.placement.node);
  out.gpus = best->d.placement.gpus;
  if (best->req.isMig()) {
    out.mig_profile = static_cast<int16_t>(best->d.placement.mig_profile);
    out.mig_start = static_cast<int16_t>(best->d.placement.mig_start);
    ++stats.mig_pods;
    stats.padding_milli += a.milli_per_gpu - pod.gpu_milli;
  } else {
    ++stats.shared_pods;
  }
  return true;
}

int64_t OpenbExperiment::typicalCpuPerGpu() const {
  return std::llround(frag_->cpuPerGpuMilli() * core::kWholeGpu.value());
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
  state.setCpuPerFreeGpu(cpu_per_free_gpu_);
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
  const bool with_mig = mig_.layout != MigLayout::kNone;
  std::vector<PodEvent> served_events;
  result.outcomes.reserve(result.pods.size());
  int64_t arrived = 0;
  const size_t total = result.pods.size();
  for (size_t i = 0; i < total; ++i) {
    const OpenbPod& pod = result.pods[i];
    arrived += pod.totalGpuMilli();
    PodOutcome out{static_cast<uint32_t>(i), -1, 0};
    bool placed = false;
    if (with_mig && pod.num_gpu == 1 && pod.gpu_milli > 0 &&
        pod.gpu_milli < core::kWholeGpu.value()) {
      placed = placeFractional(state, placer, *policy, pod, out, result.mig);
    } else {
      sched::Placer::Decision d = placer.place(pod.toRequest());
      placed = d.placed;
      if (placed) {
        out.node = static_cast<int32_t>(d.placement.node);
        out.gpus = d.placement.gpus;
      }
    }
    if (placed) {
      const auto n = static_cast<sched::NodeIndex>(out.node);
      frag_sum -= node_frag[n];
      node_frag[n] = frag_->nodeFrag(state, n);
      frag_sum += node_frag[n];
    } else {
      ++result.failed;
      if (pod.num_gpu == 0 && arrived <= total_gpus_ * core::kWholeGpu.value()) {
        ++result.cpu_only_failed_100;
      }
    }
    result.outcomes.push_back(out);
    events.push_back({arrived, state.usedGpuMilli(), frag_sum});
    if (with_mig) {
      served_events.push_back({arrived, state.usedGpuMilli() - result.mig.padding_milli, frag_sum});
    }
    if (progress && (i % 512 == 0 || i + 1 == total)) {
      progress(i + 1, total);
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.curve = binCurve(events, total_gpus_);
  result.served_curve = with_mig ? binCurve(served_events, total_gpus_) : result.curve;
  return result;
}

MigSummaryRow migSummaryRow(const std::string& trace, const RunResult& r) {
  return {trace, r.policy, r.seed, r.unallocAt(100), r.unservedAt(100), r.mig};
}

core::Status writeMigSummary(const std::string& path, const std::vector<MigSummaryRow>& rows) {
  std::string out =
      "trace,policy,seed,unalloc_pct_at_100,unserved_pct_at_100,mig_pods,shared_pods,"
      "padding_milli\n";
  for (const MigSummaryRow& r : rows) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{:.2f},{:.2f},{},{},{}\n", r.trace, r.policy,
                   r.seed, r.unalloc_100, r.unserved_100, r.mig.mig_pods, r.mig.shared_pods,
                   r.mig.padding_milli);
  }
  return writeFileAtomically(path, out);
}

std::string formatMigSummary(const std::vector<MigSummaryRow>& rows, MigLayout layout) {
  struct Acc {
    std::string trace;
    std::string policy;
    double n = 0;
    double unalloc = 0;
    double unserved = 0;
    double mig_pods = 0;
    double shared_pods = 0;
  };
  std::vector<Acc> accs;
  for (const MigSummaryRow& r : rows) {
    auto it = std::find_if(accs.begin(), accs.end(), [&](const Acc& a) {
      return a.trace == r.trace && a.policy == r.policy;
    });
    if (it == accs.end()) {
      accs.push_back({r.trace, r.policy});
      it = accs.end() - 1;
    }
    it->n += 1;
    it->unalloc += r.unalloc_100;
    it->unserved += r.unserved_100;
    it->mig_pods += static_cast<double>(r.mig.mig_pods);
    it->shared_pods += static_cast<double>(r.mig.shared_pods);
  }
  std::string out = fmt::format(
      "MIG layout {}: at arrived = 100% (mean over seeds)\n{:<14} {:<10} {:>10} {:>10} {:>9} "
      "{:>9}\n",
      migLayoutName(layout), "trace", "policy", "unalloc%", "unserved%", "mig pods", "shared");
  for (const Acc& a : accs) {
    fmt::format_to(std::back_inserter(out), "{:<14} {:<10} {:>10.2f} {:>10.2f} {:>9.0f} {:>9.0f}\n",
                   a.trace, a.policy, a.unalloc / a.n, a.unserved / a.n, a.mig_pods / a.n,
                   a.shared_pods / a.n);
  }
  return out;
}

}  // namespace tessera::sim
