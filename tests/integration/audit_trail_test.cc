// The real `tessera server`'s audit log, as an operator relies on it:
// - every kind of answer the server gives (success, each way authentication fails, the ACL,
//   paths and bodies that do not parse, sizes, rates, chroot listeners, ...) leaves its record,
//   found by the client's own connection (its port is the record's remote address);
// - refusals an attacker can send for free are recorded within a budget, and what the budget
//   drops is counted in a summary record;
// - the log's tail: a live server signs it within its checkpoint interval, and a tail that is
//   rewritten or cut off fails `tessera audit verify`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "audit/crypto.h"
#include "audit/record.h"
#include "process.h"
#include "test_certs.h"
#include "util.h"

namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;
using tessera::integration::Client;
using tessera::integration::Process;
using tessera::integration::Response;
using tessera::integration::runTessera;
using tessera::integration::slurp;
using tessera::integration::waitFor;

// One request on a connection of its own: its status (0 if no answer could be read) and the
// local port the server saw it come from.
struct Sent {
  unsigned status = 0;
  uint16_t port = 0;
  std::string body;
};

// Sends `bytes` as they are (so that malformed requests can be sent) over TLS to `address`.
Sent sendRaw(const std::string& address, const std::string& ca_pem, const std::string& bytes) {
  std::smatch m;
  std::regex_match(address, m, std::regex(R"(https://([0-9.]+):(\d+))"));
  asio::io_context io;
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  ctx.add_certificate_authority(asio::buffer(ca_pem));
  ctx.set_verify_mode(asio::ssl::verify_peer);
  beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
  beast::get_lowest_layer(stream).connect(asio::ip::tcp::endpoint(
      asio::ip::make_address(m[1].str()), static_cast<uint16_t>(std::stoi(m[2].str()))));
  stream.handshake(asio::ssl::stream_base::client);
  Sent sent;
  sent.port = beast::get_lowest_layer(stream).socket().local_endpoint().port();
  beast::error_code ec;
  asio::write(stream, asio::buffer(bytes), ec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1 << 24);
  http::read(stream, buf, parser, ec);
  if (parser.is_header_done()) {
    sent.status = parser.get().result_int();
    sent.body = parser.get().body();
  }
  stream.shutdown(ec);
  return sent;
}

// The bytes of an HTTP/1.1 request.
std::string request(const std::string& method, const std::string& target,
                    const std::string& token = "", const std::string& body = "",
                    const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!token.empty()) {
    r += "X-Tessera-Token: " + token + "\r\n";
  }
  r += extra_headers;
  r += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  return r;
}

std::vector<json> records(const fs::path& log) {
  std::vector<json> out;
  std::istringstream in(slurp(log));
  for (std::string line; std::getline(in, line);) {
    out.push_back(json::parse(line));
  }
  return out;
}

// A started `tessera server` with a main listener and one chrooted to team-1.
struct Server {
  fs::path dir;
  std::unique_ptr<Process> process;
  std::string main;    // https://127.0.0.1:PORT
  std::string chroot;  // The listener chrooted to team-1.
  std::string ca;
  std::string root;
  fs::path log() const { return dir / "audit.log"; }
  Client client() const { return Client(main, ca); }
};

// Starts a server in `dir` with `extra` config blocks; fails the test if it does not listen.
void startServer(Server& s, const fs::path& dir, const std::string& extra) {
  s.dir = dir;
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto ca = tessera::integration::writeTestCertificates(dir);
  ASSERT_TRUE(ca.isOk()) << ca.status().toString();
  s.ca = *ca;
  const std::string d = dir.string();
  const std::string tls =
      "  tls_cert_file = \"" + d + "/cert.pem\"\n  tls_key_file = \"" + d + "/key.pem\"\n";
  std::ofstream(dir / "server.hcl")
      << "storage \"sqlite\" { path = \"" << d << "/t.db\" }\n"
      << "listener \"tcp\" {\n  address = \"127.0.0.1:0\"\n  max_request_size = 4096\n"
      << tls << "}\n"
      << "listener \"tcp\" {\n  address = \"127.0.0.1:0\"\n  chroot_tenant = \"team-1\"\n"
      << tls << "}\n"
      << "nodes { simulated = \"dgx-h100:1\" }\n"
      << extra;
  s.process = std::make_unique<Process>(
      std::vector<std::string>{"server", "-config=" + d + "/server.hcl"}, dir / "out.txt");
  std::string out;
  ASSERT_TRUE(waitFor(
      [&] {
        out = s.process->output();
        return out.find("chrooted to tenant") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << out << s.process->errors();
  std::regex listen_re(R"(listening on (https://[0-9.]+:\d+))");
  std::vector<std::string> addrs;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), listen_re);
       it != std::sregex_iterator(); ++it) {
    addrs.push_back((*it)[1]);
  }
  ASSERT_EQ(addrs.size(), 2U) << out;
  s.main = addrs[0];
  s.chroot = addrs[1];
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"((tsr\.[A-Za-z0-9]{24}))"))) << out;
  s.root = m[1];
}

// A tenant and a token for it with `policies`.
std::string tenantToken(const Server& s, const std::string& tenant, const json& settings,
                        const json& policies = {"tenant-admin"}, const std::string& ttl = "1h") {
  const Client c = s.client();
  if (c.call("GET", "/v1/tenants/" + tenant, s.root).status == 404) {
    const Response made = c.call("POST", "/v1/tenants/" + tenant, s.root, settings);
    EXPECT_EQ(made.status, 204U) << made.raw;
  }
  const Response r = c.call("POST", "/v1/auth/token/create", s.root,
                            {{"tenant", tenant}, {"policies", policies}, {"ttl", ttl}});
  EXPECT_EQ(r.status, 200U) << r.raw;
  return r.body["auth"]["client_token"];
}

// One server for the table of answers and the refusals' budget.
class AuditTrailTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new Server();
    startServer(*server_,
                fs::temp_directory_path() / ("tessera-audit-trail-" + std::to_string(::getpid())),
                "audit \"file\" { path = \"" +
                    (fs::temp_directory_path() /
                     ("tessera-audit-trail-" + std::to_string(::getpid())) / "audit.log")
                        .string() +
                    "\" }\n"
                    "secrets { seal = \"shamir\" }\n"  // Never initialized: secrets answer 503.
                    "audit_refusals { per_source_rate = 1  per_source_burst = 40 }\n");
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr && server_->process != nullptr) {
      server_->process->stop(SIGTERM);
    }
    if (server_ != nullptr) {
      fs::remove_all(server_->dir);
    }
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    ASSERT_FALSE(server_->main.empty()) << "the server did not start";
  }

  static Server* server_;
};

Server* AuditTrailTest::server_ = nullptr;

// How a kind of request is found in the log.
enum class Shape {
  kPair,     // A request record and a response record with its request id (the pipeline's).
  kOne,      // One response record (a refusal, or a tenant-boundary probe).
  kNothing,  // No record, by design (a public read: health checks).
};

// Every distinct way the server answers a request, each sent on a connection of its own and
// found in the audit log by that connection's port. 19 kinds named by the issue, and the
// public read that is left out on purpose.
TEST_F(AuditTrailTest, EveryKindOfRequestIsInTheLogWithItsResponse) {
  const Server& s = *server_;
  const Client c = s.client();
  const auto expires = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  const std::string expired = tenantToken(s, "demo", json::object(), {"tenant-admin"}, "1s");
  const std::string demo = tenantToken(s, "demo", json::object());
  const std::string team1 = tenantToken(s, "team-1", json::object());
  // A rate of one request a second, spent just before the table's first request.
  const std::string slow = tenantToken(s, "slow", {{"request_rate", 1}, {"request_burst", 1}});
  // A token whose policy allows reading queues only.
  ASSERT_EQ(c.call("POST", "/v1/tenants/demo/policies/queues-reader", demo,
                   {{"path", {{"queues", {{"capabilities", {"read"}}}}}}})
                .status,
            204U);
  const std::string reader = tenantToken(s, "demo", json::object(), {"queues-reader"});
  const std::string revoked = tenantToken(s, "demo", json::object());
  ASSERT_EQ(c.call("POST", "/v1/tenants/demo/auth/token/revoke-self", revoked).status, 204U);
  ASSERT_EQ(c.call("POST", "/v1/tenants/demo/workloads/w0", demo, {{"cpuMilli", 100}}).status,
            202U);
  const std::string invalid = "tsr.invalidinvalidinvalid1";

  struct Kind {
    std::string name;
    std::string bytes;
    unsigned status;
    Shape shape;
    bool chroot = false;
    std::string bad_token;     // A token presented that must appear only HMAC'd.
    std::string stream = "-";  // The tenant whose stream holds it ("-": not checked).
  };
  const std::string wl = "/v1/tenants/demo/workloads";
  std::vector<Kind> kinds = {
      // First: the slow tenant's one token a second was spent just before.
      {"over the tenant's rate", request("GET", "/v1/tenants/slow/workloads?list=true", slow), 429,
       Shape::kOne, false, "", "slow"},
      {"a read", request("GET", wl + "?list=true", demo), 200, Shape::kPair},
      {"a status read on the I/O thread", request("GET", wl + "/w0", demo), 200, Shape::kPair},
      {"a change", request("POST", wl + "/w1", demo, R"({"cpuMilli":100})"), 202, Shape::kPair},
      {"no token", request("GET", wl + "?list=true"), 403, Shape::kOne, false, "", ""},
      {"an unknown token", request("GET", wl + "?list=true", invalid), 403, Shape::kOne, false,
       invalid},
      {"a revoked token", request("GET", wl + "?list=true", revoked), 403, Shape::kOne, false,
       revoked},
      {"the ACL denies", request("GET", wl + "?list=true", reader), 403, Shape::kPair},
      {"another tenant's path", request("GET", "/v1/tenants/team-1/workloads?list=true", demo), 404,
       Shape::kOne},
      {"a path no route has", request("GET", "/v1/tenants/demo/no-such-thing", demo), 404,
       Shape::kPair},
      {"a method the route does not take", request("PATCH", wl + "/w0", demo, "{}"), 405,
       Shape::kPair},
      {"a path that does not parse", request("GET", wl + "/%2e%2e", demo), 400, Shape::kOne, false,
       "", "demo"},
      {"a body that does not parse", request("POST", wl + "/w2", demo, "{not json"), 400,
       Shape::kOne, false, "", "demo"},
      {"a field of the wrong type", request("POST", wl + "/w3", demo, R"({"cpuMilli":"lots"})"),
       400, Shape::kPair},
      {"a body too large", request("POST", wl + "/w4", demo, std::string(5000, 'x')), 413,
       Shape::kOne, false, "", "demo"},
      {"headers too large",
       request("GET", wl, demo, "", "X-Pad: " + std::string(20000, 'p') + "\r\n"), 431,
       Shape::kOne},
      {"malformed HTTP", "GET /v1/sys/health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400,
       Shape::kOne},
      {"secrets sealed", request("GET", "/v1/tenants/demo/secrets/kv/data/x", demo), 503,
       Shape::kPair},
      {"outside a chroot listener", request("GET", "/v1/sys/metrics", s.root), 404, Shape::kOne,
       true},
      {"an unauthenticated join with a number for its token",
       request("POST", "/v1/sys/nodes/join", "", R"({"join_token":0,"node":"n9"})"), 400,
       Shape::kOne},
      {"an unauthenticated join with an unknown token",
       request("POST", "/v1/sys/nodes/join", "", R"({"join_token":"tjn.guess","node":"n9"})"), 403,
       Shape::kOne, false, "tjn.guess"},
      {"a method a public route does not take", request("DELETE", "/v1/sys/health"), 405,
       Shape::kOne},
      {"a path outside /v1/", request("GET", "/v2/anything", demo), 404, Shape::kOne},
      {"a health check (public, not recorded)", request("GET", "/v1/sys/health"), 200,
       Shape::kNothing},
  };
  std::vector<Sent> sent;
  ASSERT_EQ(c.call("LIST", "/v1/tenants/slow/workloads", slow).status, 200U);
  for (const Kind& k : kinds) {
    sent.push_back(sendRaw(k.chroot ? s.chroot : s.main, s.ca, k.bytes));
  }
  // The token that expired: used once it has.
  std::this_thread::sleep_until(expires + std::chrono::milliseconds(100));
  kinds.push_back({"an expired token", request("GET", wl + "?list=true", expired), 403, Shape::kOne,
                   false, expired});
  sent.push_back(sendRaw(s.main, s.ca, kinds.back().bytes));

  const std::string salt = *tessera::audit::readSaltFile((s.dir / "audit.log.salt").string());
  const std::string text = slurp(s.log());
  const std::vector<json> log = records(s.log());
  for (size_t i = 0; i < kinds.size(); ++i) {
    const Kind& k = kinds[i];
    SCOPED_TRACE(k.name);
    // A header too large may be answered and reset before the client reads it.
    if (!(k.status == 431 && sent[i].status == 0)) {
      EXPECT_EQ(sent[i].status, k.status) << sent[i].body;
    }
    const std::string remote = "127.0.0.1:" + std::to_string(sent[i].port);
    std::vector<json> mine;
    for (const json& rec : log) {
      if (rec.contains("request") && rec["request"]["remote_address"] == remote) {
        mine.push_back(rec);
      }
    }
    const size_t want = k.shape == Shape::kNothing ? 0 : k.shape == Shape::kOne ? 1 : 2;
    if (mine.size() != want) {
      ADD_FAILURE() << mine.size() << " records, expected " << want
                    << (mine.empty() ? "" : ": " + mine.back().dump());
      continue;
    }
    switch (k.shape) {
      case Shape::kNothing:
        continue;
      case Shape::kOne:
        EXPECT_EQ(mine[0]["type"], "response") << mine[0].dump();
        break;
      case Shape::kPair:
        EXPECT_EQ(mine[0]["type"], "request") << mine[0].dump();
        EXPECT_EQ(mine[1]["type"], "response") << mine[1].dump();
        EXPECT_EQ(mine[0]["request_id"], mine[1]["request_id"]);
        break;
    }
    EXPECT_EQ(mine.back()["response"]["status"], k.status) << mine.back().dump();
    if (k.stream != "-") {
      EXPECT_EQ(mine.back()["tenant"], k.stream) << mine.back().dump();
    }
    if (!k.bad_token.empty()) {
      // Never in clear; its HMAC tells repeated guesses of one token apart.
      EXPECT_EQ(text.find(k.bad_token), std::string::npos);
      EXPECT_EQ(mine.back()["auth"]["token"], tessera::audit::hmacValue(salt, k.bad_token))
          << mine.back().dump();
    }
  }
}

// Refusals that cost an attacker nothing are recorded within a budget per source: beyond it
// they are counted, and a summary record says how many (and the metrics).
// Issue #39, Must show 2: kubectl through a listener chrooted to team-1, with a kubeconfig from
// `tessera kubeconfig` (whose server is then the listener's root): it serves team-1 only, another
// tenant's token and every path to another tenant are refused there, and each request is in
// team-1's audit stream with kubectl's command.
TEST_F(AuditTrailTest, KubectlOnAChrootedListenerServesOnlyItsTenant) {
  if (access("/usr/bin/kubectl", X_OK) != 0) {
    GTEST_SKIP() << "/usr/bin/kubectl is not installed on this machine (CI has it)";
  }
  const std::string mine = tenantToken(*server_, "team-1", json::object());
  const std::string theirs = tenantToken(*server_, "team-k", json::object());
  const fs::path home = server_->dir / "kube-home";
  fs::create_directories(home);
  auto env = [&](const std::string& token) {
    return std::map<std::string, std::string>{
        {"TESSERA_ADDR", server_->chroot},
        {"TESSERA_CACERT", (server_->dir / "ca.pem").string()},
        {"TESSERA_TOKEN", token},
        {"HOME", home.string()}};
  };
  auto kubeconfig = [&](const std::string& token, const std::string& name) {
    const fs::path file = home / name;
    const auto made = tessera::integration::runArgv(
        {tessera::integration::binary(), "kubeconfig", "--tenant", "team-1", "-o", file.string()},
        env(token), home);
    EXPECT_EQ(made.rc, 0) << made;
    return file;
  };
  auto kubectl = [&](const fs::path& config, std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return tessera::integration::runArgv(
        args, {{"KUBECONFIG", config.string()}, {"HOME", home.string()}}, home);
  };
  const fs::path config = kubeconfig(mine, "team-1.kubeconfig");
  const std::string yaml = slurp(config);
  EXPECT_NE(yaml.find("server: \"" + server_->chroot + "\""), std::string::npos) << yaml;
  EXPECT_EQ(yaml.find("/v1/tenants/"), std::string::npos) << yaml;  // The listener's root.
  const auto version = kubectl(config, {"version"});
  EXPECT_EQ(version.rc, 0) << version;
  const auto pods = kubectl(config, {"get", "pods", "-A"});
  EXPECT_EQ(pods.rc, 0) << pods;
  EXPECT_NE(pods.err.find("No resources found"), std::string::npos) << pods;
  // Another tenant's token at team-1's root: not a token of this listener's tenant. Its
  // kubeconfig is refused, saying so; one written by hand is refused by the server.
  const auto foreign =
      tessera::integration::runArgv({tessera::integration::binary(), "kubeconfig", "--tenant",
                                     "team-1", "-o", (home / "foreign.kubeconfig").string()},
                                    env(theirs), home);
  EXPECT_EQ(foreign.rc, 1) << foreign;
  EXPECT_NE(foreign.err.find("the token is not valid for tenant 'team-1' at this address"),
            std::string::npos)
      << foreign;
  EXPECT_FALSE(fs::exists(home / "foreign.kubeconfig"));
  std::string text = yaml;
  const size_t at = text.find("token: \"") + 8;
  text.replace(at, text.find('"', at) - at, theirs);
  const fs::path crossed = home / "crossed.kubeconfig";
  std::ofstream(crossed) << text;
  const auto refused = kubectl(crossed, {"get", "pods"});
  EXPECT_EQ(refused.rc, 1) << refused;
  EXPECT_EQ(refused.out.find("NAME"), std::string::npos) << refused;
  // Tessera's own paths to another tenant do not leave the chroot.
  const auto escaped =
      Client(server_->chroot, server_->ca)
          .call("GET", "/v1/tenants/team-k/k8s/api/v1/namespaces/default/pods", theirs);
  EXPECT_EQ(escaped.status, 404U) << escaped.raw;
  bool audited = false;
  for (const json& r : records(server_->log())) {
    if (r.value("tenant", "") == "team-1" &&
        r["request"].value("client", json::object()).value("kubectl-command", "") ==
            "kubectl get") {
      audited = true;
    }
  }
  EXPECT_TRUE(audited) << "no `kubectl get` in team-1's audit stream";
}

TEST_F(AuditTrailTest, RefusalsBeyondTheBudgetAreCountedInASummary) {
  const Server& s = *server_;
  const Client c = s.client();
  const std::string flood = tenantToken(s, "flood", json::object());
  constexpr int kSent = 60;
  for (int i = 0; i < kSent; ++i) {
    Sent r = sendRaw(
        s.main, s.ca,
        request("POST", "/v1/tenants/flood/workloads/f" + std::to_string(i), flood, "{not json"));
    ASSERT_EQ(r.status, 400U) << r.body;
  }
  auto count = [&](int& one_by_one, int& summarised) {
    one_by_one = 0;
    summarised = 0;
    for (const json& rec : records(s.log())) {
      if (rec.value("tenant", "") != "flood") {
        continue;
      }
      if (rec["request"]["method"] == "DROPPED") {
        summarised += rec["request"]["body"]["dropped"].get<int>();
        EXPECT_EQ(rec["request"]["body"]["by_status"],
                  json({{"400", rec["request"]["body"]["dropped"]}}));
      } else if (rec["request"]["method"] == "POST" && rec["response"]["status"] == 400) {
        ++one_by_one;
      }
    }
  };
  int one_by_one = 0;
  int summarised = 0;
  // Housekeeping writes the summary within a second.
  EXPECT_TRUE(waitFor(
      [&] {
        count(one_by_one, summarised);
        return one_by_one + summarised == kSent;
      },
      std::chrono::seconds(5)))
      << one_by_one << " recorded, " << summarised << " summarised";
  EXPECT_GE(one_by_one, 40);  // The burst, and what refilled meanwhile (1/s).
  EXPECT_LT(one_by_one, kSent);
  const Response metrics = c.call("GET", "/v1/sys/metrics", s.root);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      metrics.raw, m, std::regex(R"re(tessera_audit_refusals_total\{outcome="dropped"\} (\d+))re")))
      << metrics.raw;
  EXPECT_GE(std::stoi(m[1]), summarised);
}

// The tail of a live server's log: not signed yet is a warning (3), signed within the interval
// (0); rewritten in place it fails at the server's next checkpoint (1); cut off, or rewritten
// with its last checkpoint dropped, it fails against the checkpoint's copy (1); a clean stop
// signs it.
TEST(AuditTailTest, ARewrittenOrCutTailFailsVerify) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-audit-tail-" + std::to_string(::getpid()));
  Server s;
  startServer(s, dir,
              "audit \"file\" { path = \"" + (dir / "audit.log").string() +
                  "\"  checkpoint_interval_ms = 1000 }\n");
  ASSERT_FALSE(s.main.empty());
  const Client c = s.client();
  const std::string log = s.log().string();
  auto verify = [&](const std::string& file, const std::string& extra = "") {
    return runTessera("audit verify " + file + " " + extra, dir / "verify.err");
  };
  auto endsSigned = [&] {
    const std::vector<json> all = records(s.log());
    return !all.empty() && all.back()["type"] == "checkpoint";
  };

  // A new log starts with a signed checkpoint that states the interval.
  const std::vector<json> first = records(s.log());
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.front()["checkpoint"]["interval_ms"], 1000);
  ASSERT_EQ(c.call("POST", "/v1/tenants/demo", s.root, json::object()).status, 204U);
  ASSERT_EQ(c.call("POST", "/v1/tenants/demo/queues/team-x", s.root, json::object()).status, 204U);
  tessera::integration::CmdResult r = verify(log);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;  // Written just now: not signed yet.
  EXPECT_NE(r.err.find("not signed yet"), std::string::npos) << r.err;
  ASSERT_TRUE(waitFor(endsSigned, std::chrono::seconds(3)));
  r = verify(log);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find(log + ".checkpoint"), std::string::npos) << r.err;  // Found beside it.
  // A snapshot of the signed log, its checkpoint's copy and public key, for the offline cases.
  const fs::path snap = dir / "snap";
  fs::create_directories(snap);
  fs::copy_file(log + ".checkpoint", snap / "audit.log.checkpoint");
  fs::copy_file(log, snap / "audit.log");
  fs::copy_file(log + ".public.pem", snap / "audit.log.public.pem");

  // Live: two more records, rewritten in place (the path edited, every hash recomputed) before
  // the server signs them. Undetectable until then, and said so (3); its checkpoint does not
  // sign the forgery (1).
  ASSERT_EQ(c.call("POST", "/v1/tenants/team-a", s.root, json::object()).status, 204U);
  std::vector<json> all = records(s.log());
  ASSERT_EQ(all.back()["type"], "response");
  ASSERT_EQ(all[all.size() - 2]["type"], "request");
  std::string forged;
  std::string prev = all[all.size() - 3]["hash"];
  for (size_t i = all.size() - 2; i < all.size(); ++i) {
    json rec = all[i];
    std::string path = rec["request"]["path"];
    path.back() = 'b';  // tenants/team-a -> team-b: the same length, so the file keeps its size.
    rec["request"]["path"] = path;
    rec["prev_hash"] = prev;
    rec.erase("hash");
    rec["hash"] = tessera::audit::sha256Hex(tessera::audit::canonicalJson(rec));
    prev = rec["hash"];
    forged += tessera::audit::canonicalJson(rec) + "\n";
  }
  {
    const std::string text = slurp(s.log());
    std::fstream out(log, std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(static_cast<std::streamoff>(text.size() - forged.size()));
    out << forged;
  }
  r = verify(log);
  EXPECT_EQ(r.rc, 3) << r.out << r.err;
  ASSERT_TRUE(waitFor(endsSigned, std::chrono::seconds(3)));
  r = verify(log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("prev_hash does not match"), std::string::npos) << r.err;

  // A clean stop signs what came since its last checkpoint, and its copy follows.
  ASSERT_EQ(c.call("GET", "/v1/tenants/demo", s.root).status, 200U);
  EXPECT_EQ(s.process->stop(SIGTERM), 0) << s.process->errors();
  const std::vector<json> stopped = records(s.log());
  EXPECT_EQ(stopped.back()["type"], "checkpoint");
  EXPECT_EQ(stopped.end()[-2]["request"]["path"], "tenants/demo");
  EXPECT_EQ(json::parse(slurp(log + ".checkpoint")), stopped.back());

  // Offline, on the snapshot (signed up to its end): cut off its last three lines, or rewrite
  // its last two records and drop the checkpoint after them. Both leave a valid, shorter or
  // re-hashed chain; the copy of the last checkpoint catches them.
  const std::string snap_log = (snap / "audit.log").string();
  ASSERT_EQ(verify(snap_log).rc, 0) << verify(snap_log).err;
  const std::string whole = slurp(snap_log);
  std::vector<std::string> lines;
  {
    std::istringstream in(whole);
    for (std::string line; std::getline(in, line);) {
      lines.push_back(line);
    }
  }
  ASSERT_GE(lines.size(), 4U);
  auto write = [&](const std::vector<std::string>& ls) {
    std::ofstream out(snap_log, std::ios::binary | std::ios::trunc);
    for (const std::string& l : ls) {
      out << l << "\n";
    }
  };
  write({lines.begin(), lines.end() - 3});
  r = verify(snap_log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("records were cut off the end of the log"), std::string::npos) << r.err;
  std::vector<std::string> rewritten(lines.begin(), lines.end() - 1);
  std::string prev_hash = json::parse(rewritten[rewritten.size() - 3])["hash"];
  for (size_t i = rewritten.size() - 2; i < rewritten.size(); ++i) {
    json rec = json::parse(rewritten[i]);
    rec["request"]["remote_address"] = "10.9.9.9:1";
    rec["prev_hash"] = prev_hash;
    rec.erase("hash");
    rec["hash"] = tessera::audit::sha256Hex(tessera::audit::canonicalJson(rec));
    prev_hash = rec["hash"];
    rewritten[i] = tessera::audit::canonicalJson(rec);
  }
  write(rewritten);
  r = verify(snap_log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  // Without the copy, the same log is intact but its tail is not signed: never a clean 0.
  fs::remove(snap / "audit.log.checkpoint");
  r = verify(snap_log);
  EXPECT_TRUE(r.rc == 3 || r.rc == 4) << r.rc << r.out << r.err;
  fs::remove_all(dir);
}

// The lines of `file`, each parsed.
std::vector<json> fileRecords(const fs::path& file) { return records(file); }

// The files of the log in `dir` that `tessera audit verify` would read beside audit.log: the
// server's rotated names and logrotate's audit.log.N, sorted by name.
std::vector<fs::path> rotatedFiles(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("audit.log.", 0) == 0 && name != "audit.log.checkpoint" &&
        name.find(".pem") == std::string::npos && name.find(".salt") == std::string::npos &&
        name.find(".tmp") == std::string::npos && name.find(".new") == std::string::npos) {
      out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Rotation through the real server and CLI: by size, the files form one chain that `tessera
// audit verify` checks as a set; a missing middle file or an edit in a rotated file fails it; a
// set whose oldest files are gone still verifies and says where it starts; SIGHUP after a
// logrotate-style rename goes on in a new file chained to the renamed one. Every record names
// its token's display name, and verify says how many records no signed checkpoint covers yet,
// until the server's timer signs them within its interval.
TEST(AuditRotationTest, RotatedLogVerifiesAsOneChain) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-audit-rotation-" + std::to_string(::getpid()));
  Server s;
  startServer(s, dir,
              "audit \"file\" { path = \"" + (dir / "audit.log").string() +
                  "\"  checkpoint_interval_ms = 1000  rotate_bytes = 16384 }\n");
  ASSERT_FALSE(s.main.empty());
  const Client c = s.client();
  const std::string log = s.log().string();
  auto verify = [&](const std::string& args) {
    return runTessera("audit verify " + args, dir / "verify.err");
  };
  // Verify covers every file of the set. The count is read around the run, since a timer's
  // checkpoint may fill the live file and rotate it meanwhile.
  auto verifiesWholeSet = [&](const tessera::integration::CmdResult& got, size_t before) {
    const size_t after = rotatedFiles(dir).size() + 1;
    for (size_t n = before; n <= after; ++n) {
      if (got.out.find("in " + std::to_string(n) + " files, chain intact") != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  auto liveEndsSigned = [&] {
    const std::vector<json> all = records(s.log());
    return !all.empty() && all.back()["type"] == "checkpoint";
  };

  ASSERT_EQ(c.call("POST", "/v1/tenants/demo", s.root, json::object()).status, 204U);
  const Response made = c.call("POST", "/v1/auth/token/create", s.root,
                               {{"tenant", "demo"},
                                {"policies", {"tenant-admin"}},
                                {"ttl", "1h"},
                                {"display_name", "rotation-bot"}});
  ASSERT_EQ(made.status, 200U) << made.raw;
  const std::string bot = made.body["auth"]["client_token"];
  constexpr int kRequests = 60;
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(c.call("GET", "/v1/tenants/demo/queues", bot).status, 200U);
  }
  std::vector<fs::path> rotated = rotatedFiles(dir);
  ASSERT_GE(rotated.size(), 3U) << "16 KiB files should have rotated";
  for (const fs::path& f : rotated) {
    EXPECT_LE(fs::file_size(f), 16384U + 4096U) << f;  // One record and the end checkpoint past.
    EXPECT_EQ(fileRecords(f).back()["checkpoint"]["file"], "end") << f;
  }
  EXPECT_EQ(records(s.log()).front()["checkpoint"]["file"], "start");

  // Every record of the bot's requests names it in clear, across the files.
  int named = 0;
  for (const fs::path& f : rotated) {
    for (const json& rec : fileRecords(f)) {
      named += rec.contains("auth") && rec["auth"]["display_name"] == "rotation-bot";
    }
  }
  for (const json& rec : records(s.log())) {
    named += rec.contains("auth") && rec["auth"]["display_name"] == "rotation-bot";
  }
  EXPECT_EQ(named, 2 * kRequests);

  // The tenant's own view reads back across the files: its last 100 records, in seq order, most
  // of them from rotated files; all of them with a large limit; and `after` a seq in the oldest
  // file, the records that follow it there.
  const uint64_t live_first = records(s.log()).front()["seq"];
  Response tail = c.call("GET", "/v1/tenants/demo/audit?limit=100", bot);
  ASSERT_EQ(tail.status, 200U) << tail.raw;
  const json& got = tail.body["data"]["records"];
  ASSERT_EQ(got.size(), 100U) << tail.raw.substr(0, 400);
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_LT(got[i - 1]["seq"].get<uint64_t>(), got[i]["seq"].get<uint64_t>());
    EXPECT_EQ(got[i]["tenant"], "demo");
  }
  EXPECT_LT(got[0]["seq"].get<uint64_t>(), live_first);
  // The last record alone needs only the newest files: the older ones are left unread.
  Response last = c.call("GET", "/v1/tenants/demo/audit?limit=1", bot);
  ASSERT_EQ(last.status, 200U);
  EXPECT_FALSE(last.body["data"]["complete"].get<bool>()) << last.raw;
  Response all = c.call("GET", "/v1/tenants/demo/audit?limit=10000", bot);
  ASSERT_EQ(all.status, 200U);
  EXPECT_TRUE(all.body["data"]["complete"].get<bool>());
  EXPECT_GE(all.body["data"]["total"].get<size_t>(), size_t{2 * kRequests});
  EXPECT_EQ(all.body["data"]["records"].size(), all.body["data"]["total"].get<size_t>());
  uint64_t oldest_bot = 0;
  for (const json& rec : fileRecords(rotated.front())) {
    if (rec.value("tenant", "") == "demo") {
      oldest_bot = rec["seq"];
      break;
    }
  }
  ASSERT_GT(oldest_bot, 0U);
  Response follow =
      c.call("GET", "/v1/tenants/demo/audit?limit=5&after=" + std::to_string(oldest_bot), bot);
  ASSERT_EQ(follow.status, 200U);
  ASSERT_EQ(follow.body["data"]["records"].size(), 5U) << follow.raw;
  EXPECT_GT(follow.body["data"]["records"][0]["seq"].get<uint64_t>(), oldest_bot);
  EXPECT_LT(follow.body["data"]["records"][4]["seq"].get<uint64_t>(), live_first);

  // The newest records are not signed yet: verify says how many (3, a live tail); the timer
  // signs them within its interval (1 s), and then the whole set verifies (0).
  ASSERT_EQ(c.call("GET", "/v1/tenants/demo/queues", bot).status, 200U);
  tessera::integration::CmdResult r = verify(log);
  if (!liveEndsSigned()) {
    EXPECT_EQ(r.rc, 3) << r.out << r.err;
    EXPECT_NE(r.out.find("not covered by a signed checkpoint yet"), std::string::npos) << r.out;
  }
  const auto asked = std::chrono::steady_clock::now();
  ASSERT_TRUE(waitFor(liveEndsSigned, std::chrono::seconds(4)));
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::milliseconds(3000));
  size_t files = rotatedFiles(dir).size() + 1;
  r = verify(log);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.err.find("rotated files beside it"), std::string::npos) << r.err;
  EXPECT_TRUE(verifiesWholeSet(r, files)) << r.out;
  EXPECT_NE(r.out.find("checkpoint signatures valid"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not covered"), std::string::npos) << r.out;
  // Alone, the live file starts at its "start" checkpoint.
  r = verify(log + " --only");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(earlier files removed)"), std::string::npos) << r.out;

  // SIGHUP after a logrotate-style rename: the renamed file ends with an "end" checkpoint, a new
  // audit.log starts chained to it.
  const fs::path renamed = dir / "audit.log.1";
  fs::rename(s.log(), renamed);
  ASSERT_EQ(::kill(s.process->pid(), SIGHUP), 0);
  ASSERT_TRUE(waitFor(
      [&] {
        return fs::exists(s.log()) && !records(s.log()).empty() &&
               records(s.log()).front()["checkpoint"].value("file", "") == "start";
      },
      std::chrono::seconds(5)))
      << s.process->errors();
  EXPECT_EQ(fileRecords(renamed).back()["checkpoint"]["file"], "end");
  EXPECT_EQ(records(s.log()).front()["prev_hash"], fileRecords(renamed).back()["hash"]);
  ASSERT_EQ(c.call("GET", "/v1/tenants/demo/queues", bot).status, 200U);
  EXPECT_EQ(records(s.log()).back()["auth"]["display_name"], "rotation-bot");
  ASSERT_TRUE(waitFor(liveEndsSigned, std::chrono::seconds(4)));
  files = rotatedFiles(dir).size() + 1;  // Now with audit.log.1.
  ASSERT_GE(files, rotated.size() + 2);
  r = verify(log);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(verifiesWholeSet(r, files)) << r.out;

  // A clean stop; then, offline, on a copy of the set.
  EXPECT_EQ(s.process->stop(SIGTERM), 0) << s.process->errors();
  r = verify(log);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  const fs::path snap = dir / "snap";
  fs::create_directories(snap);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind("audit.log", 0) == 0) {
      fs::copy_file(e.path(), snap / name);
    }
  }
  const std::string snap_log = (snap / "audit.log").string();
  ASSERT_EQ(verify(snap_log).rc, 0) << verify(snap_log).err;
  std::vector<fs::path> set = rotatedFiles(snap);  // The server's names, then audit.log.1.
  ASSERT_GE(set.size(), 4U);
  // Ordered by name, the server's own rotated files come oldest first; audit.log.1 sorts first
  // by name but holds the newest records before the live file.
  std::vector<fs::path> own;
  for (const fs::path& f : set) {
    if (f.filename() != "audit.log.1") {
      own.push_back(f);
    }
  }
  ASSERT_GE(own.size(), 3U);

  // A missing middle file fails, naming the files on either side of the gap; so does a
  // directory holding the same set.
  const fs::path middle = own[1];
  const fs::path aside = dir / "middle-aside";
  fs::rename(middle, aside);
  r = verify(snap_log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("are missing"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(own[0].string()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(own[2].string()), std::string::npos) << r.err;
  r = verify(snap.string());
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("are missing"), std::string::npos) << r.err;
  fs::rename(aside, middle);
  ASSERT_EQ(verify(snap.string()).rc, 0) << verify(snap.string()).err;

  // One byte changed in the oldest rotated file (its hash not recomputed) fails, naming it.
  {
    std::string text = slurp(own[0]);
    const size_t at = text.find("tenants/demo/queues");
    ASSERT_NE(at, std::string::npos);
    text[at + 8] = 'D';  // tenants/Demo/queues.
    std::ofstream(own[0], std::ios::binary | std::ios::trunc) << text;
  }
  r = verify(snap_log);
  EXPECT_EQ(r.rc, 1) << r.out << r.err;
  EXPECT_NE(r.err.find(own[0].string() + ": line "), std::string::npos) << r.err;

  // Retention's way: the oldest files removed. What is left starts at a signed "start"
  // checkpoint: it verifies and says where it starts.
  fs::remove(own[0]);
  r = verify(snap_log);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("(earlier files removed)"), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
