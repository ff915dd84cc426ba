#include "sim/report.h"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/csv.h"

namespace tessera::sim {
namespace {

std::string fmtPct(double x) { return std::isnan(x) ? "" : fmt::format("{:.2f}", x); }

// "06-FGD" -> "fgd", as our policy names are spelt.
std::string policyOfAuthors(std::string_view cell) {
  std::string policy(cell);
  if (size_t dash = policy.find('-'); dash != std::string::npos) {
    policy = policy.substr(dash + 1);
  }
  for (char& ch : policy) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return policy;
}

}  // namespace

core::Status writeFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      return core::Status(core::StatusCode::kUnavailable, tmp + ": cannot open for writing");
    }
    out << text;
    out.flush();
    if (!out) {
      return core::Status(core::StatusCode::kUnavailable, tmp + ": write failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return core::Status(core::StatusCode::kUnavailable, path + ": cannot rename into place");
  }
  return core::Status::ok();
}

core::Status writePlacements(const std::string& path, const RunResult& run,
                             const std::vector<model::Node>& nodes) {
  std::string out = "seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpus,status\n";
  out.reserve(run.outcomes.size() * 64);
  for (size_t i = 0; i < run.outcomes.size(); ++i) {
    const PodOutcome& o = run.outcomes[i];
    const OpenbPod& p = run.pods[o.pod];
    std::string gpus;
    for (uint64_t m = o.gpus; m != 0; m &= m - 1) {
      if (!gpus.empty()) {
        gpus += ';';
      }
      gpus += std::to_string(std::countr_zero(m));
    }
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{},{},{},{}\n", i, p.name, p.cpu_milli,
                   p.memory_mib, p.num_gpu, p.gpu_milli,
                   o.node >= 0 ? nodes[static_cast<size_t>(o.node)].name : "", gpus,
                   o.node >= 0 ? "placed" : "failed");
  }
  return writeFileAtomically(path, out);
}

core::Status writeCurve(const std::string& path, const RunResult& run) {
  std::string out = "arrived_pct,alloc_pct,unalloc_pct,frag_pct,frag_rate_pct\n";
  for (const CurvePoint& c : run.curve) {
    if (!c.present) {
      fmt::format_to(std::back_inserter(out), "{},,,,\n", c.arrived_pct);
      continue;
    }
    fmt::format_to(std::back_inserter(out), "{},{:.2f},{:.2f},{:.4f},{:.4f}\n", c.arrived_pct,
                   c.alloc_pct, c.unalloc_pct, c.frag_pct, c.frag_rate_pct);
  }
  return writeFileAtomically(path, out);
}

core::Status writeSummary(const std::string& path, const std::vector<SummaryRow>& rows) {
  std::string out =
      "trace,policy,seed,unalloc_pct_at_100,unalloc_pct_at_130,seconds,cpu_only_failed_at_100\n";
  for (const SummaryRow& r : rows) {
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{:.3f},{}\n", r.trace, r.policy, r.seed,
                   fmtPct(r.unalloc_100), fmtPct(r.unalloc_130), r.seconds, r.cpu_only_failed_100);
  }
  return writeFileAtomically(path, out);
}

std::string traceNameOf(const std::string& pod_path) {
  std::string name = pod_path.substr(pod_path.find_last_of('/') + 1);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".csv") == 0) {
    name.resize(name.size() - 4);
  }
  const std::string prefix = "openb_pod_list_";
  if (name.compare(0, prefix.size(), prefix) == 0) {
    name = name.substr(prefix.size());
  }
  return name;
}

core::Result<ExpectedResults> readExpected(const std::string& dir) {
  const std::string path = dir + "/analysis_allo_discrete.csv";
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(path));
  TESSERA_ASSIGN_OR_RETURN(size_t c_workload, t.requireColumn("workload"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_policy, t.requireColumn("sc_policy"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_100, t.requireColumn("100"));
  ExpectedResults out;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    std::string trace = traceNameOf(std::string(t.cell(r, c_workload)));
    std::string policy = policyOfAuthors(t.cell(r, c_policy));
    std::string cell(t.cell(r, c_100));
    char* end = nullptr;
    const double alloc = std::strtod(cell.c_str(), &end);
    if (cell.empty() || end != cell.c_str() + cell.size()) {
      return core::invalidArgument(t.where(r) + ": column '100' value '" + cell +
                                   "' is not a number");
    }
    out[{trace, policy}].push_back(100 - alloc);
  }
  return out;
}

core::Result<ExpectedCurves> readExpectedCurves(const std::string& dir) {
  const std::string path = dir + "/analysis_allo_discrete.csv";
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(path));
  TESSERA_ASSIGN_OR_RETURN(size_t c_workload, t.requireColumn("workload"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_policy, t.requireColumn("sc_policy"));
  // Columns named by an arrived % (the authors' files have 0..130; a shorter file is fine).
  std::vector<std::pair<size_t, int>> columns;
  for (size_t c = 0; c < t.header().size(); ++c) {
    const std::string& name = t.header()[c];
    int pct = -1;
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pct);
    if (ec == std::errc() && end == name.data() + name.size() && pct >= 0 &&
        pct <= kMaxArrivedBin) {
      columns.emplace_back(c, pct);
    }
  }
  ExpectedCurves out;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    std::vector<double> curve(kMaxArrivedBin + 1, std::nan(""));
    for (const auto& [c, pct] : columns) {
      std::string cell(t.cell(r, c));
      char* end = nullptr;
      const double alloc = std::strtod(cell.c_str(), &end);
      if (cell.empty() || end != cell.c_str() + cell.size() || !std::isfinite(alloc)) {
        return core::invalidArgument(t.where(r) + ": column '" + t.header()[c] + "' value '" +
                                     cell + "' is not a number");
      }
      curve[static_cast<size_t>(pct)] = 100 - alloc;
    }
    out[{traceNameOf(std::string(t.cell(r, c_workload))), policyOfAuthors(t.cell(r, c_policy))}]
        .push_back(std::move(curve));
  }
  return out;
}

MeanSd meanSd(const std::vector<double>& xs) {
  MeanSd m;
  for (double x : xs) {
    if (!std::isnan(x)) {
      m.mean += x;
      ++m.n;
    }
  }
  if (m.n == 0) {
    m.mean = std::nan("");
    return m;
  }
  m.mean /= static_cast<double>(m.n);
  if (m.n > 1) {
    double ss = 0;
    for (double x : xs) {
      if (!std::isnan(x)) {
        ss += (x - m.mean) * (x - m.mean);
      }
    }
    m.sd = std::sqrt(ss / static_cast<double>(m.n - 1));
  }
  return m;
}

std::vector<SummaryLine> summarizeRuns(const std::vector<SummaryRow>& rows,
                                       const ExpectedResults* expected) {
  // Keep the order in which traces and policies first appear.
  std::vector<std::pair<std::string, std::string>> keys;
  std::map<std::pair<std::string, std::string>, std::vector<const SummaryRow*>> groups;
  for (const SummaryRow& r : rows) {
    auto key = std::make_pair(r.trace, r.policy);
    if (groups.find(key) == groups.end()) {
      keys.push_back(key);
    }
    groups[key].push_back(&r);
  }
  std::vector<SummaryLine> lines;
  for (const auto& key : keys) {
    std::vector<double> a100;
    std::vector<double> a130;
    std::vector<double> secs;
    std::vector<double> cpu_failed;
    for (const SummaryRow* r : groups[key]) {
      a100.push_back(r->unalloc_100);
      a130.push_back(r->unalloc_130);
      secs.push_back(r->seconds);
      cpu_failed.push_back(static_cast<double>(r->cpu_only_failed_100));
    }
    SummaryLine line{key.first,    key.second,         meanSd(a100), meanSd(a130),
                     meanSd(secs), meanSd(cpu_failed), {},           std::nan("")};
    if (expected != nullptr) {
      auto it = expected->find(key);
      if (it != expected->end()) {
        line.authors_100 = meanSd(it->second);
        line.diff_pct =
            100 * (line.unalloc_100.mean - line.authors_100.mean) / line.authors_100.mean;
      }
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

std::string formatSummaryTable(const std::vector<SummaryRow>& rows,
                               const ExpectedResults* expected) {
  std::string out;
  // The last column: CPU-only pods that found no node before arrived passed 100 % (per run).
  if (expected != nullptr) {
    out +=
        fmt::format("{:<12} {:<14} {:>16} {:>16} {:>8} {:>16} {:>8} {:>9}\n", "trace", "policy",
                    "unalloc@100 %", "authors@100 %", "diff", "unalloc@130 %", "s/run", "cpu-fail");
  } else {
    out += fmt::format("{:<12} {:<14} {:>16} {:>16} {:>8} {:>9}\n", "trace", "policy",
                       "unalloc@100 %", "unalloc@130 %", "s/run", "cpu-fail");
  }
  for (const SummaryLine& l : summarizeRuns(rows, expected)) {
    std::string ours = fmt::format("{:.2f} ± {:.2f}", l.unalloc_100.mean, l.unalloc_100.sd);
    std::string late = fmt::format("{:.2f} ± {:.2f}", l.unalloc_130.mean, l.unalloc_130.sd);
    if (expected != nullptr) {
      std::string theirs = "-";
      std::string diff = "-";
      if (l.authors_100.n > 0) {
        theirs = fmt::format("{:.2f} ± {:.2f}", l.authors_100.mean, l.authors_100.sd);
        diff = fmt::format("{:+.1f}%", l.diff_pct);
      }
      out += fmt::format("{:<12} {:<14} {:>16} {:>16} {:>8} {:>16} {:>8.3f} {:>9.0f}\n", l.trace,
                         l.policy, ours, theirs, diff, late, l.seconds.mean,
                         l.cpu_only_failed_100.mean);
    } else {
      out += fmt::format("{:<12} {:<14} {:>16} {:>16} {:>8.3f} {:>9.0f}\n", l.trace, l.policy, ours,
                         late, l.seconds.mean, l.cpu_only_failed_100.mean);
    }
  }
  return out;
}

}  // namespace tessera::sim
