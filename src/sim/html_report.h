// The HTML reports of `tessera sim openb`, `sim philly` and `sim scenario`: one self-contained
// file per run (inline CSS and SVG plots, no script, nothing fetched), to open in a browser
// offline or attach to a review.
//
//   openb:             unallocated GPU % against arrived workload % per policy (mean over seeds,
//                      the seeds' spread as a band, the FGD authors' curves dashed when known),
//                      and the summary table the command prints;
//   philly / scenario: per leaf queue, allocation against fair share and quota over time;
//                      evictions per interval by reason; pending tasks per queue over time; the
//                      per-queue table and the headline numbers.
//
// The charts read what the simulation records already (curves, tenants rows, events); long runs
// are reduced to a bounded number of points per series here, so a report stays small whatever the
// trace. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sim/openb_experiment.h"
#include "sim/report.h"
#include "sim/scenario_run.h"

namespace tessera::sim {

struct ReportParameter {
  std::string name;
  std::string value;
};

struct OpenbReportRun {
  std::string trace;
  std::string policy;
  uint64_t seed = 0;
  std::vector<CurvePoint> curve;  // Bins 0..kMaxArrivedBin, as RunResult::curve.
};

struct OpenbReport {
  std::vector<ReportParameter> parameters;  // How the run was made, shown as given.
  std::vector<OpenbReportRun> runs;
  std::vector<SummaryRow> rows;
  // Optional (null: not given): the authors' numbers at 100 % and their curves.
  const ExpectedResults* expected = nullptr;
  const ExpectedCurves* expected_curves = nullptr;
};

std::string openbReportHtml(const OpenbReport& report);

// `title` names the run ("sim philly: philly.csv").
std::string scenarioReportHtml(const ScenarioResult& result, const std::string& title,
                               const std::vector<ReportParameter>& parameters);

// The pieces of the scenario report, exposed for tests.

// A leaf queue's numbers over time, in GPUs (pending: tasks). Exact steps (`averaged` false, the
// last value held to `end_s`) when the queue has at most `max_points` rows; else the time-weighted
// mean over each of `max_points` equal intervals of [0, end_s] (x: the interval's middle; NaN
// before the queue's first row).
struct QueueSeries {
  std::string queue;
  bool averaged = false;
  std::vector<double> time_s;
  std::vector<double> allocated;
  std::vector<double> fair_share;
  std::vector<double> quota;
  std::vector<double> pending;
};
// One per queue of `queues` (in that order), then any other queue the rows name.
std::vector<QueueSeries> queueSeries(const std::vector<TenantRow>& rows,
                                     const std::vector<std::string>& queues, double end_s,
                                     size_t max_points);

// Task evictions per interval of [0, end_s], by reason.
struct EvictionBins {
  double bin_s = 1;
  std::vector<std::string> reasons;         // Those that occur, in a fixed order.
  std::vector<std::vector<double>> counts;  // counts[reason][bin].
};
EvictionBins evictionBins(const std::vector<SimEvent>& events, double end_s, size_t bins);

// "reclaim", "preemption", "move" or "other", from an eviction's detail (the scheduler's and the
// server's words both start with "reclaimed", "preempted" or "moved").
std::string_view evictionReason(std::string_view detail);

}  // namespace tessera::sim
