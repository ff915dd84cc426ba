// Issue 42: failover that holds. Three replicas on a 3-member etcd (ha_cluster.h), real agents,
// clients at a steady load: kill -9 of the leader three times, a leader restarted at once, a
// leader paused past its lease.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "api/client.h"
#include "ha_cluster.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class HaFailoverTest : public HaTest {
 protected:
  // The API client the CLI and the agent use, with the three addresses and the tenant's token.
  std::unique_ptr<api::ApiClient> apiClient() {
    api::ClientConfig c;
    c.address = all_;
    c.ca_cert_file = (dir_ / "ca.pem").string();
    c.token = tenant_;
    c.timeout = std::chrono::milliseconds(10'000);
    auto client = api::ApiClient::create(c);
    EXPECT_TRUE(client.isOk()) << client.status().toString();
    return client.isOk() ? std::move(client).value() : nullptr;
  }
  // A workload's first task as the API shows it, through `client`.
  json task(api::ApiClient& client, const std::string& name) {
    auto w = client.call("GET", "/v1/tenants/team-1/workloads/" + name);
    if (!w.isOk()) {
      return json();
    }
    const json status = (*w)["data"].value("status", json::object());
    const json tasks = status.value("tasks", json::array());
    return tasks.empty() ? json::object() : tasks[0];
  }
  // The replica that answers health as the leader, asking only those in `among`.
  int leaderAmong(const std::vector<int>& among) {
    for (int i : among) {
      try {
        if (Client(addresses_[i], ca_pem_).call("GET", "/v1/sys/health", "").status == 200) {
          return i;
        }
      } catch (const std::exception&) {
      }
    }
    return -1;
  }
  // Starts a task that records its pid and each start, and waits until it runs.
  void startKeeper(const std::string& name, pid_t& pid, json& before) {
    CmdResult r = cli("run " + name +
                          " --gpus 2 -- sh -c 'echo $$ > task.pid; echo start >> runs; exec "
                          "sleep 600'",
                      "setup-" + name);
    ASSERT_EQ(r.rc, 0) << r.err;
    ASSERT_TRUE(waitFor([&] { return taskOf(name).value("state", "") == "running"; }, 30s))
        << taskOf(name).dump();
    before = taskOf(name);
    const fs::path folder = dir_ / before["node"].get<std::string>() / ("team-1." + name + ".0");
    ASSERT_TRUE(waitFor([&] { return !slurp(folder / "task.pid").empty(); }, 10s));
    pid = hostPidOf(folder, std::stoi(slurp(folder / "task.pid")));
    ASSERT_GT(pid, 0);
  }
  void expectKept(const std::string& name, pid_t pid, const json& before) {
    ASSERT_TRUE(waitFor([&] { return taskOf(name).value("state", "") == "running"; }, 20s))
        << taskOf(name).dump();
    const json after = taskOf(name);
    EXPECT_EQ(after["node"], before["node"]) << name;
    EXPECT_EQ(after["gpus"], before["gpus"]) << name;
    EXPECT_EQ(after["generation"], before["generation"]) << name;
    EXPECT_FALSE(gone(pid)) << name;
    const fs::path folder = dir_ / before["node"].get<std::string>() / ("team-1." + name + ".0");
    EXPECT_EQ(slurp(folder / "runs"), "start\n") << name << ": it ran twice";
  }
};

// Must show 1: under a steady load of writes and reads, three kill -9s of the leader lose no
// acknowledged write and show the clients no error; the agent's task runs on, untouched.
TEST_F(HaFailoverTest, ThreeKillsOfTheLeaderUnderLoadLoseNothingAndShowNoError) {
  startAgent("gpu-a");
  startAgent("gpu-b");
  pid_t pid = 0;
  json before;
  ASSERT_NO_FATAL_FAILURE(startKeeper("keep", pid, before));

  // The load: two API clients writing KV (about 10 writes/s each), one reading (about 20/s), and
  // the CLI writing in a loop; every error any of them sees is kept.
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<std::string> errors;
  std::map<std::string, std::string> acked;  // KV path -> value.
  std::atomic<int> reads{0};
  std::vector<std::thread> load;
  for (int c = 0; c < 2; ++c) {
    load.emplace_back([&, c] {
      auto client = apiClient();
      for (int i = 0; !stop && client; ++i) {
        const std::string path = "load/" + std::to_string(c) + "-" + std::to_string(i);
        auto r = client->call("POST", "/v1/tenants/team-1/secrets/kv/data/" + path,
                              {{"data", {{"v", path}}}});
        std::lock_guard lock(mu);
        if (r.isOk()) {
          acked[path] = path;
        } else {
          errors.push_back("api write " + path + ": " + r.status().message());
        }
        std::this_thread::sleep_for(100ms);
      }
    });
  }
  load.emplace_back([&] {
    auto client = apiClient();
    while (!stop && client) {
      auto r = client->call("GET", "/v1/tenants/team-1/secrets/kv/data/load/0-0");
      if (r.isOk() || r.status().code() == core::StatusCode::kNotFound) {
        ++reads;
      } else {
        std::lock_guard lock(mu);
        errors.push_back("api read: " + r.status().message());
      }
      std::this_thread::sleep_for(50ms);
    }
  });
  load.emplace_back([&] {
    for (int i = 0; !stop; ++i) {
      const std::string path = "cli/" + std::to_string(i);
      CmdResult r = cli("secrets kv put " + path + " v=" + path, "load");
      std::lock_guard lock(mu);
      if (r.rc == 0) {
        acked[path] = path;
      } else {
        errors.push_back("cli write " + path + ": " + r.err);
      }
    }
  });

  std::vector<double> failovers;
  auto probe = apiClient();
  ASSERT_TRUE(probe);
  for (int kill = 0; kill < 3; ++kill) {
    std::this_thread::sleep_for(1500ms);
    const int was = leader();
    ASSERT_GE(was, 0);
    EXPECT_EQ(servers_[was]->stop(SIGKILL), -SIGKILL);
    const auto killed = std::chrono::steady_clock::now();
    // The gap: until a write through the client is acknowledged again.
    auto r = probe->call("POST", "/v1/tenants/team-1/secrets/kv/data/probe",
                         {{"data", {{"kill", kill}}}});
    ASSERT_TRUE(r.isOk()) << r.status().toString();
    failovers.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count());
    const int now = leader();
    EXPECT_NE(now, was);
    EXPECT_GE(now, 0);
    // The killed replica comes back (as a supervisor would start it) and stands by.
    startServer(was);
    ASSERT_TRUE(
        waitFor([&] { return servers_[was]->output().find("standby") != std::string::npos; }, 30s))
        << servers_[was]->errors();
  }
  std::this_thread::sleep_for(1s);
  stop = true;
  for (std::thread& t : load) {
    t.join();
  }
  std::cout << "[ha-failover] failover gaps (kill -9 to the next acknowledged write):";
  for (double f : failovers) {
    std::cout << " " << f << " s";
  }
  std::cout << "; " << acked.size() << " writes acknowledged, " << reads << " reads, "
            << errors.size() << " errors seen by clients\n";
  for (double f : failovers) {
    EXPECT_LE(f, 3.0) << "failover within 3 s";
  }
  EXPECT_TRUE(errors.empty()) << errors.size() << " errors, the first: " << errors.front();
  // The load ran all along (about 110 reads and 90 writes on an idle 2-core machine; fewer when
  // other tests share its cores): a floor that says so, not a speed to meet.
  EXPECT_GT(acked.size(), 40U);
  EXPECT_GT(reads.load(), 50);
  // Every acknowledged write is there, once.
  auto reader = apiClient();
  ASSERT_TRUE(reader);
  for (const auto& [path, value] : acked) {
    auto r = reader->call("GET", "/v1/tenants/team-1/secrets/kv/data/" + path);
    ASSERT_TRUE(r.isOk()) << path << ": " << r.status().toString();
    EXPECT_EQ((*r)["data"]["data"].value("v", ""), value) << path;
    EXPECT_EQ((*r)["data"]["metadata"].value("version", 0), 1) << path << " applied twice";
  }
  // The agent's task ran on through all three, and the agents did too.
  expectKept("keep", pid, before);
  for (const auto& [node, agent] : agents_) {
    EXPECT_FALSE(gone(agent->pid())) << node << " agent: " << agent->errors();
  }
}

// Must show 1, second half: a leader killed and started again at once finds the leader key
// naming itself. The agent neither aborts nor believes undelivered reports delivered: a task that
// ends afterwards is reported, and the server sees it succeed.
TEST_F(HaFailoverTest, ALeaderRestartedAtOnceKeepsTheAgentAndItsReports) {
  startAgent("gpu-a");
  startAgent("gpu-b");
  pid_t pid = 0;
  json before;
  ASSERT_NO_FATAL_FAILURE(startKeeper("keep", pid, before));
  ASSERT_EQ(leader(), 0);
  EXPECT_EQ(servers_[0]->stop(SIGKILL), -SIGKILL);
  startServer(0);
  // Until a replica leads, the restarted one never sends a client to itself: it takes its own
  // key over at once (leader_test.cc checks that path) or, if it came up after its old lease
  // lapsed (a loaded machine starts it slower than the 2 s lease), stands by for whoever won.
  std::string self_redirect;
  ASSERT_TRUE(waitFor(
      [&] {
        try {
          Response r = Client(addresses_[0], ca_pem_)
                           .call("GET", "/v1/tenants/team-1/workloads/keep", tenant_);
          if (r.status / 100 == 3 && r.headers["location"].find(addresses_[0]) == 0) {
            self_redirect = r.headers["location"];
          }
        } catch (const std::exception&) {
        }
        return leader() >= 0;
      },
      20s));
  EXPECT_EQ(self_redirect, "") << "the restarted replica sent a client to itself";
  std::cout << "[ha-failover] after kill -9 and an immediate restart, replica " << leader()
            << " leads\n";
  // A task that ends once the restarted replica leads: its report must arrive.
  CmdResult r = cli("run short --gpus 1 -- sh -c 'sleep 1; exit 0'", "short");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto client = apiClient();
  ASSERT_TRUE(client);
  ASSERT_TRUE(waitFor(
      [&] {
        auto w = client->call("GET", "/v1/tenants/team-1/workloads/short");
        return w.isOk() && (*w)["data"]["status"].value("phase", "") == "succeeded";
      },
      30s))
      << client->call("GET", "/v1/tenants/team-1/workloads/short")->dump();
  expectKept("keep", pid, before);
  for (const auto& [node, agent] : agents_) {
    EXPECT_FALSE(gone(agent->pid())) << node << " agent: " << agent->errors();
    EXPECT_EQ(agent->errors().find("terminate"), std::string::npos) << agent->errors();
  }
}

// Must show 3: etcd loses its quorum for 60 s. Writes are answered 503 at once with the reason,
// health says it, every replica stays up, the agents' tasks run on (no leader can place them
// elsewhere meanwhile), and once etcd is back a replica serves within seconds, with every task
// where it was, run once.
TEST_F(HaFailoverTest, WithoutQuorumWritesAreRefusedAtOnceAndTasksRunOn) {
  startAgent("gpu-a");
  startAgent("gpu-b");
  pid_t pid = 0;
  json before;
  ASSERT_NO_FATAL_FAILURE(startKeeper("keep", pid, before));
  std::vector<pid_t> replicas;
  for (int i = 0; i < 3; ++i) {
    replicas.push_back(servers_[i]->pid());
  }
  etcd_->kill(1);
  etcd_->kill(2);
  const auto lost = std::chrono::steady_clock::now();
  // Once the replicas have noticed, a write to any of them is answered within a second, 503,
  // saying why; and health says it too.
  double answered_s = 0;
  std::string said;
  ASSERT_TRUE(waitFor(
      [&] {
        for (int i = 0; i < 3; ++i) {
          try {
            const auto t0 = std::chrono::steady_clock::now();
            Response r = Client(addresses_[i], ca_pem_)
                             .call("POST", "/v1/tenants/team-1/secrets/kv/data/no-quorum", tenant_,
                                   {{"data", {{"v", "x"}}}});
            answered_s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            said = r.raw;
            if (r.status == 503 && r.raw.find("no etcd quorum") != std::string::npos &&
                r.headers["x-tessera-leader"] == "none") {
              return answered_s < 1.0;
            }
          } catch (const std::exception&) {
          }
        }
        return false;
      },
      20s))
      << said;
  std::cout << "[ha-failover] without quorum a write was answered 503 in " << answered_s
            << " s: " << said << "\n";
  // Health says why, on every replica once each has tried the store.
  std::string health;
  EXPECT_TRUE(waitFor(
      [&] {
        for (int i = 0; i < 3; ++i) {
          Response h = Client(addresses_[i], ca_pem_).call("GET", "/v1/sys/health", "");
          health = h.raw;
          if (h.status != 503 || h.raw.find("no etcd quorum") == std::string::npos) {
            return false;
          }
        }
        return true;
      },
      15s))
      << health;
  // 60 s without quorum: replicas up (the same processes), the task running, nothing fenced.
  while (std::chrono::steady_clock::now() - lost < 60s) {
    std::this_thread::sleep_for(5s);
    ASSERT_FALSE(gone(pid)) << "the task was stopped during the outage";
    for (int i = 0; i < 3; ++i) {
      ASSERT_FALSE(gone(replicas[i])) << "replica " << i << ": " << servers_[i]->errors();
    }
  }
  // Two members of three: the quorum is back (the third comes back afterwards).
  ASSERT_TRUE(etcd_->restart(1).isOk());
  const auto back = std::chrono::steady_clock::now();
  auto client = apiClient();
  ASSERT_TRUE(client);
  auto w = client->call("POST", "/v1/tenants/team-1/secrets/kv/data/after-quorum",
                        {{"data", {{"v", "back"}}}});
  ASSERT_TRUE(w.isOk()) << w.status().toString();
  const double serving_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - back).count();
  std::cout << "[ha-failover] a write was acknowledged " << serving_s
            << " s after etcd had its quorum again\n";
  EXPECT_LE(serving_s, 5.0);
  ASSERT_TRUE(etcd_->restart(2).isOk());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(servers_[i]->pid(), replicas[i]) << "replica " << i << " was replaced";
    EXPECT_FALSE(gone(replicas[i]));
  }
  expectKept("keep", pid, before);
  for (const auto& [node, agent] : agents_) {
    EXPECT_FALSE(gone(agent->pid())) << node << " agent: " << agent->errors();
  }
}

// Item 5: losing etcd's raft leader: the scheduler's status writes go to another member when a
// try takes over 1 s, instead of waiting for etcd's request timeout.
TEST_F(HaFailoverTest, LosingEtcdsLeaderStallsTheSchedulerOnlyBriefly) {
  startAgent("gpu-a");
  startAgent("gpu-b");
  pid_t pid = 0;
  json before;
  ASSERT_NO_FATAL_FAILURE(startKeeper("keep", pid, before));
  auto raft_leader = etcd_->leader();
  ASSERT_TRUE(raft_leader.isOk()) << raft_leader.status().toString();
  auto client = apiClient();
  ASSERT_TRUE(client);
  etcd_->kill(*raft_leader);
  const auto killed = std::chrono::steady_clock::now();
  // A submission right after: accepted (the client rides out the gap), placed, and recorded as
  // running by the scheduler's status write.
  auto r = client->call("POST", "/v1/tenants/team-1/workloads/after",
                        {{"command", {"sleep", "600"}}, {"cpuMilli", 10}});
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  const double accepted_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  ASSERT_TRUE(waitFor([&] { return task(*client, "after").value("state", "") == "running"; }, 30s))
      << task(*client, "after").dump();
  const double running_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  std::cout << "[ha-failover] etcd's raft leader killed: a submission accepted after " << accepted_s
            << " s, its task running after " << running_s << " s\n";
  // Was about 7 s for the status write alone (etcd's request timeout), then 5 s. What is left
  // is etcd's own election (1-2 s after a kill; no write can be made meanwhile), which often
  // outlasts the leader's 2 s lease: it then restarts in place and takes its key back
  // (docs/server.md, "High availability").
  EXPECT_LE(accepted_s, 10.0);
  EXPECT_LE(running_s, 10.0);
  expectKept("keep", pid, before);
}

// Must show 4: a change sent again under its Idempotency-Key (its first answer lost with the
// connection) is applied once and answered as the first time; the key cannot be reused for
// another change; without a key, each send is a change.
TEST_F(HaFailoverTest, AChangeSentAgainUnderItsKeyIsAppliedOnce) {
  Client leader_client(addresses_[0], ca_pem_);
  leader_client.setHeader("Idempotency-Key", "4d1f0c52-retry-test");
  const json body = {{"data", {{"v", "once"}}}};
  Response first =
      leader_client.call("POST", "/v1/tenants/team-1/secrets/kv/data/once", tenant_, body);
  ASSERT_EQ(first.status, 200U) << first.raw;
  EXPECT_EQ(first.headers.count("idempotent-replayed"), 0U);
  Response again =
      leader_client.call("POST", "/v1/tenants/team-1/secrets/kv/data/once", tenant_, body);
  ASSERT_EQ(again.status, 200U) << again.raw;
  EXPECT_EQ(again.headers["idempotent-replayed"], "true");
  // A secrets path's answer counts as secret (as in the audit log): not kept, so the replay says
  // the change was applied once and withholds the rest.
  EXPECT_NE(again.raw.find("applied once already"), std::string::npos) << again.raw;
  // A submission too: the second send is not a 409 "exists".
  leader_client.setHeader("Idempotency-Key", "4d1f0c52-retry-run");
  const json spec = {{"command", {"true"}}, {"cpuMilli", 10}};
  Response run = leader_client.call("POST", "/v1/tenants/team-1/workloads/once", tenant_, spec);
  ASSERT_EQ(run.status, 202U) << run.raw;
  Response run_again =
      leader_client.call("POST", "/v1/tenants/team-1/workloads/once", tenant_, spec);
  EXPECT_EQ(run_again.status, 202U) << run_again.raw;
  EXPECT_EQ(run_again.headers["idempotent-replayed"], "true");
  // The same key for another change: refused, nothing applied.
  Response reused = leader_client.call("POST", "/v1/tenants/team-1/secrets/kv/data/once", tenant_,
                                       {{"data", {{"v", "other"}}}});
  EXPECT_EQ(reused.status, 422U) << reused.raw;
  leader_client.setHeader("Idempotency-Key", "");
  Response read = leader_client.call("GET", "/v1/tenants/team-1/secrets/kv/data/once", tenant_);
  ASSERT_EQ(read.status, 200U) << read.raw;
  EXPECT_EQ(read.body["data"]["data"].value("v", ""), "once");
  EXPECT_EQ(read.body["data"]["metadata"].value("version", 0), 1);
  // Without a key, a second send is a second change.
  ASSERT_EQ(
      leader_client.call("POST", "/v1/tenants/team-1/secrets/kv/data/once", tenant_, body).status,
      200U);
  read = leader_client.call("GET", "/v1/tenants/team-1/secrets/kv/data/once", tenant_);
  EXPECT_EQ(read.body["data"]["metadata"].value("version", 0), 2);
}

// Must show 2, through the real binaries: a leader paused past its lease (SIGSTOP: a VM stall,
// a long GC) is deposed; when it wakes, a write sent straight to it is not applied, and it comes
// back as a standby in the same process.
TEST_F(HaFailoverTest, APausedLeaderIsDeposedAndCannotWriteWhenItWakes) {
  ASSERT_EQ(leader(), 0);
  const pid_t old = servers_[0]->pid();
  ASSERT_EQ(::kill(old, SIGSTOP), 0);
  int now = -1;
  ASSERT_TRUE(waitFor(
      [&] {
        now = leaderAmong({1, 2});
        return now >= 0;
      },
      20s));
  const Client leader_client(addresses_[now], ca_pem_);
  ASSERT_EQ(leader_client
                .call("POST", "/v1/tenants/team-1/secrets/kv/data/fence", tenant_,
                      {{"data", {{"v", "new leader"}}}})
                .status,
            200U);
  ASSERT_EQ(::kill(old, SIGCONT), 0);
  // Straight to the woken replica, before or after it notices: never applied there.
  unsigned status = 0;
  try {
    status = Client(addresses_[0], ca_pem_)
                 .call("POST", "/v1/tenants/team-1/secrets/kv/data/fence", tenant_,
                       {{"data", {{"v", "deposed leader"}}}})
                 .status;
  } catch (const std::exception&) {
    status = 0;  // It went away mid-request (restarting): not applied either.
  }
  std::cout << "[ha-failover] the woken leader answered a write with " << status
            << " (0: the connection ended)\n";
  EXPECT_TRUE(status < 200 || status >= 300) << status;
  Response r = leader_client.call("GET", "/v1/tenants/team-1/secrets/kv/data/fence", tenant_);
  ASSERT_EQ(r.status, 200U) << r.raw;
  EXPECT_EQ(r.body["data"]["data"].value("v", ""), "new leader");
  EXPECT_EQ(r.body["data"]["metadata"].value("version", 0), 1);
  // The same process stands by again.
  ASSERT_TRUE(waitFor(
      [&] {
        try {
          return Client(addresses_[0], ca_pem_).call("GET", "/v1/sys/health", "").status == 429;
        } catch (const std::exception&) {
          return false;
        }
      },
      20s))
      << servers_[0]->errors();
  EXPECT_FALSE(gone(old));
  EXPECT_NE(servers_[0]->errors().find("restarting as a standby"), std::string::npos);
}

}  // namespace
}  // namespace tessera::integration
