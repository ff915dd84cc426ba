// GET /v1/sys/metrics and GET /v1/tenants/<t>/metrics from the real `tessera dev` (issue #23,
// Must show 2): the text parsed by a strict parser of the exposition format, its numbers moving
// with what happens (workloads placed, API calls, evictions, tokens), a tenant's view holding
// nothing of another tenant, and the Grafana dashboard referring only to metrics that exist.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>

#include "process.h"
#include "server/prometheus_test_util.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::slurp;
using tessera::integration::sourceDir;
using tessera::integration::waitFor;
using tessera::server::testing::parsePrometheusText;
using tessera::server::testing::PromText;
using ::testing::IsEmpty;

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-metrics-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"dev", "--data-dir", dir_.string(), "--addr", "127.0.0.1:0"},
        dir_ / "out.txt");
    ASSERT_TRUE(waitFor(
        [&] {
          if (!fs::exists(dir_ / "dev.json")) {
            return false;
          }
          dev_ = json::parse(slurp(dir_ / "dev.json"), nullptr, false);
          return dev_.is_object() && dev_.value("pid", 0) == server_->pid();
        },
        std::chrono::seconds(30)))
        << server_->output() << server_->errors();
    client_ = std::make_unique<Client>(dev_["address"].get<std::string>(),
                                       slurp(dev_["ca_cert"].get<std::string>()));
  }
  void TearDown() override {
    if (server_) {
      server_->stop(SIGTERM);
    }
    fs::remove_all(dir_);
  }

  std::string root() const { return dev_["root_token"]; }
  std::string demo() const { return dev_["tenant_token"]; }
  const Client& c() const { return *client_; }

  // A scrape of `path` with `token`, parsed; a format error fails the test.
  PromText scrape(const std::string& path, const std::string& token) {
    Response r = c().call("GET", path, token);
    EXPECT_EQ(r.status, 200U) << r.raw;
    PromText p = parsePrometheusText(r.raw);
    EXPECT_THAT(p.errors, IsEmpty()) << r.raw;
    last_text_ = r.raw;
    return p;
  }
  PromText fleet() { return scrape("/v1/sys/metrics", root()); }

  bool running(const std::string& tenant, const std::string& name, const std::string& token) {
    Response r = c().call("GET", "/v1/tenants/" + tenant + "/workloads/" + name, token);
    return r.status == 200 && r.body["data"]["status"].value("phase", "") == "running";
  }

  fs::path dir_;
  json dev_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
  std::string last_text_;
};

TEST_F(MetricsTest, FleetTenantViewsAndDashboard) {
  // The nodes come up (each in-process agent's first heartbeat): tessera_nodes says so.
  PromText before;
  ASSERT_TRUE(waitFor(
      [&] {
        before = fleet();
        return before.sum("tessera_nodes", {{"state", "ready"}}) == 3;
      },
      std::chrono::seconds(30)))
      << last_text_;
  EXPECT_EQ(before.sum("tessera_nodes"), 3);
  EXPECT_EQ(before.sum("tessera_nodes_cordoned"), 0);
  // Every family the docs promise is there, typed, with HELP.
  const std::map<std::string, std::string> promised = {
      {"tessera_nodes", "gauge"},
      {"tessera_nodes_cordoned", "gauge"},
      {"tessera_gpus", "gauge"},
      {"tessera_gpus_shared", "gauge"},
      {"tessera_gpu_allocated_gpus", "gauge"},
      {"tessera_gpu_shares", "gauge"},
      {"tessera_gpu_mig_slices", "gauge"},
      {"tessera_queue_allocated_gpus", "gauge"},
      {"tessera_queue_fair_share_gpus", "gauge"},
      {"tessera_queue_quota_gpus", "gauge"},
      {"tessera_queue_pending_gpus", "gauge"},
      {"tessera_workloads", "gauge"},
      {"tessera_evictions_total", "counter"},
      {"tessera_scheduler_pass_duration_seconds", "histogram"},
      {"tessera_scheduler_passes_total", "counter"},
      {"tessera_http_request_duration_seconds", "histogram"},
      {"tessera_tenant_http_requests_total", "counter"},
      {"tessera_tenant_http_request_seconds_total", "counter"},
      {"tessera_audit_records_total", "counter"},
      {"tessera_audit_bytes_total", "counter"},
      {"tessera_audit_flush_failures_total", "counter"},
      {"tessera_audit_flush_duration_seconds", "histogram"},
      {"tessera_tokens", "gauge"},
      {"tessera_tokens_expiring", "gauge"},
      {"tessera_leases", "gauge"},
      {"tessera_leases_expiring", "gauge"},
      {"tessera_workload_start_delay_seconds", "histogram"},
      {"tessera_workload_pending_age_seconds", "histogram"},
      {"tessera_queue_oldest_pending_seconds", "gauge"},
      {"tessera_node_gpus", "gauge"},
      {"tessera_node_allocated_gpus", "gauge"},
      {"tessera_secrets_initialized", "gauge"},
      {"tessera_secrets_sealed", "gauge"},
  };
  for (const auto& [name, type] : promised) {
    ASSERT_TRUE(before.families.contains(name)) << name << "\n" << last_text_;
    EXPECT_EQ(before.families.at(name).type, type) << name;
    EXPECT_FALSE(before.families.at(name).help.empty()) << name;
  }
  // dev's fleet: 2 DGX H100 (8 GPUs, two of one in MIG mode) and an 8 x A100 node, all free.
  EXPECT_EQ(before.sum("tessera_gpus"), 24);
  EXPECT_EQ(before.sum("tessera_gpus", {{"mode", "mig"}}), 2);
  EXPECT_EQ(before.sum("tessera_gpus", {{"state", "allocated"}}), 0);
  EXPECT_EQ(before.sum("tessera_gpu_allocated_gpus"), 0);
  // Passes are timed: the histogram's count is the passes run (read a moment apart, so >=).
  EXPECT_GT(before.sum("tessera_scheduler_pass_duration_seconds_count"), 0);
  EXPECT_GE(before.sum("tessera_scheduler_pass_duration_seconds_count"),
            before.sum("tessera_scheduler_passes_total") - 1);

  // A whole GPU, half a GPU and a MIG slice for the demo tenant.
  const json whole = {{"gpu", {{"count", 1}}}, {"cpuMilli", 1000}, {"duration", 600}};
  const json half = {{"gpu", {{"milli", 500}}}, {"cpuMilli", 1000}, {"duration", 600}};
  const json slice = {{"gpu", {{"mig", "3g.40gb"}}}, {"cpuMilli", 1000}, {"duration", 600}};
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/workloads/zq-whole", demo(), whole).status, 202U);
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/workloads/zq-half", demo(), half).status, 202U);
  ASSERT_EQ(c().call("POST", "/v1/tenants/demo/workloads/zq-slice", demo(), slice).status, 202U);
  ASSERT_TRUE(waitFor(
      [&] {
        return running("demo", "zq-whole", demo()) && running("demo", "zq-half", demo()) &&
               running("demo", "zq-slice", demo());
      },
      std::chrono::seconds(30)));
  PromText placed;
  ASSERT_TRUE(waitFor(
      [&] {
        placed = fleet();
        return placed.sum("tessera_gpus", {{"state", "allocated"}}) == 3;
      },
      std::chrono::seconds(10)))
      << last_text_;
  EXPECT_EQ(placed.sum("tessera_gpus", {{"mode", "mig"}, {"state", "allocated"}}), 1);
  EXPECT_EQ(placed.sum("tessera_gpus_shared"), 1);
  EXPECT_EQ(placed.sum("tessera_gpu_shares"), 1);
  EXPECT_EQ(placed.sum("tessera_gpu_mig_slices", {{"profile", "3g.40gb"}}), 1);
  EXPECT_GE(placed.sum("tessera_gpu_allocated_gpus"), 1.5);
  EXPECT_EQ(placed.sum("tessera_workloads", {{"phase", "running"}}), 3);
  EXPECT_GE(placed.sum("tessera_queue_allocated_gpus", {{"queue", "demo/default"}}), 1.5);
  EXPECT_EQ(placed.sum("tessera_gpus"), 24);  // Free + allocated: every GPU, once.
  // Issue #37, item 8: each start's wait since submission, per tenant and queue; each node's
  // allocation (together, the fleet's); the seal (dev's secrets are unsealed).
  EXPECT_GE(placed.sum("tessera_workload_start_delay_seconds_count",
                       {{"tenant", "demo"}, {"queue", "demo/default"}}),
            3);
  EXPECT_EQ(placed.sum("tessera_node_gpus"), 24);
  EXPECT_EQ(placed.sum("tessera_node_gpus", {{"node", "dgx-h100-0"}}), 8);
  EXPECT_DOUBLE_EQ(placed.sum("tessera_node_allocated_gpus"),
                   placed.sum("tessera_gpu_allocated_gpus"));
  EXPECT_GE(placed.sum("tessera_node_allocated_gpus"), 1.5);
  EXPECT_EQ(placed.sum("tessera_secrets_initialized"), 1);
  EXPECT_EQ(placed.sum("tessera_secrets_sealed"), 0);
  // The audit log wrote and flushed.
  EXPECT_GT(placed.sum("tessera_audit_records_total"), before.sum("tessera_audit_records_total"));
  EXPECT_GT(placed.sum("tessera_audit_bytes_total"), before.sum("tessera_audit_bytes_total"));
  EXPECT_GT(placed.sum("tessera_audit_flush_duration_seconds_count"), 0);

  // API calls move their route's count, labelled by the route's pattern, not the name.
  const std::map<std::string, std::string> route = {{"route", "tenant/workloads/{name}"},
                                                    {"code", "200"}};
  const double gets = placed.sum("tessera_http_request_duration_seconds_count", route);
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(c().call("GET", "/v1/tenants/demo/workloads/zq-whole", demo()).status, 200U);
  }
  PromText after_gets = fleet();
  EXPECT_EQ(after_gets.sum("tessera_http_request_duration_seconds_count", route), gets + 5);
  EXPECT_EQ(last_text_.find("zq-"), std::string::npos);  // No caller's name in a label.
  EXPECT_GT(after_gets.sum("tessera_tenant_http_requests_total", {{"tenant", "demo"}}), 5);

  // A token that expires within the hour shows; one for a day does not count in "1h". (Counted in
  // the tenant's view: the fleet's also holds the agents' node credentials, renewed meanwhile.)
  PromText demo_before = scrape("/v1/tenants/demo/metrics", demo());
  const double soon = demo_before.sum("tessera_tokens_expiring", {{"within", "1h"}});
  const double day = demo_before.sum("tessera_tokens_expiring", {{"within", "24h"}});
  const double live = demo_before.sum("tessera_tokens");
  Response tok = c().call("POST", "/v1/tenants/demo/auth/token/create", demo(),
                          {{"policies", {"tenant-admin"}}, {"ttl", "30m"}});
  ASSERT_EQ(tok.status, 200U) << tok.raw;
  tok = c().call("POST", "/v1/tenants/demo/auth/token/create", demo(),
                 {{"policies", {"tenant-admin"}}, {"ttl", "20h"}});
  ASSERT_EQ(tok.status, 200U) << tok.raw;
  PromText tokens = scrape("/v1/tenants/demo/metrics", demo());
  EXPECT_EQ(tokens.sum("tessera_tokens_expiring", {{"within", "1h"}}), soon + 1);
  EXPECT_EQ(tokens.sum("tessera_tokens_expiring", {{"within", "24h"}}), day + 2);
  EXPECT_EQ(tokens.sum("tessera_tokens"), live + 2);
  EXPECT_GE(fleet().sum("tessera_tokens_expiring", {{"within", "1h"}}), soon + 1);

  // Draining the whole GPU's node evicts its tasks: counted under "drained".
  Response w = c().call("GET", "/v1/tenants/demo/workloads/zq-whole", demo());
  const std::string node = w.body["data"]["status"]["tasks"][0].value("node", "");
  ASSERT_FALSE(node.empty()) << w.raw;
  const unsigned drain = c().call("POST", "/v1/nodes/" + node + "/drain", root()).status;
  ASSERT_TRUE(drain == 200U || drain == 204U) << drain;
  PromText drained;
  ASSERT_TRUE(waitFor(
      [&] {
        drained = fleet();
        return drained.sum("tessera_evictions_total", {{"reason", "drained"}}) >= 1;
      },
      std::chrono::seconds(10)))
      << last_text_;
  EXPECT_EQ(drained.sum("tessera_nodes_cordoned"), 1);
  EXPECT_EQ(drained.sum("tessera_evictions_total", {{"reason", "preempted"}}), 0);

  // Another tenant, with work of its own.
  Response r = c().call("POST", "/v1/tenants/team-b", root(), {{"quota", {{"gpu", 4}}}});
  ASSERT_EQ(r.status, 204U) << r.raw;
  r = c().call("POST", "/v1/auth/token/create", root(),
               {{"tenant", "team-b"}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}});
  ASSERT_EQ(r.status, 200U) << r.raw;
  const std::string b = r.body["auth"]["client_token"];
  ASSERT_EQ(c().call("POST", "/v1/tenants/team-b/workloads/bee", b, whole).status, 202U);
  ASSERT_TRUE(waitFor([&] { return running("team-b", "bee", b); }, std::chrono::seconds(30)));

  // Each tenant's view: its own numbers, nothing of the other, none of the fleet's.
  PromText mine = scrape("/v1/tenants/demo/metrics", demo());
  const std::string mine_text = last_text_;
  EXPECT_EQ(mine_text.find("team-b"), std::string::npos) << mine_text;
  for (const char* fleet_only :
       {"tessera_nodes", "tessera_gpus", "tessera_scheduler_pass_duration_seconds",
        "tessera_audit_records_total", "tessera_tenant_http_requests_total"}) {
    EXPECT_FALSE(mine.families.contains(fleet_only)) << fleet_only;
  }
  for (const auto& s : mine.families.at("tessera_queue_allocated_gpus").samples) {
    EXPECT_TRUE(s.labels.at("queue") == "demo" || s.labels.at("queue").starts_with("demo/"))
        << s.labels.at("queue");
  }
  EXPECT_GE(mine.sum("tessera_evictions_total", {{"reason", "drained"}}), 1);
  EXPECT_EQ(mine.sum("tessera_workloads"), 3);
  EXPECT_GT(mine.sum("tessera_http_request_duration_seconds_count", route), 5);
  EXPECT_EQ(mine.sum("tessera_tokens_expiring", {{"within", "1h"}}), soon + 1);

  PromText theirs = scrape("/v1/tenants/team-b/metrics", b);
  const std::string theirs_text = last_text_;
  EXPECT_EQ(theirs_text.find("demo"), std::string::npos) << theirs_text;
  EXPECT_EQ(theirs.sum("tessera_evictions_total"), 0);  // The drain was demo's.
  EXPECT_EQ(theirs.sum("tessera_workloads"), 1);
  EXPECT_EQ(theirs.sum("tessera_gpu_allocated_gpus"), 1);  // bee's GPU, not demo's.
  EXPECT_EQ(theirs.sum("tessera_gpu_shares"), 0);
  EXPECT_EQ(theirs.sum("tessera_tokens"), 1);  // The one made above.
  EXPECT_GE(theirs.sum("tessera_workload_start_delay_seconds_count",
                       {{"tenant", "team-b"}, {"queue", "team-b/default"}}),
            1);
  // Work that waits (team-b now at its limit of 1 GPU, which bee holds) shows in the pending
  // age, growing, in its queue.
  r = c().call("POST", "/v1/tenants/team-b", root(),
               {{"quota", {{"gpu", 1}}}, {"limit", {{"gpu", 1}}}});
  ASSERT_EQ(r.status, 204U) << r.raw;
  r = c().call("POST", "/v1/tenants/team-b/workloads/waits", b, whole);
  ASSERT_EQ(r.status, 202U) << r.raw;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  PromText waiting = scrape("/v1/tenants/team-b/metrics", b);
  const std::map<std::string, std::string> b_queue = {{"tenant", "team-b"},
                                                      {"queue", "team-b/default"}};
  EXPECT_EQ(waiting.sum("tessera_workload_pending_age_seconds_count", b_queue), 1) << last_text_;
  EXPECT_GE(waiting.sum("tessera_queue_oldest_pending_seconds", b_queue), 1) << last_text_;
  EXPECT_EQ(c().call("DELETE", "/v1/tenants/team-b/workloads/waits", b).status, 204U);
  // Its requests only: demo's GETs of workloads/{name} are not in it.
  EXPECT_LT(theirs.sum("tessera_http_request_duration_seconds_count", route),
            mine.sum("tessera_http_request_duration_seconds_count", route));

  // A tenant token reads neither the fleet's metrics nor another tenant's view: both are outside
  // its tenant, which the server answers 404, never 403 (it does not say what exists there).
  EXPECT_EQ(c().call("GET", "/v1/sys/metrics", demo()).status, 404U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/team-b/metrics", demo()).status, 404U);
  EXPECT_EQ(c().call("GET", "/v1/tenants/demo/metrics", b).status, 404U);
  // A tenant token without read on `metrics` is refused its own view too.
  r = c().call("POST", "/v1/tenants/team-b/policies/nothing", b,
               {{"path", {{"workloads/*", {{"capabilities", {"read"}}}}}}});
  ASSERT_EQ(r.status / 100, 2U) << r.raw;
  r = c().call("POST", "/v1/auth/token/create", root(),
               {{"tenant", "team-b"}, {"policies", {"nothing"}}, {"ttl", "10m"}});
  ASSERT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(c().call("GET", "/v1/tenants/team-b/metrics", r.body["auth"]["client_token"]).status,
            403U);
  // The operator may read a tenant's view.
  EXPECT_EQ(c().call("GET", "/v1/tenants/team-b/metrics", root()).status, 200U);

  // The Grafana dashboard: valid JSON whose every expression names metrics that exist.
  PromText now = fleet();
  const std::set<std::string> names = now.names();
  const fs::path path = fs::path(sourceDir()) / "docs/grafana/tessera-dashboard.json";
  const json dash = json::parse(slurp(path), nullptr, false);
  ASSERT_TRUE(dash.is_object()) << path << " is not valid JSON";
  ASSERT_TRUE(dash.contains("panels") && dash["panels"].is_array());
  std::vector<std::string> exprs;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (const auto& [k, v] : j.items()) {
        if (k == "expr" && v.is_string()) {
          exprs.push_back(v.get<std::string>());
        }
        walk(v);
      }
    } else if (j.is_array()) {
      for (const auto& v : j) {
        walk(v);
      }
    }
  };
  walk(dash["panels"]);
  EXPECT_GE(exprs.size(), 12U);
  std::set<std::string> used;
  const std::regex metric(R"(tessera_[a-zA-Z0-9_:]*)");
  for (const std::string& e : exprs) {
    for (auto it = std::sregex_iterator(e.begin(), e.end(), metric); it != std::sregex_iterator();
         ++it) {
      used.insert(it->str());
    }
  }
  for (const std::string& m : used) {
    EXPECT_TRUE(names.contains(m)) << "the dashboard uses " << m << ", which the server lacks";
  }
  // The histograms are read as histograms.
  const std::string all = json(exprs).dump();
  EXPECT_NE(all.find("histogram_quantile"), std::string::npos);
  for (const char* h : {"tessera_http_request_duration_seconds_bucket",
                        "tessera_scheduler_pass_duration_seconds_bucket",
                        "tessera_audit_flush_duration_seconds_bucket"}) {
    EXPECT_TRUE(used.contains(h)) << h;
  }
}

}  // namespace
