#include "sim/scenario_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <queue>
#include <set>

#include "sched/scheduler.h"

namespace tessera::sim {
namespace {

using core::Duration;
using sched::QueueId;
using sched::TaskId;
using sched::WorkloadId;

// kTick: a pass and nothing else, when a time-based rule (reclaim patience) may decide.
enum class EvKind : uint8_t { kUpdate, kSubmit, kFinish, kStop, kTick };

struct Ev {
  Duration at;
  uint64_t seq;
  EvKind kind;
  uint32_t id;          // Scenario workload index, or task id.
  uint32_t generation;  // For task events: ignored if the task moved on since.
  bool operator>(const Ev& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

double percentile(std::vector<double> v, double p) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  const double rank = p * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (rank - static_cast<double>(lo));
}

}  // namespace

std::vector<sched::PodShape> typicalShapes(const Scenario& sc) {
  std::vector<sched::PodShape> shapes;
  for (const ScenarioWorkload& w : sc.workloads) {
    const model::TaskRequest& r = w.spec.request;
    for (int i = 0; i < w.spec.tasks; ++i) {
      shapes.push_back({r.cpu.value(),
                        static_cast<int32_t>(r.gpu_count > 0 ? r.gpu_milli.value() : 0),
                        r.gpu_count, r.models});
    }
  }
  return shapes;
}

core::Result<ScenarioResult> runScenario(const Scenario& sc, const ScenarioProgress& progress) {
  core::FakeClock clock;
  const core::TimePoint t0 = clock.now();
  TESSERA_ASSIGN_OR_RETURN(sched::QueueTree tree, sched::QueueTree::create(sc.space, sc.queues));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> s,
                           sched::Scheduler::create(sc.catalogue, sc.nodes, std::move(tree),
                                                    typicalShapes(sc), sc.options, clock));
  // Trust groups numbered as the server numbers them: in the order tenants first name them.
  std::map<std::string, uint32_t> groups;
  for (size_t i = 0; i < sc.tenants.size(); ++i) {
    uint32_t group = 0;
    if (!sc.tenants[i].trust_group.empty()) {
      group =
          groups.try_emplace(sc.tenants[i].trust_group, static_cast<uint32_t>(groups.size() + 1))
              .first->second;
    }
    s->setTrustGroup(model::TenantId{static_cast<uint32_t>(i + 1)}, group);
    for (const std::string& pool : sc.tenants[i].pools) {  // Dedicated pools, as sys/pools.
      for (sched::NodeIndex n = 0; n < sc.nodes.size(); ++n) {
        auto label = sc.nodes[n].labels.find(std::string(model::kPoolLabel));
        if (label != sc.nodes[n].labels.end() && label->second == pool) {
          s->setDedicated(n, model::TenantId{static_cast<uint32_t>(i + 1)});
        }
      }
    }
  }
  const sched::QueueTree& queues = s->queues();
  ScenarioResult out;
  std::priority_queue<Ev, std::vector<Ev>, std::greater<>> events;
  uint64_t seq = 0;
  // Tenant updates before the submissions of the same instant (as the parity harness posts them).
  for (size_t i = 0; i < sc.tenant_updates.size(); ++i) {
    events.push({sc.tenant_updates[i].at, seq++, EvKind::kUpdate, static_cast<uint32_t>(i), 0});
  }
  for (size_t i = 0; i < sc.workloads.size(); ++i) {
    events.push({sc.workloads[i].at, seq++, EvKind::kSubmit, static_cast<uint32_t>(i), 0});
  }
  // Per scheduler task: generation, progress kept across restarts, scenario index of workload.
  std::vector<uint32_t> generation;
  std::vector<Duration> progress_kept;
  std::vector<size_t> scenario_of;  // By scheduler workload id.
  std::vector<int64_t> pending_tasks(queues.size(), 0);
  std::set<Duration> ticks;  // Instants of the kTick events still to come.
  std::vector<int> evicted_per_queue(queues.size(), 0);
  std::vector<double> lost_per_queue(queues.size(), 0);
  std::vector<double> useful_per_queue(queues.size(), 0);
  // GPUs a task of `w` holds, in GPUs (a share counts as its part; a MIG slice as one).
  auto gpus_of = [&](const sched::WorkloadInfo& w) {
    const model::TaskRequest& r = w.spec.request;
    return r.gpu_count == 0
               ? 0.0
               : static_cast<double>(r.gpu_count) *
                     (r.isMig() ? 1000.0 : static_cast<double>(r.gpu_milli.value())) / 1000.0;
  };
  std::vector<std::vector<double>> jcts(queues.size());
  std::vector<double> gpu_seconds(queues.size(), 0);
  // Tenants rows: last written values per leaf.
  std::vector<std::array<int64_t, 4>> last(queues.size(), {-1, -1, -1, -1});
  // Time-to-quota episodes per leaf: start time or -1.
  std::vector<double> episode_start(queues.size(), -1);
  std::vector<std::vector<double>> episodes(queues.size());
  double jain_weighted = 0;
  double jain_time = 0;
  double prev_time = 0;
  std::vector<QueueId> leaves;
  for (QueueId q = 0; q < queues.size(); ++q) {
    if (queues.queue(q).isLeaf()) {
      leaves.push_back(q);
    }
  }
  auto node_name = [&](const sched::Placement& p) { return s->cluster().node(p.node).name; };
  auto record = [&](double t, std::string ev, WorkloadId w, int task, std::string node,
                    std::string detail) {
    const sched::WorkloadInfo& info = s->workload(w);
    out.events.push_back({t, std::move(ev), info.spec.name, task,
                          queues.queue(info.spec.queue).name, std::move(node), std::move(detail)});
  };
  // Integrates per-queue GPU use and the Jain index from `prev_time` to `t`, with the state as it
  // was during that interval.
  auto integrate = [&](double t) {
    const double dt = t - prev_time;
    if (dt <= 0) {
      return;
    }
    double sum = 0;
    double sum_sq = 0;
    int n = 0;
    for (QueueId q : leaves) {
      const sched::Queue& queue = queues.queue(q);
      gpu_seconds[q] += static_cast<double>(queue.allocated[sched::kGpuDim]) / 1000.0 * dt;
      if (queue.fair_share[sched::kGpuDim] > 0) {
        const double x = static_cast<double>(queue.allocated[sched::kGpuDim]) /
                         static_cast<double>(queue.fair_share[sched::kGpuDim]);
        sum += x;
        sum_sq += x * x;
        ++n;
      }
    }
    if (n > 0 && sum_sq > 0) {
      jain_weighted += (sum * sum) / (n * sum_sq) * dt;
      jain_time += dt;
    }
    prev_time = t;
  };
  auto snapshot = [&](double t) {
    for (QueueId q : leaves) {
      const sched::Queue& queue = queues.queue(q);
      const std::array<int64_t, 4> now{queue.allocated[sched::kGpuDim],
                                       queue.fair_share[sched::kGpuDim],
                                       queue.quota[sched::kGpuDim], pending_tasks[q]};
      if (now != last[q]) {
        last[q] = now;
        out.tenants.push_back({t, queue.name, now[0], now[1], now[2], now[3]});
      }
      const int64_t demand = queue.allocated[sched::kGpuDim] + queue.pending[sched::kGpuDim];
      const int64_t target = std::min(queue.quota[sched::kGpuDim], demand);
      const bool short_of_quota = target > 0 && queue.allocated[sched::kGpuDim] < target;
      if (short_of_quota && episode_start[q] < 0) {
        episode_start[q] = t;
      } else if (!short_of_quota && episode_start[q] >= 0) {
        episodes[q].push_back(t - episode_start[q]);
        episode_start[q] = -1;
      }
    }
  };

  size_t processed = 0;
  const size_t total_submits = sc.workloads.size();
  size_t submitted = 0;
  while (!events.empty()) {
    const Duration now = events.top().at;
    clock.advance(now - (clock.now() - t0));
    const double t = seconds(now);
    integrate(t);
    while (!events.empty() && events.top().at == now) {
      const Ev ev = events.top();
      events.pop();
      ++processed;
      if (ev.kind == EvKind::kTick) {
        ticks.erase(ev.at);
        continue;
      }
      if (ev.kind == EvKind::kUpdate) {
        // As the server's tenant update: the tenant's queue and its default leaf, then its group.
        const ScenarioTenantUpdate& u = sc.tenant_updates[ev.id];
        const ScenarioTenant& tenant = sc.tenants[u.tenant];
        const sched::QueueSpec q = sched::tenantQueueSpec(queues.space(), tenant.name, u.numbers);
        const sched::QueueSpec leaf =
            sched::tenantDefaultQueueSpec(queues.space(), tenant.name, u.numbers);
        TESSERA_RETURN_IF_ERROR(s->updateQueue(*queues.find(q.name), q.quota, q.limit,
                                               q.over_quota_weight, q.priority));
        TESSERA_RETURN_IF_ERROR(s->setMaxUnsaved(*queues.find(q.name), q.max_unsaved_gpu_s));
        TESSERA_RETURN_IF_ERROR(s->updateQueue(*queues.find(leaf.name), leaf.quota, leaf.limit,
                                               leaf.over_quota_weight, leaf.priority));
        uint32_t group = 0;
        if (!u.trust_group.empty()) {
          group = groups.try_emplace(u.trust_group, static_cast<uint32_t>(groups.size() + 1))
                      .first->second;
        }
        s->setTrustGroup(model::TenantId{static_cast<uint32_t>(u.tenant + 1)}, group);
        continue;
      }
      if (ev.kind == EvKind::kSubmit) {
        ++submitted;
        const ScenarioWorkload& sw = sc.workloads[ev.id];
        auto id = s->submit(sw.spec);
        if (!id.isOk()) {
          out.events.push_back({t, "fail", sw.spec.name, -1, queues.queue(sw.spec.queue).name, "",
                                id.status().message()});
          ++out.failed_workloads;
          continue;
        }
        scenario_of.push_back(ev.id);
        generation.resize(generation.size() + static_cast<size_t>(sw.spec.tasks), 0);
        progress_kept.resize(progress_kept.size() + static_cast<size_t>(sw.spec.tasks),
                             Duration{0});
        pending_tasks[sw.spec.queue] += sw.spec.tasks;
        record(t, "submit", *id, -1, "",
               fmt::format("{} task(s), minAvailable {}", sw.spec.tasks, sw.spec.min_available));
        continue;
      }
      const TaskId task = ev.id;
      if (generation[task] != ev.generation) {
        continue;  // Stale: evicted or restarted since.
      }
      const sched::TaskInfo& info = s->task(task);
      const WorkloadId w = info.workload;
      const sched::WorkloadInfo& winfo = s->workload(w);
      if (ev.kind == EvKind::kFinish && info.state == sched::TaskState::kRunning) {
        const std::string node = node_name(info.assignment.placement);
        s->taskFinished(task);
        ++generation[task];
        useful_per_queue[winfo.spec.queue] +=
            seconds(sc.workloads[scenario_of[w]].duration) * gpus_of(winfo);
        record(t, "finish", w, static_cast<int>(info.index), node, "");
        if (winfo.finished == winfo.spec.tasks) {
          jcts[winfo.spec.queue].push_back(t - seconds(winfo.submitted - t0));
        }
      } else if (ev.kind == EvKind::kStop && info.state == sched::TaskState::kTerminating) {
        s->taskStopped(task);
        ++generation[task];
        ++pending_tasks[winfo.spec.queue];
      }
    }
    sched::PassResult r = s->schedule();
    ++out.passes;
    for (const sched::StartDecision& d : r.started) {
      const sched::WorkloadInfo& winfo = s->workload(d.workload);
      const ScenarioWorkload& sw = sc.workloads[scenario_of[d.workload]];
      --pending_tasks[winfo.spec.queue];
      const Duration remaining = std::max(Duration{0}, sw.duration - progress_kept[d.task]);
      events.push({now + remaining, seq++, EvKind::kFinish, d.task, ++generation[d.task]});
      record(t, "start", d.workload, static_cast<int>(s->task(d.task).index),
             node_name(d.placement), "");
    }
    for (const sched::EvictDecision& e : r.evicted) {
      const sched::TaskInfo& info = s->task(e.task);
      const ScenarioWorkload& sw = sc.workloads[scenario_of[e.victim]];
      // Work since the last checkpoint is lost; the task stops after its grace period.
      const Duration ran = progress_kept[e.task] + (clock.now() - info.started);
      progress_kept[e.task] = sw.spec.checkpoint_every.count() > 0
                                  ? (ran / sw.spec.checkpoint_every) * sw.spec.checkpoint_every
                                  : Duration{0};
      lost_per_queue[s->workload(e.victim).spec.queue] +=
          seconds(ran - progress_kept[e.task]) * gpus_of(s->workload(e.victim));
      events.push({now + sw.grace_period, seq++, EvKind::kStop, e.task, ++generation[e.task]});
      ++evicted_per_queue[s->workload(e.victim).spec.queue];
      ++out.evictions;
      // With tenants, the words the server tells the victim's tenant.
      record(t, "evict", e.victim, static_cast<int>(info.index),
             node_name(info.assignment.placement),
             sc.tenants.empty()
                 ? e.detail
                 : sched::evictionEvent(*s, e, sc.workloads[scenario_of[e.preemptor]].name));
    }
    snapshot(t);
    if (!out.events.empty()) {
      out.makespan_s = out.events.back().time_s;  // A pass that did nothing ends nothing.
    }
    // Patience runs out between events: pass again then, as the server's passes would see it.
    if (sc.options.reclaim_patience.count() > 0 && events.size() > ticks.size() &&
        std::accumulate(pending_tasks.begin(), pending_tasks.end(), int64_t{0}) > 0 &&
        ticks.insert(now + sc.options.reclaim_patience).second) {
      events.push({now + sc.options.reclaim_patience, seq++, EvKind::kTick, 0, 0});
    }
    if (progress && (out.passes % 256 == 0)) {
      progress(submitted, total_submits);
    }
    if (out.passes > 50'000'000) {
      return core::internalError("scenario did not settle after 50 million passes");
    }
  }
  (void)processed;
  // Whatever is still pending can never run.
  for (WorkloadId w = 0; w < s->workloadCount(); ++w) {
    const sched::WorkloadInfo& info = s->workload(w);
    if (info.pending > 0) {
      record(out.makespan_s, "fail", w, -1, "",
             fmt::format("{} task(s) never started: {}", info.pending, s->explain(w).message));
      ++out.failed_workloads;
    }
  }
  for (QueueId q : leaves) {
    if (episode_start[q] >= 0) {
      episodes[q].push_back(out.makespan_s - episode_start[q]);
    }
    QueueSummary qs;
    qs.name = queues.queue(q).name;
    qs.jobs_completed = static_cast<int>(jcts[q].size());
    double sum = 0;
    for (double j : jcts[q]) {
      sum += j;
    }
    qs.mean_jct_s = jcts[q].empty() ? 0 : sum / static_cast<double>(jcts[q].size());
    qs.p95_jct_s = percentile(jcts[q], 0.95);
    qs.gpu_seconds = gpu_seconds[q];
    qs.tasks_evicted = evicted_per_queue[q];
    qs.lost_gpu_seconds = lost_per_queue[q];
    qs.useful_gpu_seconds = useful_per_queue[q];
    out.lost_gpu_seconds += lost_per_queue[q];
    out.useful_gpu_seconds += useful_per_queue[q];
    qs.quota_episodes = static_cast<int>(episodes[q].size());
    double esum = 0;
    for (double e : episodes[q]) {
      esum += e;
      qs.max_time_to_quota_s = std::max(qs.max_time_to_quota_s, e);
    }
    qs.mean_time_to_quota_s =
        episodes[q].empty() ? 0 : esum / static_cast<double>(episodes[q].size());
    out.queues.push_back(qs);
  }
  double total_gpu_seconds = 0;
  for (const QueueSummary& qs : out.queues) {
    total_gpu_seconds += qs.gpu_seconds;
  }
  const double gpus = static_cast<double>(s->capacity()[sched::kGpuDim]) / 1000.0;
  out.utilisation =
      out.makespan_s > 0 && gpus > 0 ? total_gpu_seconds / (gpus * out.makespan_s) : 0;
  out.mean_jain = jain_time > 0 ? jain_weighted / jain_time : 1.0;
  out.goodput =
      out.makespan_s > 0 && gpus > 0 ? out.useful_gpu_seconds / (gpus * out.makespan_s) : 0;
  return out;
}

namespace {

std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) {
    return s;
  }
  std::string q = "\"";
  for (char c : s) {
    q += c;
    if (c == '"') {
      q += '"';
    }
  }
  return q + "\"";
}

core::Status writeText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  if (!f) {
    return core::Status(core::StatusCode::kUnavailable, path + ": write failed");
  }
  return core::Status::ok();
}

}  // namespace

core::Status writeScenarioOutputs(const ScenarioResult& r, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return core::Status(core::StatusCode::kUnavailable,
                        dir + ": cannot create directory: " + ec.message());
  }
  std::string tenants =
      "time_s,queue,allocated_milli_gpu,fair_share_milli_gpu,quota_milli_gpu,pending_tasks\n";
  for (const TenantRow& t : r.tenants) {
    fmt::format_to(std::back_inserter(tenants), "{:.3f},{},{},{},{},{}\n", t.time_s,
                   csvField(t.queue), t.allocated_milli_gpu, t.fair_share_milli_gpu,
                   t.quota_milli_gpu, t.pending_tasks);
  }
  TESSERA_RETURN_IF_ERROR(writeText(dir + "/tenants.csv", tenants));
  std::string events = "time_s,event,workload,task,queue,node,detail\n";
  for (const SimEvent& e : r.events) {
    fmt::format_to(std::back_inserter(events), "{:.3f},{},{},{},{},{},{}\n", e.time_s, e.event,
                   csvField(e.workload), e.task < 0 ? "" : std::to_string(e.task),
                   csvField(e.queue), csvField(e.node), csvField(e.detail));
  }
  TESSERA_RETURN_IF_ERROR(writeText(dir + "/events.csv", events));
  nlohmann::json summary;
  summary["makespan_s"] = r.makespan_s;
  summary["utilisation"] = r.utilisation;
  summary["mean_jain_index"] = r.mean_jain;
  summary["evictions"] = r.evictions;
  summary["useful_gpu_hours"] = r.useful_gpu_seconds / 3600;
  summary["lost_gpu_hours"] = r.lost_gpu_seconds / 3600;
  summary["goodput"] = r.goodput;
  summary["passes"] = r.passes;
  summary["failed_workloads"] = r.failed_workloads;
  summary["queues"] = nlohmann::json::array();
  for (const QueueSummary& q : r.queues) {
    summary["queues"].push_back({{"queue", q.name},
                                 {"jobs_completed", q.jobs_completed},
                                 {"mean_jct_s", q.mean_jct_s},
                                 {"p95_jct_s", q.p95_jct_s},
                                 {"gpu_seconds", q.gpu_seconds},
                                 {"tasks_evicted", q.tasks_evicted},
                                 {"useful_gpu_hours", q.useful_gpu_seconds / 3600},
                                 {"lost_gpu_hours", q.lost_gpu_seconds / 3600},
                                 {"quota_episodes", q.quota_episodes},
                                 {"max_time_to_quota_s", q.max_time_to_quota_s},
                                 {"mean_time_to_quota_s", q.mean_time_to_quota_s}});
  }
  return writeText(dir + "/summary.json", summary.dump(2) + "\n");
}

}  // namespace tessera::sim
