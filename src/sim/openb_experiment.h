// The FGD paper's experiment (Weng et al., USENIX ATC'23, section 6) on the openb trace:
//
//   1. shuffle the pod list with the seed;
//   2. tune it to `tune` x the cluster's GPU capacity: append pods drawn uniformly (with
//      replacement) from the original list, stopping at the first draw whose per-GPU share would
//      pass the target, or drop pods at random positions while the demand is above it;
//   3. draw each node's tie-break rank from the seed;
//   4. submit every pod once, in order: it is placed or it fails; nothing departs;
//   5. after each pod record the arrived GPU demand (failed pods included), the allocated GPU
//      share and the cluster's FGD fragmentation.
// Curves are binned by arrived % of GPU capacity (rounded half to even), averaging all pod
// events in a bin, or those of the neighbouring bins when a bin has none, as the authors'
// post-processing does.
//
//   auto exp = OpenbExperiment::load("nodes.csv", "pods.csv");
//   RunResult r = exp->run("fgd", 42, 1.3);
//
// `run` is const and thread-safe: each run owns its cluster state.
//
// With `MigOptions` (sim/openb_mig.h) fractional pods may also be served by MIG slices: for each
// such pod the placer decides the share and each slice form, the policy's own score of the two
// chosen nodes decides (ties: the share), and that placement is applied.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "sched/frag.h"
#include "sim/openb_mig.h"
#include "sim/openb_trace.h"

namespace tessera::sched {
class ClusterState;
class Placer;
class Policy;
}  // namespace tessera::sched

namespace tessera::sim {

inline constexpr int kMaxArrivedBin = 130;

struct CurvePoint {
  int arrived_pct = 0;
  bool present = false;  // False when neither the bin nor its neighbours had an event.
  double alloc_pct = 0;
  double unalloc_pct = 0;
  double frag_pct = 0;
  double frag_rate_pct = 0;
};

struct PodOutcome {
  uint32_t pod = 0;   // Index into `RunResult::pods`.
  int32_t node = -1;  // -1 when the pod failed.
  uint64_t gpus = 0;
  int16_t mig_profile = -1;  // Profile index on the GPU's model when served by a MIG slice.
  int16_t mig_start = -1;
};

struct RunResult {
  std::string policy;
  uint64_t seed = 0;
  double seconds = 0;          // Scheduling time only, not loading or writing.
  std::vector<OpenbPod> pods;  // The submitted list, in order.
  std::vector<PodOutcome> outcomes;
  std::vector<CurvePoint> curve;  // Bins 0..130.
  int64_t failed = 0;
  int64_t cpu_only_failed_100 = 0;  // CPU-only pods failed before arrived passed 100 %.
  MigRunStats mig;
  // As `curve`, but a MIG slice counts only the pod's share as allocated, not the slice's
  // padding: the GPU share that runs no pod's demand.
  std::vector<CurvePoint> served_curve;

  double unallocAt(int pct) const;
  double unservedAt(int pct) const;
};

// Called now and then during a run with the number of pods submitted so far and in total.
using ProgressFn = std::function<void(size_t done, size_t total)>;

class OpenbExperiment {
 public:
  // `mig` maps node models (what-if) and sets the MIG layout; the default changes nothing.
  static core::Result<std::unique_ptr<OpenbExperiment>> load(const std::string& nodes_path,
                                                             const std::string& pods_path,
                                                             const MigOptions& mig = {});

  const std::vector<model::Node>& nodes() const { return nodes_; }
  const std::vector<OpenbPod>& pods() const { return pods_; }
  const model::GpuCatalogue& catalogue() const { return catalogue_; }
  const sched::FragModel& fragModel() const { return *frag_; }
  int64_t totalGpus() const { return total_gpus_; }
  const MigOptions& mig() const { return mig_; }
  // CPU each node holds for its free GPUs in the runs, in milli-CPU per GPU, out of reach of
  // CPU-only pods (sched::ClusterState::setCpuPerFreeGpu); 0 (the default, and the FGD
  // experiment) holds nothing. `typicalCpuPerGpu` is what the typical GPU pod asks for.
  void setCpuPerFreeGpu(int64_t milli_cpu) { cpu_per_free_gpu_ = milli_cpu; }
  int64_t cpuPerFreeGpu() const { return cpu_per_free_gpu_; }
  int64_t typicalCpuPerGpu() const;
  // Fixed layout: the profile index (on the node's model) every GPU of the node is partitioned
  // into, or -1 when the node is not pre-partitioned.
  int fixedProfileOf(size_t node) const {
    return node < fixed_profile_.size() ? fixed_profile_[node] : -1;
  }

  // The pod list after shuffling and tuning with `rng` (steps 1-2).
  std::vector<OpenbPod> tunedPods(core::Rng& rng, double tune) const;

  core::Result<RunResult> run(const std::string& policy, uint64_t seed, double tune,
                              const ProgressFn& progress = {}) const;

 private:
  OpenbExperiment() = default;
  // Sets the GPUs' MIG modes and the fixed layouts from `mig_` (after the model map).
  core::Status setUpMig(const std::string& nodes_path);
  // Places a fractional pod as a share or a MIG slice (see the top of this header); fills `out`
  // and `stats` and returns whether it was placed.
  bool placeFractional(sched::ClusterState& state, sched::Placer& placer, sched::Policy& policy,
                       const OpenbPod& pod, PodOutcome& out, MigRunStats& stats) const;

  model::GpuCatalogue catalogue_;
  std::vector<model::Node> nodes_;
  std::vector<OpenbPod> pods_;
  std::unique_ptr<sched::FragModel> frag_;
  int64_t total_gpus_ = 0;
  MigOptions mig_;
  int64_t cpu_per_free_gpu_ = 0;
  std::vector<model::GpuModelId> mig_models_;  // MIG-capable models of the nodes.
  std::vector<int> fixed_profile_;             // By node; see fixedProfileOf.
  std::vector<int> fixed_slot_;                // By node: index into mig_.fixed_profiles, or -1.
  // Fixed layout, by index into mig_.fixed_profiles: the placer preference that forbids the
  // pre-partitioned nodes of every other layout, and the nodes it marks.
  std::vector<std::vector<uint8_t>> fixed_preference_;
  std::vector<std::vector<uint32_t>> fixed_marked_;
};

// Pure helpers, exposed for tests.
// Tunes `shuffled` towards `target_milli` of GPU demand as the artifact does.
std::vector<OpenbPod> tunePodList(std::vector<OpenbPod> shuffled,
                                  const std::vector<OpenbPod>& original, double target_milli,
                                  core::Rng& rng);

// One run of a MIG layout, for mig.csv (`tessera sim openb --mig fixed|dynamic`).
struct MigSummaryRow {
  std::string trace;
  std::string policy;
  uint64_t seed = 0;
  double unalloc_100 = 0;   // RunResult::unallocAt(100): slices count whole.
  double unserved_100 = 0;  // RunResult::unservedAt(100): slice padding counts as unallocated.
  MigRunStats mig;
};
MigSummaryRow migSummaryRow(const std::string& trace, const RunResult& r);
// mig.csv: trace,policy,seed,unalloc_pct_at_100,unserved_pct_at_100,mig_pods,shared_pods,
// padding_milli.
core::Status writeMigSummary(const std::string& path, const std::vector<MigSummaryRow>& rows);
// Per trace and policy, the mean over seeds of each column: a table for the terminal.
std::string formatMigSummary(const std::vector<MigSummaryRow>& rows, MigLayout layout);

struct PodEvent {
  int64_t arrived_milli = 0;
  int64_t used_milli = 0;
  double frag_milli = 0;
};
std::vector<CurvePoint> binCurve(const std::vector<PodEvent>& events, int64_t total_gpus);

}  // namespace tessera::sim
