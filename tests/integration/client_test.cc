// Starts `tessera dev` on loopback and runs the `tessera` client commands against it as a user
// would, with TESSERA_ADDR, TESSERA_TOKEN and TESSERA_CACERT set from dev.json: tenants,
// tokens, policies, workloads, login, -format=json, and the exit codes and messages of errors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/certs.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using tessera::integration::binary;
using tessera::integration::Outcome;
using tessera::integration::runArgv;
using tessera::integration::slurp;
using tessera::integration::waitFor;

// Runs `tessera ARGS` with exactly the TESSERA_* variables and HOME given, waits for it (or,
// with `stop_after`, lets it run that long and stops it with SIGTERM).
Outcome tessera(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                const fs::path& scratch,
                std::chrono::milliseconds stop_after = std::chrono::milliseconds(0)) {
  std::vector<std::string> argv = {binary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return runArgv(std::move(argv), env, scratch, stop_after);
}

json parsed(const Outcome& o) { return json::parse(o.out, nullptr, false); }

// A free loopback port: bound, then closed, so nothing listens there.
uint16_t closedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// One `tessera dev` for the whole suite (it takes a moment to start); each test uses its own
// tenants and names, and its own HOME.
class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ =
        new fs::path(fs::temp_directory_path() / ("tessera-client-" + std::to_string(::getpid())));
    fs::remove_all(*dir_);
    fs::create_directories(*dir_);
    server_pid_ = fork();
    if (server_pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      freopen((*dir_ / "server.out").c_str(), "w", stdout);
      freopen((*dir_ / "server.err").c_str(), "w", stderr);
      std::string bin = binary();
      // Simulated nodes: these tests are about the client, and their commands are not run.
      std::vector<std::string> args = {bin,          "dev",         "--data-dir", dir_->string(),
                                       "--addr",     "127.0.0.1:0", "--nodes",    "dgx-h100:2",
                                       "--simulated"};
      std::vector<char*> argv;
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
    dev_ = new json();
    // Ready when dev.json names this process.
    for (int i = 0; i < 600; ++i) {
      if (fs::exists(*dir_ / "dev.json")) {
        *dev_ = json::parse(slurp(*dir_ / "dev.json"), nullptr, false);
        if (dev_->is_object() && dev_->value("pid", 0) == server_pid_) {
          break;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }

  static void TearDownTestSuite() {
    kill(server_pid_, SIGTERM);
    const int status = tessera::integration::reap(server_pid_, std::chrono::seconds(30),
                                                  "tessera dev after SIGTERM");
    EXPECT_FALSE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << "tessera dev did not stop within 30 s of SIGTERM";
    fs::remove_all(*dir_);
    delete dir_;
    delete dev_;
  }

  void SetUp() override {
    ASSERT_EQ(dev_->value("pid", 0), server_pid_)
        << slurp(*dir_ / "server.out") << slurp(*dir_ / "server.err");
    home_ = *dir_ / ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::create_directories(home_);
  }

  std::string address() const { return (*dev_)["address"]; }
  std::string caCert() const { return (*dev_)["ca_cert"]; }
  std::string root() const { return (*dev_)["root_token"]; }
  std::string demo() const { return (*dev_)["tenant_token"]; }

  // The environment a user has after `export TESSERA_ADDR=... TESSERA_CACERT=...`, with
  // `token` (none when empty) and this test's HOME.
  std::map<std::string, std::string> envFor(const std::string& token) const {
    std::map<std::string, std::string> env = {
        {"TESSERA_ADDR", address()}, {"TESSERA_CACERT", caCert()}, {"HOME", home_.string()}};
    if (!token.empty()) {
      env["TESSERA_TOKEN"] = token;
    }
    return env;
  }
  Outcome as(const std::string& token, const std::vector<std::string>& args,
             std::chrono::milliseconds stop_after = std::chrono::milliseconds(0)) const {
    return tessera(args, envFor(token), home_, stop_after);
  }

  // Creates a tenant and a tenant-admin token for it, through the commands.
  std::string tenantWithToken(const std::string& name) {
    Outcome created = as(root(), {"tenant", "create", name, "--quota-gpu", "4"});
    EXPECT_EQ(created.rc, 0) << created;
    Outcome token = as(root(), {"token", "create", "--tenant", name, "--policy", "tenant-admin",
                                "--ttl", "1h", "-format=json"});
    EXPECT_EQ(token.rc, 0) << token;
    return parsed(token)["auth"].value("client_token", "");
  }

  // Polls `ps` until NAME's row shows PHASE; returns the last output.
  Outcome waitInPs(const std::string& token, const std::string& name, const std::string& phase) {
    Outcome o;
    for (int i = 0; i < 100; ++i) {
      o = as(token, {"ps"});
      std::istringstream lines(o.out);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream cols(line);
        std::string n, p;
        cols >> n >> p;
        if (n == name && p == phase) {
          return o;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << name << " never showed " << phase << " in ps:\n" << o;
    return o;
  }

  static inline fs::path* dir_ = nullptr;
  static inline json* dev_ = nullptr;
  static inline pid_t server_pid_ = -1;
  fs::path home_;
};

TEST_F(ClientTest, TenantTokenRunPsShowCancel) {
  // The admin creates a tenant and gives it a token.
  Outcome created = as(root(), {"tenant", "create", "team-a", "--quota-gpu", "4", "--limit-gpu",
                                "8", "--weight", "2", "--priority", "50"});
  ASSERT_EQ(created.rc, 0) << created;
  Outcome list = as(root(), {"tenant", "list", "-format=json"});
  ASSERT_EQ(list.rc, 0) << list;
  const json tenants = parsed(list);
  ASSERT_TRUE(tenants.is_array()) << list;
  EXPECT_NE(std::find(tenants.begin(), tenants.end(), "team-a"), tenants.end()) << list;
  EXPECT_NE(std::find(tenants.begin(), tenants.end(), "demo"), tenants.end()) << list;
  Outcome shown = as(root(), {"tenant", "show", "team-a", "-format=json"});
  ASSERT_EQ(shown.rc, 0) << shown;
  EXPECT_EQ(parsed(shown)["quota_milli_gpu"], 4000);
  EXPECT_EQ(parsed(shown)["limit_milli_gpu"], 8000);
  EXPECT_EQ(parsed(shown)["weight"], 2);
  EXPECT_EQ(parsed(shown)["priority"], 50);
  Outcome shown_table = as(root(), {"tenant", "show", "team-a"});
  EXPECT_NE(shown_table.out.find("quota_gpu"), std::string::npos) << shown_table;
  // create does not change an existing tenant; update changes what it is given, nothing else.
  Outcome again = as(root(), {"tenant", "create", "team-a", "--quota-gpu", "1"});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_NE(again.err.find("tenant update"), std::string::npos) << again;
  Outcome updated = as(root(), {"tenant", "update", "team-a", "--limit-gpu", "16", "--request-rate",
                                "50", "-format=json"});
  ASSERT_EQ(updated.rc, 0) << updated;
  EXPECT_EQ(parsed(updated)["limit_milli_gpu"], 16000);
  EXPECT_EQ(parsed(updated)["request_rate"], 50);
  EXPECT_EQ(parsed(updated)["quota_milli_gpu"], 4000);  // Kept.
  EXPECT_EQ(parsed(updated)["weight"], 2);              // Kept.
  Outcome bad_update = as(root(), {"tenant", "update", "team-a", "--quota-gpu", "32"});
  EXPECT_EQ(bad_update.rc, 1) << bad_update;  // Above its limit of 16.
  EXPECT_NE(bad_update.err.find("limit.gpu is below quota.gpu"), std::string::npos) << bad_update;
  Outcome missing = as(root(), {"tenant", "update", "no-such-team", "--weight", "2"});
  EXPECT_EQ(missing.rc, 1) << missing;
  EXPECT_EQ(as(root(), {"tenant", "show", "no-such-team"}).rc, 1);  // Not created by it.

  // The human output shows the secret once, its accessor and expiry.
  Outcome token = as(
      root(), {"token", "create", "--tenant", "team-a", "--policy", "tenant-admin", "--ttl", "2h"});
  ASSERT_EQ(token.rc, 0) << token;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(token.out, m, std::regex(R"(\ntoken\s+(tsr\.[A-Za-z0-9]{24}))")))
      << token;
  const std::string team_a = m[1];
  EXPECT_TRUE(std::regex_search(token.out, std::regex(R"(token_accessor\s+\S+)"))) << token;
  EXPECT_TRUE(std::regex_search(token.out, std::regex(R"(token_tenant\s+team-a)"))) << token;
  EXPECT_TRUE(std::regex_search(token.out, std::regex(R"(token_duration\s+2h\n)"))) << token;
  EXPECT_TRUE(std::regex_search(token.out, std::regex(R"(token_expire_time\s+20\d\d-)"))) << token;

  // The tenant runs a workload; no TESSERA_TENANT: the token says which tenant it is.
  Outcome run = as(team_a, {"run", "train", "--gpus", "2", "--cpu-milli", "8000", "--duration",
                            "600", "--", "python", "train.py", "-format=json"});
  ASSERT_EQ(run.rc, 0) << run;
  EXPECT_NE(run.out.find("'train'"), std::string::npos) << run;
  EXPECT_NE(run.out.find("team-a"), std::string::npos) << run;
  EXPECT_NE(run.out.find("pending"), std::string::npos) << run;
  Outcome ps = waitInPs(team_a, "train", "running");
  EXPECT_TRUE(std::regex_search(ps.out, std::regex(R"(\ntrain\s+running\s+1/1)"))) << ps;
  EXPECT_NE(ps.out.find("NAME"), std::string::npos) << ps;

  // show: its node and GPUs, spec (with the command after `--` untouched), events.
  Outcome show = as(team_a, {"show", "train", "-format=json"});
  ASSERT_EQ(show.rc, 0) << show;
  const json w = parsed(show);
  ASSERT_TRUE(w.is_object()) << show;
  ASSERT_EQ(w["status"]["tasks"].size(), 1U) << show;
  const json task = w["status"]["tasks"][0];
  EXPECT_EQ(task["gpus"].size(), 2U);
  EXPECT_EQ(w["spec"]["command"], json({"python", "train.py", "-format=json"}));
  EXPECT_EQ(w["spec"]["gpu"]["count"], 2);
  EXPECT_GE(w["events"].size(), 2U);
  Outcome show_table = as(team_a, {"show", "train"});
  ASSERT_EQ(show_table.rc, 0) << show_table;
  const std::string node = task["node"];
  const std::string gpus = task["gpus"][0].dump() + "," + task["gpus"][1].dump();
  EXPECT_TRUE(std::regex_search(show_table.out, std::regex("running\\s+" + node + "\\s+" + gpus)))
      << show_table;
  EXPECT_NE(show_table.out.find("submitted"), std::string::npos) << show_table;
  EXPECT_NE(show_table.out.find("python train.py -format=json"), std::string::npos) << show_table;

  // The admin sees the queue's allocation against its quota; nodes list their GPUs.
  Outcome top = as(root(), {"top"});
  ASSERT_EQ(top.rc, 0) << top;
  EXPECT_TRUE(std::regex_search(top.out, std::regex(R"(\nteam-a\s+2\s+\S+\s+4\s+0)"))) << top;
  Outcome top_json = as(team_a, {"top", "-format=json"});
  ASSERT_EQ(top_json.rc, 0) << top_json;
  bool found = false;
  for (const json& q : parsed(top_json)) {
    const std::string name = q["name"];
    EXPECT_EQ(name.rfind("team-a", 0), 0U) << top_json;  // A tenant sees its own queues only.
    if (name == "team-a") {
      found = true;
      EXPECT_EQ(q["allocated_milli_gpu"], 2000) << top_json;
      EXPECT_EQ(q["quota_milli_gpu"], 4000) << top_json;
    }
  }
  EXPECT_TRUE(found) << top_json;
  Outcome nodes = as(team_a, {"nodes"});
  ASSERT_EQ(nodes.rc, 0) << nodes;
  EXPECT_TRUE(std::regex_search(
      nodes.out, std::regex(node + R"(\s+simulated\s+8x H100\S*\s+[0-9.]+/8\s+\d+\s+\d+ GiB)")))
      << nodes;
  Outcome nodes_json = as(root(), {"nodes", "-format=json"});
  ASSERT_EQ(nodes_json.rc, 0) << nodes_json;
  EXPECT_EQ(parsed(nodes_json).size(), 2U) << nodes_json;

  // Cancel, and ps follows it.
  Outcome cancel = as(team_a, {"cancel", "train"});
  ASSERT_EQ(cancel.rc, 0) << cancel;
  waitInPs(team_a, "train", "cancelled");
  Outcome ps_json = as(team_a, {"ps", "-format=json"});
  ASSERT_EQ(ps_json.rc, 0) << ps_json;
  ASSERT_EQ(parsed(ps_json).size(), 1U) << ps_json;
  EXPECT_EQ(parsed(ps_json)[0]["status"]["phase"], "cancelled");

  // An admin token reaches the tenant's workloads with --tenant; with no tenant it is told how.
  Outcome admin_ps = as(root(), {"ps", "--tenant", "team-a"});
  EXPECT_EQ(admin_ps.rc, 0) << admin_ps;
  EXPECT_NE(admin_ps.out.find("train"), std::string::npos) << admin_ps;
  Outcome no_tenant = as(root(), {"ps"});
  EXPECT_EQ(no_tenant.rc, 2) << no_tenant;
  EXPECT_NE(no_tenant.err.find("TESSERA_TENANT"), std::string::npos) << no_tenant;

  Outcome del = as(root(), {"tenant", "delete", "team-a"});
  EXPECT_EQ(del.rc, 0) << del;
  EXPECT_EQ(as(root(), {"tenant", "show", "team-a"}).rc, 1);
  // Created again, the tenant can reuse its old workload names: they run afresh.
  const std::string reborn = tenantWithToken("team-a");
  // The old tenant's tokens died with it: none reaches the new one of the same name.
  Outcome stale = as(team_a, {"ps"});
  EXPECT_EQ(stale.rc, 1) << stale;
  EXPECT_NE(stale.err.find("permission denied"), std::string::npos) << stale;
  // Nor does its audit view hold the old tenant's records.
  Outcome view = as(reborn, {"audit", "tail", "-n", "1000", "-format=json"});
  ASSERT_EQ(view.rc, 0) << view;
  EXPECT_EQ(view.out.find("workloads/train"), std::string::npos) << view;
  EXPECT_NE(view.out.find("tenants/team-a/audit"), std::string::npos) << view;  // Its own.
  ASSERT_EQ(as(reborn, {"run", "train", "--gpus", "1", "--cpu-milli", "1000"}).rc, 0);
  waitInPs(reborn, "train", "running");
  EXPECT_EQ(as(reborn, {"cancel", "train"}).rc, 0);
}

TEST_F(ClientTest, AuditTailShowsTheTenantsOwnRecordsAndFollows) {
  const std::string team = tenantWithToken("team-audit");
  // Following: records of a workload submitted meanwhile appear; the tail's own polls do not.
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    Outcome run = as(team, {"run", "later", "--cpu-milli", "100", "--duration", "1"});
    EXPECT_EQ(run.rc, 0) << run;
  });
  Outcome followed = as(team, {"audit", "tail", "-f", "--interval", "0.2", "-format=json"},
                        std::chrono::milliseconds(2500));
  later.join();
  bool saw_later = false;
  std::istringstream lines(followed.out);
  std::string line;
  int records = 0;
  while (std::getline(lines, line)) {
    const json rec = json::parse(line, nullptr, false);
    ASSERT_TRUE(rec.is_object()) << followed;
    ++records;
    EXPECT_EQ(rec["tenant"], "team-audit") << line;
    const std::string path = rec["request"].value("path", "");
    EXPECT_EQ(path.find("/audit"), std::string::npos) << "a poll of the tail itself: " << line;
    saw_later |= path == "tenants/team-audit/workloads/later";
  }
  EXPECT_TRUE(saw_later) << followed;
  // Without -f: the last N records, as a table, this call's own request among them.
  Outcome tail = as(team, {"audit", "tail", "-n", "3"});
  ASSERT_EQ(tail.rc, 0) << tail;
  EXPECT_EQ(std::count(tail.out.begin(), tail.out.end(), '\n'), 3) << tail;
  EXPECT_NE(tail.out.find("GET tenants/team-audit/audit"), std::string::npos) << tail;
  // The actor column: no display name, the start of the (HMAC'd) accessor.
  EXPECT_NE(tail.out.find("  hmac:"), std::string::npos) << tail;
  EXPECT_EQ(as(team, {"audit", "tail", "-n", "0"}).rc, 2);
  // A token with a display name is named in each of its records.
  Outcome named =
      as(root(), {"token", "create", "--tenant", "team-audit", "--policy", "tenant-admin", "--ttl",
                  "1h", "--display-name", "ci-bot", "-format=json"});
  ASSERT_EQ(named.rc, 0) << named;
  const std::string bot = parsed(named)["auth"].value("client_token", "");
  Outcome by_bot = as(bot, {"audit", "tail", "-n", "1"});
  ASSERT_EQ(by_bot.rc, 0) << by_bot;
  EXPECT_NE(by_bot.out.find("  request  ci-bot  GET tenants/team-audit/audit"), std::string::npos)
      << by_bot;
}

TEST_F(ClientTest, TeamQueuesInsideATenant) {
  const std::string team = tenantWithToken("team-q");
  Outcome created = as(team, {"queue", "create", "research", "--quota-gpu", "1", "--weight", "3"});
  ASSERT_EQ(created.rc, 0) << created;
  Outcome again = as(team, {"queue", "create", "research"});
  EXPECT_EQ(again.rc, 1) << again;
  EXPECT_NE(again.err.find("queue update"), std::string::npos) << again;
  Outcome updated = as(team, {"queue", "update", "research", "--limit-gpu", "2", "-format=json"});
  ASSERT_EQ(updated.rc, 0) << updated;
  EXPECT_EQ(parsed(updated)["limit_milli_gpu"], 2000);
  EXPECT_EQ(parsed(updated)["quota_milli_gpu"], 1000);  // Kept.
  EXPECT_EQ(parsed(updated)["weight"], 3);              // Kept.
  EXPECT_EQ(as(team, {"queue", "update", "missing", "--weight", "2"}).rc, 1);
  Outcome bad = as(team, {"queue", "update", "research", "--quota-gpu", "3"});
  EXPECT_EQ(bad.rc, 1) << bad;  // Above its limit of 2.
  Outcome default_q = as(team, {"queue", "create", "default", "--weight", "2"});
  EXPECT_EQ(default_q.rc, 1) << default_q;
  EXPECT_NE(default_q.err.find("follows the tenant"), std::string::npos) << default_q;
  // Teams share the tenant's guarantee (4 GPUs): research has 1, so another may have 3, not 4.
  Outcome over = as(team, {"queue", "create", "vision", "--quota-gpu", "4"});
  EXPECT_EQ(over.rc, 1) << over;
  EXPECT_NE(over.err.find("add up to 5 GPUs, more than tenant 'team-q''s quota of 4 GPUs"),
            std::string::npos)
      << over;
  EXPECT_EQ(as(team, {"queue", "create", "vision", "--quota-gpu", "3"}).rc, 0);
  Outcome lowered = as(root(), {"tenant", "update", "team-q", "--quota-gpu", "2"});
  EXPECT_EQ(lowered.rc, 1) << lowered;
  EXPECT_NE(lowered.err.find("less than its team queues' 4 GPUs together"), std::string::npos)
      << lowered;
  ASSERT_EQ(as(team, {"queue", "delete", "vision"}).rc, 0);
  // A workload in the team's queue runs there and counts against it.
  Outcome run = as(team, {"run", "study", "--queue", "research", "--gpus", "1", "--cpu-milli",
                          "1000", "--duration", "600"});
  ASSERT_EQ(run.rc, 0) << run;
  waitInPs(team, "study", "running");
  Outcome queues = as(team, {"queue", "list", "-format=json"});
  ASSERT_EQ(queues.rc, 0) << queues;
  bool counted = false;
  for (const json& q : parsed(queues)) {
    if (q["name"] == "team-q/research") {
      counted = q["allocated_milli_gpu"] == 1000 && q["quota_milli_gpu"] == 1000;
    }
  }
  EXPECT_TRUE(counted) << queues;
  Outcome nowhere = as(team, {"run", "lost", "--queue", "nope", "--cpu-milli", "100"});
  EXPECT_EQ(nowhere.rc, 1) << nowhere;
  EXPECT_NE(nowhere.err.find("no queue 'nope'"), std::string::npos) << nowhere;
  // A queue with work in it is not deleted; once the work is over, it is, and takes no more.
  Outcome busy = as(team, {"queue", "delete", "research"});
  EXPECT_EQ(busy.rc, 1) << busy;
  EXPECT_NE(busy.err.find("pending or running"), std::string::npos) << busy;
  EXPECT_EQ(as(team, {"queue", "show", "research"}).rc, 0);
  EXPECT_EQ(as(team, {"cancel", "study"}).rc, 0);
  waitInPs(team, "study", "cancelled");
  Outcome deleted = as(team, {"queue", "delete", "research"});
  ASSERT_EQ(deleted.rc, 0) << deleted;
  EXPECT_EQ(as(team, {"queue", "show", "research"}).rc, 1);
  EXPECT_EQ(as(team, {"queue", "delete", "research"}).rc, 1);  // Gone: 404.
  Outcome after = as(team, {"run", "late", "--queue", "research", "--cpu-milli", "100"});
  EXPECT_EQ(after.rc, 1) << after;
  EXPECT_NE(after.err.find("no queue 'research'"), std::string::npos) << after;
  Outcome keep_default = as(team, {"queue", "delete", "default"});
  EXPECT_EQ(keep_default.rc, 1) << keep_default;
  // Created again, it takes work again, with its new settings.
  ASSERT_EQ(as(team, {"queue", "create", "research", "--quota-gpu", "2"}).rc, 0);
  Outcome shown = as(team, {"queue", "show", "research", "-format=json"});
  EXPECT_EQ(parsed(shown)["quota_milli_gpu"], 2000) << shown;
  Outcome again_run =
      as(team, {"run", "again", "--queue", "research", "--cpu-milli", "100", "--duration", "600"});
  EXPECT_EQ(again_run.rc, 0) << again_run;
  Outcome cancel_again = as(team, {"cancel", "again"});
  EXPECT_EQ(cancel_again.rc, 0) << cancel_again;
}

TEST_F(ClientTest, ATenantsPoliciesAreCapped) {
  // tenant-admin, which every tenant has, is one of the two.
  const std::string team = tenantWithToken("team-pol");
  ASSERT_EQ(as(root(), {"tenant", "update", "team-pol", "--max-policies", "2"}).rc, 0);
  std::ofstream(home_ / "p.hcl") << "path \"workloads/*\" { capabilities = [\"read\"] }\n";
  const std::string file = (home_ / "p.hcl").string();
  ASSERT_EQ(as(team, {"policy", "write", "reader", file}).rc, 0);
  Outcome third = as(team, {"policy", "write", "other", file});
  EXPECT_EQ(third.rc, 1) << third;
  EXPECT_NE(third.err.find("limit of 2 policies"), std::string::npos) << third;
  EXPECT_EQ(as(team, {"policy", "write", "reader", file}).rc, 0);  // A change is no new one.
  ASSERT_EQ(as(team, {"policy", "delete", "reader"}).rc, 0);
  EXPECT_EQ(as(team, {"policy", "write", "other", file}).rc, 0);
}

TEST_F(ClientTest, ATenantsTokensAreCapped) {
  // The tenant's first token (its admin's) is one of the two.
  const std::string team = tenantWithToken("team-tok");
  ASSERT_EQ(as(root(), {"tenant", "update", "team-tok", "--max-tokens", "2"}).rc, 0);
  ASSERT_EQ(as(team, {"token", "create", "--policy", "tenant-admin", "--ttl", "1h"}).rc, 0);
  Outcome third = as(team, {"token", "create", "--policy", "tenant-admin", "--ttl", "1h"});
  EXPECT_EQ(third.rc, 1) << third;
  EXPECT_NE(third.err.find("limit of 2 tokens"), std::string::npos) << third;
  // The admin is held to the tenant's cap too when it creates the tenant's tokens.
  EXPECT_EQ(as(root(), {"token", "create", "--tenant", "team-tok", "--ttl", "1h"}).rc, 1);
}

TEST_F(ClientTest, ATenantsTeamQueuesInServiceAreCapped) {
  const std::string team = tenantWithToken("team-cap");
  ASSERT_EQ(as(root(), {"tenant", "update", "team-cap", "--max-queues", "2"}).rc, 0);
  ASSERT_EQ(as(team, {"queue", "create", "one"}).rc, 0);
  ASSERT_EQ(as(team, {"queue", "create", "two"}).rc, 0);
  Outcome third = as(team, {"queue", "create", "three"});
  EXPECT_EQ(third.rc, 1) << third;
  EXPECT_NE(third.err.find("limit of 2 queues"), std::string::npos) << third;
  // Changing one is no new queue.
  EXPECT_EQ(as(team, {"queue", "update", "one", "--weight", "2"}).rc, 0);
  // A deleted queue's place is free at once (its scheduler node goes to the next new queue),
  // under its own name or another.
  ASSERT_EQ(as(team, {"queue", "delete", "two"}).rc, 0);
  EXPECT_EQ(as(team, {"queue", "create", "three"}).rc, 0);
  EXPECT_EQ(as(team, {"queue", "create", "two"}).rc, 1);
  ASSERT_EQ(as(team, {"queue", "delete", "three"}).rc, 0);
  EXPECT_EQ(as(team, {"queue", "create", "two"}).rc, 0);
  // The new queue takes work.
  EXPECT_EQ(as(team, {"run", "in-two", "--queue", "two", "--cpu-milli", "100"}).rc, 0);
  // The admin raises the cap.
  ASSERT_EQ(as(root(), {"tenant", "update", "team-cap", "--max-queues", "3"}).rc, 0);
  EXPECT_EQ(as(team, {"queue", "create", "three"}).rc, 0);
  Outcome shown = as(root(), {"tenant", "show", "team-cap", "-format=json"});
  EXPECT_EQ(parsed(shown)["max_queues"], 3) << shown;
}

TEST_F(ClientTest, RunFromAnHclFileWithFlagsOverridingIt) {
  const std::string t = tenantWithToken("team-f");
  std::ofstream(home_ / "job.hcl") << "tasks = 1\n"
                                   << "cpuMilli = 1000\n"
                                   << "duration = 600\n"
                                   << "gpu {\n  count = 1\n  models = [\"H100-80GB\"]\n}\n";
  Outcome run = as(t, {"run", "from-file", "-f", (home_ / "job.hcl").string(), "--gpus", "2",
                       "--tasks", "2", "--min-available", "1", "--no-preempt"});
  ASSERT_EQ(run.rc, 0) << run;
  Outcome show = as(t, {"show", "from-file", "-format=json"});
  ASSERT_EQ(show.rc, 0) << show;
  const json spec = parsed(show)["spec"];
  EXPECT_EQ(spec["gpu"]["count"], 2) << spec;                     // The flag wins.
  EXPECT_EQ(spec["gpu"]["models"], json({"H100-80GB"})) << spec;  // The file's stays.
  EXPECT_EQ(spec["tasks"], 2) << spec;
  EXPECT_EQ(spec["minAvailable"], 1) << spec;
  EXPECT_EQ(spec["preemptible"], false) << spec;
  EXPECT_EQ(spec["cpuMilli"], 1000) << spec;
  // A file that does not parse is bad input, named with its line.
  std::ofstream(home_ / "bad.hcl") << "tasks = \n";
  Outcome bad = as(t, {"run", "bad", "-f", (home_ / "bad.hcl").string()});
  EXPECT_EQ(bad.rc, 2) << bad;
  EXPECT_NE(bad.err.find("bad.hcl:"), std::string::npos) << bad;
  EXPECT_EQ(as(t, {"cancel", "from-file"}).rc, 0);
}

TEST_F(ClientTest, PolicyWriteReadFromHclAndItIsEnforced) {
  const std::string t = tenantWithToken("team-p");
  std::ofstream(home_ / "viewer.hcl") << "# Read-only access to workloads.\n"
                                      << "path \"workloads\" { capabilities = [\"list\"] }\n"
                                      << "path \"workloads/*\" {\n"
                                      << "  capabilities = [\"read\", \"list\"]\n}\n";
  Outcome write = as(t, {"policy", "write", "viewer", (home_ / "viewer.hcl").string()});
  ASSERT_EQ(write.rc, 0) << write;
  Outcome read = as(t, {"policy", "read", "viewer"});
  ASSERT_EQ(read.rc, 0) << read;
  EXPECT_NE(read.out.find("path \"workloads/*\" {\n  capabilities = [\"read\", \"list\"]\n}"),
            std::string::npos)
      << read;
  Outcome read_json = as(t, {"policy", "read", "viewer", "-format=json"});
  ASSERT_EQ(read_json.rc, 0) << read_json;
  EXPECT_EQ(parsed(read_json)["policy"]["path"]["workloads"]["capabilities"], json({"list"}))
      << read_json;
  Outcome list = as(t, {"policy", "list", "-format=json"});
  ASSERT_EQ(list.rc, 0) << list;
  EXPECT_EQ(parsed(list), json({"tenant-admin", "viewer"})) << list;

  // A token with only the viewer policy (from the admin: a tenant token can only hand out
  // policies it has) can list but not submit.
  Outcome token = as(root(), {"token", "create", "--tenant", "team-p", "--policy", "viewer",
                              "--ttl", "10m", "-format=json"});
  ASSERT_EQ(token.rc, 0) << token;
  const std::string viewer = parsed(token)["auth"]["client_token"];
  EXPECT_EQ(as(viewer, {"ps"}).rc, 0);
  Outcome refused = as(viewer, {"run", "nope", "--cpu-milli", "100"});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_EQ(refused.err.rfind("error: 403: permission denied", 0), 0U) << refused;

  // The admin's own policies live apart (sys/policies), JSON files too.
  std::ofstream(home_ / "ops.json") << R"({"path": {"nodes": {"capabilities": ["read"]}}})";
  Outcome admin = as(root(), {"policy", "write", "ops", (home_ / "ops.json").string()});
  ASSERT_EQ(admin.rc, 0) << admin;
  Outcome admin_list = as(root(), {"policy", "list", "-format=json"});
  EXPECT_EQ(parsed(admin_list), json({"ops"})) << admin_list;
  EXPECT_EQ(as(root(), {"policy", "delete", "ops"}).rc, 0);
  EXPECT_EQ(as(t, {"policy", "delete", "viewer"}).rc, 0);
  Outcome gone = as(t, {"policy", "read", "viewer"});
  EXPECT_EQ(gone.rc, 1) << gone;
  EXPECT_EQ(gone.err.rfind("error: 404: ", 0), 0U) << gone;
}

TEST_F(ClientTest, TokenLookupRenewRevoke) {
  Outcome created = as(demo(), {"token", "create", "--ttl", "1h", "--explicit-max-ttl", "2h",
                                "--display-name", "ci", "-format=json"});
  ASSERT_EQ(created.rc, 0) << created;
  // Vault's whole answer, as `vault token create -format=json` prints it.
  const json answer = parsed(created);
  for (const char* key :
       {"request_id", "lease_id", "lease_duration", "renewable", "data", "warnings", "auth"}) {
    EXPECT_TRUE(answer.contains(key)) << key << ": " << created;
  }
  // No --policy: a token with none, which Vault would not give (it copies the parent's).
  EXPECT_NE(answer["warnings"].dump().find("policies: none given"), std::string::npos) << created;
  const json auth = answer["auth"];
  EXPECT_EQ(auth["token_type"], "service") << created;
  const std::string accessor = auth["accessor"];
  const std::string secret = auth["client_token"];
  EXPECT_EQ(auth["tenant"], "demo");

  Outcome lookup = as(demo(), {"token", "lookup", accessor, "-format=json"});
  ASSERT_EQ(lookup.rc, 0) << lookup;
  EXPECT_EQ(parsed(lookup)["display_name"], "ci");
  EXPECT_EQ(parsed(lookup).dump().find(secret), std::string::npos);  // Never the secret.
  Outcome self = as(secret, {"token", "lookup"});
  ASSERT_EQ(self.rc, 0) << self;
  EXPECT_TRUE(std::regex_search(self.out, std::regex(R"(accessor\s+)" + accessor))) << self;
  EXPECT_TRUE(std::regex_search(self.out, std::regex(R"(tenant\s+demo)"))) << self;

  Outcome renew = as(demo(), {"token", "renew", accessor, "--increment", "90m", "-format=json"});
  ASSERT_EQ(renew.rc, 0) << renew;
  EXPECT_GT(parsed(renew)["auth"]["lease_duration"].get<int64_t>(), 3600) << renew;
  Outcome renew_self = as(secret, {"token", "renew"});
  EXPECT_EQ(renew_self.rc, 0) << renew_self;

  // A periodic service credential, and its warning for no policies in text on stderr.
  Outcome periodic = as(demo(), {"token", "create", "--policy", "tenant-admin", "--period", "2h",
                                 "--meta", "purpose=scrape"});
  ASSERT_EQ(periodic.rc, 0) << periodic;
  EXPECT_TRUE(std::regex_search(periodic.out, std::regex(R"(token_period\s+2h)"))) << periodic;
  Outcome bare = as(demo(), {"token", "create", "--ttl", "5m"});
  ASSERT_EQ(bare.rc, 0) << bare;
  EXPECT_NE(bare.err.find("WARNING! policies: none given"), std::string::npos) << bare;

  Outcome no_renew = as(demo(), {"token", "create", "--no-renew", "--ttl", "5m", "-format=json"});
  ASSERT_EQ(no_renew.rc, 0) << no_renew;
  EXPECT_EQ(parsed(no_renew)["auth"]["renewable"], false);
  Outcome refused =
      as(parsed(no_renew)["auth"]["client_token"].get<std::string>(), {"token", "renew"});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_NE(refused.err.find("not renewable"), std::string::npos) << refused;

  EXPECT_EQ(as(secret, {"token", "lookup"}).rc, 0);
  Outcome revoke = as(demo(), {"token", "revoke", accessor});
  ASSERT_EQ(revoke.rc, 0) << revoke;
  Outcome after = as(secret, {"token", "lookup"});
  EXPECT_EQ(after.rc, 1) << after;
  EXPECT_EQ(after.err.rfind("error: 403: ", 0), 0U) << after;
  EXPECT_NE(after.err.find("revoked"), std::string::npos) << after;
  EXPECT_EQ(as(demo(), {"token", "lookup", accessor}).rc, 1);

  const std::string other =
      parsed(as(demo(), {"token", "create", "-format=json"}))["auth"]["client_token"];
  EXPECT_EQ(as(other, {"token", "lookup"}).rc, 0);
  EXPECT_EQ(as(other, {"token", "revoke", "--self"}).rc, 0);
  EXPECT_EQ(as(other, {"token", "lookup"}).rc, 1);
  // A tenant's token cannot make tokens for another tenant.
  Outcome cross = as(demo(), {"token", "create", "--tenant", "other"});
  EXPECT_EQ(cross.rc, 1) << cross;
}

TEST_F(ClientTest, LoginStoresTheTokenForLaterCommands) {
  // Without a token anywhere the commands say how to give one.
  Outcome none = as("", {"ps"});
  EXPECT_EQ(none.rc, 2) << none;
  EXPECT_NE(none.err.find("tessera login"), std::string::npos) << none;

  Outcome bad = as("", {"login", "tsr.notarealtoken00000000000"});
  EXPECT_EQ(bad.rc, 1) << bad;
  EXPECT_EQ(bad.err.rfind("error: 403: ", 0), 0U) << bad;
  EXPECT_FALSE(fs::exists(home_ / ".tessera-token"));

  Outcome login = as("", {"login", demo()});
  ASSERT_EQ(login.rc, 0) << login;
  EXPECT_TRUE(std::regex_search(login.out, std::regex(R"(tenant\s+demo)"))) << login;
  EXPECT_TRUE(std::regex_search(login.out, std::regex(R"(policies\s+tenant-admin)"))) << login;
  EXPECT_TRUE(std::regex_search(login.out, std::regex(R"(ttl\s+\d+h)"))) << login;
  EXPECT_EQ(login.out.find(demo()), std::string::npos) << "the token is never printed";
  const fs::path file = home_ / ".tessera-token";
  ASSERT_TRUE(fs::exists(file));
  EXPECT_EQ(slurp(file), demo() + "\n");
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);

  // Later commands use it when TESSERA_TOKEN is unset, and TESSERA_TOKEN wins over it.
  Outcome ps = as("", {"token", "lookup", "-format=json"});
  ASSERT_EQ(ps.rc, 0) << ps;
  EXPECT_EQ(parsed(ps)["tenant"], "demo");
  Outcome env_wins = as(root(), {"token", "lookup", "-format=json"});
  ASSERT_EQ(env_wins.rc, 0) << env_wins;
  EXPECT_EQ(parsed(env_wins)["tenant"], "");
}

TEST_F(ClientTest, ErrorsSayWhatWentWrong) {
  // The server's refusal: its status and message, exit 1.
  Outcome forged = as("tsr.forgedforgedforgedforged", {"nodes"});
  EXPECT_EQ(forged.rc, 1) << forged;
  EXPECT_EQ(forged.err,
            "error: 403: permission denied: missing, invalid, revoked or expired token\n")
      << forged;
  Outcome too_big = as(demo(), {"run", "huge", "--gpus", "99"});
  EXPECT_EQ(too_big.rc, 1) << too_big;
  EXPECT_EQ(too_big.err.rfind("error: 400: ", 0), 0U) << too_big;
  EXPECT_NE(too_big.err.find("gpu.count"), std::string::npos) << too_big;
  Outcome missing = as(demo(), {"show", "no-such-workload"});
  EXPECT_EQ(missing.rc, 1) << missing;
  EXPECT_EQ(missing.err, "error: 404: no workload 'no-such-workload'\n") << missing;

  // Usage errors: exit 2.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"frobnicate"},
           {"ps", "--bogus"},
           {"tenant"},
           {"run"},
           {"token", "revoke"},
           {"run", "x", "--isolation", "sideways"},
           {"ps", "-format=yaml"},
       }) {
    Outcome o = as(demo(), args);
    EXPECT_EQ(o.rc, 2) << args[0] << "\n" << o;
    EXPECT_FALSE(o.err.empty()) << args[0];
  }

  // Nothing listening: which address, why, and what to check.
  const std::string down = "https://127.0.0.1:" + std::to_string(closedPort());
  auto env = envFor(demo());
  env["TESSERA_ADDR"] = down;
  Outcome refused = tessera({"ps"}, env, home_);
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_NE(refused.err.find("cannot reach " + down), std::string::npos) << refused;
  EXPECT_NE(refused.err.find("refused"), std::string::npos) << refused;
  EXPECT_NE(refused.err.find("TESSERA_ADDR"), std::string::npos) << refused;
  // --address wins over TESSERA_ADDR (here, back to the real server).
  Outcome flag = tessera({"nodes", "-address=" + address()}, env, home_);
  EXPECT_EQ(flag.rc, 0) << flag;

  // A server whose certificate this client does not trust.
  auto other_ca = tessera::server::CertAuthority::create("another CA", std::chrono::hours(1));
  ASSERT_TRUE(other_ca.isOk());
  std::ofstream(home_ / "other-ca.pem") << (*other_ca)->certPem();
  env = envFor(demo());
  env["TESSERA_CACERT"] = (home_ / "other-ca.pem").string();
  Outcome untrusted = tessera({"ps"}, env, home_);
  EXPECT_EQ(untrusted.rc, 1) << untrusted;
  EXPECT_NE(untrusted.err.find("certificate verify failed"), std::string::npos) << untrusted;
  EXPECT_NE(untrusted.err.find("TESSERA_CACERT"), std::string::npos) << untrusted;
  // ... and --ca-cert fixes it.
  EXPECT_EQ(tessera({"ps", "--ca-cert", caCert()}, env, home_).rc, 0);

  // Addresses that are not addresses are usage errors.
  env = envFor(demo());
  env["TESSERA_ADDR"] = "127.0.0.1:8200";
  Outcome no_scheme = tessera({"ps"}, env, home_);
  EXPECT_EQ(no_scheme.rc, 2) << no_scheme;
  EXPECT_NE(no_scheme.err.find("https://"), std::string::npos) << no_scheme;
}

// `tessera show` says why a task was evicted (issue #37): a drain moves a running task, and the
// workload's events in the table carry the reason the API has.
TEST_F(ClientTest, ShowSaysWhyATaskWasEvicted) {
  const std::string team = tenantWithToken("evicted-show");
  ASSERT_EQ(as(team, {"run", "mover", "--gpus", "1", "--cpu-milli", "1000", "--duration", "600",
                      "--", "sleep", "600"})
                .rc,
            0);
  waitInPs(team, "mover", "running");
  Outcome shown = as(team, {"show", "mover", "-format=json"});
  ASSERT_EQ(shown.rc, 0) << shown;
  const std::string node = parsed(shown)["status"]["tasks"][0].value("node", "");
  ASSERT_FALSE(node.empty()) << shown;
  ASSERT_EQ(as(root(), {"node", "drain", node}).rc, 0);
  Outcome table;
  const bool said = waitFor(
      [&] {
        table = as(team, {"show", "mover"});
        return table.out.find("evicted: drained: node " + node) != std::string::npos;
      },
      std::chrono::seconds(20));
  EXPECT_EQ(as(root(), {"node", "uncordon", node}).rc, 0);
  EXPECT_TRUE(said) << table;
}

}  // namespace
