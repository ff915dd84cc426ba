// A tenant's own audit stream, and the Prometheus metrics.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "audit/verify.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/metrics.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

namespace {

constexpr double kMilli = 1000.0;

// "whole" or "mig": how a GPU is configured.
std::string gpuMode(const GpuState& g) { return g.mig ? "mig" : "whole"; }

}  // namespace

HttpResponse ControlPlane::metrics(const std::optional<std::string>& tenant) {
  // One writer per scrape: families are grouped and typed by it, whatever order they are filled
  // in. The tenant view (`tenant` set) writes the same families as sys/metrics where they have
  // a meaning for one tenant, filled with that tenant's numbers only, and leaves out the fleet's
  // (nodes, free GPUs, the scheduler, the audit log, other tenants' totals): a tenant's
  // Prometheus can scrape it and the dashboard's tenant panels work on it unchanged.
  MetricsText out;
  const bool fleet = !tenant.has_value();
  const std::string* only = tenant ? &*tenant : nullptr;
  auto mine = [&](const std::string& who) { return fleet || who == *tenant; };

  // Nodes and GPUs, from the driver's GPU map as the last pass left it.
  const std::vector<NodeState> nodes = driver_.nodeStates();
  if (fleet) {
    std::map<std::string, int64_t> by_state = {
        {"ready", 0}, {"lost", 0}, {"waiting", 0}, {"simulated", 0}};
    int64_t cordoned = 0;
    for (const NodeState& n : nodes) {
      ++by_state[n.state];
      cordoned += n.cordoned ? 1 : 0;
    }
    MetricFamily& f = out.family("tessera_nodes", MetricType::kGauge,
                                 "Nodes in service, by state: ready (its agent's lease holds), "
                                 "lost (lease lapsed), waiting (no agent yet), simulated.");
    for (const auto& [state, n] : by_state) {
      f.add({{"state", state}}, static_cast<double>(n));
    }
    out.family("tessera_nodes_cordoned", MetricType::kGauge,
               "Nodes in service that take no new tasks (cordoned or drained), any state.")
        .add({}, static_cast<double>(cordoned));
  }
  struct ModelCounts {
    std::map<std::string, std::pair<int64_t, int64_t>> gpus;  // mode -> (free, allocated)
    int64_t milli = 0;                                        // Allocated, all modes.
    int64_t shares = 0;       // Fractional shares (tasks holding part of a whole-mode GPU).
    int64_t shared_gpus = 0;  // Whole-mode GPUs holding fractional shares.
    std::map<std::string, int64_t> slices;  // MIG profile -> instances in use.
  };
  std::map<std::string, ModelCounts> models;
  for (const NodeState& n : nodes) {
    for (const GpuState& g : n.gpus) {
      ModelCounts& m = models[g.model];
      auto& [free, allocated] = m.gpus[gpuMode(g)];
      if (fleet) {
        (g.uses.empty() ? free : allocated) += 1;
      }
      bool shared = false;
      for (const GpuUse& u : g.uses) {
        if (!mine(u.tenant)) {
          continue;
        }
        m.milli += u.milli;
        if (g.mig && !u.mig_profile.empty()) {
          ++m.slices[u.mig_profile];
        } else if (u.milli < 1000) {
          ++m.shares;
          shared = true;
        }
      }
      m.shared_gpus += shared ? 1 : 0;
    }
  }
  if (fleet) {
    MetricFamily& f = out.family("tessera_gpus", MetricType::kGauge,
                                 "GPUs in service by model, mode (whole: not in MIG mode; mig) "
                                 "and state (free: nothing on it; allocated: a task, a share or a "
                                 "MIG slice on it).");
    for (const auto& [model, m] : models) {
      for (const char* mode : {"whole", "mig"}) {
        auto it = m.gpus.find(mode);
        const auto [free, allocated] =
            it == m.gpus.end() ? std::pair<int64_t, int64_t>{0, 0} : it->second;
        f.add({{"model", model}, {"mode", mode}, {"state", "free"}}, static_cast<double>(free));
        f.add({{"model", model}, {"mode", mode}, {"state", "allocated"}},
              static_cast<double>(allocated));
      }
    }
    MetricFamily& sg = out.family("tessera_gpus_shared", MetricType::kGauge,
                                  "Whole-mode GPUs holding fractional shares, by model.");
    for (const auto& [model, m] : models) {
      sg.add({{"model", model}}, static_cast<double>(m.shared_gpus));
    }
  }
  MetricFamily& alloc = out.family(
      "tessera_gpu_allocated_gpus", MetricType::kGauge,
      "GPUs allocated to tasks by model, in GPUs (a half share counts 0.5; a MIG slice its part "
      "of the GPU), terminating tasks included.");
  MetricFamily& shares = out.family("tessera_gpu_shares", MetricType::kGauge,
                                    "Fractional GPU shares held by tasks, by model.");
  MetricFamily& slices = out.family("tessera_gpu_mig_slices", MetricType::kGauge,
                                    "MIG instances held by tasks, by model and profile.");
  for (const auto& [model, m] : models) {
    alloc.add({{"model", model}}, static_cast<double>(m.milli) / kMilli);
    shares.add({{"model", model}}, static_cast<double>(m.shares));
    for (const auto& [profile, n] : m.slices) {
      slices.add({{"model", model}, {"profile", profile}}, static_cast<double>(n));
    }
  }

  // Queues: the scheduler's tree as the last pass left it (the tenant view: its subtree).
  {
    MetricFamily& a = out.family("tessera_queue_allocated_gpus", MetricType::kGauge,
                                 "GPUs allocated to the queue's running tasks.");
    MetricFamily& fs = out.family("tessera_queue_fair_share_gpus", MetricType::kGauge,
                                  "The queue's fair share of GPUs, as the last pass computed it.");
    MetricFamily& q = out.family("tessera_queue_quota_gpus", MetricType::kGauge,
                                 "The queue's quota (deserved GPUs).");
    MetricFamily& p = out.family("tessera_queue_pending_gpus", MetricType::kGauge,
                                 "GPUs asked for by the queue's pending workloads.");
    for (const QueueStatus& s : driver_.queues(tenant.value_or(""))) {
      if (!fleet && s.name != *tenant && !s.name.starts_with(*tenant + "/")) {
        continue;
      }
      const MetricLabels l = {{"queue", s.name}};
      a.add(l, static_cast<double>(s.allocated_milli_gpu) / kMilli);
      fs.add(l, static_cast<double>(s.fair_share_milli_gpu) / kMilli);
      q.add(l, static_cast<double>(s.quota_milli_gpu) / kMilli);
      p.add(l, static_cast<double>(s.pending_milli_gpu) / kMilli);
    }
  }

  // Workloads by phase, from the stored records, in one walk with the pending ones' ages (how
  // long those pending now have waited, at the scrape); and how long workloads took from
  // submission to their first start (a histogram since the server started).
  {
    std::map<std::string, int64_t> phases = {
        {"pending", 0}, {"running", 0}, {"succeeded", 0}, {"failed", 0}, {"cancelled", 0}};
    std::map<std::pair<std::string, std::string>, HistogramData> ages;
    std::map<std::pair<std::string, std::string>, double> oldest;
    const core::WallTime now = clock_.wallNow();
    for (const auto& [t, rec] : registry_.all()) {
      if (!mine(t)) {
        continue;
      }
      ++phases[std::string(phaseName(rec->status.phase))];
      const auto submitted = core::parseRfc3339(rec->submitted);
      if (rec->status.phase != WorkloadPhase::kPending || !submitted) {
        continue;
      }
      const json& queue_field = rec->spec.contains("queue") ? rec->spec["queue"] : json();
      const std::string queue =
          queue_field.is_string() ? queue_field.get<std::string>() : "default";
      const auto key = std::make_pair(t, queue);
      const double age = std::max(0.0, std::chrono::duration<double>(now - *submitted).count());
      ages.try_emplace(key, kWaitSecondsBounds).first->second.observe(age);
      oldest[key] = std::max(oldest[key], age);
    }
    MetricFamily& f = out.family("tessera_workloads", MetricType::kGauge,
                                 "Stored workloads by phase (finished ones until collected).");
    for (const auto& [phase, n] : phases) {
      f.add({{"phase", phase}}, static_cast<double>(n));
    }
    MetricFamily& started =
        out.family("tessera_workload_start_delay_seconds", MetricType::kHistogram,
                   "Seconds from a workload's submission to its first start, by tenant and queue.");
    for (const auto& [key, h] : request_metrics_.startDelays(only)) {
      started.addHistogram({{"tenant", key.first}, {"queue", key.first + "/" + key.second}}, h);
    }
    MetricFamily& pending = out.family(
        "tessera_workload_pending_age_seconds", MetricType::kHistogram,
        "How long the workloads pending now have waited since their submission, by tenant and "
        "queue: a snapshot at each scrape (read it without rate()).");
    MetricFamily& old = out.family("tessera_queue_oldest_pending_seconds", MetricType::kGauge,
                                   "Seconds the queue's oldest pending workload has waited.");
    for (const auto& [key, h] : ages) {
      const MetricLabels l = {{"tenant", key.first}, {"queue", key.first + "/" + key.second}};
      pending.addHistogram(l, h);
      old.add(l, oldest[key]);
    }
  }
  // Each node's GPUs and how many are allocated (the fleet's view).
  if (fleet) {
    MetricFamily& cap =
        out.family("tessera_node_gpus", MetricType::kGauge, "GPUs of each node in service.");
    MetricFamily& used =
        out.family("tessera_node_allocated_gpus", MetricType::kGauge,
                   "GPUs of each node allocated to tasks (a half share counts 0.5), terminating "
                   "tasks included.");
    for (const NodeState& n : nodes) {
      int64_t milli = 0;
      for (const GpuState& g : n.gpus) {
        milli += g.allocatedMilli();
      }
      cap.add({{"node", n.name}}, static_cast<double>(n.gpus.size()));
      used.add({{"node", n.name}}, static_cast<double>(milli) / kMilli);
    }
  }
  // The secrets barrier: whether it is initialized and sealed (a sealed server answers every
  // secret with 503; an alert belongs on it).
  if (fleet && secrets_ != nullptr) {
    const secrets::SealStatus seal = secrets_->keys().status();
    out.family("tessera_secrets_initialized", MetricType::kGauge,
               "1 when the secrets barrier is initialized, 0 before `tessera operator init`.")
        .add({}, seal.initialized ? 1 : 0);
    out.family("tessera_secrets_sealed", MetricType::kGauge,
               "1 while the secrets barrier is sealed (secrets answer 503), 0 when unsealed.")
        .add({}, seal.sealed ? 1 : 0);
  }
  {
    MetricFamily& f = out.family("tessera_evictions_total", MetricType::kCounter,
                                 "Tasks evicted, by reason: preempted (a higher priority in its "
                                 "queue), reclaimed (another queue took back its fair share), "
                                 "moved (consolidation), drained (its node), other.");
    for (const auto& [reason, n] : request_metrics_.evictions(only)) {
      f.add({{"reason", reason}}, static_cast<double>(n));
    }
  }

  // The scheduler's passes.
  if (fleet) {
    out.family("tessera_scheduler_pass_duration_seconds", MetricType::kHistogram,
               "How long each scheduling pass took.")
        .addHistogram({}, driver_.passSeconds());
    out.family("tessera_scheduler_passes_total", MetricType::kCounter, "Scheduling passes run.")
        .add({}, static_cast<double>(driver_.passes()));
  }

  // The API: latency by route pattern and status code (never a caller's names or tenant: the
  // series stay bounded by the route table, whatever the number of tenants).
  {
    MetricFamily& f = out.family("tessera_http_request_duration_seconds", MetricType::kHistogram,
                                 "Time to answer API requests, by route pattern and status code "
                                 "(the audit log's records included).");
    for (const auto& [key, h] : request_metrics_.latency(only)) {
      f.addHistogram({{"route", key.route}, {"code", std::to_string(key.code)}}, h);
    }
  }
  if (fleet) {
    // One series per tenant (two families): what a per-tenant cost report needs, without the
    // route x code x bucket product per tenant.
    MetricFamily& n = out.family("tessera_tenant_http_requests_total", MetricType::kCounter,
                                 "API requests per tenant scope (\"(admin)\": the admin scope).");
    MetricFamily& s = out.family("tessera_tenant_http_request_seconds_total", MetricType::kCounter,
                                 "Seconds spent answering each tenant scope's requests.");
    for (const auto& [t, totals] : request_metrics_.tenantTotals()) {
      // Not "": Prometheus reads an empty label as no label. No tenant can be named "(admin)".
      const std::string who = t.empty() ? "(admin)" : t;
      n.add({{"tenant", who}}, static_cast<double>(totals.requests));
      s.add({{"tenant", who}}, totals.seconds);
    }
  }

  // The audit log, per sink.
  if (fleet) {
    const std::vector<std::string> names = auditor_.sinkNames();
    const std::vector<audit::SinkStats> stats = auditor_.stats();
    MetricFamily& rec = out.family("tessera_audit_records_total", MetricType::kCounter,
                                   "Audit lines written (records and checkpoints), per sink.");
    MetricFamily& bytes = out.family("tessera_audit_bytes_total", MetricType::kCounter,
                                     "Bytes written to the audit log, per sink.");
    MetricFamily& failures = out.family("tessera_audit_flush_failures_total", MetricType::kCounter,
                                        "Flushes of the audit log to stable storage that failed.");
    MetricFamily& flush = out.family("tessera_audit_flush_duration_seconds", MetricType::kHistogram,
                                     "How long each flush of the audit log to stable storage "
                                     "(fdatasync) took, per sink.");
    for (size_t i = 0; i < names.size() && i < stats.size(); ++i) {
      const audit::SinkStats& st = stats[i];
      const MetricLabels l = {{"sink", names[i]}};
      rec.add(l, static_cast<double>(st.records));
      bytes.add(l, static_cast<double>(st.bytes));
      failures.add(l, static_cast<double>(st.flush_failures));
      HistogramData h(audit::kFlushSecondsBounds);
      for (size_t b = 0; b < h.buckets.size() && b < st.flush_buckets.size(); ++b) {
        h.buckets[b] = st.flush_buckets[b];
      }
      h.sum = st.flush_seconds;
      h.count = st.flushes;
      flush.addHistogram(l, h);
    }
    const RefusalCounts refused = refusals_->counts();
    MetricFamily& refusals =
        out.family("tessera_audit_refusals_total", MetricType::kCounter,
                   "Requests refused before the pipeline records them (failed authentication, "
                   "unparsable paths and bodies, 413, 429, ...): recorded one by one, or dropped "
                   "over the budget and counted in a summary record instead.");
    refusals.add({{"outcome", "recorded"}}, static_cast<double>(refused.recorded));
    refusals.add({{"outcome", "dropped"}}, static_cast<double>(refused.dropped));
  }

  // Tokens and secrets' leases that expire soon: what will stop working within the hour or the
  // day unless renewed (the root token never expires and is not counted).
  {
    const core::WallTime now = clock_.wallNow();
    const std::pair<const char*, core::Duration> windows[] = {{"1h", std::chrono::hours(1)},
                                                              {"24h", std::chrono::hours(24)}};
    std::map<std::string, int64_t> tokens;
    int64_t live = 0;
    for (const auto& [who, expires] : tokens_->expiries()) {
      if (!mine(who)) {
        continue;
      }
      ++live;
      for (const auto& [label, d] : windows) {
        tokens[label] += expires != core::WallTime::max() && expires <= now + d ? 1 : 0;
      }
    }
    out.family("tessera_tokens", MetricType::kGauge, "Live tokens.")
        .add({}, static_cast<double>(live));
    MetricFamily& t = out.family("tessera_tokens_expiring", MetricType::kGauge,
                                 "Live tokens that expire within the window (1h, 24h).");
    for (const auto& [label, d] : windows) {
      t.add({{"within", label}}, static_cast<double>(tokens[label]));
    }
    // A server without secrets has no leases: the families are there, at 0.
    std::map<std::string, int64_t> leases;
    std::map<std::string, int64_t> states = {{"active", 0}, {"revoking", 0}, {"irrevocable", 0}};
    const std::vector<secrets::Lease> held = secrets_ != nullptr
                                                 ? secrets_->leases().list(tenant.value_or(""), "")
                                                 : std::vector<secrets::Lease>{};
    {
      for (const secrets::Lease& l : held) {
        ++states[std::string(secrets::leaseStateName(l.state))];
        for (const auto& [label, d] : windows) {
          leases[label] += l.state == secrets::LeaseState::kActive && l.expires <= now + d ? 1 : 0;
        }
      }
      MetricFamily& ls = out.family("tessera_leases", MetricType::kGauge,
                                    "Secrets' leases (database credentials) by state.");
      for (const auto& [state, n] : states) {
        ls.add({{"state", state}}, static_cast<double>(n));
      }
      MetricFamily& le = out.family("tessera_leases_expiring", MetricType::kGauge,
                                    "Active leases that expire within the window (1h, 24h).");
      for (const auto& [label, d] : windows) {
        le.add({{"within", label}}, static_cast<double>(leases[label]));
      }
    }
  }

  for (const std::string& problem : out.problems()) {
    core::logWarn("metrics: {}", problem);
  }
  HttpResponse r;
  r.body = out.text();
  r.content_type = std::string(kPrometheusContentType);
  return r;
}

HttpResponse ControlPlane::auditApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "use GET");
  }
  if (options_.audit_file.empty()) {
    return error(404, "this server has no audit file to read a view from");
  }
  auto number = [&](const char* name, int64_t lo, int64_t hi,
                    int64_t def) -> std::optional<int64_t> {
    auto it = r.scope.query.find(name);
    if (it == r.scope.query.end()) {
      return def;
    }
    int64_t v = 0;
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
      return std::nullopt;
    }
    return v;
  };
  const std::optional<int64_t> limit = number("limit", 1, 10000, 100);
  if (!limit) {
    return error(400, "limit: expected a whole number from 1 to 10000");
  }
  const std::optional<int64_t> after = number("after", 0, std::numeric_limits<int64_t>::max(), -1);
  if (!after) {
    return error(400, "after: expected a record's seq (a whole number, 0 or more)");
  }
  // The tenant's records only, byte for byte, each with its hash and prev_hash (docs/server.md
  // says what a tenant can verify from them): the last `limit`, or with `after` the first
  // `limit` whose seq is greater (to follow the log). A rotated log is read back from its newest
  // file only as far as the answer needs: `total` counts the tenant's records in the files read,
  // and `complete` is false when older files were not read.
  auto files = audit::rotatedLogFiles(options_.audit_file);
  if (!files.isOk()) {
    return fromStatus(files.status());
  }
  // Records from before the tenant was created belong to a deleted tenant of the same name: the
  // view starts at the first record since (records are in time order).
  std::string created;
  {
    std::shared_lock lock(mu_);
    if (auto t = tenants_.find(*r.scope.tenant); t != tenants_.end()) {
      created = t->second.value("created_time", "");
    }
  }
  auto time_of = [](const std::string& line) {
    const json rec = json::parse(line, nullptr, false);
    return rec.is_object() ? rec.value("time", std::string()) : std::string();
  };
  std::vector<std::string> view;  // In seq order.
  bool covered = false;           // With `after`: the files read hold every record past it.
  bool complete = true;           // No older file holds more of the tenant's records.
  for (size_t i = files->size(); i-- > 0;) {
    const audit::VerifiedFile& file = (*files)[i];
    const bool live = i + 1 == files->size();
    if (*after >= 0 ? covered : view.size() >= static_cast<size_t>(*limit)) {
      complete = false;
      break;
    }
    auto part = audit::tenantViewOfFile(file.path, *r.scope.tenant);
    if (!part.isOk()) {
      if (live) {
        return fromStatus(part.status());
      }
      core::logWarn("audit view: skipping {}", part.status().message());
      continue;
    }
    size_t first = 0;
    while (!created.empty() && first < part->size() && time_of((*part)[first]) < created) {
      ++first;
    }
    part->erase(part->begin(), part->begin() + static_cast<std::ptrdiff_t>(first));
    view.insert(view.begin(), std::make_move_iterator(part->begin()),
                std::make_move_iterator(part->end()));
    covered = file.first_seq > 0 && file.first_seq <= static_cast<uint64_t>(*after) + 1;
    if (first > 0) {
      break;  // Older files hold a deleted namesake's records only.
    }
  }
  json records = json::array();
  const auto n = static_cast<size_t>(*limit);
  if (*after >= 0) {
    for (const std::string& line : view) {
      json rec = json::parse(line, nullptr, false);
      if (rec.is_object() && rec.value("seq", int64_t{0}) > *after) {
        records.push_back(std::move(rec));
        if (records.size() == n) {
          break;
        }
      }
    }
  } else {
    for (size_t i = view.size() > n ? view.size() - n : 0; i < view.size(); ++i) {
      records.push_back(json::parse(view[i], nullptr, false));
    }
  }
  return reply(200,
               {{"request_id", r.request_id},
                {"data", {{"records", records}, {"total", view.size()}, {"complete", complete}}}});
}

}  // namespace tessera::server
