// Distributed training across machines (issue #38): a real server, three `tessera agent run`
// processes in three network namespaces (so each node has an address of its own), and gangs
// whose tasks, run as the tenant's Unix user, meet at MASTER_ADDR:MASTER_PORT over TCP as
// torchrun's would. Needs root (network namespaces), iproute2 and /usr/bin/python3.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "process.h"
#include "test_certs.h"
#include "test_network.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::slurp;
using tessera::integration::TestNetwork;
using tessera::integration::waitFor;
using namespace std::chrono_literals;

// Each task prints what it was told, then meets its peers: rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every rank (0 too) connects and sends its RANK, and rank 0 checks that
// it heard WORLD_SIZE distinct ranks. HOLD seconds of sleep at the end keep a gang running.
constexpr const char* kRendezvous = R"PY(
import os, socket, sys, threading, time
e = os.environ
rank, world = int(e['RANK']), int(e['WORLD_SIZE'])
addr, port = e['MASTER_ADDR'], int(e['MASTER_PORT'])
hosts = e['TESSERA_HOSTS'].split(',')
print('task %d host %s own-port %s master %s:%d hosts %s slots %s' % (
    rank, hosts[rank], e['TESSERA_PORT_MASTER'], addr, port, e['TESSERA_HOSTS'],
    e['LOCAL_WORLD_SIZE']), flush=True)
print('hostfile ' + open(e['TESSERA_HOSTFILE']).read().replace('\n', ';'), flush=True)
def send():
    for _ in range(300):
        try:
            c = socket.create_connection((addr, port), timeout=5)
            c.sendall(str(rank).encode())
            c.close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit('rank %d: nobody at %s:%d' % (rank, addr, port))
if rank == 0:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(world)
    s.settimeout(60)
    threading.Thread(target=send).start()
    got = set()
    while len(got) < world:
        c, _ = s.accept()
        got.add(int(c.recv(16)))
        c.close()
    print('rendezvous ok ' + ','.join(str(r) for r in sorted(got)), flush=True)
else:
    send()
time.sleep(float(e.get('HOLD', '0')))
)PY";

class TrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "this test makes network namespaces: it needs root";
    net_ = std::make_unique<TestNetwork>(3);
    ASSERT_TRUE(net_->ok()) << "could not make the test network (ip netns, veth, bridge)";
    dir_ = fs::temp_directory_path() / ("tessera-training-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto ca = tessera::integration::writeTestCertificates(dir_, {net_->hostAddress()});
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    std::ofstream(dir_ / "server.hcl")
        << tessera::integration::baseServerConfig(dir_, net_->hostAddress() + ":0")
        << "scheduler { pass_interval_ms = 50 }\n"
        << "nodes {\n  agents = \"n0=l40s-4x,n1=l40s-4x,n2=l40s-4x\"\n  lease_ttl_ms = 4000\n}\n";
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + (dir_ / "server.hcl").string()},
        dir_ / "server.out");
    const auto banner = tessera::integration::waitForServer(*server_);
    ASSERT_TRUE(banner) << server_->output() << server_->errors();
    address_ = banner->address;
    root_ = banner->root;
    client_ = std::make_unique<Client>(address_, *ca);
    tenant_ = tessera::integration::tenantWithAdmin(*client_, root_, "team-1",
                                                    {{"quota", {{"gpu", 12}}}});
    ASSERT_FALSE(tenant_.empty());
    for (int i = 0; i < 3; ++i) {
      const std::string node = "n" + std::to_string(i);
      const json policy = {
          {"path", {{"sys/nodes/" + node + "/*", {{"capabilities", {"read", "update"}}}}}}};
      ASSERT_EQ(client_->call("POST", "/v1/sys/policies/node-" + node, root_, policy).status, 204U);
      Response t = client_->call("POST", "/v1/auth/token/create", root_,
                                 {{"policies", {"node-" + node}}, {"ttl", "1h"}});
      ASSERT_EQ(t.status, 200U) << t.raw;
      // Each agent in its own namespace: the server sees its connections come from there.
      agents_.push_back(std::make_unique<Process>(
          std::vector<std::string>{"agent", "run", "--node", node, "--backend", "sim", "--profile",
                                   "l40s-4x", "--address", address_, "--ca-cert",
                                   (dir_ / "ca.pem").string(), "--work-dir", (dir_ / node).string(),
                                   "--node-mode", "development", "--token-file",
                                   tessera::integration::tokenFile(dir_, node + ".token",
                                                                   t.body["auth"]["client_token"])},
          dir_ / (node + ".out"), net_->ns(i)));
    }
    ASSERT_TRUE(waitFor(
        [&] {
          int ready = 0;
          const Response nodes = client_->call("GET", "/v1/nodes", root_);
          for (const json& n : nodes.body["data"]["nodes"]) {
            ready += n.value("state", "") == "ready";
          }
          return ready == 3;
        },
        30s))
        << client_->call("GET", "/v1/nodes", root_).raw;
  }
  void TearDown() override {
    agents_.clear();
    server_.reset();
    net_.reset();
    fs::remove_all(dir_);
  }

  Response submit(const std::string& name, int tasks, int gpus, double hold_s,
                  const json& extra = json::object()) {
    json body = {{"tasks", tasks},
                 {"minAvailable", tasks},
                 {"gpu", {{"count", gpus}}},
                 {"cpuMilli", 200},
                 {"memoryMiB", 256},
                 {"env", {{"HOLD", std::to_string(hold_s)}}},
                 {"command", {"/usr/bin/python3", "-c", kRendezvous}}};
    body.update(extra);
    return client_->call("POST", "/v1/tenants/team-1/workloads/" + name, tenant_, body);
  }
  // Every node's stdout of task `index` of `name`, in node order (a task placed again may have
  // run on another node; each attempt's output is appended to its node's log).
  // Every attempt's output of task `index`, on any node: a folder keeps the earlier
  // generations' logs (stdout.<generation>.log), oldest first, then the last one's stdout.log.
  std::string allOutput(const std::string& name, int index) {
    std::map<uint64_t, std::string> by_generation;
    std::string last;
    for (int i = 0; i < 3; ++i) {
      const fs::path d =
          dir_ / ("n" + std::to_string(i)) / ("team-1." + name + "." + std::to_string(index));
      std::error_code ec;
      for (const fs::directory_entry& e : fs::directory_iterator(d, ec)) {
        const std::string f = e.path().filename().string();
        if (f.starts_with("stdout.") && f.ends_with(".log") && f != "stdout.log") {
          by_generation[std::stoull(f.substr(7))] = slurp(e.path());
        }
      }
      last += slurp(d / "stdout.log");
    }
    std::string all;
    for (const auto& [generation, text] : by_generation) {
      all += text;
    }
    return all + last;
  }
  // The node folder where task `index` of `name` runs now ("" if none).
  fs::path runningDir(const std::string& name, int index) {
    const json s = status(name);
    if (!s.contains("tasks") || s["tasks"].size() <= static_cast<size_t>(index)) {
      return {};
    }
    const json& t = s["tasks"][index];
    if (t.value("state", "") != "running") {
      return {};
    }
    return dir_ / t.value("node", "") / ("team-1." + name + "." + std::to_string(index));
  }
  json status(const std::string& name) {
    return client_->call("GET", "/v1/tenants/team-1/workloads/" + name, tenant_)
        .body["data"]["status"];
  }
  // What task `index` of `name` printed, from its folder on whichever node ran it.
  std::string output(const std::string& name, int index) {
    for (int i = 0; i < 3; ++i) {
      const fs::path log = dir_ / ("n" + std::to_string(i)) /
                           ("team-1." + name + "." + std::to_string(index)) / "stdout.log";
      if (fs::exists(log)) {
        return slurp(log);
      }
    }
    return "";
  }
  // "task 2 host 10.213.5.11 own-port 20003 ...": (host, own port).
  static std::pair<std::string, std::string> hostAndPort(const std::string& out) {
    std::smatch m;
    if (!std::regex_search(out, m, std::regex(R"(host (\S+) own-port (\d+))"))) {
      return {};
    }
    return {m[1], m[2]};
  }

  std::unique_ptr<TestNetwork> net_;
  fs::path dir_;
  std::unique_ptr<Process> server_;
  std::vector<std::unique_ptr<Process>> agents_;
  std::unique_ptr<Client> client_;
  std::string address_;
  std::string root_;
  std::string tenant_;
};

// A gang of 4 tasks of 2 GPUs on nodes of 4: at least two nodes, so two addresses. Every rank
// reaches rank 0 at MASTER_ADDR:MASTER_PORT, and each is told the same hosts.
TEST_F(TrainingTest, AGangAcrossNodesMeetsAtItsMasterAddressAndPort) {
  ASSERT_EQ(submit("train", 4, 2, 0).status, 202U);
  ASSERT_TRUE(waitFor([&] { return status("train").value("phase", "") == "succeeded"; }, 90s))
      << status("train").dump() << output("train", 0) << output("train", 1);
  const std::string zero = output("train", 0);
  EXPECT_NE(zero.find("rendezvous ok 0,1,2,3"), std::string::npos) << zero;
  std::set<std::string> hosts;
  std::string told;
  for (int i = 0; i < 4; ++i) {
    const std::string out = output("train", i);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(hosts (\S+) slots (\d+))"))) << out;
    if (i == 0) {
      told = m[1];
    }
    EXPECT_EQ(m[1], told) << "task " << i << " was told other hosts";
    EXPECT_EQ(m[2], "2");  // LOCAL_WORLD_SIZE: its GPUs.
    hosts.insert(hostAndPort(out).first);
    EXPECT_NE(out.find(" slots=2;"), std::string::npos) << out;  // The hostfile.
  }
  EXPECT_GE(hosts.size(), 2U) << told;
  for (const std::string& h : hosts) {
    EXPECT_EQ(h.rfind(net_->address(0).substr(0, net_->address(0).rfind('.') + 1), 0), 0U) << h;
  }
  // Finished tasks keep where they ran and how they ended.
  const json finished = status("train");
  for (const json& t : finished["tasks"]) {
    EXPECT_EQ(t.value("exit_code", -1), 0) << t.dump();
    EXPECT_EQ(t["gpus"].size(), 2U) << t.dump();
  }
}

// Two gangs at once on the same nodes: every task has a port of its own on its node, and both
// meet their own peers.
TEST_F(TrainingTest, TwoGangsAtOnceGetPortsOfTheirOwn) {
  ASSERT_EQ(submit("pair-a", 3, 2, 3).status, 202U);
  ASSERT_EQ(submit("pair-b", 3, 2, 3).status, 202U);
  for (const std::string name : {"pair-a", "pair-b"}) {
    EXPECT_TRUE(waitFor([&] { return status(name).value("phase", "") == "succeeded"; }, 90s))
        << name << ": " << status(name).dump() << output(name, 0);
    EXPECT_NE(output(name, 0).find("rendezvous ok 0,1,2"), std::string::npos) << output(name, 0);
  }
  // Both ran at once (12 GPUs for 12 asked): no (node, port) twice.
  std::set<std::pair<std::string, std::string>> taken;
  for (const std::string name : {"pair-a", "pair-b"}) {
    for (int i = 0; i < 3; ++i) {
      const auto hp = hostAndPort(output(name, i));
      ASSERT_FALSE(hp.first.empty()) << output(name, i);
      EXPECT_TRUE(taken.insert(hp).second)
          << name << " task " << i << ": " << hp.first << ":" << hp.second << " given twice";
    }
  }
}

// Must show 1: a rank killed after the rendezvous makes the whole gang start over (restart
// attempts 1): every task anew, meeting again at a new MASTER_PORT, and the gang succeeds.
TEST_F(TrainingTest, AKilledRankRestartsTheWholeGangWithANewRendezvous) {
  ASSERT_EQ(submit("again", 4, 2, 8, {{"restart", {{"attempts", 1}}}}).status, 202U);
  ASSERT_TRUE(waitFor(
      [&] { return output("again", 0).find("rendezvous ok 0,1,2,3") != std::string::npos; }, 90s))
      << status("again").dump() << output("again", 0);
  const std::regex master(R"(master (\S+):(\d+))");
  std::smatch m;
  const std::string first = output("again", 0);
  ASSERT_TRUE(std::regex_search(first, m, master)) << first;
  const std::string first_port = m[2];
  // Rank 2's process, killed while the gang holds (SIGKILL: a crash, not a stop).
  const fs::path rank2 = runningDir("again", 2);
  ASSERT_FALSE(rank2.empty()) << status("again").dump();
  std::istringstream shim(slurp(rank2 / "shim"));
  pid_t shim_pid = 0;
  pid_t process = 0;
  shim >> shim_pid >> process;
  ASSERT_GT(process, 0) << slurp(rank2 / "shim");
  ASSERT_EQ(::kill(process, SIGKILL), 0);
  ASSERT_TRUE(waitFor([&] { return status("again").value("phase", "") == "succeeded"; }, 120s))
      << status("again").dump() << allOutput("again", 0);
  const json done = status("again");
  EXPECT_EQ(done.value("attempt", 0), 2) << done.dump();
  ASSERT_EQ(done["attempts"].size(), 1U) << done.dump();
  EXPECT_NE(done["attempts"][0].get<std::string>().find("task 2 on node"), std::string::npos)
      << done.dump();
  // Every rank met its peers again, task 0 at a new port.
  const std::string all = allOutput("again", 0);
  std::vector<std::string> ports;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), master); it != std::sregex_iterator();
       ++it) {
    ports.push_back((*it)[2]);
  }
  ASSERT_EQ(ports.size(), 2U) << all;
  EXPECT_EQ(ports[0], first_port);
  EXPECT_NE(ports[1], first_port) << "the second rendezvous reused the first one's port";
  size_t met = 0;
  for (size_t at = all.find("rendezvous ok 0,1,2,3"); at != std::string::npos;
       at = all.find("rendezvous ok 0,1,2,3", at + 1)) {
    ++met;
  }
  EXPECT_EQ(met, 2U) << all;
  for (const json& t : done["tasks"]) {
    EXPECT_EQ(t.value("exit_code", -1), 0) << t.dump();
  }
}

}  // namespace
