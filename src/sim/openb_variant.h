// Derives new openb pod-list variants from a base list (normally `openb_pod_list_default.csv`)
// the way the published `cpuNNN` and `gpushareNN` variants were derived
// (shared/reference/traces.md §2.2), so placement can be tested at levels beyond the published
// ones:
//
//   cpu_pct = P:      the base list's GPU pods, plus CPU-only pods making up P % of all pods
//                     (by count). They are drawn from the base list's CPU-only pods: without
//                     replacement while there are enough, then every one plus draws with
//                     replacement. The published files drew the extra pods from the full
//                     production trace, which is not public.
//   gpushare_pct = S: GPU-sharing pods (1 GPU, gpu_milli < 1000) make up S % of the total GPU
//                     request, with the GPU pod count kept: non-sharing GPU pods at random
//                     positions are replaced by sharing pods drawn (with replacement) from the
//                     base list until the share reaches S (or sharing pods by non-sharing ones
//                     when the base is above S). CPU-only pods are kept.
//   gpuspec_pct = G:  `gpu_spec` (the accepted GPU models) set on G % of the GPU pods (by count),
//                     chosen at random, and cleared on the others. Each chosen pod takes the
//                     spec of a pod drawn from `gpuspec_from` (a list with specs, such as
//                     the published gpuspec20) among its pods of the same kind: sharing, or
//                     whole with the same GPU count; all its specs when it has none of that
//                     kind. The published gpuspecNN files took their specs from the production
//                     trace, which is not public.
// They may be combined: the GPU-share step runs first, then the spec step, then the CPU-only
// step.
//
// Every row keeps all its columns; rows are ordered by `creation_time` when the list has that
// column (as `default` is) and renamed `openb-pod-NNNN` by position, as upstream does.
//
//   TESSERA_ASSIGN_OR_RETURN(core::CsvTable base, core::CsvTable::readFile("default.csv"));
//   TESSERA_ASSIGN_OR_RETURN(OpenbVariant v, makeOpenbVariant(base, {.cpu_pct = 30, .seed = 7}));
//   writeFileAtomically("cpu300.csv", v.csv);
//
// Pure functions: the same base, spec and seed give the same bytes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/csv.h"
#include "core/status.h"

namespace tessera::sim {

struct VariantSpec {
  std::optional<double> cpu_pct;       // In [0, 100).
  std::optional<double> gpushare_pct;  // In [0, 100].
  std::optional<double> gpuspec_pct;   // In [0, 100]; needs `gpuspec_from`.
  const core::CsvTable* gpuspec_from = nullptr;
  uint64_t seed = 1;
};

// Counts and resource sums of a pod list, to compare variants.
struct PodListStats {
  int64_t pods = 0;
  int64_t cpu_only_pods = 0;
  int64_t share_pods = 0;      // num_gpu 1, gpu_milli < 1000.
  int64_t whole_gpu_pods = 0;  // Every other GPU pod (1 or more whole GPUs).
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t gpu_milli = 0;        // num_gpu x gpu_milli, summed.
  int64_t share_gpu_milli = 0;  // Of it, by sharing pods.
  int64_t spec_pods = 0;        // GPU pods with a gpu_spec.

  double cpuOnlyPct() const;  // CPU-only pods, % of pods.
  double sharePct() const;    // Sharing pods' GPU request, % of all GPU request.
};

struct OpenbVariant {
  std::string csv;  // Header and rows, LF line endings.
  PodListStats stats;
};

// Statistics of a pod list; an error names the file, line and column of a bad cell.
core::Result<PodListStats> podListStats(const core::CsvTable& pods);

// Derives a variant of `base` (see the header comment). Errors: a bad cell (file, line, column),
// a percentage out of range, or a base list without the pods the spec needs to draw from.
core::Result<OpenbVariant> makeOpenbVariant(const core::CsvTable& base, const VariantSpec& spec);

// One line of statistics, e.g. "8832 pods: 1768 CPU-only (20.02 %), ...".
std::string formatPodListStats(const PodListStats& s);

// `tessera sim openb-variant`: reads `base_path`, writes the variant to `out_path` and returns
// the statistics of both, to print.
// `gpuspec_from_path`, when not empty, is read into `spec.gpuspec_from`.
core::Result<std::string> writeOpenbVariant(const std::string& base_path, VariantSpec spec,
                                            const std::string& out_path,
                                            const std::string& gpuspec_from_path = "");

}  // namespace tessera::sim
