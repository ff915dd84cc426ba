#include "cli/sim_api.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <thread>

#include "api/client.h"
#include "audit/auditor.h"
#include "audit/crypto.h"
#include "audit/file_sink.h"
#include "server/certs.h"
#include "server/control_plane.h"
#include "server/driver.h"
#include "server/http_server.h"
#include "server/request.h"
#include "store/sqlite_store.h"

namespace tessera::cli {

using api::ApiClient;
using api::ClientConfig;
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double seconds(core::Duration d) { return std::chrono::duration<double>(d).count(); }

core::Status writeFile(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.flush();
  return f ? core::Status::ok() : core::unavailable(path.string() + ": cannot write");
}

// What the harness last saw of one workload's tasks.
struct Seen {
  std::string tenant;
  std::string name;   // In its tenant.
  std::string queue;  // "tenant/queue", as the scheduler names it.
  std::vector<std::pair<std::string, std::string>> tasks;  // state, node
  bool done = false;  // Succeeded, failed or cancelled: nothing more will happen.
};

// A server wired as `tessera server` wires it (store, audit log, scheduler driver, control plane,
// HTTPS listener on loopback), in this process, on a virtual clock the harness advances, with
// `nodes` simulated. `admin` holds its root token; passes run only when the harness says
// (driver->runOnce()).
struct InProcessServer {
  core::FakeClock clock;
  std::unique_ptr<store::Store> store;
  std::unique_ptr<audit::Auditor> auditor;
  std::unique_ptr<server::SchedulerDriver> driver;
  std::unique_ptr<server::ControlPlane> cp;
  std::vector<server::ListenerConfig> listeners;
  std::unique_ptr<server::HttpServer> http;
  ClientConfig cc;
  std::unique_ptr<ApiClient> admin;

  ~InProcessServer() {
    if (http) {
      http->shutdown(std::chrono::seconds(5));
    }
  }

  // `work_dir` (emptied first) receives the store, audit log and certificates.
  static core::Result<std::unique_ptr<InProcessServer>> start(const std::string& work_dir,
                                                              const model::GpuCatalogue& catalogue,
                                                              std::vector<model::Node> nodes,
                                                              server::DriverOptions dopts) {
    std::error_code ec;
    fs::remove_all(work_dir, ec);  // Ours: a run starts from an empty store.
    fs::create_directories(work_dir, ec);
    if (ec) {
      return core::unavailable(work_dir + ": cannot create directory: " + ec.message());
    }
    const fs::path dir(work_dir);
    auto s = std::make_unique<InProcessServer>();
    InProcessServer* self = s.get();
    TESSERA_ASSIGN_OR_RETURN(s->store,
                             store::SqliteStore::open((dir / "tessera.db").string(), {}, s->clock));
    const std::string salt_file = (dir / "audit.salt").string();
    TESSERA_ASSIGN_OR_RETURN(std::string salt, fs::exists(salt_file)
                                                   ? audit::readSaltFile(salt_file)
                                                   : audit::createSaltFile(salt_file));
    audit::FileSinkOptions sink_options;
    sink_options.sink.salt = salt;
    std::vector<std::unique_ptr<audit::AuditSink>> sinks;
    TESSERA_ASSIGN_OR_RETURN(
        sinks.emplace_back(),
        audit::FileSink::open((dir / "audit.log").string(), sink_options, s->clock));
    TESSERA_ASSIGN_OR_RETURN(s->auditor, audit::Auditor::create(std::move(sinks)));
    dopts.epoch = 1;
    TESSERA_ASSIGN_OR_RETURN(
        s->driver, server::SchedulerDriver::create(
                       catalogue, std::move(nodes), s->clock, std::move(dopts),
                       [self](const std::map<std::string, server::WorkloadStatus>& changed) {
                         return self->cp != nullptr ? self->cp->onDriverChanges(changed)
                                                    : core::Status::ok();
                       }));
    server::ControlPlaneOptions copts;
    // Virtual time stands still between passes: no admission bucket would refill.
    copts.tenant_rate_per_s = 1e9;
    copts.tenant_burst = 1e9;
    copts.default_max_workloads = 10'000'000;
    copts.default_max_pending = 10'000'000;
    copts.tokens.max_ttl = std::chrono::hours(24 * 365 * 10);
    TESSERA_ASSIGN_OR_RETURN(
        s->cp, server::ControlPlane::open(*s->store, *s->auditor, *s->driver, catalogue, s->clock,
                                          copts, nullptr));
    TESSERA_ASSIGN_OR_RETURN(server::CreatedToken root, s->cp->bootstrapRootToken());
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<server::CertAuthority> ca,
                             server::CertAuthority::create("tessera sim", std::chrono::hours(24)));
    TESSERA_ASSIGN_OR_RETURN(server::IssuedCert leaf,
                             ca->issue("localhost", {"localhost"}, {"127.0.0.1"}, false));
    TESSERA_RETURN_IF_ERROR(writeFile(dir / "ca.pem", ca->certPem()));
    TESSERA_RETURN_IF_ERROR(writeFile(dir / "cert.pem", leaf.cert_pem));
    TESSERA_RETURN_IF_ERROR(writeFile(dir / "key.pem", leaf.key_pem));
    server::ListenerConfig listener;
    listener.address = "127.0.0.1:0";
    listener.tls_cert_file = (dir / "cert.pem").string();
    listener.tls_key_file = (dir / "key.pem").string();
    s->listeners = {listener};
    TESSERA_ASSIGN_OR_RETURN(
        s->http,
        server::HttpServer::create(
            s->listeners,
            [self](const server::HttpRequest& r, server::Reply reply) {
              self->cp->handle(r, self->listeners, std::move(reply));
            },
            [self](const server::HttpRequest& r) { return self->cp->admit(r, self->listeners); },
            [self](const server::HttpRequest& head) {
              return server::bodyAllowance(head, self->listeners);
            }));
    s->http->start(1, 4);
    s->cc.address = "https://127.0.0.1:" + std::to_string(s->http->ports()[0]);
    s->cc.ca_cert_file = (dir / "ca.pem").string();
    s->cc.token = root.secret;
    TESSERA_ASSIGN_OR_RETURN(s->admin, ApiClient::create(s->cc));
    return s;
  }
};

}  // namespace

core::Result<sim::ScenarioResult> runScenarioThroughApi(const sim::Scenario& sc,
                                                        const std::string& work_dir) {
  if (sc.tenants.empty()) {
    return core::invalidArgument(
        "--through-api runs scenarios with \"tenants\" (the server knows tenants, not queue "
        "trees); see sim/scenario.h");
  }
  for (const sim::ScenarioWorkload& w : sc.workloads) {
    if (w.duration <= core::Duration::zero()) {
      return core::invalidArgument("workload '" + w.spec.name +
                                   "': duration 0 means \"until cancelled\" to the server, and "
                                   "\"done at once\" to the simulator; give it a duration");
    }
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<InProcessServer> srv,
                           InProcessServer::start(work_dir, sc.catalogue, sc.nodes, [&] {
                             server::DriverOptions dopts;
                             dopts.scheduler = sc.options;
                             dopts.typical = sim::typicalShapes(sc);
                             dopts.simulate_grace = true;
                             return dopts;
                           }()));
  core::FakeClock& clock = srv->clock;
  const core::TimePoint t0 = clock.now();
  server::SchedulerDriver* driver = srv->driver.get();
  ApiClient* admin = srv->admin.get();
  const ClientConfig& cc = srv->cc;

  // Tenants, their team queues and a token each, in the scenario's order (the order decides
  // the scheduler's queue and tenant numbers, as the simulator's).
  std::map<std::string, std::unique_ptr<ApiClient>> clients;
  std::vector<std::string> leaves;  // In the tree's order, as the simulator writes them.
  for (const sim::ScenarioTenant& t : sc.tenants) {
    auto where = [&](const std::string& what) { return "tenant '" + t.name + "': " + what; };
    TESSERA_RETURN_IF_ERROR(
        admin->call("POST", "/v1/tenants/" + t.name, t.body).status().withContext(where("create")));
    leaves.push_back(t.name + "/default");
    for (const std::string& pool : t.pools) {
      TESSERA_RETURN_IF_ERROR(admin->call("POST", "/v1/sys/pools/" + pool, {{"tenant", t.name}})
                                  .status()
                                  .withContext(where("pool '" + pool + "'")));
    }
    for (const auto& [team, body] : t.queues) {
      TESSERA_RETURN_IF_ERROR(admin->call("POST", "/v1/tenants/" + t.name + "/queues/" + team, body)
                                  .status()
                                  .withContext(where("queue '" + team + "'")));
      leaves.push_back(t.name + "/" + team);
    }
    TESSERA_ASSIGN_OR_RETURN(json token, admin->call("POST", "/v1/auth/token/create",
                                                     {{"tenant", t.name},
                                                      {"policies", {"tenant-admin"}},
                                                      {"ttl", "87600h"},
                                                      {"display_name", "sim"}}));
    ClientConfig tc = cc;
    tc.token = token["auth"]["client_token"].get<std::string>();
    TESSERA_ASSIGN_OR_RETURN(clients[t.name], ApiClient::create(tc));
  }

  sim::ScenarioResult out;
  std::vector<Seen> seen;
  std::map<std::string, std::array<int64_t, 4>> last_row;
  size_t next = 0;
  int64_t waiting = 0;  // Pending tasks after the last pass.
  // Reads every workload that may still change through the API, and writes what changed.
  auto observe = [&](double t) -> core::Status {
    std::map<std::string, int64_t> pending;  // By leaf.
    for (Seen& w : seen) {
      if (w.done) {
        continue;
      }
      ApiClient& c = *clients.at(w.tenant);
      const std::string path = "/v1/tenants/" + w.tenant + "/workloads/" + w.name;
      TESSERA_ASSIGN_OR_RETURN(json got, c.call("GET", path));
      const json& status = got["data"]["status"];
      const json& tasks = status["tasks"];
      json events;  // Fetched once, if a task was evicted.
      for (size_t i = 0; i < tasks.size(); ++i) {
        const std::string state = tasks[i].value("state", "");
        const std::string node = tasks[i].value("node", "");
        if (w.tasks.size() <= i) {
          w.tasks.emplace_back("pending", "");
        }
        const auto& [was, was_on] = w.tasks[i];
        const std::string full = w.tenant + "/" + w.name;
        // Started in this pass: running now, or terminating already (one pass may start a task
        // and then evict it for another). A task that was stopping and runs again stopped and
        // was placed again within the pass (a moved task restarts at once).
        const bool started = (was != "running" && was != "terminating" &&
                              (state == "running" || state == "terminating")) ||
                             (was == "terminating" && state == "running");
        if (started) {
          out.events.push_back({t, "start", full, static_cast<int>(i), w.queue, node, ""});
        }
        const std::string on = started ? node : was_on;
        if (was == "running" && state == "finished") {
          out.events.push_back({t, "finish", full, static_cast<int>(i), w.queue, was_on, ""});
        } else if ((was == "running" || started) &&
                   (state == "terminating" || state == "pending")) {
          // The victim's event says who took the GPUs, naming this task and its node.
          if (events.is_null()) {
            TESSERA_ASSIGN_OR_RETURN(json e, c.call("GET", path + "/events"));
            events = e["data"]["events"];
          }
          const std::string tail = fmt::format("(task {} on node {})", i, on);
          std::string detail;
          for (auto e = events.rbegin(); e != events.rend(); ++e) {
            const std::string reason = e->value("reason", "");
            if (e->value("event", "") == "evicted" && reason.ends_with(tail)) {
              detail = reason;
              break;
            }
          }
          out.events.push_back({t, "evict", full, static_cast<int>(i), w.queue, on, detail});
          ++out.evictions;
        }
        w.tasks[i] = {state, node};
        if (state == "pending") {
          ++pending[w.queue];
        }
      }
      const std::string phase = status.value("phase", "");
      w.done = phase == "succeeded" || phase == "failed" || phase == "cancelled";
    }
    waiting = 0;
    for (const auto& [leaf, n] : pending) {
      waiting += n;
    }
    TESSERA_ASSIGN_OR_RETURN(json queues, admin->call("GET", "/v1/queues"));
    std::map<std::string, const json*> by_name;
    for (const json& q : queues["data"]["queues"]) {
      by_name[q.value("name", "")] = &q;
    }
    for (const std::string& leaf : leaves) {
      auto q = by_name.find(leaf);
      if (q == by_name.end()) {
        return core::internalError("GET /v1/queues does not list queue '" + leaf + "'");
      }
      const json& j = *q->second;
      const std::array<int64_t, 4> now{j.value("allocated_milli_gpu", int64_t{0}),
                                       j.value("fair_share_milli_gpu", int64_t{0}),
                                       j.value("quota_milli_gpu", int64_t{0}), pending[leaf]};
      auto [it, added] = last_row.try_emplace(leaf, std::array<int64_t, 4>{-1, -1, -1, -1});
      if (it->second != now) {
        it->second = now;
        out.tenants.push_back({t, leaf, now[0], now[1], now[2], now[3]});
      }
    }
    return core::Status::ok();
  };

  size_t next_update = 0;
  // Passes when reclaim patience may run out between events, at the same instants as the
  // simulator's (scenario_run.cc): after a pass that leaves work pending, one patience later.
  std::set<core::Duration> ticks;
  while (true) {
    std::optional<core::Duration> at;
    if (next < sc.workloads.size()) {
      at = sc.workloads[next].at;
    }
    if (next_update < sc.tenant_updates.size() &&
        (!at || sc.tenant_updates[next_update].at < *at)) {
      at = sc.tenant_updates[next_update].at;
    }
    if (std::optional<core::TimePoint> e = driver->nextSimulatedEvent()) {
      if (!at || *e - t0 < *at) {
        at = *e - t0;
      }
    }
    if (!at) {
      break;  // Nothing more will happen: a tick left alone is not waited for.
    }
    if (!ticks.empty() && *ticks.begin() < *at) {
      at = *ticks.begin();
    }
    ticks.erase(ticks.begin(), ticks.upper_bound(*at));
    clock.advance(*at - (clock.now() - t0));
    const double t = seconds(*at);
    // Tenant updates first, as the simulator applies them.
    for (; next_update < sc.tenant_updates.size() && sc.tenant_updates[next_update].at == *at;
         ++next_update) {
      const sim::ScenarioTenantUpdate& u = sc.tenant_updates[next_update];
      const std::string& name = sc.tenants[u.tenant].name;
      TESSERA_RETURN_IF_ERROR(
          admin->call("POST", "/v1/tenants/" + name, u.body)
              .status()
              .withContext(fmt::format("at {:.3f} s: tenant '{}': update", t, name)));
    }
    size_t posted = 0;
    for (; next < sc.workloads.size() && sc.workloads[next].at == *at; ++next) {
      const sim::ScenarioWorkload& w = sc.workloads[next];
      const std::string queue = sc.queues[w.spec.queue].name;
      auto r = clients.at(w.tenant)->call(
          "POST", "/v1/tenants/" + w.tenant + "/workloads/" + w.name, w.body);
      if (!r.isOk()) {
        out.events.push_back({t, "fail", w.spec.name, -1, queue, "", r.status().message()});
        ++out.failed_workloads;
        continue;
      }
      ++posted;
      seen.push_back({w.tenant, w.name, queue, {}, false});
      out.events.push_back(
          {t, "submit", w.spec.name, -1, queue, "",
           fmt::format("{} task(s), minAvailable {}", w.spec.tasks, w.spec.min_available)});
    }
    // The server hands submissions to the scheduler through its store's watch: wait for them.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (driver->queuedSubmits() < posted) {
      if (std::chrono::steady_clock::now() > deadline) {
        return core::internalError(fmt::format(
            "at {:.3f} s: {} submission(s) accepted, {} reached the scheduler within 30 s", t,
            posted, driver->queuedSubmits()));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    driver->runOnce();
    ++out.passes;
    TESSERA_RETURN_IF_ERROR(observe(t));
    if (!out.events.empty()) {
      out.makespan_s = out.events.back().time_s;  // A pass that did nothing ends nothing.
    }
    const bool more = next < sc.workloads.size() || next_update < sc.tenant_updates.size() ||
                      driver->nextSimulatedEvent().has_value();
    if (sc.options.reclaim_patience.count() > 0 && waiting > 0 && more) {
      ticks.insert(*at + sc.options.reclaim_patience);
    }
  }
  // Whatever is still pending can never run (as the simulator says it).
  for (const Seen& w : seen) {
    int pending = 0;
    for (const auto& [state, node] : w.tasks) {
      pending += state == "pending" ? 1 : 0;
    }
    if (pending == 0) {
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(
        json got,
        clients.at(w.tenant)->call("GET", "/v1/tenants/" + w.tenant + "/workloads/" + w.name));
    std::string reason = got["data"]["status"].value("reason", "");
    if (const size_t colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);  // "<reason name>: <message>"
    }
    out.events.push_back({out.makespan_s, "fail", w.tenant + "/" + w.name, -1, w.queue, "",
                          fmt::format("{} task(s) never started: {}", pending, reason)});
    ++out.failed_workloads;
  }
  return out;
}

}  // namespace tessera::cli

namespace tessera::cli {

core::Result<sim::RunResult> runOpenbThroughApi(const sim::OpenbExperiment& exp,
                                                const std::string& policy, uint64_t seed,
                                                double tune, const std::string& work_dir,
                                                bool given_typical, int max_moves,
                                                const sim::ProgressFn& progress) {
  if (exp.mig().layout != sim::MigLayout::kNone) {
    return core::invalidArgument("--through-api does not run MIG what-ifs (--mig)");
  }
  sim::RunResult result;
  result.policy = policy;
  result.seed = seed;
  // The same draws as OpenbExperiment::run: the tuned list, then the ranks.
  core::Rng rng(seed);
  result.pods = exp.tunedPods(rng, tune);
  const std::vector<model::Node>& nodes = exp.nodes();
  std::vector<uint32_t> rank(nodes.size());
  std::iota(rank.begin(), rank.end(), 0);
  rng.shuffle(std::span<uint32_t>(rank));
  std::vector<model::Node> ranked(nodes.size());
  std::map<std::string, uint32_t> index_of;  // Node name -> its index in the trace.
  for (size_t i = 0; i < nodes.size(); ++i) {
    ranked[rank[i]] = nodes[i];
    if (!index_of.emplace(nodes[i].name, static_cast<uint32_t>(i)).second) {
      return core::invalidArgument("two nodes are named '" + nodes[i].name + "'");
    }
  }
  server::DriverOptions dopts;
  sched::SchedulerOptions so;
  so.policy = policy;
  so.min_runtime = std::chrono::seconds(0);
  so.cpu_per_free_gpu_milli = exp.cpuPerFreeGpu();
  so.max_moves_per_pass = max_moves;
  dopts.scheduler = so;
  if (given_typical) {
    for (const sim::OpenbPod& pod : exp.pods()) {
      dopts.typical.push_back(pod.shape());
    }
  }
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<InProcessServer> srv,
      InProcessServer::start(work_dir, exp.catalogue(), std::move(ranked), std::move(dopts)));
  const std::string tenant = "openb";
  TESSERA_RETURN_IF_ERROR(
      srv->admin->call("POST", "/v1/tenants/" + tenant, json::object()).status());
  TESSERA_ASSIGN_OR_RETURN(json token, srv->admin->call("POST", "/v1/auth/token/create",
                                                        {{"tenant", tenant},
                                                         {"policies", {"tenant-admin"}},
                                                         {"ttl", "87600h"},
                                                         {"display_name", "sim"}}));
  ClientConfig tc = srv->cc;
  tc.token = token["auth"]["client_token"].get<std::string>();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> client, ApiClient::create(tc));

  const auto start = std::chrono::steady_clock::now();
  const int64_t capacity = exp.totalGpus() * core::kWholeGpu.value();
  int64_t arrived = 0;
  int64_t used = 0;
  std::vector<sim::PodEvent> events;
  events.reserve(result.pods.size());
  const model::GpuCatalogue& catalogue = exp.catalogue();
  for (size_t i = 0; i < result.pods.size(); ++i) {
    const sim::OpenbPod& pod = result.pods[i];
    arrived += pod.totalGpuMilli();
    json body = {{"cpuMilli", pod.cpu_milli}, {"memoryMiB", pod.memory_mib}};
    if (pod.num_gpu > 0) {
      json gpu = {{"count", pod.num_gpu}, {"milli", pod.gpu_milli}};
      if (!pod.models.empty()) {
        json models = json::array();
        for (model::GpuModelId m : pod.models) {
          models.push_back(catalogue.model(m).name);
        }
        gpu["models"] = std::move(models);
      }
      body["gpu"] = std::move(gpu);
    }
    const std::string path = fmt::format("/v1/tenants/{}/workloads/p{}", tenant, i);
    sim::PodOutcome out{static_cast<uint32_t>(i), -1, 0};
    auto posted = client->call("POST", path, body);
    bool placed = false;
    if (posted.isOk()) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (srv->driver->queuedSubmits() < 1) {
        if (std::chrono::steady_clock::now() > deadline) {
          return core::internalError(
              fmt::format("pod {}: accepted, but it did not reach the scheduler within 30 s", i));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      srv->driver->runOnce();
      TESSERA_ASSIGN_OR_RETURN(json got, client->call("GET", path));
      const json& task = got["data"]["status"]["tasks"][0];
      placed = task.value("state", "") == "running";
      if (placed) {
        auto node = index_of.find(task.value("node", ""));
        if (node == index_of.end()) {
          return core::internalError(fmt::format(
              "pod {}: the API says it runs on unknown node '{}'", i, task.value("node", "")));
        }
        out.node = static_cast<int32_t>(node->second);
        for (const json& g : task.value("gpus", json::array())) {
          out.gpus |= uint64_t{1} << g.get<int>();
        }
        used += pod.totalGpuMilli();
      } else {
        // Pending: with nothing departing it never runs; the experiment counts it failed. It is
        // gone before the next pod is tried (the cancel reaches the scheduler through the
        // store's watch, as a submission does).
        TESSERA_RETURN_IF_ERROR(client->call("DELETE", path).status());
        for (int tries = 0;; ++tries) {
          if (tries == 100'000) {
            return core::internalError(
                fmt::format("pod {}: deleted, but the scheduler did not cancel it", i));
          }
          srv->driver->runOnce();
          std::optional<server::WorkloadStatus> st =
              srv->driver->status(tenant, fmt::format("p{}", i));
          if (st && st->phase == server::WorkloadPhase::kCancelled) {
            break;
          }
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      }
    } else if (posted.status().code() == core::StatusCode::kInternal ||
               posted.status().code() == core::StatusCode::kUnavailable) {
      return posted.status().withContext(fmt::format("pod {}", i));
    }
    // Refused at admission (no node could ever hold it) is failed too.
    if (!placed) {
      ++result.failed;
      if (pod.num_gpu == 0 && arrived <= capacity) {
        ++result.cpu_only_failed_100;
      }
    }
    result.outcomes.push_back(out);
    events.push_back({arrived, used, 0});
    if (progress && (i % 256 == 0 || i + 1 == result.pods.size())) {
      progress(i + 1, result.pods.size());
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.curve = sim::binCurve(events, exp.totalGpus());
  result.served_curve = result.curve;
  return result;
}

}  // namespace tessera::cli
