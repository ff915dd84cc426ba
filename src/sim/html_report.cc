#include "sim/html_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "sim/svg_plot.h"

namespace tessera::sim {
namespace {

// Points per series in the scenario charts: enough for a chart 1000 pixels wide, and a bound on
// the report's size whatever the length of the trace.
constexpr size_t kMaxPointsPerSeries = 600;
constexpr size_t kEvictionBins = 60;

const char* const kStyle = R"(<style>
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1240px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 4px 10px; text-align: right; }
th { background: #f3f3f3; }
th.l, td.l { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
figure { margin: 0; }
figcaption, .note { font-size: 13px; color: #555; max-width: 1000px; }
svg.chart { border: 1px solid #eee; }
</style>
)";

std::string h(std::string_view text) { return escapeXml(text); }

std::string page(const std::string& title, const std::string& body) {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" +
         h(title) + "</title>\n" + kStyle + "</head>\n<body>\n<h1>" + h(title) + "</h1>\n" + body +
         "</body>\n</html>\n";
}

std::string parameterTable(const std::vector<ReportParameter>& parameters) {
  if (parameters.empty()) {
    return "";
  }
  std::string out = "<h2>Parameters</h2>\n<table class=\"parameters\">\n";
  for (const ReportParameter& p : parameters) {
    out +=
        "<tr><th class=\"l\">" + h(p.name) + "</th><td class=\"l\">" + h(p.value) + "</td></tr>\n";
  }
  return out + "</table>\n";
}

// As wide as its chart, so that a long caption wraps instead of widening the figure (small charts
// then sit side by side).
std::string figure(const std::string& svg, int width_px, const std::string& caption) {
  return fmt::format("<figure style=\"width: {}px\">\n", width_px + 2) + svg + "<figcaption>" +
         h(caption) + "</figcaption>\n</figure>\n";
}

std::string meanSdText(const MeanSd& m) {
  return m.n == 0 ? "-" : fmt::format("{:.2f} ± {:.2f}", m.mean, m.sd);
}

// The unit a time axis reads best in, for a run of `end_s` seconds.
struct TimeUnit {
  double seconds;
  const char* name;
};
TimeUnit timeUnitFor(double end_s) {
  if (end_s < 600) {
    return {1, "s"};
  }
  if (end_s < 3 * 3600) {
    return {60, "min"};
  }
  if (end_s < 3 * 86400) {
    return {3600, "h"};
  }
  return {86400, "days"};
}

std::string durationText(double s) {
  if (s < 60) {
    return fmt::format("{:.3g} s", s);
  }
  if (s < 3600) {
    return fmt::format("{:.3g} min", s / 60);
  }
  if (s < 86400) {
    return fmt::format("{:.3g} h", s / 3600);
  }
  return fmt::format("{:.3g} days", s / 86400);
}

std::vector<double> scaled(const std::vector<double>& v, double divisor) {
  std::vector<double> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [&](double x) { return x / divisor; });
  return out;
}

// The points of `s` with x >= `x_min` (its band too, when it has one).
PlotSeries pointsFrom(const PlotSeries& s, double x_min) {
  PlotSeries out = s;
  out.x.clear();
  out.y.clear();
  out.low.clear();
  out.high.clear();
  const bool band = s.low.size() == s.x.size() && s.high.size() == s.x.size();
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (s.x[i] >= x_min) {
      out.x.push_back(s.x[i]);
      out.y.push_back(s.y[i]);
      if (band) {
        out.low.push_back(s.low[i]);
        out.high.push_back(s.high[i]);
      }
    }
  }
  return out;
}

}  // namespace

std::string_view evictionReason(std::string_view detail) {
  if (detail.starts_with("reclaimed")) {
    return "reclaim";
  }
  if (detail.starts_with("preempted")) {
    return "preemption";
  }
  if (detail.starts_with("moved")) {
    return "move";
  }
  return "other";
}

std::vector<QueueSeries> queueSeries(const std::vector<TenantRow>& rows,
                                     const std::vector<std::string>& queues, double end_s,
                                     size_t max_points) {
  std::vector<QueueSeries> out;
  std::map<std::string, size_t> index;
  for (const std::string& q : queues) {
    if (index.try_emplace(q, out.size()).second) {
      out.emplace_back().queue = q;
    }
  }
  std::vector<std::vector<const TenantRow*>> by_queue(out.size());
  double end = std::isfinite(end_s) ? end_s : 0;
  for (const TenantRow& r : rows) {
    auto [it, added] = index.try_emplace(r.queue, out.size());
    if (added) {
      out.emplace_back().queue = r.queue;
      by_queue.emplace_back();
    }
    by_queue[it->second].push_back(&r);
    if (std::isfinite(r.time_s)) {
      end = std::max(end, r.time_s);
    }
  }
  max_points = std::max<size_t>(max_points, 1);
  for (size_t q = 0; q < out.size(); ++q) {
    QueueSeries& s = out[q];
    const std::vector<const TenantRow*>& rs = by_queue[q];
    auto values = [](const TenantRow& r) {
      return std::array<double, 4>{static_cast<double>(r.allocated_milli_gpu) / 1000,
                                   static_cast<double>(r.fair_share_milli_gpu) / 1000,
                                   static_cast<double>(r.quota_milli_gpu) / 1000,
                                   static_cast<double>(r.pending_tasks)};
    };
    auto push = [&](double t, const std::array<double, 4>& v) {
      s.time_s.push_back(t);
      s.allocated.push_back(v[0]);
      s.fair_share.push_back(v[1]);
      s.quota.push_back(v[2]);
      s.pending.push_back(v[3]);
    };
    if (rs.size() <= max_points || !(end > 0)) {
      // Exact steps; the last value holds to the end of the run.
      const size_t first = rs.size() > max_points ? rs.size() - max_points : 0;
      for (size_t i = first; i < rs.size(); ++i) {
        push(rs[i]->time_s, values(*rs[i]));
      }
      if (!rs.empty() && end > rs.back()->time_s) {
        push(end, values(*rs.back()));
      }
      continue;
    }
    // Time-weighted mean per interval: each row's values hold until the next row (or the end).
    s.averaged = true;
    const size_t k = max_points;
    const double width = end / static_cast<double>(k);
    std::vector<std::array<double, 4>> sums(k, {0, 0, 0, 0});
    std::vector<double> covered(k, 0);
    auto bucket = [&](double t) {
      return std::min(k - 1, static_cast<size_t>(std::max(0.0, std::floor(t / width))));
    };
    for (size_t i = 0; i < rs.size(); ++i) {
      const double t0 = std::clamp(rs[i]->time_s, 0.0, end);
      const double t1 = i + 1 < rs.size() ? std::clamp(rs[i + 1]->time_s, t0, end) : end;
      if (!(t1 > t0)) {
        continue;  // Superseded at the same instant.
      }
      const std::array<double, 4> v = values(*rs[i]);
      for (size_t b = bucket(t0), last = bucket(t1); b <= last; ++b) {
        const double lo = std::max(t0, static_cast<double>(b) * width);
        const double hi = b + 1 == k ? t1 : std::min(t1, static_cast<double>(b + 1) * width);
        if (hi > lo) {
          for (size_t j = 0; j < 4; ++j) {
            sums[b][j] += v[j] * (hi - lo);
          }
          covered[b] += hi - lo;
        }
      }
    }
    for (size_t b = 0; b < k; ++b) {
      std::array<double, 4> v;
      for (size_t j = 0; j < 4; ++j) {
        v[j] = covered[b] > 0 ? sums[b][j] / covered[b] : std::nan("");
      }
      push((static_cast<double>(b) + 0.5) * width, v);
    }
  }
  return out;
}

EvictionBins evictionBins(const std::vector<SimEvent>& events, double end_s, size_t bins) {
  static constexpr std::array<std::string_view, 4> kReasons = {"reclaim", "preemption", "move",
                                                               "other"};
  double end = std::isfinite(end_s) && end_s > 0 ? end_s : 0;
  for (const SimEvent& e : events) {
    if (e.event == "evict" && std::isfinite(e.time_s)) {
      end = std::max(end, e.time_s);
    }
  }
  if (!(end > 0)) {
    end = 1;
  }
  bins = std::max<size_t>(bins, 1);
  // A round interval ("per 5 min") at least end / bins long.
  static constexpr std::array<double, 20> kNice = {1,     2,     5,     10,    15,     30,    60,
                                                   120,   300,   600,   900,   1800,   3600,  7200,
                                                   10800, 21600, 43200, 86400, 172800, 604800};
  const double min_width = end / static_cast<double>(bins);
  EvictionBins out;
  out.bin_s = min_width;
  for (double w : kNice) {
    if (w >= min_width) {
      out.bin_s = w;
      break;
    }
  }
  const auto n = static_cast<size_t>(std::max(1.0, std::ceil(end / out.bin_s - 1e-9)));
  std::array<std::vector<double>, kReasons.size()> counts;
  for (auto& c : counts) {
    c.assign(n, 0);
  }
  for (const SimEvent& e : events) {
    if (e.event != "evict" || !std::isfinite(e.time_s)) {
      continue;
    }
    const std::string_view reason = evictionReason(e.detail);
    const size_t r =
        static_cast<size_t>(std::find(kReasons.begin(), kReasons.end(), reason) - kReasons.begin());
    const auto b = std::min(n - 1, static_cast<size_t>(std::max(0.0, e.time_s / out.bin_s)));
    counts[r][b] += 1;
  }
  for (size_t r = 0; r < kReasons.size(); ++r) {
    if (std::any_of(counts[r].begin(), counts[r].end(), [](double c) { return c > 0; })) {
      out.reasons.emplace_back(kReasons[r]);
      out.counts.push_back(std::move(counts[r]));
    }
  }
  if (out.counts.empty()) {  // Keep the bins, so the chart shows the run's span with no bars.
    out.reasons.emplace_back("evictions");
    out.counts.emplace_back(n, 0);
  }
  return out;
}

std::string openbReportHtml(const OpenbReport& report) {
  std::string body;
  body +=
      "<p class=\"note\">The FGD paper's experiment (Weng et al., USENIX ATC'23): each pod of "
      "the shuffled, tuned list is placed once, in order, and never leaves; the curves show "
      "the share of the cluster's GPUs left unallocated as the arrived GPU demand grows.</p>\n";
  body += parameterTable(report.parameters);

  const std::vector<SummaryLine> lines = summarizeRuns(report.rows, report.expected);
  body +=
      "<h2>Summary</h2>\n<table class=\"summary\">\n<tr><th class=\"l\">trace</th>"
      "<th class=\"l\">policy</th><th>seeds</th><th>unallocated GPU % at 100 %</th>";
  if (report.expected != nullptr) {
    body += "<th>authors at 100 %</th><th>diff</th>";
  }
  body += "<th>unallocated GPU % at 130 %</th><th>s / run</th></tr>\n";
  for (const SummaryLine& l : lines) {
    body += fmt::format("<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>",
                        h(l.trace), h(l.policy), l.seconds.n, meanSdText(l.unalloc_100));
    if (report.expected != nullptr) {
      body += fmt::format("<td>{}</td><td>{}</td>", meanSdText(l.authors_100),
                          l.authors_100.n > 0 && std::isfinite(l.diff_pct)
                              ? fmt::format("{:+.1f}%", l.diff_pct)
                              : "-");
    }
    body +=
        fmt::format("<td>{}</td><td>{:.3f}</td></tr>\n", meanSdText(l.unalloc_130), l.seconds.mean);
  }
  body +=
      "</table>\n<p class=\"note\">Mean ± sample standard deviation over seeds; \"at 100 %\": "
      "when the arrived GPU demand equals the cluster's GPU capacity.</p>\n";

  // Traces and policies in the order they first appear; a policy keeps its colour everywhere.
  std::vector<std::string> traces;
  std::vector<std::string> policies;
  for (const OpenbReportRun& r : report.runs) {
    if (std::find(traces.begin(), traces.end(), r.trace) == traces.end()) {
      traces.push_back(r.trace);
    }
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) {
      policies.push_back(r.policy);
    }
  }
  body += "<h2>Unallocated GPUs against arrived workload</h2>\n";
  if (traces.empty()) {
    body += "<p class=\"note\">No runs.</p>\n";
  }
  constexpr int kBins = kMaxArrivedBin + 1;
  for (const std::string& trace : traces) {
    std::vector<PlotSeries> full;
    size_t seeds = 0;
    for (size_t pi = 0; pi < policies.size(); ++pi) {
      const std::string& policy = policies[pi];
      PlotSeries s;
      s.name = policy;
      s.colour = std::string(paletteColour(pi));
      std::vector<const OpenbReportRun*> runs;
      for (const OpenbReportRun& r : report.runs) {
        if (r.trace == trace && r.policy == policy) {
          runs.push_back(&r);
        }
      }
      if (runs.empty()) {
        continue;
      }
      seeds = std::max(seeds, runs.size());
      for (int k = 0; k < kBins; ++k) {
        double sum = 0;
        double lo = INFINITY;
        double hi = -INFINITY;
        int n = 0;
        for (const OpenbReportRun* r : runs) {
          if (static_cast<size_t>(k) < r->curve.size() && r->curve[k].present) {
            const double v = r->curve[k].unalloc_pct;
            sum += v;
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            ++n;
          }
        }
        s.x.push_back(k);
        s.y.push_back(n > 0 ? sum / n : std::nan(""));
        s.low.push_back(n > 0 ? lo : std::nan(""));
        s.high.push_back(n > 0 ? hi : std::nan(""));
      }
      if (runs.size() < 2) {  // One seed: no spread to show.
        s.low.clear();
        s.high.clear();
      }
      full.push_back(std::move(s));
      if (report.expected_curves == nullptr) {
        continue;
      }
      auto it = report.expected_curves->find({trace, policy});
      if (it == report.expected_curves->end()) {
        continue;
      }
      PlotSeries e;
      e.name = policy + " (authors)";
      e.colour = std::string(paletteColour(pi));
      e.dashed = true;
      for (int k = 0; k < kBins; ++k) {
        double sum = 0;
        int n = 0;
        for (const std::vector<double>& c : it->second) {
          if (static_cast<size_t>(k) < c.size() && std::isfinite(c[k])) {
            sum += c[k];
            ++n;
          }
        }
        e.x.push_back(k);
        e.y.push_back(n > 0 ? sum / n : std::nan(""));
      }
      full.push_back(std::move(e));
    }
    LineChart chart;
    chart.title = "Unallocated GPUs: trace " + trace;
    chart.x = {"arrived workload (% of the cluster's GPU capacity)", 0.0, double{kMaxArrivedBin}};
    chart.y = {"unallocated GPU %", 0.0, {}};
    chart.width_px = 1000;
    chart.height_px = 420;
    chart.series = full;
    // The same curves from 80 % on, where the policies part: the region of the paper's figure
    // that tells them apart.
    LineChart zoom = chart;
    zoom.title = "The same from 80 % arrived";
    zoom.x.min = 80;
    zoom.y.min.reset();
    zoom.height_px = 360;
    for (PlotSeries& s : zoom.series) {
      s = pointsFrom(s, 80);
    }
    const std::string how =
        seeds > 1 ? fmt::format("Lines: mean over {} seeds; shaded: the seeds' range (min to max).",
                                seeds)
                  : std::string("One seed per policy.");
    body += "<div class=\"charts\">\n" +
            figure(renderLineChart(chart), chart.width_px,
                   how + (report.expected_curves != nullptr
                              ? " Dashed: the FGD authors' curves (mean over their seeds)."
                              : "")) +
            figure(renderLineChart(zoom), zoom.width_px,
                   "Arrived 80 % to 130 %, y axis from the data.") +
            "</div>\n";
  }
  return page("Tessera simulation report: sim openb", body);
}

std::string scenarioReportHtml(const ScenarioResult& r, const std::string& title,
                               const std::vector<ReportParameter>& parameters) {
  std::string body;
  body += parameterTable(parameters);
  body += "<h2>Summary</h2>\n<table class=\"headline\">\n";
  auto row = [&](std::string_view name, const std::string& value) {
    body += "<tr><th class=\"l\">" + h(name) + "</th><td>" + h(value) + "</td></tr>\n";
  };
  row("makespan", fmt::format("{:.0f} s ({})", r.makespan_s, durationText(r.makespan_s)));
  row("GPU utilisation", fmt::format("{:.1f} %", 100 * r.utilisation));
  row("mean Jain index (allocation / fair share)", fmt::format("{:.3f}", r.mean_jain));
  row("task evictions", std::to_string(r.evictions));
  row("useful work", fmt::format("{:.0f} GPU-hours", r.useful_gpu_seconds / 3600));
  row("lost to evictions",
      fmt::format(
          "{:.0f} GPU-hours ({:.1f} % of useful)", r.lost_gpu_seconds / 3600,
          r.useful_gpu_seconds > 0 ? 100 * r.lost_gpu_seconds / r.useful_gpu_seconds : 0.0));
  row("goodput", fmt::format("{:.1f} %", 100 * r.goodput));
  row("scheduling passes", std::to_string(r.passes));
  row("workloads that never ran", std::to_string(r.failed_workloads));
  body += "</table>\n";
  body +=
      "<table class=\"queues\">\n<tr><th class=\"l\">queue</th><th>jobs</th>"
      "<th>mean JCT s</th><th>p95 JCT s</th><th>GPU-hours</th><th>tasks evicted</th>"
      "<th>lost GPU-hours</th><th>max to quota s</th></tr>\n";
  for (const QueueSummary& q : r.queues) {
    body += fmt::format(
        "<tr><td class=\"l\">{}</td><td>{}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.1f}</td>"
        "<td>{}</td><td>{:.1f}</td><td>{:.0f}</td></tr>\n",
        h(q.name), q.jobs_completed, q.mean_jct_s, q.p95_jct_s, q.gpu_seconds / 3600,
        q.tasks_evicted, q.lost_gpu_seconds / 3600, q.max_time_to_quota_s);
  }
  body += "</table>\n";

  std::vector<std::string> names;
  for (const QueueSummary& q : r.queues) {
    names.push_back(q.name);
  }
  const std::vector<QueueSeries> series =
      queueSeries(r.tenants, names, r.makespan_s, kMaxPointsPerSeries);
  const TimeUnit unit = timeUnitFor(r.makespan_s);
  const std::string time_label = fmt::format("time ({})", unit.name);
  const bool averaged =
      std::any_of(series.begin(), series.end(), [](const QueueSeries& s) { return s.averaged; });
  const std::string averaged_note =
      averaged ? fmt::format(" Long runs: the time-weighted mean over each 1/{} of the run.",
                             kMaxPointsPerSeries)
               : "";

  body += "<h2>Evictions over time</h2>\n";
  const EvictionBins ev = evictionBins(r.events, r.makespan_s, kEvictionBins);
  BarChart bars;
  bars.title = fmt::format("Task evictions per {}", durationText(ev.bin_s));
  bars.x = {time_label, {}, {}};
  bars.y = {"tasks evicted", {}, {}};
  bars.width_px = 1000;
  bars.x0 = 0;
  bars.bin_width = ev.bin_s / unit.seconds;
  bars.stack_names = ev.reasons;
  bars.values = ev.counts;
  body += figure(renderBarChart(bars), bars.width_px,
                 "By reason: reclaim (another queue takes back its fair share), preemption (a "
                 "higher priority in the same queue), move (consolidation).");

  body += "<h2>Pending tasks per queue</h2>\n";
  LineChart pending;
  pending.title = "Pending tasks";
  pending.x = {time_label, 0.0, {}};
  pending.y = {"tasks waiting", 0.0, {}};
  pending.width_px = 1000;
  pending.height_px = 340;
  for (size_t i = 0; i < series.size(); ++i) {
    // Past the palette's ten colours, dashes tell queues of the same colour apart.
    pending.series.push_back({series[i].queue,
                              scaled(series[i].time_s, unit.seconds),
                              series[i].pending,
                              {},
                              {},
                              std::string(paletteColour(i)),
                              (i / 10) % 2 == 1,
                              !series[i].averaged});
  }
  body += figure(renderLineChart(pending), pending.width_px,
                 "Tasks submitted (or evicted) and not running, per queue." + averaged_note);
  // Per-queue detail after the overview: small charts, side by side.
  body += "<h2>Fair share and allocation per queue</h2>\n<div class=\"charts\">\n";
  if (series.empty()) {
    body += "<p class=\"note\">No queues.</p>\n";
  }
  for (const QueueSeries& s : series) {
    LineChart c;
    c.title = "Queue " + s.queue;
    c.x = {time_label, 0.0, {}};
    c.y = {"GPUs", 0.0, {}};
    c.width_px = 580;  // Two side by side in a 1280-pixel window, scroll bar included.
    c.height_px = 280;
    const std::vector<double> t = scaled(s.time_s, unit.seconds);
    c.series.push_back(
        {"allocated", t, s.allocated, {}, {}, std::string(paletteColour(0)), false, !s.averaged});
    c.series.push_back(
        {"fair share", t, s.fair_share, {}, {}, std::string(paletteColour(1)), true, !s.averaged});
    c.series.push_back({"quota", t, s.quota, {}, {}, "#888888", true, !s.averaged});
    body += figure(renderLineChart(c), c.width_px,
                   "GPUs allocated to the queue, its fair share and quota." + averaged_note);
  }
  body += "</div>\n";

  return page(title, body);
}

}  // namespace tessera::sim
