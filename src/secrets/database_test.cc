#include "secrets/database.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "secrets/postgres.h"
#include "secrets/test_util.h"
#include "secrets/testing/pg_server.h"

namespace tessera::secrets {
namespace {

using namespace std::chrono_literals;
using core::StatusCode;
using nlohmann::json;
using testing::filesContaining;
using testing::openStore;
using testing::TempDir;
using testing::ThreadSafeFakeClock;

constexpr const char* kTenant = "team-1";

int64_t epochSeconds(core::WallTime t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

class DatabaseTest : public ::testing::Test {
 protected:
  // The binary's server, with a table to grant on.
  static void SetUpTestSuite() {
    PgTestServer* pg = PgTestServer::shared(&suite_error_);
    if (pg == nullptr) {
      return;
    }
    auto admin = PgConnection::connect(pg->superuserConninfo(), 5s);
    if (!admin.isOk()) {
      suite_error_ = admin.status().message();
      return;
    }
    auto made = (*admin)->execScript(
        "CREATE TABLE widgets (id int); INSERT INTO widgets VALUES (1), (2), (3)");
    if (!made.isOk()) {
      suite_error_ = made.status().message();
    }
  }

  void SetUp() override {
    ASSERT_TRUE(suite_error_.empty()) << suite_error_;
    std::string error;
    server_ = PgTestServer::shared(&error);
    ASSERT_NE(server_, nullptr) << error;
    // PostgreSQL checks VALID UNTIL against the real clock: start the fake one at real time.
    clock_.advance(std::chrono::system_clock::now().time_since_epoch());
    store_ = openStore(dir_.path(), clock_);
    ASSERT_NE(store_, nullptr);
    auto keys = KeyManager::open(*store_, {SealOptions::Mode::kKeyFile, keys_dir_.file("key")});
    ASSERT_TRUE(keys.isOk()) << keys.status().toString();
    keys_ = std::move(keys).value();
    ASSERT_TRUE(keys_->addTenant(kTenant).isOk());
    LeaseOptions options;
    options.seed = 7;
    auto leases = LeaseManager::open(*store_, clock_, options);
    ASSERT_TRUE(leases.isOk()) << leases.status().toString();
    leases_ = std::move(leases).value();
    engine_ = std::make_unique<DatabaseEngine>(*store_, *keys_, *leases_, clock_);
    leases_->setRevoker("db", engine_.get());
    auto admin = PgConnection::connect(server_->superuserConninfo(), 5s);
    ASSERT_TRUE(admin.isOk()) << admin.status().message();
    admin_ = std::move(admin).value();
  }

  std::string connectionUrl() const {
    return "host=127.0.0.1 port=" + std::to_string(server_->port()) +
           " dbname=postgres sslmode=disable";
  }
  json connectionBody(const json& allowed_roles) const {
    return {{"connection_url", connectionUrl()},
            {"username", PgTestServer::kAdminUser},
            {"password", server_->adminPassword()},
            {"allowed_roles", allowed_roles}};
  }
  static json readOnlyRole(const std::string& db_name = "main") {
    return {{"db_name", db_name},
            {"creation_statements",
             {"CREATE ROLE \"{{name}}\" WITH LOGIN PASSWORD '{{password}}' VALID UNTIL "
              "'{{expiration}}'",
              "GRANT SELECT ON ALL TABLES IN SCHEMA public TO \"{{name}}\""}},
            {"default_ttl", "1h"},
            {"max_ttl", "24h"}};
  }
  // Connection "main" allowing role "ro", and role "ro".
  void configure() {
    const core::Status put = engine_->putConnection(kTenant, "main", connectionBody({"ro"}));
    ASSERT_TRUE(put.isOk()) << put.toString();
    const core::Status role = engine_->putRole(kTenant, "ro", readOnlyRole());
    ASSERT_TRUE(role.isOk()) << role.toString();
  }
  DbCredential issue(const std::string& role = "ro", core::Duration ttl = {}) {
    auto c = engine_->createCredential(kTenant, role, ttl);
    EXPECT_TRUE(c.isOk()) << c.status().toString();
    return c.isOk() ? std::move(c).value() : DbCredential{};
  }

  bool roleExists(const std::string& user) {
    auto r = admin_->exec("SELECT 1 FROM pg_roles WHERE rolname = $1", {user});
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return r.isOk() && !r->rows.empty();
  }
  // The role's VALID UNTIL as Unix seconds (-1 if there is no such role).
  int64_t validUntil(const std::string& user) {
    auto r = admin_->exec(
        "SELECT extract(epoch FROM rolvaliduntil)::bigint FROM pg_roles WHERE rolname = $1",
        {user});
    EXPECT_TRUE(r.isOk()) << r.status().message();
    if (!r.isOk() || r->rows.empty() || !r->rows[0][0]) {
      return -1;
    }
    return std::stoll(*r->rows[0][0]);
  }
  core::Result<std::unique_ptr<PgConnection>> login(const DbCredential& c) {
    return PgConnection::connect(server_->conninfo(c.username, c.password), 5s);
  }

  static inline std::string suite_error_;  // Why the suite's server is unusable.
  PgTestServer* server_ = nullptr;
  TempDir dir_;
  TempDir keys_dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<KeyManager> keys_;
  std::unique_ptr<LeaseManager> leases_;
  std::unique_ptr<DatabaseEngine> engine_;
  std::unique_ptr<PgConnection> admin_;
};

TEST_F(DatabaseTest, IssuedUserLogsInAndReads) {
  configure();
  const DbCredential c = issue();
  EXPECT_EQ(c.username.rfind("v-team-1-ro-", 0), 0U) << c.username;
  EXPECT_EQ(c.username.size(), std::string("v-team-1-ro-").size() + 10);
  EXPECT_EQ(c.password.size(), 32U);
  EXPECT_TRUE(std::all_of(c.password.begin(), c.password.end(),
                          [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }));
  EXPECT_EQ(c.lease.id.rfind("db/creds/ro/", 0), 0U) << c.lease.id;
  EXPECT_EQ(c.lease.kind, "db");
  EXPECT_EQ(c.lease.data, json({{"connection", "main"}, {"role", "ro"}, {"username", c.username}}));
  EXPECT_EQ(c.lease.expires - c.lease.issued, 1h);  // The role's default_ttl.
  EXPECT_EQ(c.lease.max_expires - c.lease.issued, 24h);

  auto db = login(c);
  ASSERT_TRUE(db.isOk()) << db.status().message();
  auto rows = (*db)->exec("SELECT count(*) FROM widgets");
  ASSERT_TRUE(rows.isOk()) << rows.status().message();
  EXPECT_EQ(rows->rows[0][0], "3");
  // VALID UNTIL is the lease's expiry (rounded up to the second).
  const int64_t until = validUntil(c.username);
  EXPECT_GE(until, epochSeconds(c.lease.expires));
  EXPECT_LE(until, epochSeconds(c.lease.expires) + 1);
  // PostgreSQL got a SCRAM verifier, not the password.
  auto stored = admin_->exec("SELECT rolpassword FROM pg_authid WHERE rolname = $1", {c.username});
  ASSERT_TRUE(stored.isOk()) << stored.status().message();
  EXPECT_EQ(stored->rows[0][0]->rfind("SCRAM-SHA-256$", 0), 0U);

  // Each credential is a new user with a new password.
  const DbCredential d = issue();
  EXPECT_NE(d.username, c.username);
  EXPECT_NE(d.password, c.password);
  EXPECT_EQ(leases_->count(), 2U);
}

TEST_F(DatabaseTest, ShorterTtlIsKeptAndLongerIsCappedByMaxTtl) {
  configure();
  const DbCredential shorter = issue("ro", 10min);
  EXPECT_EQ(shorter.lease.expires - shorter.lease.issued, 10min);
  const DbCredential longer = issue("ro", 48h);
  EXPECT_EQ(longer.lease.expires - longer.lease.issued, 24h);
  EXPECT_LE(validUntil(longer.username), epochSeconds(longer.lease.expires) + 1);
  EXPECT_EQ(engine_->createCredential(kTenant, "ro", -1s).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(DatabaseTest, RevokeEndsSessionsAndDropsTheUserIdempotently) {
  configure();
  // This role may create tables: what the user owns goes to the admin, its grants go away.
  json role = readOnlyRole();
  role["creation_statements"].push_back("GRANT CREATE ON SCHEMA public TO \"{{name}}\"");
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", role).isOk());
  const DbCredential c = issue();
  auto session = login(c);
  ASSERT_TRUE(session.isOk()) << session.status().message();
  const std::string table = "owned_by_" + c.username.substr(c.username.size() - 10);
  ASSERT_TRUE((*session)->exec("CREATE TABLE " + table + " (i int)").isOk());

  const core::Status revoked = leases_->revoke(kTenant, c.lease.id);
  ASSERT_TRUE(revoked.isOk()) << revoked.toString();
  EXPECT_FALSE(roleExists(c.username));
  EXPECT_EQ(leases_->lookup(kTenant, c.lease.id).status().code(), StatusCode::kNotFound);
  // The open session was ended, and no new one starts.
  EXPECT_EQ((*session)->exec("SELECT 1").status().code(), StatusCode::kUnavailable);
  auto again = login(c);
  ASSERT_FALSE(again.isOk());
  EXPECT_EQ(again.status().code(), StatusCode::kUnavailable);
  auto owner = admin_->exec("SELECT tableowner FROM pg_tables WHERE tablename = $1", {table});
  ASSERT_TRUE(owner.isOk()) << owner.status().message();
  ASSERT_EQ(owner->rows.size(), 1U);
  EXPECT_EQ(owner->rows[0][0], PgTestServer::kAdminUser);

  // A second revocation of the same lease (after a crash) is a success.
  const core::Status twice = engine_->revoke(c.lease);
  EXPECT_TRUE(twice.isOk()) << twice.toString();
}

TEST_F(DatabaseTest, RevocationStatementsReplaceTheDefault) {
  configure();
  json role = readOnlyRole();
  role["revocation_statements"] = {
      "ALTER ROLE \"{{name}}\" NOLOGIN",
      "REVOKE SELECT ON ALL TABLES IN SCHEMA public FROM \"{{name}}\""};
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", role).isOk());
  const DbCredential c = issue();
  ASSERT_TRUE(leases_->revoke(kTenant, c.lease.id).isOk());
  EXPECT_TRUE(roleExists(c.username));  // Only what the statements said.
  EXPECT_FALSE(login(c).isOk());
  const std::string ident = *quoteIdent(c.username);
  ASSERT_TRUE(admin_->execScript("DROP OWNED BY " + ident + "; DROP ROLE " + ident).isOk());
  EXPECT_TRUE(engine_->revoke(c.lease).isOk());  // Gone: nothing left to do.
}

TEST_F(DatabaseTest, ExpiredLeaseDropsTheUser) {
  configure();
  const DbCredential c = issue("ro", 10min);
  const DbCredential later = issue("ro", 20min);
  ASSERT_TRUE(login(c).isOk());
  clock_.advance(10min - 1s);
  EXPECT_EQ(*leases_->tick(), 0U);
  EXPECT_TRUE(roleExists(c.username));
  clock_.advance(1s);
  auto ticked = leases_->tick();
  ASSERT_TRUE(ticked.isOk()) << ticked.status().toString();
  EXPECT_EQ(*ticked, 1U);
  EXPECT_FALSE(roleExists(c.username));
  EXPECT_TRUE(roleExists(later.username));
  EXPECT_EQ(leases_->count(), 1U);
}

TEST_F(DatabaseTest, RenewMovesValidUntil) {
  configure();
  const DbCredential c = issue("ro", 10min);
  EXPECT_LE(validUntil(c.username), epochSeconds(c.lease.expires) + 1);
  clock_.advance(5min);
  auto renewed = leases_->renew(kTenant, c.lease.id, 2h);
  ASSERT_TRUE(renewed.isOk()) << renewed.status().toString();
  EXPECT_EQ(renewed->expires, clock_.wallNow() + 2h);
  const int64_t until = validUntil(c.username);
  EXPECT_GE(until, epochSeconds(renewed->expires));
  EXPECT_LE(until, epochSeconds(renewed->expires) + 1);
  EXPECT_TRUE(login(c).isOk());

  // renew_statements, when the role has them, run instead.
  json role = readOnlyRole();
  role["renew_statements"] = {
      "ALTER ROLE \"{{name}}\" VALID UNTIL '{{expiration}}' CONNECTION LIMIT 3"};
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", role).isOk());
  clock_.advance(1min);
  renewed = leases_->renew(kTenant, c.lease.id, 3h);
  ASSERT_TRUE(renewed.isOk()) << renewed.status().toString();
  EXPECT_GE(validUntil(c.username), epochSeconds(renewed->expires));
  auto limit = admin_->exec("SELECT rolconnlimit FROM pg_roles WHERE rolname = $1", {c.username});
  ASSERT_TRUE(limit.isOk()) << limit.status().message();
  EXPECT_EQ(limit->rows[0][0], "3");

  // A user dropped behind the engine's back cannot be renewed.
  const std::string ident = *quoteIdent(c.username);
  ASSERT_TRUE(admin_->execScript("DROP OWNED BY " + ident + "; DROP ROLE " + ident).isOk());
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", readOnlyRole()).isOk());
  EXPECT_FALSE(leases_->renew(kTenant, c.lease.id, 1h).isOk());
}

TEST_F(DatabaseTest, AllowedRolesDecideWhoMayUseAConnection) {
  ASSERT_TRUE(engine_->putConnection(kTenant, "main", connectionBody({"other"})).isOk());
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", readOnlyRole()).isOk());
  auto denied = engine_->createCredential(kTenant, "ro", {});
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status().toString();
  // Without allowed_roles nobody may.
  json body = connectionBody({});
  body.erase("allowed_roles");
  ASSERT_TRUE(engine_->putConnection(kTenant, "main", body).isOk());
  EXPECT_EQ(engine_->createCredential(kTenant, "ro", {}).status().code(),
            StatusCode::kPermissionDenied);
  ASSERT_TRUE(engine_->putConnection(kTenant, "main", connectionBody({"*"})).isOk());
  EXPECT_TRUE(engine_->createCredential(kTenant, "ro", {}).isOk());

  EXPECT_EQ(engine_->createCredential(kTenant, "nope", {}).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(engine_->putRole(kTenant, "orphan", readOnlyRole("missing")).isOk());
  EXPECT_EQ(engine_->createCredential(kTenant, "orphan", {}).status().code(),
            StatusCode::kFailedPrecondition);
  // Another tenant sees none of it.
  ASSERT_TRUE(keys_->addTenant("team-2").isOk());
  EXPECT_EQ(engine_->createCredential("team-2", "ro", {}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->readConnection("team-2", "main").status().code(), StatusCode::kNotFound);
}

TEST_F(DatabaseTest, WrongAdminPasswordIsRefusedWithoutThePassword) {
  json body = connectionBody({"ro"});
  body["password"] = "wrong-admin-pw-xyz";
  const core::Status s = engine_->putConnection(kTenant, "main", body);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("password authentication failed"), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find("wrong-admin-pw-xyz"), std::string::npos) << s.message();
  EXPECT_EQ(engine_->readConnection(kTenant, "main").status().code(), StatusCode::kNotFound);
  // Not verified, it is stored as given.
  body["verify_connection"] = false;
  EXPECT_TRUE(engine_->putConnection(kTenant, "main", body).isOk());
}

TEST_F(DatabaseTest, ConnectionsReadBackWithoutThePassword) {
  const std::string host = "127.0.0.1:" + std::to_string(server_->port());
  // URLs too, with or without Vault's placeholders for the credentials.
  for (const std::string& url :
       {connectionUrl(), "postgresql://" + host + "/postgres?sslmode=disable",
        "postgres://{{username}}:{{password}}@" + host + "/postgres?sslmode=disable"}) {
    json body = connectionBody({"ro", "rw"});
    body["connection_url"] = url;
    const core::Status s = engine_->putConnection(kTenant, "main", body);
    ASSERT_TRUE(s.isOk()) << url << ": " << s.toString();
    auto read = engine_->readConnection(kTenant, "main");
    ASSERT_TRUE(read.isOk()) << read.status().toString();
    EXPECT_EQ(*read, json({{"connection_url", url},
                           {"username", PgTestServer::kAdminUser},
                           {"allowed_roles", {"ro", "rw"}},
                           {"verify_connection", true}}));
    EXPECT_EQ(read->dump().find(server_->adminPassword()), std::string::npos);
  }
  ASSERT_TRUE(engine_->putConnection(kTenant, "second", connectionBody("a,b")).isOk());
  EXPECT_EQ((*engine_->readConnection(kTenant, "second"))["allowed_roles"], json({"a", "b"}));
  EXPECT_EQ(*engine_->listConnections(kTenant), (std::vector<std::string>{"main", "second"}));
  ASSERT_TRUE(engine_->deleteConnection(kTenant, "main").isOk());
  EXPECT_EQ(engine_->deleteConnection(kTenant, "main").code(), StatusCode::kNotFound);
  EXPECT_EQ(*engine_->listConnections(kTenant), (std::vector<std::string>{"second"}));
  EXPECT_TRUE(engine_->listConnections("team-2")->empty());
}

TEST_F(DatabaseTest, RolesReadBackWithTtlsInSeconds) {
  json role = readOnlyRole();
  role["default_ttl"] = "1h30m";
  role["max_ttl"] = 86400 * 2;
  role["revocation_statements"] = "DROP ROLE \"{{name}}\"";
  ASSERT_TRUE(engine_->putRole(kTenant, "ro", role).isOk());
  auto read = engine_->readRole(kTenant, "ro");
  ASSERT_TRUE(read.isOk()) << read.status().toString();
  EXPECT_EQ((*read)["default_ttl"], 5400);
  EXPECT_EQ((*read)["max_ttl"], 172800);
  EXPECT_EQ((*read)["db_name"], "main");
  EXPECT_EQ((*read)["creation_statements"].size(), 2U);
  EXPECT_EQ((*read)["revocation_statements"], json({"DROP ROLE \"{{name}}\""}));
  EXPECT_EQ((*read)["renew_statements"], json::array());

  // Defaults: 1h and 24h; a max_ttl under 1h lowers the default with it.
  ASSERT_TRUE(
      engine_->putRole(kTenant, "plain", {{"db_name", "main"}, {"creation_statements", "SELECT 1"}})
          .isOk());
  EXPECT_EQ((*engine_->readRole(kTenant, "plain"))["default_ttl"], 3600);
  EXPECT_EQ((*engine_->readRole(kTenant, "plain"))["max_ttl"], 86400);
  ASSERT_TRUE(
      engine_
          ->putRole(kTenant, "short",
                    {{"db_name", "main"}, {"creation_statements", "SELECT 1"}, {"max_ttl", "30m"}})
          .isOk());
  EXPECT_EQ((*engine_->readRole(kTenant, "short"))["default_ttl"], 1800);
  EXPECT_EQ((*engine_->readRole(kTenant, "short"))["max_ttl"], 1800);

  EXPECT_EQ(*engine_->listRoles(kTenant), (std::vector<std::string>{"plain", "ro", "short"}));
  ASSERT_TRUE(engine_->deleteRole(kTenant, "plain").isOk());
  EXPECT_EQ(engine_->readRole(kTenant, "plain").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(engine_->deleteRole(kTenant, "plain").code(), StatusCode::kNotFound);
}

// A bad request and a word its error must name.
struct BadBody {
  const char* what;
  json body;
  std::string names;
};

// `body` with field `k` set to `v`, or without field `k`.
json withField(json body, const std::string& k, const json& v) {
  body[k] = v;
  return body;
}
json withoutField(json body, const std::string& k) {
  body.erase(k);
  return body;
}

TEST_F(DatabaseTest, BadConnectionBodiesAreInvalidAndStoreNothing) {
  const json good = connectionBody({"ro"});
  auto with = [&](const std::string& k, const json& v) { return withField(good, k, v); };
  auto without = [&](const std::string& k) { return withoutField(good, k); };
  const std::vector<BadBody> cases = {
      {"unknown field", with("bogus", 1), "bogus"},
      {"not an object", json::array(), "object"},
      {"url missing", without("connection_url"), "connection_url"},
      {"username missing", without("username"), "username"},
      {"url not a string", with("connection_url", 5), "connection_url"},
      {"password in url", with("connection_url", connectionUrl() + " password=hunter22"),
       "must not hold a password"},
      {"password in url userinfo", with("connection_url", "postgresql://u:hunter22@127.0.0.1/db"),
       "must not hold a password"},
      {"malformed url", with("connection_url", "host=127.0.0.1 nokey=1"), "connection_url"},
      {"bad allowed role", with("allowed_roles", {"Bad Role"}), "allowed_roles"},
      {"allowed_roles not a list", with("allowed_roles", 3), "allowed_roles"},
      {"verify not a bool", with("verify_connection", "yes"), "verify_connection"},
  };
  for (const BadBody& c : cases) {
    const core::Status s = engine_->putConnection(kTenant, "main", c.body);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what << ": " << s.toString();
    EXPECT_NE(s.message().find(c.names), std::string::npos) << c.what << ": " << s.message();
    EXPECT_EQ(s.message().find("hunter22"), std::string::npos) << c.what << ": " << s.message();
    EXPECT_EQ(s.message().find(server_->adminPassword()), std::string::npos) << c.what;
  }
  for (const std::string& name :
       std::vector<std::string>{"", "Main", "a/b", "a.b", "a b", std::string(65, 'a')}) {
    const core::Status s = engine_->putConnection(kTenant, name, good);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << "'" << name << "'";
    EXPECT_EQ(engine_->putRole(kTenant, name, readOnlyRole()).code(), StatusCode::kInvalidArgument)
        << "'" << name << "'";
  }
  EXPECT_TRUE(engine_->listConnections(kTenant)->empty());
  EXPECT_TRUE(engine_->putConnection(kTenant, std::string(64, 'a'), good).isOk());
}

TEST_F(DatabaseTest, BadRoleBodiesAreInvalid) {
  const json good = readOnlyRole();
  auto with = [&](const std::string& k, const json& v) { return withField(good, k, v); };
  auto without = [&](const std::string& k) { return withoutField(good, k); };
  json default_over_max = with("default_ttl", "2h");
  default_over_max["max_ttl"] = "1h";
  const std::vector<BadBody> cases = {
      {"unknown field", with("default_lease", 1), "default_lease"},
      {"db_name missing", without("db_name"), "db_name"},
      {"db_name bad", with("db_name", "Main DB"), "db_name"},
      {"creation missing", without("creation_statements"), "creation_statements"},
      {"creation empty", with("creation_statements", json::array()), "creation_statements"},
      {"creation not strings", with("creation_statements", {1, 2}), "creation_statements"},
      {"creation blank", with("creation_statements", {" ;"}), "creation_statements"},
      {"unknown template", with("creation_statements", {"CREATE ROLE \"{{user}}\""}), "{{user}}"},
      {"unclosed template", with("revocation_statements", {"DROP ROLE \"{{name\""}),
       "revocation_statements"},
      {"default over max", default_over_max, "default_ttl"},
      {"bad unit", with("default_ttl", "1x"), "default_ttl"},
      {"sub-second unit", with("default_ttl", "10ms"), "default_ttl"},
      {"missing unit", with("max_ttl", "1h30"), "max_ttl"},
      {"negative", with("max_ttl", -5), "max_ttl"},
      {"fraction", with("max_ttl", 1.5), "max_ttl"},
      {"empty", with("max_ttl", ""), "max_ttl"},
  };
  for (const BadBody& c : cases) {
    const core::Status s = engine_->putRole(kTenant, "ro", c.body);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.what << ": " << s.toString();
    EXPECT_NE(s.message().find(c.names), std::string::npos) << c.what << ": " << s.message();
  }
  EXPECT_TRUE(engine_->listRoles(kTenant)->empty());
}

TEST_F(DatabaseTest, FailedCreationStatementsLeaveNoUserAndNoLease) {
  ASSERT_TRUE(engine_->putConnection(kTenant, "main", connectionBody({"broken"})).isOk());
  json role = readOnlyRole();
  role["creation_statements"].push_back("SELECT * FROM no_such_table");
  ASSERT_TRUE(engine_->putRole(kTenant, "broken", role).isOk());
  auto c = engine_->createCredential(kTenant, "broken", {});
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("statement 3"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("no_such_table"), std::string::npos);
  auto users = admin_->exec("SELECT rolname FROM pg_roles WHERE rolname LIKE 'v-team-1-broken-%'");
  ASSERT_TRUE(users.isOk()) << users.status().message();
  EXPECT_TRUE(users->rows.empty());
  EXPECT_EQ(leases_->count(), 0U);
  // The admin connection was fine for the next request (no transaction left open).
  role["creation_statements"].erase(2);
  ASSERT_TRUE(engine_->putRole(kTenant, "broken", role).isOk());
  EXPECT_TRUE(engine_->createCredential(kTenant, "broken", {}).isOk());
}

TEST_F(DatabaseTest, LongTenantAndRoleNamesAreCutToFitPostgres) {
  const std::string tenant(40, 't');
  const std::string role(64, 'r');
  ASSERT_TRUE(keys_->addTenant(tenant).isOk());
  json conn = connectionBody({role});
  ASSERT_TRUE(engine_->putConnection(tenant, "main", conn).isOk());
  ASSERT_TRUE(engine_->putRole(tenant, role, readOnlyRole()).isOk());
  auto c = engine_->createCredential(tenant, role, {});
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_LE(c->username.size(), 63U);
  EXPECT_EQ(c->username.rfind("v-" + std::string(24, 't') + "-" + std::string(25, 'r') + "-", 0),
            0U)
      << c->username;
  EXPECT_TRUE(roleExists(c->username));  // Not truncated by PostgreSQL.
  EXPECT_TRUE(login(*c).isOk());
}

TEST_F(DatabaseTest, StoreHoldsNoPasswordInTheClear) {
  configure();
  const DbCredential c = issue();
  ASSERT_FALSE(c.password.empty());
  EXPECT_TRUE(filesContaining(dir_.path(), server_->adminPassword()).empty());
  EXPECT_TRUE(filesContaining(dir_.path(), c.password).empty());
  // The records are there, sealed.
  auto raw = store_->range("/secrets/team-1/db/", store::prefixEnd("/secrets/team-1/db/"));
  ASSERT_TRUE(raw.isOk());
  ASSERT_EQ(raw->kvs.size(), 2U);
  EXPECT_EQ(raw->kvs[0].key, "/secrets/team-1/db/config/main");
  EXPECT_EQ(raw->kvs[0].value.rfind("tsb1", 0), 0U);
  EXPECT_EQ(raw->kvs[1].key, "/secrets/team-1/db/roles/ro");
  EXPECT_EQ(raw->kvs[1].value.rfind("tsb1", 0), 0U);
}

TEST_F(DatabaseTest, PasswordNeverReachesPostgresLog) {
  configure();
  // Every statement of the admin's new sessions is logged, as a server might be configured.
  ASSERT_TRUE(admin_->exec("ALTER ROLE tessera_admin SET log_statement = 'all'").isOk());
  auto c = engine_->createCredential(kTenant, "ro", {});
  ASSERT_TRUE(admin_->exec("ALTER ROLE tessera_admin RESET log_statement").isOk());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  const std::string log = server_->serverLog();
  EXPECT_NE(log.find("CREATE ROLE \"" + c->username + "\""), std::string::npos)
      << "statements not logged: " << log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
  EXPECT_EQ(log.find(c->password), std::string::npos);
  EXPECT_EQ(log.find(server_->adminPassword()), std::string::npos);
}

TEST_F(DatabaseTest, UnreachableServerIsRetriedAndAMissingConnectionIsIrrevocable) {
  json down = connectionBody({"ro"});
  down["connection_url"] = "host=127.0.0.1 port=" + std::to_string(PgTestServer::closedPort()) +
                           " dbname=postgres sslmode=disable";
  down["verify_connection"] = false;
  ASSERT_TRUE(engine_->putConnection(kTenant, "down", down).isOk());
  auto lease =
      leases_->create(kTenant, "db/creds/ro", "db",
                      {{"connection", "down"}, {"role", "ro"}, {"username", "v-x"}}, 1h, 1h);
  ASSERT_TRUE(lease.isOk()) << lease.status().toString();
  const core::Status s = leases_->revoke(kTenant, lease->id);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.toString();
  auto after = leases_->lookup(kTenant, lease->id);
  ASSERT_TRUE(after.isOk());
  EXPECT_EQ(after->state, LeaseState::kRevoking);
  EXPECT_EQ(after->attempts, 1);
  EXPECT_GT(after->next_attempt, clock_.wallNow());
  EXPECT_NE(after->last_error.find("Connection refused"), std::string::npos) << after->last_error;
  EXPECT_EQ(after->last_error.find(server_->adminPassword()), std::string::npos);
  // Renewing needs the server too.
  EXPECT_EQ(engine_->extend(*lease, clock_.wallNow() + 2h).code(), StatusCode::kUnavailable);

  // The connection was deleted: nothing can revoke the lease, and retrying will not help.
  ASSERT_TRUE(engine_->putConnection(kTenant, "gone", connectionBody({"ro"})).isOk());
  auto orphan =
      leases_->create(kTenant, "db/creds/ro", "db",
                      {{"connection", "gone"}, {"role", "ro"}, {"username", "v-y"}}, 1h, 1h);
  ASSERT_TRUE(orphan.isOk()) << orphan.status().toString();
  ASSERT_TRUE(engine_->deleteConnection(kTenant, "gone").isOk());
  EXPECT_FALSE(leases_->revoke(kTenant, orphan->id).isOk());
  auto stuck = leases_->lookup(kTenant, orphan->id);
  ASSERT_TRUE(stuck.isOk());
  EXPECT_EQ(stuck->state, LeaseState::kIrrevocable);
  EXPECT_EQ(stuck->attempts, 1);
  EXPECT_NE(stuck->last_error.find("no longer exists"), std::string::npos) << stuck->last_error;
}

TEST_F(DatabaseTest, ChangedLeaseRecordCannotDropOtherRoles) {
  configure();
  // Lease records are not sealed: one naming a user the engine did not generate is refused.
  for (const std::string& user :
       {std::string(PgTestServer::kAdminUser), std::string("v-\"x"), std::string()}) {
    auto lease =
        leases_->create(kTenant, "db/creds/ro", "db",
                        {{"connection", "main"}, {"role", "ro"}, {"username", user}}, 1h, 1h);
    ASSERT_TRUE(lease.isOk()) << lease.status().toString();
    EXPECT_EQ(engine_->revoke(*lease).code(), StatusCode::kInvalidArgument) << user;
    EXPECT_EQ(engine_->extend(*lease, clock_.wallNow() + 2h).code(), StatusCode::kInvalidArgument)
        << user;
    EXPECT_FALSE(leases_->revoke(kTenant, lease->id).isOk());
    EXPECT_EQ(leases_->lookup(kTenant, lease->id)->state, LeaseState::kIrrevocable);
  }
  EXPECT_TRUE(roleExists(PgTestServer::kAdminUser));
  EXPECT_EQ(validUntil(PgTestServer::kAdminUser), -1);
}

TEST_F(DatabaseTest, SealedBarrierMakesRevocationWait) {
  configure();
  const DbCredential c = issue();
  keys_->seal();
  EXPECT_EQ(engine_->revoke(c.lease).code(), StatusCode::kUnavailable);
  EXPECT_EQ(engine_->createCredential(kTenant, "ro", {}).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(roleExists(c.username));
  ASSERT_TRUE(keys_->unsealWithKeyFile().isOk());
  EXPECT_TRUE(engine_->revoke(c.lease).isOk());
  EXPECT_FALSE(roleExists(c.username));
}

}  // namespace
}  // namespace tessera::secrets
