// Output of `tessera sim openb`: per-run CSVs, the summary CSV, the authors' reference numbers
// and the printed comparison table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/node.h"
#include "sim/openb_experiment.h"

namespace tessera::sim {

// placements-<policy>-<seed>.csv:
//   seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpus,status
core::Status writePlacements(const std::string& path, const RunResult& run,
                             const std::vector<model::Node>& nodes);
// curve-<policy>-<seed>.csv: arrived_pct,alloc_pct,unalloc_pct,frag_pct,frag_rate_pct
core::Status writeCurve(const std::string& path, const RunResult& run);

struct SummaryRow {
  std::string trace;
  std::string policy;
  uint64_t seed = 0;
  double unalloc_100 = 0;
  double unalloc_130 = 0;
  double seconds = 0;
  int64_t cpu_only_failed_100 = 0;  // CPU-only pods failed before arrived passed 100 %.
};
// summary.csv: trace,policy,seed,unalloc_pct_at_100,unalloc_pct_at_130,seconds,
// cpu_only_failed_at_100
core::Status writeSummary(const std::string& path, const std::vector<SummaryRow>& rows);

// The FGD authors' per-seed unallocated GPU % at arrived = 100, by trace ("default") and
// policy ("fgd"), read from analysis_allo_discrete.csv in `dir`.
using ExpectedResults = std::map<std::pair<std::string, std::string>, std::vector<double>>;
core::Result<ExpectedResults> readExpected(const std::string& dir);

// The FGD authors' per-seed curves from the same file: unallocated GPU % (100 - allocated) at
// arrived = 0..kMaxArrivedBin % (index = arrived %; NaN where the file has no column for it), by
// trace and policy. Every cell of those columns must be a number.
using ExpectedCurves =
    std::map<std::pair<std::string, std::string>, std::vector<std::vector<double>>>;
core::Result<ExpectedCurves> readExpectedCurves(const std::string& dir);

// "default" from ".../openb_pod_list_default.csv".
std::string traceNameOf(const std::string& pod_path);

// Mean and sample standard deviation.
struct MeanSd {
  double mean = 0;
  double sd = 0;
  size_t n = 0;
};
MeanSd meanSd(const std::vector<double>& xs);

// One line of the summary: a trace and policy over its seeds, with the authors' numbers when
// known (`authors.n` == 0 when not; `diff_pct` is NaN then).
struct SummaryLine {
  std::string trace;
  std::string policy;
  MeanSd unalloc_100;
  MeanSd unalloc_130;
  MeanSd seconds;
  MeanSd cpu_only_failed_100;
  MeanSd authors_100;
  double diff_pct = 0;  // Ours against the authors', in % of theirs.
};
// In the order in which traces and policies first appear in `rows`.
std::vector<SummaryLine> summarizeRuns(const std::vector<SummaryRow>& rows,
                                       const ExpectedResults* expected);

// Writes `text` to `path` through a temporary file and a rename, so that a reader never sees
// half a file.
core::Status writeFileAtomically(const std::string& path, const std::string& text);

// The table printed after a run: one line per policy with mean +- sd at 100% and 130%, and the
// authors' mean +- sd beside ours when `expected` has them.
std::string formatSummaryTable(const std::vector<SummaryRow>& rows,
                               const ExpectedResults* expected);

}  // namespace tessera::sim
