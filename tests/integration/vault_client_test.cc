// Vault's own Python client against the real server (issue #37, item 3): Debian's
// python3-hvac, unchanged, runs tests/vault/hvac_client_test.py against a `tessera server`
// started here: token create with Vault's fields, renew-self, revoke-self and lookup-self of a
// tenant token at the admin root, accessor operations, X-Vault-Namespace, KV v2 end to end, and
// periodic tokens (on a second server whose max_ttl is a few seconds, so that a periodic token
// can be seen outliving it while renewed, and expiring when not).
//
// The script's own assertions decide each case; here the run must pass every case it was given,
// none skipped. hvac is Debian's package, so it runs under /usr/bin/python3 (never a python3
// earlier on PATH, which would not have it).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "process.h"
#include "test_certs.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
using tessera::integration::Outcome;
using tessera::integration::Process;
using tessera::integration::runArgv;

constexpr int kShortMaxTtlS = 8;

// A `tessera server` with one TLS listener and `tokens_block` in its config.
struct Server {
  fs::path dir;
  std::unique_ptr<Process> process;
  std::string address;
  std::string root;

  Server(const std::string& name, const std::string& tokens_block) {
    dir = fs::temp_directory_path() / ("tessera-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto ca = tessera::integration::writeTestCertificates(dir);
    EXPECT_TRUE(ca.isOk()) << ca.status().toString();
    const std::string d = dir.string();
    std::ofstream(dir / "server.hcl")
        << "storage \"sqlite\" { path = \"" << d << "/t.db\" }\n"
        << "listener \"tcp\" {\n  address = \"127.0.0.1:0\"\n  tls_cert_file = \"" << d
        << "/cert.pem\"\n  tls_key_file = \"" << d << "/key.pem\"\n}\n"
        << "audit \"file\" { path = \"" << d << "/audit.log\" }\n"
        << tokens_block;
    process = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + d + "/server.hcl"}, dir / "out.txt");
    auto banner = tessera::integration::waitForServer(*process);
    if (banner) {
      address = banner->address;
      root = banner->root;
    }
  }
  ~Server() {
    process->stop(SIGTERM);
    fs::remove_all(dir);
  }

  // The hvac script's test classes `cases` (unittest names) against this server.
  Outcome hvac(const std::vector<std::string>& cases, int max_ttl_s) const {
    const char* source = std::getenv("TESSERA_SOURCE_DIR");  // Set by ctest.
    // hvac leaves its sessions' sockets to the collector: that warning is noise here.
    std::vector<std::string> argv = {
        "/usr/bin/python3", "-W", "ignore::ResourceWarning",
        std::string(source != nullptr ? source : ".") + "/tests/vault/hvac_client_test.py", "-v"};
    argv.insert(argv.end(), cases.begin(), cases.end());
    return runArgv(argv,
                   {{"VAULT_ADDR", address},
                    {"VAULT_CACERT", (dir / "ca.pem").string()},
                    {"TESSERA_ROOT_TOKEN", root},
                    {"TESSERA_MAX_TTL_S", std::to_string(max_ttl_s)},
                    {"PYTHONDONTWRITEBYTECODE", "1"}},
                   dir);
  }
};

// unittest's summary: every case given ran and passed, none skipped.
void expectAllPassed(const Outcome& o, int cases) {
  EXPECT_EQ(o.rc, 0) << o;
  EXPECT_NE(o.err.find("Ran " + std::to_string(cases) + " test"), std::string::npos) << o;
  EXPECT_TRUE(std::regex_search(o.err, std::regex(R"(\nOK\s*$)"))) << o;  // Not "OK (skipped=".
}

TEST(VaultClientTest, HvacTokensNamespacesAndKvV2) {
  Server s("vault-client", "");
  ASSERT_FALSE(s.address.empty()) << s.process->output() << s.process->errors();
  ASSERT_FALSE(s.root.empty()) << s.process->output();
  const Outcome o = s.hvac({"TokenCreate", "SelfOperations", "Namespaces", "KvV2",
                            "PeriodicTokens.test_a_role_with_a_period_makes_service_tokens"},
                           768 * 3600);
  expectAllPassed(o, 8);
}

TEST(VaultClientTest, HvacPeriodicTokenOutlivesMaxTtlOnlyWhileRenewed) {
  Server s("vault-periodic", "tokens {\n  default_ttl = \"" + std::to_string(kShortMaxTtlS) +
                                 "s\"\n  max_ttl = \"" + std::to_string(kShortMaxTtlS) +
                                 "s\"\n}\n");
  ASSERT_FALSE(s.address.empty()) << s.process->output() << s.process->errors();
  const Outcome o = s.hvac(
      {"PeriodicTokens.test_a_periodic_token_outlives_max_ttl_while_renewed_and_dies_when_not"},
      kShortMaxTtlS);
  expectAllPassed(o, 1);
}

}  // namespace
