// Three server replicas on one 3-member etcd cluster (Debian's etcd-server, on loopback), with
// the tenant, tokens and agents the HA tests share (ha_test.cc, ha_failover_test.cc). Clients get
// the list of the three addresses (TESSERA_ADDR=a,b,c).
#pragma once

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
#include <string>
#include <vector>

#include "process.h"
#include "store/etcd_test_cluster.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {

namespace ha_fs = std::filesystem;
using namespace std::chrono_literals;

class HaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ha_fs::temp_directory_path() / ("tessera-ha-" + std::to_string(::getpid()));
    ha_fs::remove_all(dir_);
    ha_fs::create_directories(dir_);
    auto ca = writeTestCertificates(dir_);
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    ca_pem_ = *ca;
    auto cluster = store::EtcdTestCluster::start(3);
    ASSERT_TRUE(cluster.isOk()) << cluster.status().toString();
    etcd_ = std::move(cluster).value();
    std::string endpoints;
    for (const std::string& url : etcd_->clientUrls()) {
      endpoints += (endpoints.empty() ? "\"" : ", \"") + url + "\"";
    }
    for (int i = 0; i < 3; ++i) {
      const uint16_t port = freeLoopbackPort();
      ASSERT_NE(port, 0);
      addresses_.push_back("https://127.0.0.1:" + std::to_string(port));
      const ha_fs::path d = dir_ / ("server-" + std::to_string(i));
      ha_fs::create_directories(d);
      std::ofstream(d / "server.hcl")
          << "storage \"etcd\" {\n  endpoints = [" << endpoints << "]\n}\n"
          << "secrets { key_file = \"" << (dir_ / "unseal.key").string() << "\" }\n"
          << "ha { api_addr = \"" << addresses_.back() << "\"  lease_ttl_ms = 2000 }\n"
          << "listener \"tcp\" {\n  address = \"127.0.0.1:" << port << "\"\n"
          << "  tls_cert_file = \"" << (dir_ / "cert.pem").string() << "\"\n"
          << "  tls_key_file = \"" << (dir_ / "key.pem").string() << "\"\n}\n"
          << "audit \"file\" { path = \"" << (d / "audit.log").string() << "\" }\n"
          << "scheduler { pass_interval_ms = 50 }\n"
          << "nodes {\n  agents = \"gpu-a=t4-2x,gpu-b=t4-2x\"\n  lease_ttl_ms = 12000\n}\n";
    }
    all_ = addresses_[0] + "," + addresses_[1] + "," + addresses_[2];
    // The first leads (and prints the root token); the others stand by.
    startServer(0);
    ASSERT_TRUE(waitFor(
        [&] { return servers_[0]->output().find("listening on") != std::string::npos; }, 30s))
        << servers_[0]->output() << servers_[0]->errors();
    std::smatch m;
    const std::string out = servers_[0]->output();
    ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((tsr\.[A-Za-z0-9]{24}))"))) << out;
    root_ = m[1];
    for (int i : {1, 2}) {
      startServer(i);
      ASSERT_TRUE(
          waitFor([&] { return servers_[i]->output().find("standby") != std::string::npos; }, 30s))
          << servers_[i]->errors();
    }
    const Client leader(addresses_[0], ca_pem_);
    for (const std::string node : {"gpu-a", "gpu-b"}) {
      const nlohmann::json policy = {
          {"path", {{"sys/nodes/" + node + "/*", {{"capabilities", {"read", "update"}}}}}}};
      ASSERT_EQ(leader.call("POST", "/v1/sys/policies/node-" + node, root_, policy).status, 204U);
      Response t = leader.call("POST", "/v1/auth/token/create", root_,
                               {{"policies", {"node-" + node}}, {"ttl", "1h"}});
      ASSERT_EQ(t.status, 200U) << t.raw;
      node_tokens_[node] = t.body["auth"]["client_token"];
    }
    ASSERT_EQ(leader.call("POST", "/v1/tenants/team-1", root_, {{"quota", {{"gpu", 4}}}}).status,
              204U);
    Response t = leader.call("POST", "/v1/auth/token/create", root_,
                             {{"tenant", "team-1"}, {"policies", {"tenant-admin"}}, {"ttl", "1h"}});
    ASSERT_EQ(t.status, 200U) << t.raw;
    tenant_ = t.body["auth"]["client_token"];
  }
  void TearDown() override {
    agents_.clear();
    servers_.clear();
    etcd_.reset();
    ha_fs::remove_all(dir_);
  }
  void startServer(int i) {
    const ha_fs::path d = dir_ / ("server-" + std::to_string(i));
    servers_[i] = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + (d / "server.hcl").string()},
        d / ("out-" + std::to_string(++starts_)));
  }
  void startAgent(const std::string& node) {
    agents_[node] = std::make_unique<Process>(
        std::vector<std::string>{"agent",
                                 "run",
                                 "--node",
                                 node,
                                 "--backend",
                                 "sim",
                                 "--profile",
                                 "t4-2x",
                                 "--address",
                                 all_,
                                 "--token-file",
                                 tokenFile(dir_, node + ".token", node_tokens_[node]),
                                 "--ca-cert",
                                 (dir_ / "ca.pem").string(),
                                 "--work-dir",
                                 (dir_ / node).string(),
                                 "--run-as",
                                 "agent",
                                 "--node-mode",
                                 "development",
                                 "--fence-after-ms",
                                 "10000"},
        dir_ / (node + ".out"));
  }
  // The tessera CLI with the tenant's token and every replica's address; `tag` names its error
  // file (several run at once).
  CmdResult cli(const std::string& args, const std::string& tag) {
    return runTessera(args, dir_ / ("cli-" + tag + ".err"),
                      "TESSERA_ADDR=" + all_ + " TESSERA_CACERT=" + (dir_ / "ca.pem").string() +
                          " TESSERA_TENANT= HOME=" + dir_.string() + " TESSERA_TOKEN=" + tenant_);
  }
  // GET through whichever replica answers (a standby's redirect is followed by the CLI, not by
  // this client: it asks each in turn).
  Response get(const std::string& target, const std::string& token) {
    for (const std::string& a : addresses_) {
      try {
        Response r = Client(a, ca_pem_).call("GET", target, token);
        if (r.status != 307 && r.status != 503) {
          return r;
        }
      } catch (const std::exception&) {
      }
    }
    return {};
  }
  // Index of the replica that leads now (-1: none answers as leader).
  int leader() {
    for (int i = 0; i < 3; ++i) {
      if (!servers_[i]) {
        continue;
      }
      try {
        if (Client(addresses_[i], ca_pem_).call("GET", "/v1/sys/health", "").status == 200) {
          return i;
        }
      } catch (const std::exception&) {
      }
    }
    return -1;
  }
  nlohmann::json taskOf(const std::string& name) {
    const nlohmann::json s =
        get("/v1/tenants/team-1/workloads/" + name, tenant_).body["data"]["status"];
    return s.value("tasks", nlohmann::json::array()).empty() ? nlohmann::json() : s["tasks"][0];
  }

  ha_fs::path dir_;
  std::string ca_pem_;
  std::vector<std::string> addresses_;
  std::string all_;
  std::string root_;
  std::string tenant_;
  std::map<std::string, std::string> node_tokens_;
  std::unique_ptr<store::EtcdTestCluster> etcd_;
  std::map<int, std::unique_ptr<Process>> servers_;
  std::map<std::string, std::unique_ptr<Process>> agents_;
  int starts_ = 0;
};

}  // namespace tessera::integration
