// TaskSecrets against a real PostgreSQL on loopback (secrets/testing/pg_server.h) and a fake
// clock: one credential per task generation, KV values refreshed, leases renewed at half their
// TTL while the task is live and revoked when it is not, also by a restarted server.
#include "server/task_secrets.h"

#include <gtest/gtest.h>

#include "audit/sink.h"
#include "secrets/postgres.h"
#include "secrets/test_util.h"
#include "secrets/testing/pg_server.h"

namespace tessera::server {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using secrets::PgTestServer;
using secrets::testing::openStore;
using secrets::testing::TempDir;
using secrets::testing::ThreadSafeFakeClock;

class TaskSecretsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    pg_ = PgTestServer::shared(&error);
    ASSERT_NE(pg_, nullptr) << error;
    // PostgreSQL checks VALID UNTIL against the real clock: start the fake one at real time.
    clock_.advance(std::chrono::system_clock::now().time_since_epoch());
    store_ = openStore(dir_.path(), clock_);
    ASSERT_NE(store_, nullptr);
    openEngine();
    ASSERT_TRUE(engine_->keys().addTenant("team-1").isOk());
    ASSERT_TRUE(engine_->kv().write("team-1", "app/config", {{"k", "v1"}}, std::nullopt).isOk());
    ASSERT_TRUE(engine_->db()
                    .putConnection(
                        "team-1", "main",
                        {{"connection_url", "host=127.0.0.1 port=" + std::to_string(pg_->port()) +
                                                " dbname=postgres sslmode=disable"},
                         {"username", PgTestServer::kAdminUser},
                         {"password", pg_->adminPassword()},
                         {"allowed_roles", {"ro"}}})
                    .isOk());
    ASSERT_TRUE(engine_->db()
                    .putRole("team-1", "ro",
                             {{"db_name", "main"},
                              {"creation_statements",
                               {"CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' "
                                "VALID UNTIL '{{expiration}}'"}},
                              {"default_ttl", "10m"},
                              {"max_ttl", "1h"}})
                    .isOk());
    auto admin = secrets::PgConnection::connect(pg_->superuserConninfo(), 5s);
    ASSERT_TRUE(admin.isOk()) << admin.status().message();
    admin_ = std::move(admin).value();
  }

  void openEngine() {
    secrets::SecretsOptions options;
    options.seal = {secrets::SealOptions::Mode::kKeyFile, keys_dir_.file("key")};
    auto engine = secrets::Secrets::open(*store_, clock_, options);
    ASSERT_TRUE(engine.isOk()) << engine.status().toString();
    engine_ = std::move(engine).value();
    auto sink =
        std::make_unique<audit::MemorySink>("memory", audit::SinkOptions{.salt = "s"}, clock_);
    sink_ = sink.get();
    std::vector<std::unique_ptr<audit::AuditSink>> sinks;
    sinks.push_back(std::move(sink));
    auditor_ = std::move(audit::Auditor::create(std::move(sinks))).value();
    secrets_ = std::make_unique<TaskSecrets>(*engine_, *store_, *auditor_, clock_,
                                             TaskSecretsOptions{.kv_refresh = 30s});
    ASSERT_TRUE(secrets_->load().isOk());
  }

  // One sweep, with these tasks live.
  size_t sweep(const std::set<std::string>& live) {
    return secrets_->sweep([&] { return live; });
  }

  static NodeTask task(uint32_t generation) {
    NodeTask t;
    t.id = "team-1.train.0";
    t.generation = generation;
    t.tenant = "team-1";
    t.workload = "train";
    t.secrets.kv = {"app/config"};
    t.secrets.db = {"ro"};
    return t;
  }

  int64_t count(const std::string& sql, const std::vector<std::string>& params = {}) {
    auto r = admin_->exec(sql, params);
    return r.isOk() && r->rows.size() == 1 && r->rows[0][0] ? std::stoll(*r->rows[0][0]) : -1;
  }
  bool roleExists(const std::string& user) {
    return count("SELECT count(*) FROM pg_roles WHERE rolname = $1", {user}) == 1;
  }
  int64_t generatedRoles() {
    return count("SELECT count(*) FROM pg_roles WHERE rolname LIKE 'v-team-1-%'");
  }

  size_t auditLinesWith(const std::string& needle) const {
    size_t n = 0;
    for (const std::string& line : sink_->lines()) {
      n += line.find(needle) != std::string::npos ? 1 : 0;
    }
    return n;
  }

  PgTestServer* pg_ = nullptr;
  TempDir dir_;
  TempDir keys_dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<secrets::Secrets> engine_;
  audit::MemorySink* sink_ = nullptr;
  std::unique_ptr<audit::Auditor> auditor_;
  std::unique_ptr<TaskSecrets> secrets_;
  std::unique_ptr<secrets::PgConnection> admin_;
};

TEST_F(TaskSecretsTest, OneCredentialPerGenerationRefreshedRenewedAndRevokedWhenTheTaskEnds) {
  auto first = secrets_->resolve(task(1));
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  const json file = json::parse(*first);
  EXPECT_EQ(file["kv"]["app/config"]["k"], "v1");
  const std::string user = file["db"]["ro"]["username"];
  const std::string lease = file["db"]["ro"]["lease_id"];
  EXPECT_TRUE(roleExists(user));
  EXPECT_EQ(auditLinesWith("task credentials issued"), 1U);
  // The audit record names the lease, never the password.
  EXPECT_EQ(auditLinesWith(file["db"]["ro"]["password"].get<std::string>()), 0U);
  // Every heartbeat gets the same file: no second credential.
  EXPECT_EQ(*secrets_->resolve(task(1)), *first);
  EXPECT_EQ(auditLinesWith("task credentials issued"), 1U);

  // A changed KV value reaches the task after kv_refresh, not before.
  ASSERT_TRUE(engine_->kv().write("team-1", "app/config", {{"k", "v2"}}, std::nullopt).isOk());
  clock_.advance(10s);
  EXPECT_EQ(json::parse(*secrets_->resolve(task(1)))["kv"]["app/config"]["k"], "v1");
  clock_.advance(25s);
  const json refreshed = json::parse(*secrets_->resolve(task(1)));
  EXPECT_EQ(refreshed["kv"]["app/config"]["k"], "v2");
  EXPECT_EQ(refreshed["db"]["ro"]["username"], user);

  // Live past half the 10-minute TTL: the lease is renewed (from now), and the file says so.
  const std::set<std::string> live = {"team-1.train.0@1"};
  EXPECT_EQ(sweep(live), 0U);
  const auto before = engine_->leases().lookup("team-1", lease);
  ASSERT_TRUE(before.isOk());
  clock_.advance(6min);
  EXPECT_EQ(sweep(live), 0U);
  const auto after = engine_->leases().lookup("team-1", lease);
  ASSERT_TRUE(after.isOk());
  EXPECT_EQ(after->expires, clock_.wallNow() + 10min);
  EXPECT_GT(after->expires, before->expires);
  EXPECT_NE(json::parse(*secrets_->resolve(task(1)))["db"]["ro"]["expire_time"],
            refreshed["db"]["ro"]["expire_time"]);

  // The task ends (not live any more): the lease is revoked and the role dropped.
  EXPECT_EQ(sweep({}), 1U);
  EXPECT_FALSE(roleExists(user));
  EXPECT_EQ(engine_->leases().lookup("team-1", lease).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(auditLinesWith("task credentials revoked"), 1U);
  EXPECT_EQ(secrets_->size(), 0U);
  // A new generation gets a new credential.
  auto second = secrets_->resolve(task(2));
  ASSERT_TRUE(second.isOk());
  const std::string user2 = json::parse(*second)["db"]["ro"]["username"];
  EXPECT_NE(user2, user);
  EXPECT_TRUE(roleExists(user2));
  EXPECT_EQ(sweep({}), 1U);
  EXPECT_FALSE(roleExists(user2));
}

TEST_F(TaskSecretsTest, ALongTaskGetsANewCredentialBeforeTheOldOneReachesItsMaxTtl) {
  auto file = secrets_->resolve(task(1));
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  const std::string first = json::parse(*file)["db"]["ro"]["username"];
  const std::set<std::string> live = {"team-1.train.0@1"};
  // Renewed every few minutes up to the role's 1-hour max TTL, then replaced.
  std::string now_user = first;
  int minutes = 0;
  for (; minutes < 90 && now_user == first; minutes += 3) {
    clock_.advance(3min);
    sweep(live);
    now_user = json::parse(*secrets_->resolve(task(1)))["db"]["ro"]["username"];
  }
  ASSERT_NE(now_user, first) << "no new credential after " << minutes << " minutes";
  EXPECT_GE(minutes, 30);          // Not before the old one was at its max TTL.
  EXPECT_LE(minutes, 60);          // Before it ended.
  EXPECT_TRUE(roleExists(first));  // It ends by itself at its max TTL...
  EXPECT_TRUE(roleExists(now_user));
  EXPECT_EQ(auditLinesWith("task credentials rotated"), 1U);
  // ...or with the task, with the new one.
  EXPECT_EQ(sweep({}), 1U);
  EXPECT_FALSE(roleExists(first));
  EXPECT_FALSE(roleExists(now_user));
}

TEST_F(TaskSecretsTest, ARestartedServerRevokesTheCredentialsOfTasksThatEnded) {
  auto file = secrets_->resolve(task(1));
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  const std::string user = json::parse(*file)["db"]["ro"]["username"];
  // The server goes away without a sweep; a new one loads what the old one kept.
  secrets_.reset();
  engine_.reset();
  openEngine();
  EXPECT_EQ(secrets_->size(), 1U);
  EXPECT_TRUE(roleExists(user));
  EXPECT_EQ(sweep({}),
            1U);  // After a restart no old generation is live.
  EXPECT_FALSE(roleExists(user));
  EXPECT_EQ(secrets_->size(), 0U);
  // Nothing left to revoke after another restart.
  secrets_.reset();
  engine_.reset();
  openEngine();
  EXPECT_EQ(secrets_->size(), 0U);
}

TEST_F(TaskSecretsTest, WhatCannotBeResolvedIsAnErrorAndLeavesNoCredentialBehind) {
  const int64_t roles_before = generatedRoles();  // The server is shared by the tests.
  NodeTask t = task(1);
  t.secrets.kv = {"app/missing"};
  auto missing = secrets_->resolve(t);
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("app/missing"), std::string::npos);
  // A role that fails after another was made: the one made is revoked again.
  t = task(2);
  t.secrets.db = {"ro", "nope"};
  auto bad_role = secrets_->resolve(t);
  ASSERT_FALSE(bad_role.isOk());
  EXPECT_NE(bad_role.status().message().find("nope"), std::string::npos);
  EXPECT_EQ(generatedRoles(), roles_before);
  // Sealed: nothing resolves.
  engine_->keys().seal();
  EXPECT_EQ(secrets_->resolve(task(3)).status().code(), core::StatusCode::kUnavailable);
  // An audit log that cannot record the issue: refused, and nothing is left.
  ASSERT_TRUE(engine_->keys().unsealWithKeyFile().isOk());
  sink_->setFailWrites(true);
  EXPECT_EQ(secrets_->resolve(task(4)).status().code(), core::StatusCode::kUnavailable);
  sink_->setFailWrites(false);
  EXPECT_EQ(generatedRoles(), roles_before);
}

// A pull secret in each shape people keep one in; the login for the image's registry only, and
// errors that say what is wrong without the values.
// A container's volumes (docs/agent.md "Volumes"): a secret's keys as files (all of them,
// or as `items` names them), read again once older than kv_refresh; what is not there is an
// error unless the volume is optional; a tmpfs has no files.
TEST_F(TaskSecretsTest, VolumesAreASecretsKeysAsFilesReadAgainWhenOld) {
  ASSERT_TRUE(
      engine_->kv()
          .write(
              "team-1", "kube/default/secrets/db",
              {{"password", "hunter2"}, {"kubernetes.io/object", "{}"}, {"limits", {{"gpu", 1}}}},
              std::nullopt)
          .isOk());
  NodeTask t;
  t.id = "team-1.train.0";
  t.generation = 1;
  t.tenant = "team-1";
  t.workload = "train";
  auto volume = [](std::string path, std::string kv, std::map<std::string, std::string> items,
                   bool optional) {
    WorkloadVolume v;
    v.path = std::move(path);
    v.kv = std::move(kv);
    v.items = std::move(items);
    v.optional = optional;
    return v;
  };
  t.volumes = {volume("/etc/db", "kube/default/secrets/db", {}, false),
               volume("/etc/pw", "kube/default/secrets/db", {{"password", "x/pw"}}, false),
               volume("/etc/none", "kube/default/secrets/none", {}, true),
               volume("/dev/shm", "", {}, false)};
  t.volumes[3].size_mib = 64;
  auto v = secrets_->volumes(t);
  ASSERT_TRUE(v.isOk()) << v.status().message();
  ASSERT_EQ(v->size(), 4U);
  // Every key that is a file name (not the kept Kubernetes object), a non-string as its JSON.
  EXPECT_EQ((*v)[0].files, (std::map<std::string, std::string>{{"password", "hunter2"},
                                                               {"limits", R"({"gpu":1})"}}));
  EXPECT_EQ((*v)[0].path, "/etc/db");
  EXPECT_EQ((*v)[1].files, (std::map<std::string, std::string>{{"x/pw", "hunter2"}}));
  EXPECT_TRUE((*v)[2].files.empty());
  EXPECT_FALSE((*v)[2].tmpfs);
  EXPECT_TRUE((*v)[3].tmpfs);
  EXPECT_EQ((*v)[3].size_mib, 64);
  EXPECT_EQ(auditLinesWith("volumes read"), 1U);
  EXPECT_EQ(auditLinesWith("hunter2"), 0U);  // Paths only.
  // A new password reaches the task once its copy is older than kv_refresh.
  ASSERT_TRUE(
      engine_->kv()
          .write("team-1", "kube/default/secrets/db", {{"password", "changed"}}, std::nullopt)
          .isOk());
  EXPECT_EQ(secrets_->volumes(t)->at(1).files.at("x/pw"), "hunter2");
  clock_.advance(31s);
  auto later = secrets_->volumes(t);
  ASSERT_TRUE(later.isOk()) << later.status().message();
  EXPECT_EQ(later->at(1).files.at("x/pw"), "changed");
  EXPECT_EQ(later->at(0).files, (std::map<std::string, std::string>{{"password", "changed"}}));
  EXPECT_EQ(auditLinesWith("volumes read"), 2U);
  // A key the items name that is not there, or a secret that is not: the task does not start.
  NodeTask missing = t;
  missing.id = "team-1.train.1";
  missing.volumes = {volume("/etc/pw", "kube/default/secrets/db", {{"user", "u"}}, false)};
  auto no_key = secrets_->volumes(missing);
  ASSERT_FALSE(no_key.isOk());
  EXPECT_NE(no_key.status().message().find("volumes[0]: secret 'kube/default/secrets/db': no key "
                                           "'user'"),
            std::string::npos)
      << no_key.status().message();
  missing.volumes[0].kv = "kube/default/secrets/gone";
  EXPECT_EQ(secrets_->volumes(missing).status().code(), core::StatusCode::kNotFound);
  missing.volumes[0].optional = true;
  ASSERT_TRUE(secrets_->volumes(missing).isOk());
}

TEST(RegistryLoginTest, ReadsDockerConfigsAndPlainLoginsForTheImagesRegistry) {
  // base64("team:pa:ss") (a password may hold ':').
  const json config = {{"auths",
                        {{"https://index.docker.io/v1/", {{"auth", "dGVhbTpwYTpzcw=="}}},
                         {"reg.example:5000", {{"username", "u2"}, {"password", "p2"}}}}}};
  auto hub = registryLogin(config, "docker.io");
  ASSERT_TRUE(hub.isOk()) << hub.status().message();
  EXPECT_EQ(hub->username, "team");
  EXPECT_EQ(hub->password, "pa:ss");
  auto other = registryLogin({{".dockerconfigjson", config.dump()}}, "reg.example:5000");
  ASSERT_TRUE(other.isOk()) << other.status().message();
  EXPECT_EQ(other->username, "u2");
  EXPECT_EQ(registryLogin({{"auths", config["auths"].dump()}}, "reg.example:5000")->password, "p2");
  auto plain = registryLogin({{"username", "a"}, {"password", "b"}}, "nvcr.io");
  ASSERT_TRUE(plain.isOk());
  EXPECT_EQ(plain->password, "b");
  // What is wrong, and where; never a value.
  auto none = registryLogin(config, "ghcr.io");
  ASSERT_FALSE(none.isOk());
  EXPECT_EQ(none.status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "it has no login for registry ghcr.io");
  auto bad = registryLogin({{"auths", {{"ghcr.io", {{"auth", "bm9jb2xvbg=="}}}}}}, "ghcr.io");
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message(), "auths[\"ghcr.io\"].auth is not base64 of \"user:password\"");
  EXPECT_FALSE(registryLogin({{"token", "x"}}, "ghcr.io").isOk());
  EXPECT_FALSE(registryLogin({{".dockerconfigjson", "{not json"}}, "ghcr.io").isOk());
  auto other_registry =
      registryLogin({{"registry", "a.example"}, {"username", "u"}, {"password", "p"}}, "b.example");
  ASSERT_FALSE(other_registry.isOk());
  EXPECT_EQ(other_registry.status().message().find("p\""), std::string::npos);
}

}  // namespace
}  // namespace tessera::server
