#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/server.h"

namespace tessera::server {
namespace {

TEST(DefaultTenantConcurrency, HalfTheCoresBoundedByTwoAndHalfTheWorkers) {
  EXPECT_EQ(defaultTenantConcurrency(16, 16), 8);
  EXPECT_EQ(defaultTenantConcurrency(8, 16), 4);
  EXPECT_EQ(defaultTenantConcurrency(2, 16), 2);  // At least 2: group commit needs company.
  EXPECT_EQ(defaultTenantConcurrency(1, 16), 2);
  EXPECT_EQ(defaultTenantConcurrency(0, 16), 2);   // hardware_concurrency() may not know.
  EXPECT_EQ(defaultTenantConcurrency(64, 16), 8);  // Never more than half the workers.
  EXPECT_EQ(defaultTenantConcurrency(64, 3), 2);
}

class ServerConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "server.hcl").string();
    std::ofstream(path) << text;
    return path;
  }
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-config-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

constexpr const char* kBase = R"(
storage "sqlite" { path = "/tmp/x.db" }
listener "tcp" { address = "127.0.0.1:0" tls_disable = true }
audit "file" { path = "/tmp/audit.log" }
)";

TEST_F(ServerConfigTest, TenantConcurrencyIsAutomaticUnlessSet) {
  auto c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->tenant_max_in_flight, 0);  // Resolved at start by defaultTenantConcurrency.

  c = readServerConfig(write(std::string(kBase) + "limits { tenant_concurrency = 5 }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->tenant_max_in_flight, 5);
}

TEST_F(ServerConfigTest, TenantConcurrencyOutOfRangeNamesTheFieldAndFile) {
  const std::string path = write(std::string(kBase) + "limits { tenant_concurrency = 0 }\n");
  auto c = readServerConfig(path);
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("tenant_concurrency"), std::string::npos)
      << c.status().message();
  EXPECT_NE(c.status().message().find(path), std::string::npos) << c.status().message();
}

TEST_F(ServerConfigTest, NodesAreOnlyWhatTheConfigDeclares) {
  const model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  auto nodes = [&](const std::string& block) -> core::Result<std::vector<std::string>> {
    TESSERA_ASSIGN_OR_RETURN(ServerConfig c, readServerConfig(write(std::string(kBase) + block)));
    TESSERA_ASSIGN_OR_RETURN(std::vector<model::Node> all, declaredNodes(c, catalogue));
    std::vector<std::string> names;
    for (const model::Node& n : all) {
      names.push_back(n.name);
    }
    return names;
  };
  using Names = std::vector<std::string>;
  // No nodes block, an empty one, "" or "none": no node at all (agents join later).
  for (const std::string block :
       {"", "nodes {}\n", "nodes { simulated = \"\" }\n", "nodes { simulated = \"none\" }\n"}) {
    auto got = nodes(block);
    ASSERT_TRUE(got.isOk()) << block << got.status().message();
    EXPECT_EQ(*got, Names{}) << block;
  }
  auto got = nodes("nodes { simulated = \"dgx-h100:2\"  agents = \"gpu-a=t4-2x\" }\n");
  ASSERT_TRUE(got.isOk()) << got.status().message();
  EXPECT_EQ(*got, (Names{"dgx-h100-0", "dgx-h100-1", "gpu-a"}));
  // What the server's start refuses, reading refuses too, naming the file and the field.
  for (const auto& [block, expected] : std::vector<std::pair<std::string, std::string>>{
           {"nodes { simulated = \"nonesuch:1\" }\n", "nonesuch"},
           {"nodes { simulated = \"dgx-h100:0\" }\n", "PROFILE:COUNT"},
           {"nodes { simulated = 2 }\n", "nodes.simulated"},
           {"nodes { agents = \"a=t4-2x,a=t4-2x\" }\n", "declared twice"},
           {"nodes { simulated = \"x=t4-2x\"  agents = \"x=t4-2x\" }\n", "declared twice"},
           {"nodes {\n  agents = \"a=t4-2x\"\n  labels = { b = { pool = \"p\" } }\n}\n",
            "no declared node 'b'"}}) {
    auto c = readServerConfig(write(std::string(kBase) + block));
    ASSERT_FALSE(c.isOk()) << block;
    EXPECT_NE(c.status().message().find(expected), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find((dir_ / "server.hcl").string()), std::string::npos)
        << c.status().message();
  }
}

TEST_F(ServerConfigTest, CapsOnATenantsObjectsHaveDefaultsAndBounds) {
  auto c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->max_queues, 32);
  EXPECT_EQ(c->max_tokens, 10000);
  EXPECT_EQ(c->max_policies, 256);
  EXPECT_EQ(c->max_secrets, 10000);
  c = readServerConfig(write(std::string(kBase) + "limits { max_tokens = 5  max_policies = 7 }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->max_tokens, 5);
  EXPECT_EQ(c->max_policies, 7);
  c = readServerConfig(write(std::string(kBase) + "limits { max_tokens = 0 }\n"));
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("max_tokens"), std::string::npos) << c.status().message();
  c = readServerConfig(write(std::string(kBase) + "limits { max_queues = 0 }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->max_queues, 0);  // No team queues: only each tenant's default.
  c = readServerConfig(write(std::string(kBase) + "limits { max_queues = 10001 }\n"));
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("max_queues"), std::string::npos) << c.status().message();
}

TEST_F(ServerConfigTest, StorageIsSqliteOrEtcdAndEtcdNeedsItsEndpointsAndAnUnsealKeyFile) {
  constexpr const char* kRest = R"(
listener "tcp" { address = "127.0.0.1:0" tls_disable = true }
audit "file" { path = "/tmp/audit.log" }
)";
  auto c = readServerConfig(write(std::string(R"(storage "etcd" {
  endpoints = ["https://etcd-1:2379", "https://etcd-2:2379"]
  ca_file = "/etc/tessera/etcd-ca.pem"
  prefix = "/prod"
}
secrets { key_file = "/etc/tessera/unseal.key" })") +
                                  kRest));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  ASSERT_TRUE(c->etcd.has_value());
  EXPECT_EQ(c->etcd->endpoints,
            (std::vector<std::string>{"https://etcd-1:2379", "https://etcd-2:2379"}));
  EXPECT_EQ(c->etcd->ca_file, "/etc/tessera/etcd-ca.pem");
  EXPECT_EQ(c->etcd->prefix, "/prod");
  EXPECT_TRUE(c->storage_path.empty());
  c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_FALSE(c->etcd.has_value());
  for (const auto& [config, says] : std::vector<std::pair<std::string, std::string>>{
           {R"(storage "etcd" { endpoints = [] })", "endpoints"},
           {R"(storage "etcd" { endpoints = "http://127.0.0.1:2379" })", "endpoints"},
           {R"(storage "etcd" { endpoints = ["http://127.0.0.1:2379"] bogus = 1 })", "bogus"},
           {R"(storage "etcd" { endpoints = ["http://127.0.0.1:2379"] })", "key_file"},
           {R"(storage "consul" { path = "x" })", "storage \"etcd\""}}) {
    c = readServerConfig(write(config + kRest));
    ASSERT_FALSE(c.isOk()) << config;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().message();
  }
}

// Several replicas (docs/server.md "High availability"): an ha block needs etcd and an address.
TEST_F(ServerConfigTest, ReplicasNeedEtcdAndAnAddressOfTheirOwn) {
  const std::string etcd = R"(storage "etcd" { endpoints = ["http://127.0.0.1:2379"] }
secrets { key_file = "/tmp/unseal.key" }
listener "tcp" { address = "127.0.0.1:0" tls_disable = true }
audit "file" { path = "/tmp/audit.log" }
)";
  auto c = readServerConfig(write(etcd + R"(ha { api_addr = "https://10.0.0.1:8200" })"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  ASSERT_TRUE(c->ha.has_value());
  EXPECT_EQ(c->ha->api_addr, "https://10.0.0.1:8200");
  EXPECT_EQ(c->ha->lease_ttl_ms, 2000);
  c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk());
  EXPECT_FALSE(c->ha.has_value());
  for (const auto& [config, says] : std::vector<std::pair<std::string, std::string>>{
           {etcd + R"(ha { })", "api_addr"},
           {etcd + R"(ha { api_addr = "10.0.0.1:8200" })", "api_addr"},
           {etcd + R"(ha { api_addr = "https://a:1" lease_ttl_ms = 10 })", "lease_ttl_ms"},
           {etcd + R"(ha { api_addr = "https://a:1" bogus = 1 })", "bogus"},
           {std::string(kBase) + R"(ha { api_addr = "https://a:1" })", "etcd"}}) {
    c = readServerConfig(write(config));
    ASSERT_FALSE(c.isOk()) << config;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << c.status().message();
  }
}

// Fair share's knobs (docs/fairness.md): defaults, values, and bounds named with the field.
TEST_F(ServerConfigTest, SchedulerFairShareSettingsHaveDefaultsAndBounds) {
  auto c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->reclaim_patience_s, 0);
  EXPECT_EQ(c->max_moves_per_pass, 8);
  EXPECT_EQ(c->max_unsaved_gpu_seconds, 3600);
  EXPECT_EQ(c->cpu_per_free_gpu_milli, 0);
  c = readServerConfig(write(std::string(kBase) +
                             "scheduler { reclaim_patience_s = 300  max_moves_per_pass = 0\n"
                             "            max_unsaved_gpu_seconds = 14400\n"
                             "            cpu_per_free_gpu_milli = 8000 }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->reclaim_patience_s, 300);
  EXPECT_EQ(c->max_moves_per_pass, 0);  // No consolidation.
  EXPECT_EQ(c->max_unsaved_gpu_seconds, 14400);
  EXPECT_EQ(c->cpu_per_free_gpu_milli, 8000);
  for (const char* bad :
       {"reclaim_patience_s = -1", "max_moves_per_pass = 1001", "cpu_per_free_gpu_milli = -1",
        "max_unsaved_gpu_seconds = -5", "max_moves = 3"}) {
    c = readServerConfig(write(std::string(kBase) + "scheduler { " + bad + " }\n"));
    ASSERT_FALSE(c.isOk()) << bad;
    const std::string field = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(c.status().message().find(field), std::string::npos) << c.status().message();
  }
}

TEST_F(ServerConfigTest, AuditDurableAnswersIsSecretsUnlessAllIsAsked) {
  auto c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_FALSE(c->audit_durable_every_answer);
  EXPECT_EQ(c->audit[0].flush_delay_ms, 50);

  c = readServerConfig(write(std::string(kBase) + "audit_durable_answers = \"all\"\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(c->audit_durable_every_answer);

  c = readServerConfig(write(std::string(kBase) + "audit_durable_answers = \"secrets\"\n" +
                             "audit \"file\" { path = \"/tmp/b.log\" flush_delay_ms = 5 }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_FALSE(c->audit_durable_every_answer);
  EXPECT_EQ(c->audit[1].flush_delay_ms, 5);
}

TEST_F(ServerConfigTest, BadAuditFlushSettingsNameTheFieldAndFile) {
  for (const std::string& bad : {std::string("audit_durable_answers = \"none\"\n"),
                                 std::string("audit_durable_answers = true\n"),
                                 std::string("audit \"file\" { path = \"/tmp/b.log\" "
                                             "flush_delay_ms = 5000 }\n")}) {
    const std::string path = write(std::string(kBase) + bad);
    auto c = readServerConfig(path);
    ASSERT_FALSE(c.isOk()) << bad;
    const std::string& m = c.status().message();
    EXPECT_TRUE(m.find("audit_durable_answers") != std::string::npos ||
                m.find("flush_delay_ms") != std::string::npos)
        << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
  }
}

// Rotation of the audit file: on by default at 100 MiB and a day, every rotated file kept;
// each option may turn its part off ("0"), and a bad value names the field and the file.
TEST_F(ServerConfigTest, AuditRotationHasDefaultsAndNamesBadValues) {
  auto c = readServerConfig(write(kBase));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->audit[0].rotate_bytes, 100ull << 20);
  EXPECT_EQ(c->audit[0].rotate_interval_s, 86400);
  EXPECT_EQ(c->audit[0].retain_files, 0);
  EXPECT_EQ(c->audit[0].checkpoint_interval_ms, 5000);

  c = readServerConfig(write(std::string(kBase) +
                             "audit \"file\" { path = \"/tmp/b.log\" rotate_bytes = 1048576 "
                             "rotate_interval = \"6h\" retain_files = 30 }\n"
                             "audit \"file\" { path = \"/tmp/c.log\" rotate_bytes = 0 "
                             "rotate_interval = \"0\" }\n"));
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_EQ(c->audit[1].rotate_bytes, 1048576U);
  EXPECT_EQ(c->audit[1].rotate_interval_s, 6 * 3600);
  EXPECT_EQ(c->audit[1].retain_files, 30);
  EXPECT_EQ(c->audit[2].rotate_bytes, 0U);
  EXPECT_EQ(c->audit[2].rotate_interval_s, 0);

  for (const std::string& bad :
       {std::string("rotate_bytes = -1"), std::string("rotate_interval = \"soon\""),
        std::string("retain_files = -3"), std::string("rotate_files = 3")}) {
    const std::string path =
        write(std::string(kBase) + "audit \"file\" { path = \"/tmp/b.log\" " + bad + " }\n");
    auto bad_config = readServerConfig(path);
    ASSERT_FALSE(bad_config.isOk()) << bad;
    const std::string& m = bad_config.status().message();
    EXPECT_NE(m.find(bad.substr(0, bad.find(' '))), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace tessera::server
