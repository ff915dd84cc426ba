// The CLI habits of issue #23 through the real binary, as a user runs it: `tessera dev` (agents
// running real processes) started by the suite, the commands run with TESSERA_ADDR,
// TESSERA_TOKEN and TESSERA_CACERT. `--gpus 0.5`, multi-value flags before `--`, `--env`,
// `--identity-audience`, `run --wait`, `logs --tail`, `ps --phase` in one request, `top
// --watch`, `nodes`' STATE, token roles (a tenant admin's narrower tokens, and every refusal),
// the admin-command hint, `doctor`'s exit status, completion, `version`, `server -validate`
// and client certificates (TESSERA_CLIENT_CERT/KEY) on a listener that requires them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process.h"
#include "server/acl.h"
#include "server/certs.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::binary;
using tessera::integration::Client;
using tessera::integration::Dev;
using tessera::integration::Outcome;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::runArgv;
using tessera::integration::slurp;
using tessera::integration::sourceDir;
using tessera::integration::waitFor;

json parsed(const Outcome& o) { return json::parse(o.out, nullptr, false); }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) {
    ++n;
  }
  return n;
}

// One `tessera dev` with one simulated DGX run by an in-process agent (tasks are real
// processes) for the suite; each test uses its own tenants, names and HOME.
class CliHabitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dev_ = new Dev(fs::temp_directory_path() / ("tessera-habits-" + std::to_string(::getpid())),
                   {"--nodes", "dgx-h100:1"});
  }
  static void TearDownTestSuite() {
    delete dev_;
    dev_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(dev_->up()) << dev_->logs();
    home_ = dev_->dir / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(home_);
  }

  std::string address() const { return dev_->info["address"]; }
  std::string caCert() const { return dev_->info["ca_cert"]; }
  std::string root() const { return dev_->info["root_token"]; }
  std::string caPem() const { return slurp(caCert()); }

  std::map<std::string, std::string> envFor(const std::string& token) const {
    std::map<std::string, std::string> env = {
        {"TESSERA_ADDR", address()}, {"TESSERA_CACERT", caCert()}, {"HOME", home_.string()}};
    if (!token.empty()) {
      env["TESSERA_TOKEN"] = token;
    }
    return env;
  }
  Outcome as(const std::string& token, std::vector<std::string> args,
             std::chrono::milliseconds stop_after = std::chrono::milliseconds(0)) const {
    args.insert(args.begin(), binary());
    return runArgv(args, envFor(token), home_, stop_after);
  }

  // A tenant and a tenant-admin token for it (1 h), through the commands.
  std::string tenantWithToken(const std::string& name) {
    Outcome created = as(root(), {"tenant", "create", name, "--quota-gpu", "8"});
    EXPECT_EQ(created.rc, 0) << created;
    Outcome token = as(root(), {"token", "create", "--tenant", name, "--policy", "tenant-admin",
                                "--ttl", "1h", "-format=json"});
    EXPECT_EQ(token.rc, 0) << token;
    return parsed(token)["auth"].value("client_token", "");
  }

  json spec(const std::string& token, const std::string& name) {
    Outcome shown = as(token, {"show", name, "-format=json"});
    EXPECT_EQ(shown.rc, 0) << shown;
    return parsed(shown).value("spec", json::object());
  }

  // Writes a policy file in HOME and uploads it into the token's tenant.
  void writePolicy(const std::string& token, const std::string& name, const std::string& hcl) {
    const fs::path file = home_ / (name + ".hcl");
    std::ofstream(file) << hcl;
    Outcome w = as(token, {"policy", "write", name, file.string()});
    ASSERT_EQ(w.rc, 0) << w;
  }

  static inline Dev* dev_ = nullptr;
  fs::path home_;
};

TEST_F(CliHabitsTest, GpusTakesAFractionOfOneGpuAndSaysWhyNotMore) {
  const std::string t = tenantWithToken("gpus");
  Outcome half = as(t, {"run", "half", "--gpus", "0.5", "--duration", "1", "--", "true"});
  ASSERT_EQ(half.rc, 0) << half;
  const json h = spec(t, "half");
  EXPECT_EQ(h["gpu"].value("milli", 0), 500) << h;  // As --gpu-milli 500.
  EXPECT_FALSE(h["gpu"].contains("count")) << h;
  Outcome two = as(t, {"run", "two", "--gpus", "2", "--", "true"});
  ASSERT_EQ(two.rc, 0) << two;
  EXPECT_EQ(spec(t, "two")["gpu"].value("count", 0), 2);  // Unchanged.
  Outcome milli = as(t, {"run", "quarter", "--gpus", ".25", "--", "true"});
  ASSERT_EQ(milli.rc, 0) << milli;
  EXPECT_EQ(spec(t, "quarter")["gpu"].value("milli", 0), 250);

  Outcome one_and_half = as(t, {"run", "bad", "--gpus", "1.5", "--", "true"});
  EXPECT_EQ(one_and_half.rc, 2) << one_and_half;
  EXPECT_TRUE(contains(one_and_half.err, "--gpus 1.5: a fraction is possible only below one GPU"))
      << one_and_half;
  Outcome both = as(t, {"run", "bad", "--gpus", "0.5", "--gpu-milli", "300", "--", "true"});
  EXPECT_EQ(both.rc, 2) << both;
  EXPECT_TRUE(contains(both.err, "use one")) << both;
  for (const char* wrong : {"abc", "0.0001", "-1", "1.", ""}) {
    Outcome o = as(t, {"run", "bad", "--gpus", wrong, "--", "true"});
    EXPECT_EQ(o.rc, 2) << wrong << "\n" << o;
    EXPECT_TRUE(contains(o.err, "--gpus")) << wrong << "\n" << o;
  }
  // A burst limit over a time-sliced share (#41); refused, naming the field, over an MPS one.
  Outcome burst = as(t, {"run", "burst", "--gpus", "0.3", "--gpu-milli-limit", "900", "--isolation",
                         "none", "--duration", "1", "--", "true"});
  ASSERT_EQ(burst.rc, 0) << burst;
  EXPECT_EQ(spec(t, "burst")["gpu"].value("milliLimit", 0), 900);
  Outcome mps = as(t, {"run", "bad", "--gpus", "0.3", "--gpu-milli-limit", "900", "--", "true"});
  EXPECT_NE(mps.rc, 0) << mps;
  EXPECT_TRUE(contains(mps.err, "gpu.milliLimit")) << mps;
  EXPECT_EQ(as(t, {"show", "bad"}).rc, 1);  // None of them was submitted.
}

TEST_F(CliHabitsTest, MultiValueFlagsLeaveTheCommandAfterTheDashesAlone) {
  const std::string t = tenantWithToken("multi");
  // The issue's own example, which failed on `-c` before.
  Outcome o = as(t, {"run", "kv", "--secret-kv", "app/config", "--", "sh", "-c", "true"});
  ASSERT_EQ(o.rc, 0) << o;
  json s = spec(t, "kv");
  EXPECT_EQ(s["command"], json({"sh", "-c", "true"})) << s;
  EXPECT_EQ(s["secrets"]["kv"], json({"app/config"})) << s;
  // Repeated, comma lists, and several list flags in a row, before a command with its own flags.
  o = as(t, {"run", "many", "--secret-kv", "a/b", "--secret-kv", "c/d,e/f", "--secret-db", "reader",
             "--model", "H100", "--", "sh", "-c", "echo -n x", "--tail"});
  ASSERT_EQ(o.rc, 0) << o;
  s = spec(t, "many");
  EXPECT_EQ(s["command"], json({"sh", "-c", "echo -n x", "--tail"})) << s;
  EXPECT_EQ(s["secrets"]["kv"], json({"a/b", "c/d", "e/f"})) << s;
  EXPECT_EQ(s["secrets"]["db"], json({"reader"})) << s;
  EXPECT_EQ(s["gpu"]["models"], json({"H100"})) << s;
  // `token create --policy a --policy b` still gathers both (an admin-side list flag).
  Outcome tok = as(root(), {"token", "create", "--tenant", "multi", "--policy", "tenant-admin",
                            "--policy", "tenant-admin", "--ttl", "5m", "-format=json"});
  ASSERT_EQ(tok.rc, 0) << tok;
}

// Issue #37, item 5: an operator's view across tenants (`ps -A`, `nodes` with allocation per
// node and per GPU), and a finished task that keeps its node, GPU indexes, times and exit code.
TEST_F(CliHabitsTest, OperatorsSeeEveryTenantAndFinishedTasksKeepTheirGpus) {
  const std::string a = tenantWithToken("opview-a");
  const std::string b = tenantWithToken("opview-b");
  ASSERT_EQ(
      as(a, {"run", "train", "--gpus", "1", "--wait", "--interval", "0.1", "--", "sleep", "60"}).rc,
      0);
  ASSERT_EQ(
      as(b, {"run", "serve", "--gpus", "1", "--wait", "--interval", "0.1", "--", "sleep", "60"}).rc,
      0);
  Outcome crashed = as(a, {"run", "crash", "--gpus", "1", "--", "sh", "-c", "sleep 0.5; exit 3"});
  ASSERT_EQ(crashed.rc, 0) << crashed;

  // ps -A: both tenants' workloads, each with its tenant; a tenant's token is told why not.
  Outcome all = as(root(), {"ps", "-A"});
  ASSERT_EQ(all.rc, 0) << all;
  EXPECT_TRUE(std::regex_search(all.out, std::regex(R"(^TENANT\s+NAME\s+PHASE)"))) << all;
  EXPECT_TRUE(std::regex_search(all.out, std::regex(R"(\nopview-a\s+train\s+running)"))) << all;
  EXPECT_TRUE(std::regex_search(all.out, std::regex(R"(\nopview-b\s+serve\s+running)"))) << all;
  Outcome all_json = as(root(), {"ps", "-A", "--phase", "running", "-format=json"});
  ASSERT_EQ(all_json.rc, 0) << all_json;
  std::set<std::string> seen;
  for (const json& w : parsed(all_json)) {
    seen.insert(w.value("tenant", "") + "/" + w.value("name", ""));
    EXPECT_EQ(w["status"]["phase"], "running") << w;
  }
  EXPECT_TRUE(seen.contains("opview-a/train") && seen.contains("opview-b/serve")) << all_json;
  Outcome refused = as(a, {"ps", "-A"});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_TRUE(contains(refused.err, "operator's token")) << refused;

  // nodes: GPUs allocated of all, the sum of each GPU's; per GPU, who (operators: everyone).
  // The table and the JSON agree. Tasks of earlier tests on this server may end between the two
  // commands, so a pair taken while the allocation changed is taken again.
  Outcome table;
  int64_t sum = 0;
  int64_t in_table = -1;
  for (int attempt = 0; attempt < 5 && in_table != sum; ++attempt) {
    Outcome nodes_json = as(root(), {"nodes", "-format=json"});
    ASSERT_EQ(nodes_json.rc, 0) << nodes_json;
    const json node = parsed(nodes_json).at(0);
    sum = 0;
    for (const json& d : node["devices"]) {
      sum += d["allocated_milli"].get<int64_t>();
    }
    EXPECT_GE(node["allocated_milli_gpu"].get<int64_t>(), 2000) << node;
    EXPECT_EQ(node["allocated_milli_gpu"].get<int64_t>(), sum) << node;
    table = as(root(), {"nodes"});
    ASSERT_EQ(table.rc, 0) << table;
    EXPECT_TRUE(contains(table.out, "ALLOCATED")) << table;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(table.out, m,
                                  std::regex(R"(dgx-h100-0\s+ready\s+8x \S+\s+([0-9.]+)/8\s)")))
        << table;
    in_table = std::llround(std::stod(m[1]) * 1000);
  }
  EXPECT_EQ(in_table, sum) << table;
  Outcome per_gpu = as(root(), {"nodes", "--gpus"});
  ASSERT_EQ(per_gpu.rc, 0) << per_gpu;
  EXPECT_TRUE(contains(per_gpu.out, "opview-a/train.0")) << per_gpu;
  EXPECT_TRUE(contains(per_gpu.out, "opview-b/serve.0")) << per_gpu;
  // A tenant sees how full each GPU is, and only its own tasks by name.
  Outcome mine = as(a, {"nodes", "--gpus"});
  ASSERT_EQ(mine.rc, 0) << mine;
  EXPECT_TRUE(contains(mine.out, "opview-a/train.0")) << mine;
  EXPECT_FALSE(contains(mine.out, "opview-b")) << mine;

  // The crashed task keeps where it ran and how it ended.
  json task;
  ASSERT_TRUE(waitFor(
      [&] {
        Outcome shown = as(a, {"show", "crash", "-format=json"});
        const json st = parsed(shown).value("status", json::object());
        if (st.value("phase", "") != "failed") {
          return false;
        }
        task = st["tasks"].at(0);
        return true;
      },
      std::chrono::seconds(30)));
  EXPECT_EQ(task.value("state", ""), "finished") << task;
  EXPECT_EQ(task.value("node", ""), "dgx-h100-0") << task;
  ASSERT_TRUE(task.contains("gpus")) << task;
  EXPECT_EQ(task["gpus"].size(), 1U) << task;
  EXPECT_EQ(task.value("exit_code", -1), 3) << task;
  EXPECT_FALSE(task.value("started_at", "").empty()) << task;
  EXPECT_GE(task.value("finished_at", ""), task.value("started_at", "")) << task;
  for (const char* w : {"train", "crash"}) {
    as(a, {"cancel", w});
  }
  as(b, {"cancel", "serve"});
}

TEST_F(CliHabitsTest, EnvAndIdentityAudienceReachTheSpec) {
  const std::string t = tenantWithToken("envs");
  Outcome o =
      as(t, {"run", "e", "--env", "A=1", "--env", "B=x=y", "--env", "EMPTY=", "--identity-audience",
             "sts.amazonaws.com", "--identity-audience", "vault", "--", "true"});
  ASSERT_EQ(o.rc, 0) << o;
  const json s = spec(t, "e");
  EXPECT_EQ(s["env"], json({{"A", "1"}, {"B", "x=y"}, {"EMPTY", ""}})) << s;
  EXPECT_EQ(s["identity"]["audiences"], json({"sts.amazonaws.com", "vault"})) << s;
  for (const char* wrong : {"NOEQUALS", "=v"}) {
    Outcome bad = as(t, {"run", "e2", "--env", wrong, "--", "true"});
    EXPECT_EQ(bad.rc, 2) << bad;
    EXPECT_TRUE(contains(bad.err, "expected NAME=VALUE")) << bad;
  }
}

TEST_F(CliHabitsTest, RunWaitFollowsToRunningOrSaysWhyItFailed) {
  const std::string t = tenantWithToken("waits");
  Outcome ok = as(t, {"run", "sleeper", "--wait", "--interval", "0.1", "--", "sleep", "30"});
  ASSERT_EQ(ok.rc, 0) << ok;
  EXPECT_TRUE(std::regex_search(ok.out, std::regex(R"(==> \S+ running)"))) << ok;
  // It returned once running: the workload still runs.
  Outcome shown = as(t, {"show", "sleeper", "-format=json"});
  EXPECT_EQ(parsed(shown)["status"]["phase"], "running") << shown;
  // A task that cannot start (its KV secret does not exist) fails: exit 1 with the reason.
  Outcome bad = as(t, {"run", "nosecret", "--wait", "--interval", "0.1", "--secret-kv",
                       "missing/thing", "--", "true"});
  EXPECT_EQ(bad.rc, 1) << bad;
  EXPECT_TRUE(contains(bad.err, "workload 'nosecret' failed: ")) << bad;
  EXPECT_TRUE(contains(bad.err, "missing/thing")) << bad;
  EXPECT_TRUE(contains(bad.out, "failed")) << bad;
  // Work beyond the tenant's GPU limit stays pending: --wait-timeout gives up, saying so.
  ASSERT_EQ(as(root(), {"tenant", "update", "waits", "--quota-gpu", "1", "--limit-gpu", "1"}).rc,
            0);
  // Placed (so counted against the limit) at once: no need to wait for it to start.
  Outcome first = as(t, {"run", "one", "--gpus", "1", "--", "sleep", "30"});
  ASSERT_EQ(first.rc, 0) << first;
  Outcome stuck = as(t, {"run", "two", "--gpus", "1", "--wait", "--wait-timeout", "1", "--interval",
                         "0.1", "--", "true"});
  EXPECT_EQ(stuck.rc, 1) << stuck;
  EXPECT_TRUE(contains(stuck.err, "workload 'two' is still pending after 1 s")) << stuck;
  for (const char* name : {"sleeper", "one", "two"}) {
    EXPECT_EQ(as(t, {"cancel", name}).rc, 0);
  }
}

TEST_F(CliHabitsTest, LogsTailPrintsTheLastLines) {
  const std::string t = tenantWithToken("tails");
  Outcome o = as(t, {"run", "count", "--wait", "--interval", "0.1", "--", "sh", "-c",
                     "for i in $(seq 1 50); do echo line $i; done"});
  ASSERT_EQ(o.rc, 0) << o;
  ASSERT_TRUE(waitFor(
      [&] {
        return contains(as(t, {"ps", "--phase", "succeeded"}).out, "count");
      },
      std::chrono::seconds(20)));
  Outcome all = as(t, {"logs", "count"});
  ASSERT_EQ(all.rc, 0) << all;
  EXPECT_EQ(count(all.out, "\n"), 50U) << all;
  Outcome tail = as(t, {"logs", "count", "--tail", "3"});
  ASSERT_EQ(tail.rc, 0) << tail;
  EXPECT_EQ(tail.out, "line 48\nline 49\nline 50\n") << tail;
  EXPECT_EQ(as(t, {"logs", "count", "-n", "0"}).out, "");
  EXPECT_EQ(count(as(t, {"logs", "count", "--tail", "500"}).out, "\n"), 50U);
  EXPECT_EQ(as(t, {"logs", "count", "--tail", "-2"}).rc, 2);
}

TEST_F(CliHabitsTest, PsFiltersByPhaseInOneRequest) {
  const std::string t = tenantWithToken("psone");
  // Submitted together, so that their tasks start (a couple of seconds each) side by side.
  for (const char* name : {"run-a", "run-b"}) {
    Outcome o = as(t, {"run", name, "--", "sleep", "30"});
    ASSERT_EQ(o.rc, 0) << o;
  }
  Outcome f = as(t, {"run", "fails", "--secret-kv", "no/such", "--", "true"});
  ASSERT_EQ(f.rc, 0) << f;
  ASSERT_TRUE(waitFor(
      [&] {
        return contains(as(t, {"ps", "--phase", "failed"}).out, "fails");
      },
      std::chrono::seconds(20)));

  const fs::path audit = dev_->dir / "audit.log";
  const std::string list_path = R"("method":"LIST","path":"tenants/psone/workloads")";
  const std::string get_path = R"("path":"tenants/psone/workloads/)";
  const size_t lists_before = count(slurp(audit), list_path);
  const size_t gets_before = count(slurp(audit), get_path);
  Outcome running = as(t, {"ps", "--phase", "running", "-format=json"});
  ASSERT_EQ(running.rc, 0) << running;
  std::vector<std::string> names;
  for (const json& w : parsed(running)) {
    names.push_back(w.value("name", ""));
    EXPECT_EQ(w["status"]["phase"], "running") << running;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"run-a", "run-b"})) << running;
  Outcome failed = as(t, {"ps", "--phase", "failed"});
  ASSERT_EQ(failed.rc, 0) << failed;
  EXPECT_TRUE(contains(failed.out, "fails")) << failed;
  EXPECT_FALSE(contains(failed.out, "run-a")) << failed;
  EXPECT_TRUE(contains(as(t, {"ps", "--phase", "pending"}).out, "No pending workloads"));
  EXPECT_EQ(as(t, {"ps", "--phase", "sleeping"}).rc, 2);

  // One request per `ps`, however many workloads: in the audit log (a request and a response
  // record each), four LISTs for the four `ps` above and no GET of a single workload.
  Outcome marker = as(t, {"token", "lookup"});  // Its records follow the ones counted.
  ASSERT_EQ(marker.rc, 0) << marker;
  ASSERT_TRUE(waitFor([&] { return contains(slurp(audit), "auth/token/lookup-self"); },
                      std::chrono::seconds(5)));
  const std::string after = slurp(audit);
  EXPECT_EQ(count(after, list_path) - lists_before, 2U * 3U) << "three ps with a valid --phase";
  EXPECT_EQ(count(after, get_path), gets_before);

  // The API: the keys as before, and with ?detail=true each workload's status.
  const Client c(address(), caPem());
  Response plain = c.call("LIST", "/v1/tenants/psone/workloads", t);
  ASSERT_EQ(plain.status, 200U) << plain.raw;
  EXPECT_EQ(plain.body["data"]["keys"].size(), 3U) << plain.raw;
  EXPECT_FALSE(plain.body["data"].contains("workloads")) << plain.raw;
  Response detail = c.call("GET", "/v1/tenants/psone/workloads?list=true&detail=true", t);
  ASSERT_EQ(detail.status, 200U) << detail.raw;
  ASSERT_EQ(detail.body["data"]["workloads"].size(), 3U) << detail.raw;
  EXPECT_EQ(detail.body["data"]["workloads"][2]["status"]["phase"], "running") << detail.raw;

  // A token that may list but read only run-a's record sees only run-a in the details.
  writePolicy(t, "lister",
              "path \"workloads\" { capabilities = [\"list\"] }\n"
              "path \"workloads/run-a\" { capabilities = [\"read\"] }\n");
  Outcome narrow = as(root(), {"token", "create", "--tenant", "psone", "--policy", "lister",
                               "--ttl", "5m", "-format=json"});
  ASSERT_EQ(narrow.rc, 0) << narrow;
  Response partial = c.call("LIST", "/v1/tenants/psone/workloads?detail=true",
                            parsed(narrow)["auth"].value("client_token", ""));
  ASSERT_EQ(partial.status, 200U) << partial.raw;
  EXPECT_EQ(partial.body["data"]["keys"].size(), 3U) << partial.raw;
  ASSERT_EQ(partial.body["data"]["workloads"].size(), 1U) << partial.raw;
  EXPECT_EQ(partial.body["data"]["workloads"][0]["name"], "run-a") << partial.raw;
  for (const char* name : {"run-a", "run-b"}) {
    EXPECT_EQ(as(t, {"cancel", name}).rc, 0);
  }
}

TEST_F(CliHabitsTest, TopWatchRefreshesAndNodesShowTheirState) {
  const std::string t = tenantWithToken("watch");
  Outcome once = as(t, {"top"});
  ASSERT_EQ(once.rc, 0) << once;
  EXPECT_EQ(count(once.out, "QUEUE"), 1U) << once;
  Outcome watched = as(t, {"top", "--watch", "0.2"}, std::chrono::milliseconds(1500));
  EXPECT_EQ(watched.rc, -SIGTERM) << watched;  // It ran until stopped.
  EXPECT_GE(count(watched.out, "Every 0.2s: tessera top"), 3U) << watched;
  EXPECT_GE(count(watched.out, "QUEUE"), 3U) << watched;
  EXPECT_EQ(as(t, {"top", "--watch", "0.01"}).rc, 2);

  Outcome nodes = as(root(), {"nodes"});
  ASSERT_EQ(nodes.rc, 0) << nodes;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex(R"(NAME\s+STATE\s+GPUS)"))) << nodes;
  EXPECT_TRUE(std::regex_search(nodes.out, std::regex(R"(dgx-h100-0\s+ready\s+8x H100)"))) << nodes;
  EXPECT_EQ(as(root(), {"node", "cordon", "dgx-h100-0"}).rc, 0);
  EXPECT_TRUE(contains(as(root(), {"nodes"}).out, "ready,cordoned"));
  EXPECT_EQ(as(root(), {"node", "uncordon", "dgx-h100-0"}).rc, 0);
}

TEST_F(CliHabitsTest, AdminCommandWithATenantTokenSaysToUseAnAdminToken) {
  const std::string t = tenantWithToken("hint");
  for (const std::vector<std::string>& cmd : {std::vector<std::string>{"tenant", "list"},
                                              {"tenant", "show", "hint"},
                                              {"node", "join-token", "list"}}) {
    Outcome o = as(t, cmd);
    EXPECT_EQ(o.rc, 1) << o;
    EXPECT_TRUE(contains(o.err,
                         "this is an admin command, and your token belongs to tenant 'hint': use "
                         "an admin (root) token"))
        << o;
  }
  // An admin token that lacks the right keeps the server's own answer.
  Outcome none = as(root(), {"tenant", "show", "no-such-tenant"});
  EXPECT_EQ(none.rc, 1) << none;
  EXPECT_FALSE(contains(none.err, "admin command")) << none;
}

TEST_F(CliHabitsTest, TenantAdminDelegatesNarrowerTokensThroughRoles) {
  const std::string admin = tenantWithToken("deleg");
  const std::string other = tenantWithToken("deleg-other");
  writePolicy(admin, "dev",
              "path \"workloads\" { capabilities = [\"list\"] }\n"
              "path \"workloads/*\" { capabilities = [\"create\", \"read\", \"update\", "
              "\"delete\", \"list\"] }\n");
  // More than a tenant admin has (sudo), and a team lead who may only hand on `dev`.
  writePolicy(admin, "big", "path \"*\" { capabilities = [\"read\", \"sudo\"] }\n");
  writePolicy(admin, "lead",
              "path \"workloads\" { capabilities = [\"list\"] }\n"
              "path \"workloads/*\" { capabilities = [\"create\", \"read\", \"update\", "
              "\"delete\", \"list\"] }\n"
              "path \"auth/token/roles/*\" { capabilities = [\"create\", \"update\"] }\n"
              "path \"auth/token/create/*\" { capabilities = [\"update\"] }\n");
  writePolicy(admin, "secrets-reader", "path \"secrets/*\" { capabilities = [\"read\"] }\n");

  // Today's rule stays: without a role, only the creator's own policies.
  Outcome direct = as(admin, {"token", "create", "--policy", "dev"});
  EXPECT_EQ(direct.rc, 1) << direct;
  EXPECT_TRUE(contains(direct.err, "the parent token does not have it")) << direct;

  Outcome role = as(admin, {"token", "role", "write", "dev", "--allowed-policy", "dev",
                            "--token-ttl", "30m", "--token-max-ttl", "2h"});
  ASSERT_EQ(role.rc, 0) << role;
  Outcome read = as(admin, {"token", "role", "read", "dev", "-format=json"});
  ASSERT_EQ(read.rc, 0) << read;
  EXPECT_EQ(parsed(read)["allowed_policies"], json({"dev"})) << read;
  EXPECT_EQ(parsed(read)["token_max_ttl"], 7200) << read;
  EXPECT_EQ(parsed(as(admin, {"token", "role", "list", "-format=json"})), json({"dev"}));

  Outcome dev_tok = as(admin, {"token", "create", "--role", "dev", "-format=json"});
  ASSERT_EQ(dev_tok.rc, 0) << dev_tok;
  const json d = parsed(dev_tok)["auth"];
  EXPECT_EQ(d["policies"], json({"dev"})) << dev_tok;
  EXPECT_EQ(d["tenant"], "deleg") << dev_tok;
  EXPECT_EQ(d["role"], "dev") << dev_tok;
  EXPECT_LE(d.value("lease_duration", 0), 1800) << dev_tok;  // The role's token_ttl.
  const std::string dev = d.value("client_token", "");
  // The developer runs workloads, and nothing else of the tenant's.
  Outcome ran = as(dev, {"run", "mine", "--duration", "1", "--", "true"});
  EXPECT_EQ(ran.rc, 0) << ran;
  Outcome policies = as(dev, {"policy", "list"});
  EXPECT_EQ(policies.rc, 1) << policies;
  EXPECT_TRUE(contains(policies.err, "403")) << policies;
  // ... and cannot make tokens from the role itself.
  EXPECT_EQ(as(dev, {"token", "create", "--role", "dev"}).rc, 1);

  // Refusals, through the CLI. A policy beyond the writer's power:
  Outcome big = as(admin, {"token", "role", "write", "big", "--allowed-policy", "big"});
  EXPECT_EQ(big.rc, 1) << big;
  EXPECT_TRUE(contains(big.err,
                       "policy 'big' gives read, sudo on '*', more than the calling "
                       "token has"))
      << big;
  // The root policy, whatever the name's rules:
  Outcome rooted = as(admin, {"token", "role", "write", "r", "--allowed-policy", "root"});
  EXPECT_EQ(rooted.rc, 1) << rooted;
  EXPECT_TRUE(contains(rooted.err, "policy 'root' cannot be given through a token role")) << rooted;
  // An admin-scope policy: names resolve in the tenant, where it does not exist.
  writePolicy(root(), "ops", "path \"sys/*\" { capabilities = [\"read\"] }\n");
  Outcome ops = as(admin, {"token", "role", "write", "ops", "--allowed-policy", "ops"});
  EXPECT_EQ(ops.rc, 1) << ops;
  EXPECT_TRUE(contains(ops.err, "no policy 'ops' in tenant 'deleg'")) << ops;
  // Longer than the role allows, or a policy it does not name:
  Outcome long_ttl = as(admin, {"token", "create", "--role", "dev", "--ttl", "3h"});
  EXPECT_EQ(long_ttl.rc, 1) << long_ttl;
  EXPECT_TRUE(contains(long_ttl.err, "longer than token role 'dev' allows")) << long_ttl;
  Outcome extra = as(admin, {"token", "create", "--role", "dev", "--policy", "tenant-admin"});
  EXPECT_EQ(extra.rc, 1) << extra;
  EXPECT_TRUE(contains(extra.err, "does not allow policy 'tenant-admin'")) << extra;
  // For another tenant:
  Outcome elsewhere = as(admin, {"token", "create", "--role", "dev", "--tenant", "deleg-other"});
  EXPECT_EQ(elsewhere.rc, 1) << elsewhere;
  EXPECT_TRUE(contains(elsewhere.err, "can only create tokens of that tenant")) << elsewhere;
  Outcome other_roles = as(admin, {"token", "role", "list", "--tenant", "deleg-other"});
  EXPECT_EQ(other_roles.rc, 1) << other_roles;

  // A team lead (a narrower token) can hand on `dev` (within its power) but not what it lacks,
  // even through a role the tenant admin wrote.
  ASSERT_EQ(
      as(admin, {"token", "role", "write", "reader", "--allowed-policy", "secrets-reader"}).rc, 0);
  Outcome lead_tok = as(root(), {"token", "create", "--tenant", "deleg", "--policy", "lead",
                                 "--ttl", "10m", "-format=json"});
  ASSERT_EQ(lead_tok.rc, 0) << lead_tok;
  const std::string lead = parsed(lead_tok)["auth"].value("client_token", "");
  Outcome lead_dev = as(lead, {"token", "create", "--role", "dev", "--ttl", "1h", "-format=json"});
  ASSERT_EQ(lead_dev.rc, 0) << lead_dev;
  // Never longer than the creator has left (10 min), whatever the role allows.
  EXPECT_LE(parsed(lead_dev)["auth"].value("lease_duration", 0), 600) << lead_dev;
  Outcome lead_reader = as(lead, {"token", "create", "--role", "reader"});
  EXPECT_EQ(lead_reader.rc, 1) << lead_reader;
  EXPECT_TRUE(contains(lead_reader.err,
                       "policy 'secrets-reader' gives read on 'secrets/*', more than the calling "
                       "token has"))
      << lead_reader;
  Outcome lead_role =
      as(lead, {"token", "role", "write", "mine", "--allowed-policy", "secrets-reader"});
  EXPECT_EQ(lead_role.rc, 1) << lead_role;
  EXPECT_TRUE(contains(lead_role.err, "more than the calling token has")) << lead_role;

  // The same refusals through the API.
  const Client c(address(), caPem());
  Response r = c.call("POST", "/v1/tenants/deleg/auth/token/roles/x", admin,
                      {{"allowed_policies", {"root"}}});
  EXPECT_EQ(r.status, 403U) << r.raw;
  r = c.call("POST", "/v1/tenants/deleg/auth/token/roles/x", admin,
             {{"allowed_policies", {"big"}}});
  EXPECT_EQ(r.status, 403U) << r.raw;
  r = c.call("POST", "/v1/tenants/deleg/auth/token/roles/x", admin,
             {{"allowed_policies", {"ops"}}});
  EXPECT_EQ(r.status, 400U) << r.raw;
  // A field Vault's roles have and Tessera's do not: written, and said so as Vault says it.
  r = c.call("POST", "/v1/tenants/deleg/auth/token/roles/x", admin,
             {{"allowed_policies", {"dev"}}, {"bogus", 1}});
  EXPECT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(r.body["warnings"], json({"Endpoint ignored these unrecognized parameters: [bogus]"}))
      << r.raw;
  // Another tenant's roles and role tokens are out of sight (404, as anything of another's).
  ASSERT_EQ(as(other, {"token", "role", "write", "dev", "--allowed-policy", "tenant-admin"}).rc, 0);
  r = c.call("POST", "/v1/tenants/deleg-other/auth/token/create/dev", admin, json::object());
  EXPECT_EQ(r.status, 404U) << r.raw;
  r = c.call("POST", "/v1/tenants/deleg-other/auth/token/roles/dev", admin,
             {{"allowed_policies", {"tenant-admin"}}});
  EXPECT_EQ(r.status, 404U) << r.raw;
  // Admin scope: a tenant token cannot reach it at all.
  r = c.call("POST", "/v1/auth/token/roles/x", admin, {{"allowed_policies", {"ops"}}});
  EXPECT_EQ(r.status, 404U) << r.raw;
  r = c.call("POST", "/v1/auth/token/create/x", admin, json::object());
  EXPECT_EQ(r.status, 404U) << r.raw;
  // The dev token, though a child of the admin's, holds no policy-writing power.
  r = c.call("POST", "/v1/tenants/deleg/policies/dev", dev,
             {{"path", {{"*", {{"capabilities", {"sudo"}}}}}}});
  EXPECT_EQ(r.status, 403U) << r.raw;
  // Revoking the creator revokes what it made.
  const std::string dev_accessor = d.value("accessor", "");
  EXPECT_EQ(as(lead, {"token", "revoke", "--self"}).rc, 0);
  EXPECT_EQ(as(admin, {"token", "lookup", dev_accessor}).rc, 0);  // Not the lead's child.
  EXPECT_EQ(as(admin, {"token", "role", "delete", "dev"}).rc, 0);
  EXPECT_EQ(as(admin, {"token", "create", "--role", "dev"}).rc, 1);
}

TEST_F(CliHabitsTest, CompletionAndVersion) {
  Outcome v = as("", {"version"});
  ASSERT_EQ(v.rc, 0) << v;
  Outcome flag = as("", {"--version"});
  ASSERT_EQ(flag.rc, 0) << flag;
  EXPECT_TRUE(contains(v.out, "tessera 0.1.0")) << v;
  EXPECT_EQ(v.out, flag.out) << v << flag;

  Outcome bash = as("", {"completion", "bash"});
  ASSERT_EQ(bash.rc, 0) << bash;
  const fs::path script = home_ / "tessera.bash";
  std::ofstream(script) << bash.out;
  Outcome syntax = runArgv({"bash", "-n", script.string()}, {}, home_);
  EXPECT_EQ(syntax.rc, 0) << syntax;
  for (const char* cmd : {"run", "ps", "logs", "top", "nodes", "token", "tenant", "doctor",
                          "server", "dev", "version", "completion", "secrets", "policy"}) {
    EXPECT_TRUE(contains(bash.out, std::string(" ") + cmd)) << cmd;
  }
  // What bash offers for `tessera r<TAB>` and `ru<TAB>`, `token cr<TAB>` and `run x --gp<TAB>`.
  auto complete = [&](const std::string& words, int cword) {
    const std::string line = "source " + script.string() + "; COMP_WORDS=(" + words +
                             "); COMP_CWORD=" + std::to_string(cword) +
                             "; _tessera; printf '%s\\n' \"${COMPREPLY[@]}\"";
    return runArgv({"bash", "-c", line}, {{"PATH", "/usr/bin:/bin"}}, home_);
  };
  Outcome r = complete("tessera r", 1);
  EXPECT_EQ(r.out, "resume\nrun\n") << r;
  r = complete("tessera ru", 1);
  EXPECT_EQ(r.out, "run\n") << r;
  Outcome cr = complete("tessera token cr", 2);
  EXPECT_EQ(cr.out, "create\n") << cr;
  Outcome gp = complete("tessera run x --gp", 3);
  EXPECT_TRUE(contains(gp.out, "--gpus\n")) << gp;
  EXPECT_TRUE(contains(gp.out, "--gpu-milli\n")) << gp;
  Outcome role = complete("tessera token role w", 3);
  EXPECT_EQ(role.out, "write\n") << role;
  Outcome zsh = as("", {"completion", "zsh"});
  ASSERT_EQ(zsh.rc, 0) << zsh;
  EXPECT_EQ(zsh.out.rfind("#compdef tessera\n", 0), 0U) << zsh;
  EXPECT_TRUE(contains(zsh.out, "bashcompinit")) << zsh;
  EXPECT_EQ(as("", {"completion", "fish"}).rc, 2);
}

// doctor: findings fail it (the dev root token never expires); a clean server passes.
TEST(CliDoctorTest, ExitsNonZeroWhenItFindsSomething) {
  Dev dev(fs::temp_directory_path() / ("tessera-doctor-" + std::to_string(::getpid())),
          {"--simulated"});
  ASSERT_TRUE(dev.up()) << dev.logs();
  const std::map<std::string, std::string> env = {{"TESSERA_ADDR", dev.info["address"]},
                                                  {"TESSERA_CACERT", dev.info["ca_cert"]},
                                                  {"HOME", dev.dir.string()}};
  auto as = [&](const std::string& token, std::vector<std::string> args) {
    auto e = env;
    e["TESSERA_TOKEN"] = token;
    args.insert(args.begin(), binary());
    return runArgv(args, e, dev.dir);
  };
  const std::string root = dev.info["root_token"];
  Outcome found = as(root, {"doctor"});
  EXPECT_EQ(found.rc, 1) << found;
  EXPECT_TRUE(contains(found.out, "never expires")) << found;
  EXPECT_TRUE(contains(found.err, "live longer than 24h")) << found;
  Outcome found_json = as(root, {"doctor", "-format=json"});
  EXPECT_EQ(found_json.rc, 1) << found_json;
  EXPECT_TRUE(parsed(found_json).is_array()) << found_json;
  // A short-lived root token from the unseal key (key-file mode), then no long-lived token left.
  auto e = env;
  Outcome gen = runArgv(
      {binary(), "operator", "generate-root", "-format=json",
       std::regex_replace(slurp(dev.dir / "tessera.db.unseal-key"), std::regex("\\s+"), "")},
      e, dev.dir);
  ASSERT_EQ(gen.rc, 0) << gen;
  const std::string short_root = parsed(gen).value("token", "");
  ASSERT_EQ(as(root, {"token", "revoke", "--self"}).rc, 0);
  // Tokens made with a fresh install's defaults pass (issue #37): an orphan (capped by the
  // system maximum only, 24 h by default) and a periodic service credential (1 h period).
  for (std::vector<std::string> extra : {std::vector<std::string>{}, {"--period", "1h"}}) {
    std::vector<std::string> args = {"token",    "create",       "--tenant", "demo",
                                     "--policy", "tenant-admin", "--orphan"};
    args.insert(args.end(), extra.begin(), extra.end());
    Outcome made = as(short_root, args);
    ASSERT_EQ(made.rc, 0) << made;
  }
  Outcome clean = as(short_root, {"doctor"});
  EXPECT_EQ(clean.rc, 0) << clean;
  EXPECT_TRUE(contains(clean.out, "No token, grant or lease lives longer than 24h")) << clean;
}

// A listener that requires a client certificate (tls_client_ca_file): the CLI presents one
// from TESSERA_CLIENT_CERT/KEY or --client-cert/--client-key; `server -validate` checks configs.
class CliServerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tessera-mtls-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto ca = tessera::server::CertAuthority::create("server CA", std::chrono::hours(1));
    ASSERT_TRUE(ca.isOk());
    auto leaf = (*ca)->issue("localhost", {"localhost"}, {"127.0.0.1"}, false);
    ASSERT_TRUE(leaf.isOk());
    auto clients = tessera::server::CertAuthority::create("clients CA", std::chrono::hours(1));
    ASSERT_TRUE(clients.isOk());
    auto me = (*clients)->issue("alice", {}, {}, true);
    ASSERT_TRUE(me.isOk());
    auto stranger_ca = tessera::server::CertAuthority::create("other CA", std::chrono::hours(1));
    ASSERT_TRUE(stranger_ca.isOk());
    auto stranger = (*stranger_ca)->issue("mallory", {}, {}, true);
    ASSERT_TRUE(stranger.isOk());
    const auto write = [&](const std::string& name, const std::string& pem, bool secret) {
      ASSERT_TRUE(tessera::server::writeFile((dir_ / name).string(), pem, secret).isOk());
    };
    write("ca.pem", (*ca)->certPem(), false);
    write("cert.pem", leaf->cert_pem, false);
    write("key.pem", leaf->key_pem, true);
    write("clients-ca.pem", (*clients)->certPem(), false);
    write("alice.pem", me->cert_pem, false);
    write("alice-key.pem", me->key_pem, true);
    write("mallory.pem", stranger->cert_pem, false);
    write("mallory-key.pem", stranger->key_pem, true);
    const std::string d = dir_.string();
    std::ofstream(dir_ / "server.hcl") << "storage \"sqlite\" { path = \"" << d << "/t.db\" }\n"
                                       << "listener \"tcp\" {\n"
                                       << "  address = \"127.0.0.1:0\"\n"
                                       << "  tls_cert_file = \"" << d << "/cert.pem\"\n"
                                       << "  tls_key_file = \"" << d << "/key.pem\"\n"
                                       << "  tls_client_ca_file = \"" << d << "/clients-ca.pem\"\n"
                                       << "}\n"
                                       << "audit \"file\" { path = \"" << d << "/audit.log\" }\n"
                                       << "nodes { simulated = \"dgx-h100:1\" }\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome tessera(std::vector<std::string> args, std::map<std::string, std::string> env) {
    env["HOME"] = dir_.string();
    args.insert(args.begin(), binary());
    return runArgv(args, env, dir_);
  }
  // Waits until `server` listens: its address, and the root token it printed at its first
  // start (a failure is recorded when either is missing: use with ASSERT_NO_FATAL_FAILURE).
  void listening(const Process& server, std::string& address, std::string& root) {
    std::smatch m;
    std::string out;
    ASSERT_TRUE(waitFor(
        [&] {
          out = server.output();
          return std::regex_search(out, m, std::regex(R"(listening on (https://[0-9.]+:\d+))"));
        },
        std::chrono::seconds(30)))
        << out << server.errors();
    address = m[1];
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((tsr\.[A-Za-z0-9]{24}))"))) << out;
    root = m[1];
  }

  fs::path dir_;
};

TEST_F(CliServerConfigTest, ClientCertificateForAListenerThatRequiresOne) {
  Process server({"server", "-config=" + (dir_ / "server.hcl").string()}, dir_ / "out.txt");
  std::string address;
  std::string root;
  ASSERT_NO_FATAL_FAILURE(listening(server, address, root));
  const std::string d = dir_.string();
  std::map<std::string, std::string> env = {
      {"TESSERA_ADDR", address}, {"TESSERA_CACERT", d + "/ca.pem"}, {"TESSERA_TOKEN", root}};

  Outcome without = tessera({"tenant", "list"}, env);
  EXPECT_EQ(without.rc, 1) << without;  // The handshake fails: no certificate.
  auto with = env;
  with["TESSERA_CLIENT_CERT"] = d + "/alice.pem";
  with["TESSERA_CLIENT_KEY"] = d + "/alice-key.pem";
  Outcome listed = tessera({"tenant", "list"}, with);
  EXPECT_EQ(listed.rc, 0) << listed;
  Outcome flags = tessera({"tenant", "create", "by-flags", "--client-cert", d + "/alice.pem",
                           "--client-key", d + "/alice-key.pem"},
                          env);
  EXPECT_EQ(flags.rc, 0) << flags;
  // Signed by a CA the listener does not trust: refused.
  auto stranger = env;
  stranger["TESSERA_CLIENT_CERT"] = d + "/mallory.pem";
  stranger["TESSERA_CLIENT_KEY"] = d + "/mallory-key.pem";
  EXPECT_EQ(tessera({"tenant", "list"}, stranger).rc, 1);
  // Half a pair, a missing file, or a key of another certificate: said before connecting.
  auto half = env;
  half["TESSERA_CLIENT_CERT"] = d + "/alice.pem";
  Outcome o = tessera({"tenant", "list"}, half);
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, "set both TESSERA_CLIENT_CERT and TESSERA_CLIENT_KEY")) << o;
  auto missing = with;
  missing["TESSERA_CLIENT_KEY"] = d + "/nope.pem";
  o = tessera({"tenant", "list"}, missing);
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, "nope.pem")) << o;
  auto mixed = with;
  mixed["TESSERA_CLIENT_KEY"] = d + "/mallory-key.pem";
  o = tessera({"tenant", "list"}, mixed);
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, "cannot load the client key")) << o;
}

TEST_F(CliServerConfigTest, ValidateChecksWithoutStarting) {
  const std::string file = (dir_ / "server.hcl").string();
  Outcome ok = tessera({"server", "-validate", "-config=" + file}, {});
  EXPECT_EQ(ok.rc, 0) << ok;
  EXPECT_TRUE(contains(ok.out, "OK")) << ok;
  EXPECT_FALSE(contains(ok.out + ok.err, "listening on")) << ok;
  EXPECT_FALSE(fs::exists(dir_ / "t.db")) << "validate must not open the store";

  // A bad value: the file and the line of the field.
  std::string text = slurp(file);
  const fs::path bad = dir_ / "bad.hcl";
  std::ofstream(bad) << std::regex_replace(text, std::regex("  address = \"127.0.0.1:0\""),
                                           "  address = \"127.0.0.1:0\"\n  tls_bogus = 1");
  Outcome o = tessera({"server", "-validate", "-config=" + bad.string()}, {});
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, bad.string() + ":4: ")) << o;  // tls_bogus is on line 4.
  EXPECT_TRUE(contains(o.err, "unknown field 'tls_bogus'")) << o;
  EXPECT_TRUE(contains(o.err, "tls_bogus")) << o;
  // A syntax error: the parser's line.
  const fs::path broken = dir_ / "broken.hcl";
  std::ofstream(broken) << "storage \"sqlite\" {\n  path = \n";
  o = tessera({"server", "-validate", "-config=" + broken.string()}, {});
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, broken.string() + ":3")) << o;
  // A certificate that is not there: named, with its line.
  const fs::path gone = dir_ / "gone.hcl";
  std::ofstream(gone) << std::regex_replace(text, std::regex("/clients-ca.pem"), "/nope.pem");
  o = tessera({"server", "-validate", "-config=" + gone.string()}, {});
  EXPECT_EQ(o.rc, 2) << o;
  EXPECT_TRUE(contains(o.err, gone.string() + ":6: listener[0].tls_client_ca_file")) << o;
  EXPECT_TRUE(contains(o.err, "nope.pem' cannot be read")) << o;
  o = tessera({"server", "-validate", "-config=" + (dir_ / "absent.hcl").string()}, {});
  EXPECT_EQ(o.rc, 2) << o;
}

// `-validate` says yes exactly where the server starts, and no, with the same reason, exactly
// where it does not: each config below is validated and then started.
TEST_F(CliServerConfigTest, ValidateRefusesExactlyWhatStartRefuses) {
  const std::string d = dir_.string();
  const std::string base = slurp(dir_ / "server.hcl");
  std::ofstream(dir_ / "garbage.pem") << "not a certificate\n";
  const std::string nodes_line = "nodes { simulated = \"dgx-h100:1\" }\n";
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = base;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  struct Case {
    std::string name;
    std::string config;
    std::string reason;  // "": it starts.
  };
  const std::vector<Case> cases = {
      {"as written", base, ""},
      {"no nodes block", replace(nodes_line, ""), ""},
      {"simulated none", replace("dgx-h100:1", "none"), ""},
      {"simulated empty", replace("dgx-h100:1", ""), ""},
      {"unknown profile", replace("dgx-h100:1", "nonesuch:1"), "unknown node profile 'nonesuch'"},
      {"count zero", replace("dgx-h100:1", "dgx-h100:0"), "expected PROFILE:COUNT"},
      {"node twice", replace("dgx-h100:1", "a=t4-2x,a=t4-2x"), "node 'a' is declared twice"},
      {"labels of no node",
       replace(nodes_line,
               "nodes {\n  simulated = \"dgx-h100:1\"\n  labels = { "
               "gpu-z = { pool = \"p\" } }\n}\n"),
       "no declared node 'gpu-z'"},
      {"unknown field", base + "bogus = 1\n", "bogus"},
      {"store folder missing", replace(d + "/t.db", d + "/missing/t.db"), d + "/missing"},
      {"audit folder missing", replace(d + "/audit.log", d + "/missing/audit.log"), d + "/missing"},
      {"certificate not PEM", replace(d + "/cert.pem", d + "/garbage.pem"), "garbage.pem"},
      {"key of another certificate", replace(d + "/key.pem", d + "/alice-key.pem"),
       "alice-key.pem"},
      {"address not an IP", replace("127.0.0.1:0", "300.1.1.1:0"), "300.1.1.1"},
      {"signing key missing",
       replace(d + "/audit.log\"", d + "/audit.log\" signing_key_file = \"" + d + "/none.pem\""),
       d + "/none.pem"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    SCOPED_TRACE(c.name);
    const fs::path file = dir_ / ("case-" + std::to_string(i) + ".hcl");
    std::ofstream(file) << c.config;
    Outcome v = tessera({"server", "-validate", "-config=" + file.string()}, {});
    Process server({"server", "-config=" + file.string()},
                   dir_ / ("case-" + std::to_string(i) + ".out"));
    bool listening = false;
    ASSERT_TRUE(waitFor(
        [&] {
          listening = server.output().find("listening on") != std::string::npos;
          return listening || server.errors().find("error: ") != std::string::npos;
        },
        std::chrono::seconds(30)))
        << server.output() << server.errors();
    const int start_rc = listening ? server.stop(SIGTERM) : server.wait();
    const std::string start_err = server.errors();
    if (c.reason.empty()) {
      EXPECT_EQ(v.rc, 0) << v;
      EXPECT_TRUE(listening) << start_err;
      EXPECT_EQ(start_rc, 0) << start_err;
    } else {
      EXPECT_EQ(v.rc, 2) << v;
      EXPECT_TRUE(contains(v.err, c.reason)) << v;
      EXPECT_FALSE(listening);
      EXPECT_NE(start_rc, 0);
      EXPECT_TRUE(contains(start_err, c.reason)) << start_err;
    }
    EXPECT_FALSE(fs::exists(dir_ / "missing")) << "nothing is created in a missing folder";
    fs::remove(dir_ / "t.db");
  }
}

// A server whose config declares no nodes has none: nothing is placed on a phantom node, work
// waits (saying why) until an agent joins.
TEST_F(CliServerConfigTest, AServerWithoutDeclaredNodesHasNone) {
  std::string text = slurp(dir_ / "server.hcl");
  text = std::regex_replace(text, std::regex("nodes \\{[^\n]*\n"), "");
  text = std::regex_replace(text, std::regex("  tls_client_ca_file[^\n]*\n"), "");
  ASSERT_EQ(text.find("nodes"), std::string::npos) << text;
  std::ofstream(dir_ / "bare.hcl") << text << "scheduler { pass_interval_ms = 50 }\n";
  Process server({"server", "-config=" + (dir_ / "bare.hcl").string()}, dir_ / "bare.out");
  std::string address;
  std::string root;
  ASSERT_NO_FATAL_FAILURE(listening(server, address, root));
  EXPECT_TRUE(contains(server.errors(), "no nodes yet")) << server.errors();
  const Client c(address, slurp(dir_ / "ca.pem"));
  Response nodes = c.call("GET", "/v1/nodes", root);
  ASSERT_EQ(nodes.status, 200U) << nodes.raw;
  EXPECT_TRUE(nodes.body["data"]["nodes"].empty()) << nodes.raw;
  ASSERT_EQ(c.call("POST", "/v1/tenants/t", root, {{"quota", {{"gpu", 8}}}}).status, 204U);
  Response submitted = c.call("POST", "/v1/tenants/t/workloads/w", root,
                              {{"gpu", {{"count", 1}}}, {"command", {"sleep", "60"}}});
  ASSERT_EQ(submitted.status, 202U) << submitted.raw;
  // Work is taken while no node is there yet (agents join later), and waits, saying why.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // Ten passes.
  Response w = c.call("GET", "/v1/tenants/t/workloads/w", root);
  ASSERT_EQ(w.status, 200U) << w.raw;
  EXPECT_EQ(w.body["data"]["status"]["phase"], "pending") << w.raw;
  EXPECT_TRUE(contains(w.body["data"]["status"].value("reason", ""), "no node is in service yet"))
      << w.raw;
  Outcome listed = tessera({"nodes"}, {{"TESSERA_ADDR", address},
                                       {"TESSERA_CACERT", (dir_ / "ca.pem").string()},
                                       {"TESSERA_TOKEN", root}});
  EXPECT_EQ(listed.rc, 0) << listed;
  EXPECT_FALSE(contains(listed.out, "dgx-h100")) << listed;
  EXPECT_EQ(server.stop(SIGTERM), 0) << server.errors();
}

// `tessera tls` makes a CA and a server certificate as an operator without a PKI would; with
// them, examples/server.hcl and the server configs of docs/server.md (whole, and its audit and
// nodes fragments on the example) pass -validate and start, their /etc, /var/lib and /var/log
// paths moved under a temporary folder and their addresses onto free loopback ports. (The etcd
// configs need an etcd cluster: ServerTest covers those.)
TEST_F(CliServerConfigTest, ExamplesAndDocsConfigsValidateAndStart) {
  const fs::path root = dir_ / "fleet";
  for (const char* sub : {"etc", "lib", "log"}) {
    fs::create_directories(root / sub);
  }
  const std::string etc = (root / "etc").string();
  Outcome ca = tessera({"tls", "ca", "create", "--out-dir", etc}, {});
  ASSERT_EQ(ca.rc, 0) << ca;
  EXPECT_TRUE(contains(ca.out, "tessera-ca.pem")) << ca;
  EXPECT_EQ(fs::status(root / "etc" / "tessera-ca-key.pem").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  // Never over an existing CA.
  Outcome again = tessera({"tls", "ca", "create", "--out-dir", etc}, {});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_TRUE(contains(again.err, "exists already")) << again;
  Outcome no_kind = tessera({"tls", "cert", "create", "--out-dir", etc}, {});
  EXPECT_EQ(no_kind.rc, 2) << no_kind;
  Outcome cert =
      tessera({"tls", "cert", "create", "--server", "--dns", "tessera.example.internal", "--ca",
               etc + "/tessera-ca.pem", "--ca-key", etc + "/tessera-ca-key.pem", "--out-dir", etc},
              {});
  ASSERT_EQ(cert.rc, 0) << cert;
  EXPECT_TRUE(contains(cert.out, "tessera.example.internal, localhost, 127.0.0.1")) << cert;
  // A key that is not the CA's is refused, saying so.
  Outcome other = tessera({"tls", "cert", "create", "--client", "--ca", etc + "/tessera-ca.pem",
                           "--ca-key", etc + "/tessera-server-key.pem", "--out-dir", etc},
                          {});
  EXPECT_EQ(other.rc, 2) << other;  // Bad input.
  EXPECT_TRUE(contains(other.err, "not the CA certificate's key")) << other;

  auto moved = [&](std::string text) {
    text = std::regex_replace(text, std::regex("/etc/tessera/"), etc + "/");
    text = std::regex_replace(text, std::regex("/var/lib/tessera/"), (root / "lib").string() + "/");
    text = std::regex_replace(text, std::regex("/var/log/tessera/"), (root / "log").string() + "/");
    return std::regex_replace(text, std::regex(R"((0\.0\.0\.0|127\.0\.0\.1):\d+)"), "127.0.0.1:0");
  };
  const std::string example = slurp(fs::path(sourceDir()) / "examples" / "server.hcl");
  ASSERT_FALSE(example.empty());
  // The code blocks of a docs page that are server configs or fragments of one.
  auto blocks = [](const std::string& page) {
    std::vector<std::string> out;
    const std::string text = slurp(fs::path(sourceDir()) / "docs" / page);
    const std::regex block("```hcl\n([\\s\\S]*?)```");
    for (auto it = std::sregex_iterator(text.begin(), text.end(), block);
         it != std::sregex_iterator(); ++it) {
      out.push_back((*it)[1]);
    }
    return out;
  };
  std::vector<std::pair<std::string, std::string>> configs = {{"examples/server.hcl", example}};
  for (const std::string& b : blocks("server.md")) {
    if (contains(b, "storage \"sqlite\"")) {
      configs.emplace_back("docs/server.md: a whole config", b);
    } else if (b.rfind("audit \"file\"", 0) == 0) {
      configs.emplace_back("docs/server.md: an audit block, in the example",
                           std::regex_replace(example, std::regex(R"(audit "file" \{[^}]*\})"), b));
    }
  }
  for (const std::string& b : blocks("agent.md")) {
    if (b.rfind("nodes {", 0) == 0) {
      configs.emplace_back("docs/agent.md: a nodes block, in the example", example + b);
    }
  }
  ASSERT_GE(configs.size(), 4U);
  int n = 0;
  for (const auto& [what, text] : configs) {
    SCOPED_TRACE(what);
    const fs::path file = root / ("config-" + std::to_string(n++) + ".hcl");
    std::ofstream(file) << moved(text);
    fs::remove_all(root / "lib");
    fs::remove_all(root / "log");
    fs::create_directories(root / "lib");
    fs::create_directories(root / "log");
    Outcome v = tessera({"server", "-validate", "-config=" + file.string()}, {});
    ASSERT_EQ(v.rc, 0) << v << "\n" << moved(text);
    Process server({"server", "-config=" + file.string()}, root / ("out-" + std::to_string(n)));
    std::string address;
    std::string token;
    ASSERT_NO_FATAL_FAILURE(listening(server, address, token));
    EXPECT_EQ(server.stop(SIGTERM), 0) << server.errors();
  }
}

// The rule token roles rest on (server/acl.h checkWithinPower), case by case: the refusals above
// go through it, and these pin down its edges (deny rules, precedence, globs, `+` segments).
TEST(CheckWithinPowerTest, HandsOnOnlyWhatTheHolderHasOnEveryPath) {
  using tessera::server::checkWithinPower;
  using tessera::server::Policy;
  auto policy = [](const json& paths) {
    auto p = Policy::fromJson("p", {{"path", paths}});
    EXPECT_TRUE(p.isOk()) << paths.dump();
    return p.isOk() ? *p : Policy{};
  };
  auto caps = [](std::initializer_list<const char*> c) {
    return json{{"capabilities", json(std::vector<std::string>(c.begin(), c.end()))}};
  };
  const json crudl = caps({"create", "read", "update", "delete", "list"});
  struct Case {
    std::vector<json> holder;
    json candidate;
    bool ok;
  };
  const std::vector<Case> cases = {
      {{{{"*", crudl}}}, {{"workloads/*", caps({"create", "read"})}}, true},
      {{{{"*", crudl}}}, {{"*", caps({"sudo"})}}, false},
      {{{{"*", crudl}, {"secrets/*", caps({"deny"})}}}, {{"workloads/*", caps({"read"})}}, true},
      {{{{"*", crudl}, {"secrets/*", caps({"deny"})}}}, {{"*", caps({"read"})}}, false},
      {{{{"*", crudl}, {"secrets/*", caps({"deny"})}}}, {{"secrets/x", caps({"read"})}}, false},
      {{{{"workloads/*", caps({"read"})}}}, {{"workloads/a", caps({"read"})}}, true},
      {{{{"workloads/*", caps({"read"})}}}, {{"workloads/a", caps({"update"})}}, false},
      {{{{"workloads/a", caps({"read"})}}}, {{"workloads/*", caps({"read"})}}, false},
      {{{{"workloads/+/logs", caps({"read"})}}}, {{"workloads/x/logs", caps({"read"})}}, true},
      {{{{"workloads/+/logs", caps({"read"})}}}, {{"workloads/+/logs*", caps({"read"})}}, false},
      {{{{"workloads/x/logs", caps({"read"})}}}, {{"workloads/+/logs", caps({"read"})}}, false},
      {{{{"*", caps({"read"})}, {"workloads/*", crudl}}}, {{"workloads/*", crudl}}, true},
      {{{{"*", crudl}, {"workloads/a-*", caps({"read"})}}}, {{"workloads/*", crudl}}, false},
      {{{{"a/*", caps({"read"})}}, {{"a/*", caps({"list"})}}},
       {{"a/*", caps({"read", "list"})}},
       true},
      {{{{"a*", caps({"read"})}}}, {{"ab*", caps({"read"})}}, true},
      {{{{"a*", caps({"read"})}}}, {{"a", caps({"read"})}}, true},
      {{{{"ab*", caps({"read"})}}}, {{"a*", caps({"read"})}}, false},
      {{}, {{"*", caps({"deny"})}}, true},  // A deny gives nothing.
      {{}, {{"workloads", caps({"list"})}}, false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<Policy> held;
    for (const json& h : cases[i].holder) {
      held.push_back(policy(h));
    }
    std::vector<const Policy*> ptrs;
    for (const Policy& h : held) {
      ptrs.push_back(&h);
    }
    const auto st = checkWithinPower(ptrs, policy(cases[i].candidate));
    EXPECT_EQ(st.isOk(), cases[i].ok) << "case " << i << ": " << st.message();
    if (!st.isOk()) {
      EXPECT_EQ(st.code(), tessera::core::StatusCode::kPermissionDenied) << "case " << i;
    }
  }
}

}  // namespace
