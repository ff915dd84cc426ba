// A lower bound on the unallocated GPU % any scheduler, even one that knew the whole pod
// sequence and could leave pods out, can reach once a given set of pods has arrived: an upper
// bound on the GPU milli that can be allocated to them at once, from a linear relaxation solved
// with GLPK (docs/placement.md, "Lower bound").
//
//   auto exp = OpenbExperiment::load("nodes.csv", "pods.csv");
//   core::Rng rng(42);
//   std::vector<OpenbPod> tuned = exp->tunedPods(rng, 1.3);
//   size_t n = arrivedPrefix(tuned, exp->totalGpus(), 100);
//   auto b = allocationBound(exp->nodes(), std::span(tuned).first(n));
//   // b->unalloc_pct <= what any policy shows at arrived = 100 % for seed 42.
//
// The relaxation groups nodes into types (same CPU, memory, GPU count and model) and pods into
// shapes, and keeps, per node type, the capacity sums, valid inequalities from dual-feasible
// functions (per GPU, per node) and the configuration LP of one GPU's shares (maximal patterns);
// each holds for every integral placement. The result is certified by weak duality. No state of
// its own; concurrent calls are as safe as GLPK (thread-local in Debian's build).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/node.h"
#include "sim/openb_trace.h"

namespace tessera::sim {

inline constexpr size_t kMaxPatterns = 20000;

struct AllocationBound {
  int64_t capacity_milli = 0;  // All GPUs x 1000.
  int64_t arrived_milli = 0;   // GPU request of the pods given.
  double lp_milli = 0;         // The LP optimum as the solver reports it.
  double max_alloc_milli = 0;  // Certified upper bound (weak duality), >= lp_milli.
  double unalloc_pct = 0;      // max(0, 100 x (1 - max_alloc / capacity)).
  // False when `place_cpu_only` cannot be met: no placement holds all CPU-only pods (then
  // unalloc_pct is NaN).
  bool feasible = true;
  size_t gpu_pods = 0;  // Pods with GPUs among those given.
  size_t shapes = 0;
  size_t node_types = 0;
  size_t rows = 0;
  size_t columns = 0;
  size_t patterns = 0;  // Maximal per-GPU patterns of sharing sizes used (0: none or too many).
  double seconds = 0;
};

// Which families of valid inequalities the relaxation keeps, besides the capacity sums (to
// show what each adds; the bound is valid with any of them).
struct BoundOptions {
  bool per_gpu = true;   // Dual-feasible functions of each GPU's share.
  bool per_node = true;  // Dual-feasible functions of each node's CPU, memory and GPU count.
  // Every CPU-only pod given must be placed (left out otherwise). The bound then holds only for
  // runs in which none of them failed, but it sees the CPU and memory they take.
  bool place_cpu_only = false;
  // Per node type, the sharing pods of each size are covered by GPUs packed with maximal
  // patterns of sizes (the configuration LP of each GPU), when there are at most
  // `kMaxPatterns` of them.
  bool gpu_patterns = true;
};

// Upper bound on the GPU milli allocatable at once to `pods` on `nodes`. Errors: a node whose
// GPUs are of several models, or a solver failure.
core::Result<AllocationBound> allocationBound(const std::vector<model::Node>& nodes,
                                              std::span<const OpenbPod> pods,
                                              const BoundOptions& options = {});

// How many pods of the submitted list `pods` have arrived by the end of the experiment's
// arrived = `pct` % bin: the bin holds the events whose arrived GPU demand, as % of capacity,
// rounds (half to even) to `pct`; when it holds none, the curve uses its neighbours, so the
// prefix runs to the end of bin `pct` + 1. Every event the bin's value averages has arrived
// within this prefix, so a bound on it bounds the bin. 0 when `total_gpus` is not positive.
size_t arrivedPrefix(const std::vector<OpenbPod>& pods, int64_t total_gpus, int pct);

// `tessera sim openb-bound`: for each pod list and seed, the experiment's tuned list (as
// `OpenbExperiment::run` draws it), its prefix arrived by bin `pct`, and the bound; returns the
// table to print, ending with the mean per pod list.
core::Result<std::string> openbBoundReport(const std::string& nodes_path,
                                           const std::vector<std::string>& pods_paths,
                                           const std::vector<uint64_t>& seeds, double tune,
                                           int pct);

}  // namespace tessera::sim
