// Tenant isolation on a node (issue #21, item 3), tried as an attacker would: a server and a
// real agent as root, two tenants each with a secret. Tenant A's task holds its identity token
// and secrets; tenant B's task then goes looking for them (listing the credentials root,
// guessing A's folder from the naming scheme, A's task folder, the server's unseal key and
// database) and prints what it got. With each tenant's tasks under its own Unix user it gets
// nothing. A control run with isolation off (`--run-as agent --node-mode single-tenant
// --sandbox off`) shows the same probe does read everything there, so the probe itself can find
// a leak; and an agent that cannot switch users in a shared node refuses B's task outright.
// `tessera dev` as root keeps tenants apart the same way (item 5).
//
// Needs root (the agent creates the tenants' users with useradd); skipped otherwise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "process.h"
#include "server/certs.h"
#include "test_certs.h"
#include "util.h"

namespace tessera::integration {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr char kSecretA[] = "a-only-secret-7f3c9e";

// Why the test cannot run here ("" : it can).
std::string cannotRun() {
  if (::geteuid() != 0) {
    return "needs root: the agent runs each tenant's tasks as its own Unix user, created with "
           "useradd";
  }
  if (!fs::exists("/usr/sbin/useradd")) {
    return "needs /usr/sbin/useradd to create the tenants' users";
  }
  return "";
}

// Tenant A's task: reads its own token and secrets (it may), says where they are, and holds
// them while it runs.
json holder() {
  return {{"command",
           {"sh", "-c",
            "cat \"$TESSERA_IDENTITY_TOKEN_FILE\" >/dev/null && cat \"$TESSERA_SECRETS_FILE\" "
            ">/dev/null && echo \"ready $TESSERA_CREDENTIALS_DIR\"; exec sleep 300"}},
          {"secrets", {{"kv", {"app/db"}}}},
          {"cpuMilli", 100},
          {"gracePeriod", 1}};
}

// Tenant B's task: an attacker on the same node. From its own credentials folder it knows the
// root; it lists it, guesses A's folder from the naming scheme (<tenant>.<workload>.<index>),
// and tries A's files, A's task folder and the server's files it is told of. One line per try:
// "<what>: READ <output>" or "<what>: DENIED <error>".
json attacker(const std::string& victim_task, const std::vector<std::string>& server_files) {
  std::string script =
      "try() { what=$1; shift; if out=$(\"$@\" 2>&1); then echo \"$what: READ $out\" | tr '\\n' "
      "' '; echo; else echo \"$what: DENIED $out\" | tr '\\n' ' '; echo; fi; }\n"
      "root=$(dirname \"$TESSERA_CREDENTIALS_DIR\")\n"
      "victim=\"$root/" +
      victim_task +
      "\"\n"
      "try own-token head -c 16 \"$TESSERA_IDENTITY_TOKEN_FILE\"\n"
      "try list-root ls -a \"$root\"\n"
      "try list-victim ls -a \"$victim\"\n"
      "try token cat \"$victim/identity-token\"\n"
      "try secrets cat \"$victim/secrets.json\"\n"
      "try task-folder ls -a \"$HOME/../" +
      victim_task + "\"\n";
  for (size_t i = 0; i < server_files.size(); ++i) {
    script += "try server-file-" + std::to_string(i) + " head -c 64 \"" + server_files[i] + "\"\n";
  }
  script += "echo done\n";
  return {{"command", {"sh", "-c", script}}, {"cpuMilli", 100}, {"gracePeriod", 1}};
}

// The attacker's lines, by what it tried.
std::map<std::string, std::string> tries(const std::string& out) {
  std::map<std::string, std::string> by_what;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t colon = line.find(": ");
    if (colon != std::string::npos) {
      by_what[line.substr(0, colon)] = line.substr(colon + 2);
    }
  }
  return by_what;
}

// Whether a try was refused by the kernel (permission) or found nothing, never read.
::testing::AssertionResult denied(const std::map<std::string, std::string>& got,
                                  const std::string& what) {
  auto it = got.find(what);
  if (it == got.end()) {
    return ::testing::AssertionFailure() << what << ": not tried";
  }
  if (it->second.rfind("DENIED ", 0) == 0 &&
      (it->second.find("Permission denied") != std::string::npos ||
       it->second.find("No such file") != std::string::npos)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << what << ": " << it->second;
}

// A server and one agent node ("iso-node") run by a real `tessera agent run` as root, and two
// tenants, iso-a and iso-b, each with a tenant-admin token; iso-a has the secret app/db.
class IsolationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = cannotRun(); !why.empty()) {
      GTEST_SKIP() << why;
    }
    dir_ = fs::temp_directory_path() /
           ("tessera-iso-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    auto ca = writeTestCertificates(dir_);
    ASSERT_TRUE(ca.isOk()) << ca.status().toString();
    ca_pem_ = *ca;
    const std::string d = dir_.string();
    std::ofstream(dir_ / "server.hcl")
        << baseServerConfig(dir_) << "scheduler { pass_interval_ms = 50 }\n"
        << "nodes {\n  agents = \"iso-node=t4-2x\"\n  lease_ttl_ms = 4000\n}\n";
    server_ = std::make_unique<Process>(
        std::vector<std::string>{"server", "-config=" + d + "/server.hcl"}, dir_ / "server.out");
    const std::optional<ServerBanner> banner = waitForServer(*server_);
    ASSERT_TRUE(banner) << server_->output() << server_->errors();
    address_ = banner->address;
    root_ = banner->root;
    ASSERT_FALSE(root_.empty()) << server_->output();
    client_ = std::make_unique<Client>(address_, ca_pem_);
    const json policy = {
        {"path", {{"sys/nodes/iso-node/*", {{"capabilities", {"read", "update"}}}}}}};
    ASSERT_EQ(call("POST", "/v1/sys/policies/node-iso", root_, policy).status, 204U);
    Response t =
        call("POST", "/v1/auth/token/create", root_, {{"policies", {"node-iso"}}, {"ttl", "1h"}});
    ASSERT_EQ(t.status, 200U) << t.raw;
    node_token_ = t.body["auth"]["client_token"];
    ASSERT_NO_FATAL_FAILURE(addTenants());
  }
  void TearDown() override {
    agent_.reset();
    server_.reset();
    if (!credentials_root_.empty()) {
      fs::remove_all(credentials_root_);
    }
    if (!dir_.empty()) {
      fs::remove_all(dir_);
    }
  }

  void addTenants() {
    for (const std::string tenant : {"iso-a", "iso-b"}) {
      tokens_[tenant] = tenantWithAdmin(*client_, root_, tenant, {{"quota", {{"gpu", 1}}}});
      ASSERT_FALSE(tokens_[tenant].empty()) << tenant;
    }
    Response kv = call("POST", "/v1/tenants/iso-a/secrets/kv/data/app/db", tokens_["iso-a"],
                       {{"data", {{"password", kSecretA}}}});
    ASSERT_EQ(kv.status, 200U) << kv.raw;
  }

  Response call(const std::string& method, const std::string& target, const std::string& token,
                const json& body = nullptr) {
    return client_->call(method, target, token, body);
  }
  // Starts the agent; waits until its node is registered unless `registered` is false.
  void startAgent(const std::vector<std::string>& extra, bool registered = true) {
    std::vector<std::string> args = {"agent",
                                     "run",
                                     "--node",
                                     "iso-node",
                                     "--backend",
                                     "sim",
                                     "--profile",
                                     "t4-2x",
                                     "--address",
                                     address_,
                                     "--token-file",
                                     tokenFile(dir_, "iso-node.token", node_token_),
                                     "--ca-cert",
                                     (dir_ / "ca.pem").string(),
                                     "--work-dir",
                                     (dir_ / "iso-node").string(),
                                     "--fence-after-ms",
                                     "2500"};
    args.insert(args.end(), extra.begin(), extra.end());
    agent_ = std::make_unique<Process>(args, dir_ / "agent.out");
    if (!registered) {
      return;
    }
    ASSERT_TRUE(
        waitFor([&] { return agent_->errors().find("registered") != std::string::npos; }, 20s))
        << agent_->errors();
  }
  json status(const std::string& tenant, const std::string& name) {
    return call("GET", "/v1/tenants/" + tenant + "/workloads/" + name, tokens_[tenant])
        .body["data"]["status"];
  }
  void submit(const std::string& tenant, const std::string& name, const json& body) {
    Response r =
        call("POST", "/v1/tenants/" + tenant + "/workloads/" + name, tokens_[tenant], body);
    ASSERT_EQ(r.status, 202U) << r.raw;
  }
  fs::path taskDir(const std::string& task) { return dir_ / "iso-node" / task; }
  // Starts A's holder; returns its credentials folder once it runs with its files there.
  std::string startHolder() {
    submit("iso-a", "holder", holder());
    std::string ready;
    const bool started = waitFor(
        [&] {
          ready = slurp(taskDir("iso-a.holder.0") / "stdout.log");
          return ready.rfind("ready ", 0) == 0 && ready.back() == '\n';
        },
        30s);
    EXPECT_TRUE(started) << status("iso-a", "holder").dump() << agent_->errors();
    if (!started) {
      return "";
    }
    const std::string folder = ready.substr(6, ready.size() - 7);
    credentials_root_ = fs::path(folder).parent_path().string();
    return folder;
  }
  // Runs B's attacker to its end; returns what it printed.
  std::string attack(const std::vector<std::string>& server_files) {
    submit("iso-b", "attack", attacker("iso-a.holder.0", server_files));
    std::string out;
    const bool done = waitFor(
        [&] {
          out = slurp(taskDir("iso-b.attack.0") / "stdout.log");
          return out.find("done\n") != std::string::npos;
        },
        30s);
    EXPECT_TRUE(done) << status("iso-b", "attack").dump() << agent_->errors();
    return out;
  }

  fs::path dir_;
  std::string ca_pem_;
  std::string address_;
  std::string root_;
  std::string node_token_;
  std::string credentials_root_;
  std::map<std::string, std::string> tokens_;
  std::unique_ptr<Process> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Process> agent_;
};

TEST_F(IsolationTest, TenantBsTaskCannotReadTenantAsCredentialsSecretsOrTokenAsRoot) {
  ASSERT_NO_FATAL_FAILURE(startAgent({}));  // As root: --run-as tenant, a shared node.
  EXPECT_NE(agent_->errors().find("node mode shared (a shared node): each tenant's tasks run as "
                                  "its own Unix user (tessera-{tenant})"),
            std::string::npos)
      << agent_->errors();
  const std::string folder = startHolder();
  ASSERT_FALSE(folder.empty());
  const std::string token = slurp(fs::path(folder) / "identity-token");
  const std::string secrets = slurp(fs::path(folder) / "secrets.json");
  ASSERT_FALSE(token.empty());
  ASSERT_NE(secrets.find(kSecretA), std::string::npos) << secrets;
  const std::string db = (dir_ / "t.db").string();
  const std::string out = attack({db + ".unseal-key", db, (dir_ / "key.pem").string()});
  std::cout << "tenant B's attacker printed:\n" << out;
  const auto got = tries(out);
  // B's own token is B's to read (its user is its own, with its credentials).
  EXPECT_EQ(got.at("own-token").rfind("READ ", 0), 0U) << got.at("own-token");
  for (const std::string what : {"list-root", "list-victim", "token", "secrets", "task-folder",
                                 "server-file-0", "server-file-1", "server-file-2"}) {
    EXPECT_TRUE(denied(got, what));
  }
  EXPECT_EQ(out.find(token.substr(token.rfind('.') + 1)), std::string::npos);
  EXPECT_EQ(out.find(kSecretA), std::string::npos);
  // The tasks ran as their tenants' users.
  struct stat a {};
  struct stat b {};
  ASSERT_EQ(::stat(taskDir("iso-a.holder.0").c_str(), &a), 0);
  ASSERT_EQ(::stat(taskDir("iso-b.attack.0").c_str(), &b), 0);
  EXPECT_NE(a.st_uid, 0U);
  EXPECT_NE(b.st_uid, 0U);
  EXPECT_NE(a.st_uid, b.st_uid);
  // A's task is cancelled: its credentials folder goes with it.
  ASSERT_EQ(call("DELETE", "/v1/tenants/iso-a/workloads/holder", tokens_["iso-a"]).status, 204U);
  EXPECT_TRUE(waitFor([&] { return !fs::exists(folder); }, 20s)) << folder;
}

// The control: with isolation off (every task as the agent's user, root, in the node's own view)
// the very same probe reads A's token and secrets. Were this to fail, the probe could not see a
// leak at all.
TEST_F(IsolationTest, WithoutUsersTheSameProbeReadsEverythingOfTheOtherTenant) {
  ASSERT_NO_FATAL_FAILURE(
      startAgent({"--run-as", "agent", "--node-mode", "single-tenant", "--sandbox", "off"}));
  EXPECT_NE(agent_->errors().find("tenants are NOT isolated from each other here"),
            std::string::npos)
      << agent_->errors();
  const std::string folder = startHolder();
  ASSERT_FALSE(folder.empty());
  const std::string token = slurp(fs::path(folder) / "identity-token");
  ASSERT_FALSE(token.empty());
  const std::string out = attack({});
  const auto got = tries(out);
  for (const std::string what : {"list-root", "list-victim", "token", "secrets", "task-folder"}) {
    EXPECT_FALSE(denied(got, what)) << what;
  }
  EXPECT_NE(out.find(token.substr(token.rfind('.') + 1)), std::string::npos) << out;
  EXPECT_NE(out.find(kSecretA), std::string::npos) << out;
}

// An agent that cannot switch users, on a shared node: B's task is refused while A's runs.
TEST_F(IsolationTest, AnAgentThatCannotSwitchUsersRunsOneTenantAtATime) {
  ASSERT_NO_FATAL_FAILURE(startAgent({"--run-as", "agent"}));
  EXPECT_NE(agent_->errors().find("node mode shared: the agent cannot switch users"),
            std::string::npos)
      << agent_->errors();
  ASSERT_FALSE(startHolder().empty());
  submit("iso-b", "attack", attacker("iso-a.holder.0", {}));
  std::string raw;
  ASSERT_TRUE(waitFor(
      [&] {
        const Response r = call("GET", "/v1/tenants/iso-b/workloads/attack", tokens_["iso-b"]);
        raw = r.raw;
        return r.body["data"]["status"].value("phase", "") == "failed";
      },
      30s))
      << raw;
  EXPECT_NE(raw.find("runs the tasks of one tenant at a time"), std::string::npos) << raw;
  EXPECT_FALSE(fs::exists(taskDir("iso-b.attack.0") / "stdout.log"));  // Never ran.
  EXPECT_EQ(status("iso-a", "holder").value("phase", ""), "running");
}

// Another user of the machine makes the folder the agent's credentials go in before the agent
// starts (its name is predictable: the node and a hash of the work folder, under /dev/shm,
// which anyone may write). The agent refuses to start rather than write tokens into it.
TEST_F(IsolationTest, AnAgentRefusesACredentialsFolderAnotherUserMadeFirst) {
  const std::string work_dir = (dir_ / "iso-node").string();
  char suffix[17];
  std::snprintf(suffix, sizeof suffix, "%016zx", std::hash<std::string>{}(work_dir));
  const fs::path trap = fs::path("/dev/shm") / ("tessera-iso-node-" + std::string(suffix, 8));
  if (!fs::is_directory("/dev/shm")) {
    GTEST_SKIP() << "no /dev/shm";
  }
  fs::remove_all(trap);
  ASSERT_EQ(::mkdir(trap.c_str(), 0711), 0) << trap;
  ASSERT_EQ(::chown(trap.c_str(), 54321, 54321), 0);
  credentials_root_ = trap.string();  // Removed at the end.
  ASSERT_NO_FATAL_FAILURE(startAgent({}, false));
  EXPECT_EQ(agent_->wait(), 1) << agent_->errors();
  EXPECT_NE(agent_->errors().find("credentials: " + trap.string() +
                                  " belongs to uid 54321, not to this agent's user (uid 0)"),
            std::string::npos)
      << agent_->errors();
  EXPECT_TRUE(fs::is_empty(trap));
}

unsigned modeOf(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// The server's keys and store are its owner's alone, and a restart makes them so again if an
// operator (or a backup restored with a wide umask) opened them up.
TEST_F(IsolationTest, TheServersKeysSaltAndStoreAreItsOwnersAlone) {
  const std::vector<fs::path> files = {
      dir_ / "t.db",      dir_ / "t.db-wal",        dir_ / "t.db-shm",
      dir_ / "t.db.lock", dir_ / "t.db.unseal-key", dir_ / "audit.log.salt",
      dir_ / "audit.log"};
  for (const fs::path& f : files) {
    EXPECT_EQ(modeOf(f), 0600U) << f;
  }
  ASSERT_EQ(server_->stop(SIGTERM), 0) << server_->errors();
  for (const fs::path& f : {dir_ / "t.db", dir_ / "t.db.unseal-key", dir_ / "audit.log.salt"}) {
    ASSERT_EQ(::chmod(f.c_str(), 0644), 0) << f;
  }
  ASSERT_EQ(::chmod((dir_ / "key.pem").c_str(), 0640), 0);
  server_ = std::make_unique<Process>(
      std::vector<std::string>{"server", "-config=" + (dir_ / "server.hcl").string()},
      dir_ / "server2.out");
  ASSERT_TRUE(
      waitFor([&] { return server_->output().find("listening on") != std::string::npos; }, 30s))
      << server_->errors();
  for (const fs::path& f : files) {
    EXPECT_EQ(modeOf(f), 0600U) << f;
  }
  const std::string err = server_->errors();
  EXPECT_NE(err.find("unseal key file " + (dir_ / "t.db.unseal-key").string() +
                     " was mode 0644, readable by others; made it 0600"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("audit salt file " + (dir_ / "audit.log.salt").string() + " was mode 0644"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find((dir_ / "t.db").string() + " was mode 0644"), std::string::npos) << err;
  // A TLS key may be shared with another service: said, not changed.
  EXPECT_NE(err.find("TLS key file " + (dir_ / "key.pem").string() + " is mode 0640"),
            std::string::npos)
      << err;
  EXPECT_EQ(modeOf(dir_ / "key.pem"), 0640U);
}

// Item 5: `tessera dev` as root runs each tenant's tasks as its own user too.
TEST(DevIsolationTest, InDevAsRootTenantBsTaskCannotReadTenantAsIdentityToken) {
  if (const std::string why = cannotRun(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-iso-dev-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string credentials_root;
  {
    Process dev({"dev", "--data-dir", dir.string(), "--addr", "127.0.0.1:0", "--nodes", "t4-2x:1"},
                dir / "dev.out");
    json info;
    ASSERT_TRUE(waitFor(
        [&] {
          info = json::parse(slurp(dir / "dev.json"), nullptr, false);
          return info.is_object() && info.value("pid", 0) == dev.pid();
        },
        30s))
        << dev.errors();
    // dev.json comes before its agents start: wait for the agent's line.
    EXPECT_TRUE(waitFor(
        [&] {
          return dev.errors().find(
                     "node mode development (a development node): each tenant's "
                     "tasks run as its own Unix user") != std::string::npos;
        },
        10s))
        << dev.errors();
    const Client c(info["address"], slurp(info["ca_cert"].get<std::string>()));
    const std::string root = info["root_token"];
    std::map<std::string, std::string> tokens;
    for (const std::string tenant : {"iso-a", "iso-b"}) {
      tokens[tenant] = tenantWithAdmin(c, root, tenant, {{"quota", {{"gpu", 1}}}});
      ASSERT_FALSE(tokens[tenant].empty()) << tenant;
    }
    ASSERT_EQ(c.call("POST", "/v1/tenants/iso-a/secrets/kv/data/app/db", tokens["iso-a"],
                     {{"data", {{"password", kSecretA}}}})
                  .status,
              200U);
    ASSERT_EQ(
        c.call("POST", "/v1/tenants/iso-a/workloads/holder", tokens["iso-a"], holder()).status,
        202U);
    const fs::path node = dir / "nodes" / "t4-2x-0";
    std::string ready;
    ASSERT_TRUE(waitFor(
        [&] {
          ready = slurp(node / "iso-a.holder.0" / "stdout.log");
          return ready.rfind("ready ", 0) == 0 && ready.back() == '\n';
        },
        30s))
        << c.call("GET", "/v1/tenants/iso-a/workloads/holder", tokens["iso-a"]).raw << dev.errors();
    const std::string folder = ready.substr(6, ready.size() - 7);
    credentials_root = fs::path(folder).parent_path().string();
    const std::string token = slurp(fs::path(folder) / "identity-token");
    ASSERT_FALSE(token.empty());
    const std::string db = (dir / "tessera.db").string();
    ASSERT_EQ(c.call("POST", "/v1/tenants/iso-b/workloads/attack", tokens["iso-b"],
                     attacker("iso-a.holder.0", {db + ".unseal-key", db}))
                  .status,
              202U);
    std::string out;
    ASSERT_TRUE(waitFor(
        [&] {
          out = slurp(node / "iso-b.attack.0" / "stdout.log");
          return out.find("done\n") != std::string::npos;
        },
        30s))
        << c.call("GET", "/v1/tenants/iso-b/workloads/attack", tokens["iso-b"]).raw << dev.errors();
    std::cout << "tenant b's attacker in tessera dev printed:\n" << out;
    const auto got = tries(out);
    EXPECT_EQ(got.at("own-token").rfind("READ ", 0), 0U) << got.at("own-token");
    for (const std::string what : {"list-root", "list-victim", "token", "secrets", "task-folder",
                                   "server-file-0", "server-file-1"}) {
      EXPECT_TRUE(denied(got, what));
    }
    EXPECT_EQ(out.find(token.substr(token.rfind('.') + 1)), std::string::npos);
    EXPECT_EQ(out.find(kSecretA), std::string::npos);
    EXPECT_EQ(dev.stop(SIGTERM), 0) << dev.errors();
  }
  if (!credentials_root.empty()) {
    fs::remove_all(credentials_root);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera::integration
