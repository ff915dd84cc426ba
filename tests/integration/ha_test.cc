// Issue 22, Must show 2: three server replicas on one 3-member etcd cluster, two real agents,
// clients with the list of the three addresses (TESSERA_ADDR=a,b,c), all on loopback.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ha_cluster.h"
#include "process.h"
#include "server/certs.h"
#include "store/etcd_test_cluster.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

TEST_F(HaTest, KillingTheLeaderLosesNoAcknowledgedWriteAndNoRunningTask) {
  startAgent("gpu-a");
  startAgent("gpu-b");
  // Two tasks that record their pid and each start.
  for (const std::string w : {"keep-1", "keep-2"}) {
    CmdResult r = cli("run " + w +
                          " --gpus 2 -- sh -c 'echo $$ > task.pid; echo start >> runs; exec "
                          "sleep 600'",
                      "setup");
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  std::map<std::string, json> before;
  for (const std::string w : {"keep-1", "keep-2"}) {
    ASSERT_TRUE(waitFor([&] { return taskOf(w).value("state", "") == "running"; }, 30s))
        << taskOf(w).dump();
    before[w] = taskOf(w);
  }
  ASSERT_NE(before["keep-1"]["node"], before["keep-2"]["node"]);
  std::map<std::string, pid_t> pids;
  for (const auto& [w, task] : before) {
    const fs::path folder = dir_ / task["node"].get<std::string>() / ("team-1." + w + ".0");
    ASSERT_TRUE(waitFor([&] { return !slurp(folder / "task.pid").empty(); }, 10s));
    pids[w] = hostPidOf(folder, std::stoi(slurp(folder / "task.pid")));
    ASSERT_GT(pids[w], 0);
  }

  // A bounded burst of KV writes and submissions from three clients; the leader is killed
  // while it runs. Each makes 12 attempts, and goes on (up to 60) until it has made 2 after
  // another replica leads: on a loaded machine the failover may take most of the first 12.
  std::mutex mu;
  std::set<std::string> acked_kv;
  std::set<std::string> acked_workloads;
  std::atomic<int> refused{0};
  std::atomic<bool> failed_over{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c) {
    clients.emplace_back([&, c] {
      int after = 0;
      for (int i = 0; i < 60 && (i < 12 || after < 2); ++i) {
        after += failed_over ? 1 : 0;
        const std::string id = std::to_string(c) + "-" + std::to_string(i);
        const bool kv = i % 2 == 0;
        CmdResult r = kv ? cli("secrets kv put burst/" + id + " v=" + id, "c" + id)
                         : cli("run b-" + id + " --gpus 0 --cpu-milli 10 -- true", "c" + id);
        std::lock_guard lock(mu);
        if (r.rc == 0) {
          (kv ? acked_kv : acked_workloads).insert(id);
        } else {
          ++refused;
        }
      }
    });
  }
  std::this_thread::sleep_for(700ms);
  ASSERT_EQ(leader(), 0);
  EXPECT_EQ(servers_[0]->stop(SIGKILL), -SIGKILL);
  servers_[0].reset();
  const auto killed = std::chrono::steady_clock::now();
  // Another replica leads and accepts writes.
  std::string took;
  ASSERT_TRUE(waitFor(
      [&] {
        CmdResult r = cli("secrets kv put probe/after v=1", "probe");
        took = r.err;
        return r.rc == 0;
      },
      20s))
      << took;
  failed_over = true;
  const double failover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_LE(failover_s, 5.0);
  for (std::thread& t : clients) {
    t.join();
  }
  const int now_leading = leader();
  ASSERT_TRUE(now_leading == 1 || now_leading == 2) << now_leading;
  std::cout << "[ha] failover: a replica accepted a write " << failover_s
            << " s after the leader was killed; acknowledged " << acked_kv.size() << " KV writes, "
            << acked_workloads.size() << " submissions; " << refused << " refused\n";
  // No acknowledged write is lost.
  for (const std::string& id : acked_kv) {
    Response r = get("/v1/tenants/team-1/secrets/kv/data/burst/" + id, tenant_);
    EXPECT_EQ(r.status, 200U) << id << " " << r.raw;
    EXPECT_EQ(r.body["data"]["data"].value("v", ""), id) << r.raw;
  }
  for (const std::string& id : acked_workloads) {
    EXPECT_EQ(get("/v1/tenants/team-1/workloads/b-" + id, tenant_).status, 200U) << id;
  }
  EXPECT_GT(acked_kv.size() + acked_workloads.size(), 10U);
  // Every acknowledged write is in the audit log of a replica (the one that made it).
  std::string audit;
  for (int i = 0; i < 3; ++i) {
    audit += slurp(dir_ / ("server-" + std::to_string(i)) / "audit.log");
  }
  for (const std::string& id : acked_kv) {
    EXPECT_NE(audit.find("tenants/team-1/secrets/kv/data/burst/" + id + "\""), std::string::npos)
        << id;
  }

  // The running tasks kept their processes, nodes, GPUs and generations; none ran twice.
  std::this_thread::sleep_for(3s);  // Agents fail over, heartbeats and passes come and go.
  for (const auto& [w, task] : before) {
    ASSERT_TRUE(waitFor([&] { return taskOf(w).value("state", "") == "running"; }, 20s))
        << taskOf(w).dump();
    const json after = taskOf(w);
    EXPECT_EQ(after["node"], task["node"]) << w;
    EXPECT_EQ(after["gpus"], task["gpus"]) << w;
    EXPECT_EQ(after["generation"], task["generation"]) << w;
    EXPECT_FALSE(gone(pids[w])) << w;
    const fs::path folder = dir_ / task["node"].get<std::string>() / ("team-1." + w + ".0");
    EXPECT_EQ(slurp(folder / "runs"), "start\n") << w;
  }

  // One etcd member dies: clients see nothing of it.
  etcd_->kill(0);
  CmdResult r = cli("secrets kv put after-etcd/k v=2", "etcd");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = cli("secrets kv get after-etcd/k", "etcd-get");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("2"), std::string::npos) << r.out;
  for (const auto& [w, task] : before) {
    EXPECT_EQ(taskOf(w)["generation"], task["generation"]) << w;
  }
}

}  // namespace
}  // namespace tessera::integration
