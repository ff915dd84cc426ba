#include "secrets/postgres.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ctime>

#include "secrets/testing/pg_server.h"

namespace tessera::secrets {
namespace {

using namespace std::chrono_literals;
using core::StatusCode;

struct QuoteCase {
  std::string in;
  std::string ident;
  std::string literal;
};

const std::vector<QuoteCase>& quoteCases() {
  static const std::vector<QuoteCase> cases = {
      {"abc", "\"abc\"", "'abc'"},
      {"", "\"\"", "''"},
      {"t-x", "\"t-x\"", "'t-x'"},
      {"Mixed Case", "\"Mixed Case\"", "'Mixed Case'"},
      {"a\"b", "\"a\"\"b\"", "'a\"b'"},
      {"\"", "\"\"\"\"", "'\"'"},
      {"it's", "\"it's\"", "'it''s'"},
      {"a\\b", "\"a\\b\"", "E'a\\\\b'"},
      {"\\'", "\"\\'\"", "E'\\\\'''"},
      {"x'; DROP ROLE y; --", "\"x'; DROP ROLE y; --\"", "'x''; DROP ROLE y; --'"},
      {"\"; DROP ROLE y; --", "\"\"\"; DROP ROLE y; --\"", "'\"; DROP ROLE y; --'"},
      {"ünï-😀", "\"ünï-😀\"", "'ünï-😀'"},
      {"tab\there\nnewline", "\"tab\there\nnewline\"", "'tab\there\nnewline'"},
  };
  return cases;
}

TEST(PgQuoteTest, FollowsPostgresRules) {
  for (const QuoteCase& c : quoteCases()) {
    auto ident = quoteIdent(c.in);
    ASSERT_TRUE(ident.isOk()) << c.in;
    EXPECT_EQ(*ident, c.ident) << c.in;
    auto literal = quoteLiteral(c.in);
    ASSERT_TRUE(literal.isOk()) << c.in;
    EXPECT_EQ(*literal, c.literal) << c.in;
  }
}

TEST(PgQuoteTest, RefusesNulBytes) {
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(quoteIdent(with_nul).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(quoteLiteral(with_nul).status().code(), StatusCode::kInvalidArgument);
}

TEST(PgRedactTest, MasksPasswordsInConnectionStringsAndUrls) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"host=h password=s3cret user=u", "host=h password=*** user=u"},
      {"password=s3cret", "password=***"},
      {"sslkey=k sslpassword=s3cret", "sslkey=k sslpassword=***"},
      {"postgres://u@h/db?sslpassword=s3cret", "postgres://u@h/db?sslpassword=***"},
      {"host=h password = 'a b\\' c' user=u", "host=h password = *** user=u"},
      {"host=h password='' user=u", "host=h password=*** user=u"},
      {"postgresql://u:s3cret@h:5432/db", "postgresql://u:***@h:5432/db"},
      {"postgres://u:s3c:r@t@h1:1,h2:2/db", "postgres://u:***@h1:1,h2:2/db"},
      {"postgres://u@h/db?password=s3cret&sslmode=disable",
       "postgres://u@h/db?password=***&sslmode=disable"},
      {"postgres://u@h/db?sslmode=disable&password=s3cret",
       "postgres://u@h/db?sslmode=disable&password=***"},
      {"error in \"postgresql://u:s3cret@h/db\"", "error in \"postgresql://u:***@h/db\""},
      // Nothing to mask.
      {"host=h user=u", "host=h user=u"},
      {"postgresql://u@h/db", "postgresql://u@h/db"},
      {"postgresql://h:5432/db", "postgresql://h:5432/db"},
      {"password authentication failed for user \"u\"",
       "password authentication failed for user \"u\""},
      {"user=my_password_user", "user=my_password_user"},
  };
  for (const auto& [in, want] : cases) {
    EXPECT_EQ(redactConninfo(in), want) << in;
  }
}

TEST(PgConnectTest, MalformedConnectionStringsAreInvalidWithoutThePassword) {
  for (const std::string conninfo :
       {"host=127.0.0.1 password=hunter22 bogus", "host=127.0.0.1 password=hunter22 nokey=1",
        "postgresql://u:hunter22@127.0.0.1/db?bogus=1", "postgresql://u:hunter%zz22@127.0.0.1/db",
        "host=127.0.0.1 password='hunter22"}) {
    auto r = PgConnection::connect(conninfo, 1s);
    ASSERT_FALSE(r.isOk()) << conninfo;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().message();
    EXPECT_EQ(r.status().message().find("hunter"), std::string::npos) << r.status().message();
  }
}

TEST(PgConnectTest, ClosedPortIsUnavailableAtOnce) {
  const std::string conninfo = "host=127.0.0.1 port=" + std::to_string(PgTestServer::closedPort()) +
                               " user=u password=hunter22 dbname=d connect_timeout=30";
  const auto begin = std::chrono::steady_clock::now();
  auto r = PgConnection::connect(conninfo, 10s);
  const auto took = std::chrono::steady_clock::now() - begin;
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(took, 2s);
  EXPECT_NE(r.status().message().find("host=127.0.0.1"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("Connection refused"), std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("hunter22"), std::string::npos) << r.status().message();
}

TEST(PgConnectTest, SilentServerTimesOut) {
  // Listens (the kernel completes the handshake) but never answers the startup packet.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  const std::string conninfo = "host=127.0.0.1 port=" + std::to_string(ntohs(addr.sin_port)) +
                               " user=u password=hunter22 sslmode=disable gssencmode=disable";
  const auto begin = std::chrono::steady_clock::now();
  auto r = PgConnection::connect(conninfo, 300ms);
  const auto took = std::chrono::steady_clock::now() - begin;
  close(fd);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("no answer within 300 ms"), std::string::npos)
      << r.status().message();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 2s);
}

// "2030-01-02 03:04:05+00".
std::string utc(std::chrono::system_clock::time_point t) {
  const std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S+00", &tm);
  return buf;
}

class PgServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    server_ = PgTestServer::shared(&error);
    ASSERT_NE(server_, nullptr) << error;
    auto admin = PgConnection::connect(server_->superuserConninfo(), 5s);
    ASSERT_TRUE(admin.isOk()) << admin.status().message();
    admin_ = std::move(admin).value();
  }

  // Creates a login role with `password`, valid until `until`.
  void createRole(const std::string& role, const std::string& password,
                  std::chrono::system_clock::time_point until) {
    const std::string sql = "CREATE ROLE " + *quoteIdent(role) + " WITH LOGIN PASSWORD " +
                            *quoteLiteral(password) + " VALID UNTIL " + *quoteLiteral(utc(until));
    auto r = admin_->exec(sql);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ(r->command_tag, "CREATE ROLE");
  }

  PgTestServer* server_ = nullptr;
  std::unique_ptr<PgConnection> admin_;
};

TEST_F(PgServerTest, SuperuserConnectsOverTcp) {
  auto r = admin_->exec("SELECT current_user, inet_server_addr()::text, current_setting('port')");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  ASSERT_EQ(r->rows.size(), 1U);
  EXPECT_EQ(r->rows[0][0], "tessera_admin");
  EXPECT_EQ(r->rows[0][1], "127.0.0.1/32");
  EXPECT_EQ(r->rows[0][2], std::to_string(server_->port()));
  EXPECT_TRUE(admin_->ok());
  // Nothing is trusted: the superuser without its password is refused.
  auto no_password = PgConnection::connect(server_->conninfo("tessera_admin", "wrong"), 5s);
  EXPECT_EQ(no_password.status().code(), StatusCode::kUnavailable);
}

TEST_F(PgServerTest, ParameterisedExec) {
  auto r = admin_->exec("SELECT $1::int + 1 AS answer, $2::text AS t, NULL::text AS n",
                        {"41", "it's \\ \"odd\""});
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->columns, (std::vector<std::string>{"answer", "t", "n"}));
  ASSERT_EQ(r->rows.size(), 1U);
  EXPECT_EQ(r->rows[0][0], "42");
  EXPECT_EQ(r->rows[0][1], "it's \\ \"odd\"");
  EXPECT_EQ(r->rows[0][2], std::nullopt);
  EXPECT_EQ(r->affected_rows, 1);

  auto script = admin_->execScript(
      "CREATE TEMP TABLE t (v int); INSERT INTO t VALUES (1), (2), (3); UPDATE t SET v = v + 1");
  ASSERT_TRUE(script.isOk()) << script.status().message();
  EXPECT_EQ(script->command_tag, "UPDATE 3");
  EXPECT_EQ(script->affected_rows, 3);
  auto sum = admin_->exec("SELECT sum(v) FROM t WHERE v > $1", {"2"});
  ASSERT_TRUE(sum.isOk()) << sum.status().message();
  EXPECT_EQ(sum->rows[0][0], "7");

  // One statement only with parameters (the extended protocol).
  EXPECT_FALSE(admin_->exec("SELECT 1; SELECT 2").isOk());
  EXPECT_EQ(admin_->exec("SELECT $1::int", {"not a number"}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(admin_->exec("SELECT $1::text", {std::string("a\0b", 3)}).status().code(),
            StatusCode::kInvalidArgument);
  auto syntax = admin_->exec("SELEC 1");
  EXPECT_EQ(syntax.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(syntax.status().message(), "postgres: 42601 syntax error at or near \"SELEC\"");
  EXPECT_TRUE(admin_->exec("SELECT 1").isOk());  // Still usable after errors.
}

TEST_F(PgServerTest, QuotedValuesReadBackUnchanged) {
  for (const QuoteCase& c : quoteCases()) {
    // PostgreSQL has no empty identifiers ("zero-length delimited identifier").
    const std::string alias = c.in.empty() ? "" : " AS " + c.ident;
    auto r = admin_->exec("SELECT " + c.literal + " = $1, " + c.literal + alias, {c.in});
    ASSERT_TRUE(r.isOk()) << c.in << ": " << r.status().message();
    EXPECT_EQ(r->rows[0][0], "t") << c.in;
    EXPECT_EQ(r->rows[0][1], c.in);
    if (!c.in.empty()) {
      EXPECT_EQ(r->columns[1], c.in);
    }
  }
  // Both with and without standard_conforming_strings.
  ASSERT_TRUE(admin_->exec("SET standard_conforming_strings = off").isOk());
  auto r = admin_->exec("SELECT " + *quoteLiteral("a\\'b") + " = $1", {"a\\'b"});
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->rows[0][0], "t");
}

TEST_F(PgServerTest, RoleValidUntilLaterLogsInWithItsPasswordOnly) {
  const auto now = std::chrono::system_clock::now();
  createRole("t-x", "pw-for-t-x 'quoted' \\", now + std::chrono::hours(1));

  auto as_role = PgConnection::connect(server_->conninfo("t-x", "pw-for-t-x 'quoted' \\"), 5s);
  ASSERT_TRUE(as_role.isOk()) << as_role.status().message();
  auto who = (*as_role)->exec("SELECT current_user");
  ASSERT_TRUE(who.isOk()) << who.status().message();
  EXPECT_EQ(who->rows[0][0], "t-x");

  auto wrong = PgConnection::connect(server_->conninfo("t-x", "not-the-password-123"), 5s);
  ASSERT_FALSE(wrong.isOk());
  EXPECT_EQ(wrong.status().code(), StatusCode::kUnavailable);
  const std::string& message = wrong.status().message();
  EXPECT_NE(message.find("password authentication failed for user \"t-x\""), std::string::npos)
      << message;
  EXPECT_NE(message.find("user=t-x"), std::string::npos) << message;
  EXPECT_EQ(message.find("not-the-password-123"), std::string::npos) << message;
  EXPECT_EQ(message.find("pw-for-t-x"), std::string::npos) << message;

  auto again = admin_->exec("CREATE ROLE \"t-x\"");
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "postgres: 42710 role \"t-x\" already exists");
}

TEST_F(PgServerTest, RoleValidUntilPastCannotLogIn) {
  createRole("t-expired", "pw-expired", std::chrono::system_clock::now() - std::chrono::hours(1));
  auto r = PgConnection::connect(server_->conninfo("t-expired", "pw-expired"), 5s);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message().find("pw-expired"), std::string::npos) << r.status().message();
}

TEST_F(PgServerTest, DroppedRoleCannotLogIn) {
  createRole("t-dropped", "pw-dropped", std::chrono::system_clock::now() + std::chrono::hours(1));
  {
    auto r = PgConnection::connect(server_->conninfo("t-dropped", "pw-dropped"), 5s);
    ASSERT_TRUE(r.isOk()) << r.status().message();
  }
  auto dropped = admin_->exec("DROP ROLE " + *quoteIdent("t-dropped"));
  ASSERT_TRUE(dropped.isOk()) << dropped.status().message();
  EXPECT_EQ(dropped->command_tag, "DROP ROLE");
  auto r = PgConnection::connect(server_->conninfo("t-dropped", "pw-dropped"), 5s);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  auto twice = admin_->exec("DROP ROLE " + *quoteIdent("t-dropped"));
  EXPECT_EQ(twice.status().code(), StatusCode::kNotFound) << twice.status().message();
  EXPECT_TRUE(admin_->exec("DROP ROLE IF EXISTS " + *quoteIdent("t-dropped")).isOk());
}

TEST_F(PgServerTest, HashedPasswordLogsIn) {
  auto verifier = admin_->encryptPassword("pw-hashed", "t-hashed");
  ASSERT_TRUE(verifier.isOk()) << verifier.status().message();
  EXPECT_EQ(verifier->rfind("SCRAM-SHA-256$", 0), 0U) << *verifier;
  EXPECT_EQ(verifier->find("pw-hashed"), std::string::npos);
  createRole("t-hashed", *verifier, std::chrono::system_clock::now() + std::chrono::hours(1));
  auto r = PgConnection::connect(server_->conninfo("t-hashed", "pw-hashed"), 5s);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_FALSE(PgConnection::connect(server_->conninfo("t-hashed", *verifier), 5s).isOk());
}

TEST_F(PgServerTest, LostConnectionIsUnavailableAndReconnects) {
  auto other = PgConnection::connect(server_->superuserConninfo(), 5s);
  ASSERT_TRUE(other.isOk()) << other.status().message();
  auto pid = (*other)->exec("SELECT pg_backend_pid()");
  ASSERT_TRUE(pid.isOk()) << pid.status().message();
  auto killed = admin_->exec("SELECT pg_terminate_backend($1::int)", {*pid->rows[0][0]});
  ASSERT_TRUE(killed.isOk()) << killed.status().message();

  auto r = (*other)->exec("SELECT 1");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().message();
  EXPECT_FALSE((*other)->ok());
  EXPECT_EQ((*other)->exec("SELECT 1").status().code(), StatusCode::kUnavailable);

  ASSERT_TRUE((*other)->reconnect().isOk());
  EXPECT_TRUE((*other)->ok());
  auto back = (*other)->exec("SELECT 1");
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->rows[0][0], "1");
}

TEST_F(PgServerTest, UrlConnectionStrings) {
  const std::string url = "postgresql://tessera_admin:" + server_->adminPassword() +
                          "@127.0.0.1:" + std::to_string(server_->port()) +
                          "/postgres?sslmode=disable";
  auto r = PgConnection::connect(url, 5s);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  auto bad = PgConnection::connect("postgresql://tessera_admin:wrong-pw-xyz@127.0.0.1:" +
                                       std::to_string(server_->port()) + "/postgres",
                                   5s);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().message().find("wrong-pw-xyz"), std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::secrets
