#include "sim/philly.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>

#include "core/csv.h"
#include "model/node_profiles.h"

namespace tessera::sim {
namespace {

// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
int64_t daysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// "2017-10-09 07:01:55" -> seconds since the epoch.
bool parseTimestamp(std::string_view s, int64_t* out) {
  int v[6];
  const size_t pos[6] = {0, 5, 8, 11, 14, 17};
  const size_t len[6] = {4, 2, 2, 2, 2, 2};
  if (s.size() != 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' ||
      s[16] != ':') {
    return false;
  }
  for (int i = 0; i < 6; ++i) {
    auto [p, ec] = std::from_chars(s.data() + pos[i], s.data() + pos[i] + len[i], v[i]);
    if (ec != std::errc() || p != s.data() + pos[i] + len[i]) {
      return false;
    }
  }
  if (v[1] < 1 || v[1] > 12 || v[2] < 1 || v[2] > 31 || v[3] > 23 || v[4] > 59 || v[5] > 60) {
    return false;
  }
  *out = daysFromCivil(v[0], static_cast<unsigned>(v[1]), static_cast<unsigned>(v[2])) * 86400 +
         int64_t{v[3]} * 3600 + int64_t{v[4]} * 60 + v[5];
  return true;
}

core::Result<int64_t> parseSeconds(const core::CsvTable& t, size_t row, size_t col) {
  std::string cell(t.cell(row, col));
  char* end = nullptr;
  const double v = std::strtod(cell.c_str(), &end);
  if (cell.empty() || end != cell.c_str() + cell.size() || !(v >= 0) || v > 1e12) {
    return core::invalidArgument(t.where(row) + ": column '" + t.header()[col] + "' value '" +
                                 cell + "' is not a non-negative number of seconds");
  }
  return static_cast<int64_t>(v);
}

}  // namespace

core::Result<std::vector<PhillyJob>> readPhillyTrace(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(path));
  TESSERA_ASSIGN_OR_RETURN(size_t c_time, t.requireColumn("timestamp"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_dur, t.requireColumn("duration"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_gpus, t.requireColumn("num_gpus"));
  TESSERA_ASSIGN_OR_RETURN(size_t c_vc, t.requireColumn("cluster"));
  if (t.rowCount() == 0) {
    return core::invalidArgument(path + ":2: no jobs (only a header)");
  }
  std::vector<PhillyJob> jobs;
  jobs.reserve(t.rowCount());
  int64_t first = INT64_MAX;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    PhillyJob j;
    if (!parseTimestamp(t.cell(r, c_time), &j.submit_s)) {
      return core::invalidArgument(t.where(r) + ": column 'timestamp' value '" +
                                   std::string(t.cell(r, c_time)) + "' is not YYYY-MM-DD HH:MM:SS");
    }
    TESSERA_ASSIGN_OR_RETURN(j.duration_s, parseSeconds(t, r, c_dur));
    TESSERA_ASSIGN_OR_RETURN(int64_t g, t.getInt(r, c_gpus, 1, 4096));
    j.gpus = static_cast<int>(g);
    j.tenant = std::string(t.cell(r, c_vc));
    if (j.tenant.empty()) {
      return core::invalidArgument(t.where(r) + ": column 'cluster' is empty");
    }
    first = std::min(first, j.submit_s);
    jobs.push_back(std::move(j));
  }
  for (PhillyJob& j : jobs) {
    j.submit_s -= first;
  }
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const PhillyJob& a, const PhillyJob& b) { return a.submit_s < b.submit_s; });
  return jobs;
}

core::Result<Scenario> phillyScenario(const std::vector<PhillyJob>& all_jobs,
                                      const PhillyOptions& options) {
  std::vector<PhillyJob> jobs(
      all_jobs.begin(),
      all_jobs.begin() + static_cast<std::ptrdiff_t>(
                             options.max_jobs == 0 ? all_jobs.size()
                                                   : std::min(options.max_jobs, all_jobs.size())));
  Scenario s;
  s.catalogue = model::GpuCatalogue::builtin();
  s.space = sched::ResourceSpace::withModels(s.catalogue, {});
  s.options.fair_share = options.fair_share;
  s.options.min_runtime = options.min_runtime;
  s.options.reclaim_to = options.reclaim_to;
  s.options.max_unsaved_gpu_time = options.max_unsaved_gpu_time;
  s.options.reclaim_patience = options.reclaim_patience;
  // Cluster: PROFILE:COUNT or NODESxGPUS.
  const std::string& spec = options.cluster;
  const size_t colon = spec.find(':');
  const size_t x = spec.find('x');
  int64_t count = 0;
  if (colon != std::string::npos) {
    const std::string n = spec.substr(colon + 1);
    auto [p, ec] = std::from_chars(n.data(), n.data() + n.size(), count);
    if (ec != std::errc() || p != n.data() + n.size() || count <= 0 || count > 100000) {
      return core::invalidArgument("--cluster '" + spec +
                                   "': expected PROFILE:COUNT, e.g. dgx-h100:250");
    }
    for (int64_t i = 0; i < count; ++i) {
      auto node = model::makeProfileNode(spec.substr(0, colon), "node-" + std::to_string(i),
                                         s.catalogue, static_cast<int>(i));
      if (!node.isOk()) {
        return node.status().withContext("--cluster");
      }
      s.nodes.push_back(std::move(node).value());
    }
  } else if (x != std::string::npos) {
    int64_t gpus = 0;
    const std::string a = spec.substr(0, x);
    const std::string b = spec.substr(x + 1);
    auto r1 = std::from_chars(a.data(), a.data() + a.size(), count);
    auto r2 = std::from_chars(b.data(), b.data() + b.size(), gpus);
    if (r1.ec != std::errc() || r2.ec != std::errc() || count <= 0 || count > 100000 || gpus <= 0 ||
        gpus > model::kMaxGpusPerNode) {
      return core::invalidArgument("--cluster '" + spec + "': expected NODESxGPUS, e.g. 250x8");
    }
    for (int64_t i = 0; i < count; ++i) {
      model::Node n = model::makeNode("node-" + std::to_string(i), core::MilliCpu{224000},
                                      core::MiB{int64_t{2048} * 1024}, s.catalogue,
                                      *s.catalogue.find("H100-80GB"), static_cast<int>(gpus));
      n.nvlink_domain = static_cast<int>(i);
      s.nodes.push_back(std::move(n));
    }
  } else {
    return core::invalidArgument("--cluster '" + spec +
                                 "': expected PROFILE:COUNT (dgx-h100:250) or NODESxGPUS (250x8)");
  }
  int64_t total_gpus = 0;
  for (const model::Node& n : s.nodes) {
    total_gpus += static_cast<int64_t>(n.gpus.size());
  }
  // Tenants and quotas.
  std::map<std::string, double> gpu_time;
  for (const PhillyJob& j : jobs) {
    gpu_time[j.tenant] += static_cast<double>(j.duration_s) * j.gpus;
  }
  std::map<std::string, int64_t> quota;
  if (!options.quota_file.empty()) {
    TESSERA_ASSIGN_OR_RETURN(core::CsvTable t, core::CsvTable::readFile(options.quota_file));
    TESSERA_ASSIGN_OR_RETURN(size_t c_q, t.requireColumn("queue"));
    TESSERA_ASSIGN_OR_RETURN(size_t c_g, t.requireColumn("gpus"));
    for (size_t r = 0; r < t.rowCount(); ++r) {
      TESSERA_ASSIGN_OR_RETURN(int64_t g, t.getInt(r, c_g, 0, 1000000));
      quota[std::string(t.cell(r, c_q))] = g;
    }
  } else {
    // Proportional to GPU-time, whole GPUs, largest remainder.
    double sum = 0;
    for (const auto& [tenant, gt] : gpu_time) {
      sum += gt;
    }
    std::vector<std::pair<double, std::string>> rem;
    int64_t given = 0;
    for (const auto& [tenant, gt] : gpu_time) {
      const double exact = sum > 0 ? gt / sum * static_cast<double>(total_gpus) : 0;
      quota[tenant] = static_cast<int64_t>(exact);
      given += quota[tenant];
      rem.emplace_back(exact - static_cast<double>(quota[tenant]), tenant);
    }
    std::sort(rem.begin(), rem.end(), std::greater<>());
    for (size_t i = 0; given < total_gpus && i < rem.size(); ++i, ++given) {
      ++quota[rem[i].second];
    }
  }
  s.queues.push_back({"philly", "", {}, {}, 1, 100});
  for (const auto& [tenant, gt] : gpu_time) {
    sched::QueueSpec q{tenant, "philly", s.space.zeros(), {}, 1, 100};
    q.quota[sched::kGpuDim] = 1000 * (quota.count(tenant) != 0 ? quota[tenant] : 0);
    s.queues.push_back(std::move(q));
  }
  auto tree = sched::QueueTree::create(s.space, s.queues);
  if (!tree.isOk()) {
    return tree.status();
  }
  s.workloads.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const PhillyJob& j = jobs[i];
    ScenarioWorkload w;
    const int tasks = (j.gpus + 7) / 8;
    const int per_task = (j.gpus + tasks - 1) / tasks;
    w.spec.name = "job-" + std::to_string(i);
    w.spec.queue = *tree->find(j.tenant);
    w.spec.tasks = tasks;
    w.spec.min_available = tasks;
    w.spec.request.gpu_count = per_task;
    w.spec.request.gpu_milli = core::kWholeGpu;
    w.at = std::chrono::seconds(j.submit_s);
    w.duration = std::chrono::seconds(std::max<int64_t>(1, j.duration_s));
    w.grace_period = std::chrono::seconds(30);
    w.spec.checkpoint_every = options.checkpoint_every;
    s.workloads.push_back(std::move(w));
  }
  return s;
}

}  // namespace tessera::sim
