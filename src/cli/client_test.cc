#include "api/client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "server/certs.h"
#include "server/http_server.h"

namespace tessera::cli {
namespace {

using api::ApiClient;
using api::ClientConfig;
using api::pathSegment;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

// A TLS server whose answers the test chooses; it records each request's peer address, which
// names the connection it came on.
class FakeServer {
 public:
  // The certificate names localhost and, unless `ip_in_cert` is false, 127.0.0.1.
  explicit FakeServer(server::HttpServer::Handler handler, bool ip_in_cert = true) {
    static int made = 0;  // Several at once (replicas) each have their own.
    dir_ = std::filesystem::temp_directory_path() /
           ("tessera-client-unit-" + std::to_string(::getpid()) + "-" + std::to_string(++made));
    std::filesystem::create_directories(dir_);
    auto ca = server::CertAuthority::create("client test CA " + std::to_string(made),
                                            std::chrono::hours(1));
    auto leaf = (*ca)->issue(
        "localhost", {"localhost"},
        ip_in_cert ? std::vector<std::string>{"127.0.0.1"} : std::vector<std::string>{}, false);
    EXPECT_TRUE(server::writeFile(ca_file(), (*ca)->certPem(), false).isOk());
    EXPECT_TRUE(server::writeFile((dir_ / "cert.pem").string(), leaf->cert_pem, false).isOk());
    EXPECT_TRUE(server::writeFile((dir_ / "key.pem").string(), leaf->key_pem, true).isOk());
    server::ListenerConfig l;
    l.address = "127.0.0.1:0";
    l.tls_cert_file = (dir_ / "cert.pem").string();
    l.tls_key_file = (dir_ / "key.pem").string();
    auto s = server::HttpServer::create({l}, [this, handler](const server::HttpRequest& r) {
      {
        std::lock_guard lock(mu_);
        peers_.insert(r.remote);
        ++requests_;
      }
      return handler(r);
    });
    EXPECT_TRUE(s.isOk()) << s.status().message();
    server_ = std::move(s).value();
    server_->start(1, 2);
  }
  ~FakeServer() {
    server_->shutdown(std::chrono::milliseconds(100));
    std::filesystem::remove_all(dir_);
  }
  std::string ca_file() const { return (dir_ / "ca.pem").string(); }
  std::string address(const std::string& host = "127.0.0.1") const {
    return "https://" + host + ":" + std::to_string(server_->ports()[0]);
  }
  size_t connections() const {
    std::lock_guard lock(mu_);
    return peers_.size();
  }
  int requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<server::HttpServer> server_;
  mutable std::mutex mu_;  // Guards peers_ and requests_.
  std::set<std::string> peers_;
  int requests_ = 0;
};

std::string slurpFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

server::HttpResponse answer(unsigned status, std::string body) {
  server::HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

std::unique_ptr<ApiClient> clientFor(const FakeServer& s, const std::string& host = "127.0.0.1") {
  ClientConfig c;
  c.address = s.address(host);
  c.ca_cert_file = s.ca_file();
  c.token = "tsr.test";
  auto client = ApiClient::create(c);
  EXPECT_TRUE(client.isOk()) << client.status().message();
  return std::move(client).value();
}

TEST(ApiClientTest, ReusesOneTlsConnectionForACommandsRequests) {
  FakeServer server([](const server::HttpRequest& r) {
    return answer(200, json{{"data",
                             {{"method", r.method},
                              {"target", r.target},
                              {"token", r.header("x-tessera-token")},
                              {"body", r.body}}}}
                           .dump());
  });
  auto client = clientFor(server);
  for (int i = 0; i < 3; ++i) {
    auto r = client->call("LIST", "/v1/tenants/t" + std::to_string(i) + "/workloads");
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_EQ((*r)["data"]["method"], "LIST");
    EXPECT_EQ((*r)["data"]["target"], "/v1/tenants/t" + std::to_string(i) + "/workloads");
    EXPECT_EQ((*r)["data"]["token"], "tsr.test");
  }
  auto posted = client->call("POST", "/v1/x", {{"a", 1}});
  ASSERT_TRUE(posted.isOk());
  EXPECT_EQ(json::parse((*posted)["data"]["body"].get<std::string>()), json({{"a", 1}}));
  EXPECT_EQ(server.requests(), 4);
  EXPECT_EQ(server.connections(), 1U);
}

TEST(ApiClientTest, TheHostNameIsVerifiedToo) {
  FakeServer server([](const server::HttpRequest&) { return answer(200, "{}"); },
                    /*ip_in_cert=*/false);
  auto right = clientFor(server, "localhost")->call("GET", "/v1/x");
  EXPECT_TRUE(right.isOk()) << right.status().message();
  // The same server, by an address its certificate does not name.
  auto wrong = clientFor(server, "127.0.0.1")->call("GET", "/v1/x");
  ASSERT_FALSE(wrong.isOk());
  EXPECT_EQ(wrong.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(wrong.status().message().find("certificate verify failed"), std::string::npos)
      << wrong.status().message();
}

TEST(ApiClientTest, ServerErrorsKeepTheirStatusAndMessage) {
  struct Case {
    unsigned status;
    std::string body;
    core::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {403, R"({"errors": ["permission denied"]})", core::StatusCode::kPermissionDenied,
       "403: permission denied"},
      {404, R"({"errors": ["no workload 'x'"]})", core::StatusCode::kNotFound,
       "404: no workload 'x'"},
      // The server's 400 is not the user's usage error: never kInvalidArgument.
      {400, R"({"errors": ["gpu.count: too big", "tasks: too many"]})",
       core::StatusCode::kFailedPrecondition, "400: gpu.count: too big; tasks: too many"},
      {409, R"({"errors": ["exists"]})", core::StatusCode::kAlreadyExists, "409: exists"},
      {429, R"({"errors": ["slow down"]})", core::StatusCode::kResourceExhausted, "429: slow down"},
      {502, "bad gateway\n", core::StatusCode::kUnavailable, "502: bad gateway"},
      {503, "", core::StatusCode::kUnavailable, "503: Service Unavailable"},
  };
  size_t next = 0;
  std::mutex mu;
  FakeServer server([&](const server::HttpRequest&) {
    std::lock_guard lock(mu);
    const Case& c = cases[next++];
    server::HttpResponse r = answer(c.status, c.body);
    r.content_type = c.body.starts_with("{") ? "application/json" : "text/plain";
    return r;
  });
  auto client = clientFor(server);
  for (const Case& c : cases) {
    auto r = client->call("GET", "/v1/x");
    ASSERT_FALSE(r.isOk()) << c.status;
    EXPECT_EQ(r.status().code(), c.code) << c.status;
    EXPECT_EQ(r.status().message(), c.message) << c.status;
  }
}

TEST(ApiClientTest, NoContentIsAnEmptyObject) {
  FakeServer server([](const server::HttpRequest&) { return answer(204, ""); });
  auto r = clientFor(server)->call("DELETE", "/v1/x");
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(*r, json::object());
}

// A plain HTTP server that answers each request with keep-alive and then closes the connection
// anyway, as a server does when a keep-alive connection has been idle too long.
TEST(ApiClientTest, ReconnectsWhenTheServerClosedAnIdleConnection) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const tcp::endpoint endpoint = acceptor.local_endpoint();
  std::atomic<int> accepted{0};
  std::thread t([&] {
    for (int i = 0; i < 2; ++i) {
      beast::error_code ec;
      tcp::socket socket(io);
      acceptor.accept(socket, ec);
      ++accepted;
      beast::flat_buffer buf;
      http::request<http::string_body> req;
      http::read(socket, buf, req, ec);
      if (ec) {
        return;
      }
      http::response<http::string_body> resp{http::status::ok, 11};
      resp.body() = R"({"n": )" + std::to_string(i) + "}";
      resp.keep_alive(true);
      resp.prepare_payload();
      http::write(socket, resp, ec);
      socket.shutdown(tcp::socket::shutdown_both, ec);
      socket.close(ec);
    }
  });
  ClientConfig c;
  c.address = "http://127.0.0.1:" + std::to_string(endpoint.port());
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk());
  auto first = (*client)->call("GET", "/v1/a");
  EXPECT_TRUE(first.isOk()) << first.status().message();
  auto second = (*client)->call("GET", "/v1/b");
  EXPECT_TRUE(second.isOk()) << second.status().message();
  if (second.isOk()) {
    EXPECT_EQ((*second)["n"], 1);
  }
  if (accepted < 2) {  // The client gave up: let the server thread finish.
    beast::error_code ec;
    tcp::socket poke(io);
    poke.connect(endpoint, ec);
    poke.close(ec);
  }
  t.join();
  EXPECT_EQ(accepted, 2);
}

TEST(ApiClientTest, NothingListeningNamesTheAddressAndWhatToCheck) {
  uint16_t port = 0;
  {
    asio::io_context io;
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }
  ClientConfig c;
  c.address = "https://127.0.0.1:" + std::to_string(port);
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk());
  auto r = (*client)->call("GET", "/v1/x");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(r.status().message().rfind("cannot reach " + c.address + ": ", 0), 0U)
      << r.status().message();
  EXPECT_NE(r.status().message().find("TESSERA_ADDR"), std::string::npos);
}

TEST(ApiClientTest, AddressesAreCheckedBeforeConnecting) {
  for (const std::string bad :
       {"127.0.0.1:8200", "https://", "https://:8200", "https://h:0", "https://h:99999",
        "https://h:80x", "https://h:8200/v1", "https://[::1:8200", "ftp://h:21"}) {
    ClientConfig c;
    c.address = bad;
    auto r = ApiClient::create(c);
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument) << bad;
  }
  for (const std::string good : {"https://127.0.0.1:8200", "https://[::1]:8200", "http://localhost",
                                 "https://tessera.example.com/"}) {
    ClientConfig c;
    c.address = good;
    EXPECT_TRUE(ApiClient::create(c).isOk()) << good;
  }
  ClientConfig c;
  c.ca_cert_file = "/no/such/ca.pem";
  auto r = ApiClient::create(c);
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find("/no/such/ca.pem"), std::string::npos);
}

// Several replicas (docs/server.md "High availability"): an address that cannot be reached is
// left for the next, and a standby's 307 is followed to the leader it names, with the request's
// method, path and body.
TEST(ApiClientTest, AListOfServersFailsOverAndFollowsAStandbysRedirect) {
  FakeServer leader([](const server::HttpRequest& r) {
    return answer(200, json{{"data", {{"target", r.target}, {"body", r.body}}}}.dump());
  });
  const std::string leader_address = leader.address();
  FakeServer standby([&leader_address](const server::HttpRequest& r) {
    server::HttpResponse resp = answer(307, R"({"errors": ["a standby"]})");
    resp.headers.emplace_back("Location", leader_address + r.target);
    resp.headers.emplace_back("X-Tessera-Standby", "true");
    return resp;
  });
  uint16_t dead = 0;
  {
    asio::io_context io;
    tcp::acceptor a(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    dead = a.local_endpoint().port();
  }
  // The fakes have CAs of their own: trust both.
  const std::string both = leader.ca_file() + ".both";
  ASSERT_TRUE(
      server::writeFile(both, slurpFile(leader.ca_file()) + slurpFile(standby.ca_file()), false)
          .isOk());
  ClientConfig c;
  c.address = "https://127.0.0.1:" + std::to_string(dead) + ", " + standby.address();
  c.ca_cert_file = both;
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk()) << client.status().message();
  auto ok = (*client)->call("POST", "/v1/tenants/t/workloads/w?x=1", json{{"tasks", 2}});
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  EXPECT_EQ((*ok)["data"]["target"], "/v1/tenants/t/workloads/w?x=1");
  EXPECT_EQ((*ok)["data"]["body"], R"({"tasks":2})");
  EXPECT_EQ((*client)->address(), leader_address);
  EXPECT_EQ(standby.requests(), 1);
  EXPECT_EQ(leader.requests(), 1);
  // The next call goes to the leader at once.
  ASSERT_TRUE((*client)->call("GET", "/v1/x").isOk());
  EXPECT_EQ(standby.requests(), 1);
  // Every address of a list is checked.
  c.address = "https://127.0.0.1:8200,ftp://x";
  auto bad = ApiClient::create(c);
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.status().message().find("ftp://x"), std::string::npos);
}

// Issue 42: a standby that names itself (a leader restarted at once) or keeps answering "no
// leader" is no answer: the client tries again, with pauses, until a leader answers or its
// time for retries is spent, and a 3xx never comes back as a success.
TEST(ApiClientTest, NoLeaderYetIsRetriedAndA3xxIsNeverASuccess) {
  std::atomic<int> refusals{3};
  std::string self;
  FakeServer replica([&](const server::HttpRequest& r) {
    if (refusals-- > 0) {
      server::HttpResponse resp = answer(307, R"({"errors": ["a standby; the leader is me"]})");
      resp.headers.emplace_back("Location", self + r.target);
      resp.headers.emplace_back("X-Tessera-Standby", "true");
      return resp;
    }
    return answer(200, R"({"data": {"ok": true}})");
  });
  self = replica.address();
  ClientConfig c;
  c.address = replica.address();
  c.ca_cert_file = replica.ca_file();
  c.retry_for = std::chrono::milliseconds(5000);
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk()) << client.status().message();
  auto ok = (*client)->call("GET", "/v1/x");
  ASSERT_TRUE(ok.isOk()) << ok.status().message();
  EXPECT_EQ((*ok)["data"]["ok"], true);
  EXPECT_EQ(replica.requests(), 4);
  // For ever a standby naming itself: an error naming the reason, after the time for retries.
  refusals = 1'000'000;
  c.retry_for = std::chrono::milliseconds(300);
  client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk());
  const auto start = std::chrono::steady_clock::now();
  auto never = (*client)->call("POST", "/v1/y", json::object());
  ASSERT_FALSE(never.isOk());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250));
  EXPECT_EQ(never.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(never.status().message().find("no leader"), std::string::npos)
      << never.status().message();
  EXPECT_NE(never.status().message().find("to itself"), std::string::npos)
      << never.status().message();
}

// The time for retries counts from the first failure: an answer the server held longer than
// that (a long poll), then lost (its leader stepped down), is still tried again.
TEST(ApiClientTest, TheTimeForRetriesStartsAtTheFirstFailure) {
  std::atomic<int> calls{0};
  FakeServer replica([&](const server::HttpRequest&) {
    if (calls++ == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      server::HttpResponse resp = answer(503, R"({"errors": ["stepped down; no leader yet"]})");
      resp.headers.emplace_back("X-Tessera-Standby", "true");
      return resp;
    }
    return answer(200, R"({"data": {"version": 7}})");
  });
  ClientConfig c;
  c.address = replica.address();
  c.ca_cert_file = replica.ca_file();
  c.retry_for = std::chrono::milliseconds(200);
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk()) << client.status().message();
  auto got = (*client)->call("GET", "/v1/sys/nodes/n/tasks?index=6&wait_ms=2000");
  ASSERT_TRUE(got.isOk()) << got.status().message();
  EXPECT_EQ((*got)["data"]["version"], 7);
  EXPECT_EQ(calls.load(), 2);
}

// A change carries an Idempotency-Key, the same on every try of one call (a new one per call),
// and an answer whose outcome the server does not know (X-Tessera-Applied: unknown) is sent
// again under it; a read carries none.
TEST(ApiClientTest, AChangeWhoseOutcomeIsUnknownIsSentAgainUnderItsKey) {
  std::mutex mu;
  std::vector<std::string> keys;
  std::atomic<int> unknown{1};
  FakeServer leader([&](const server::HttpRequest& r) {
    {
      std::lock_guard lock(mu);
      keys.push_back(r.header("idempotency-key"));
    }
    if (r.method != "GET" && unknown-- > 0) {
      server::HttpResponse resp = answer(
          503,
          R"j({"errors": ["put: etcd: timed out (the write may or may not have been applied)"]})j");
      resp.headers.emplace_back("X-Tessera-Applied", "unknown");
      return resp;
    }
    return answer(200, R"({"data": {}})");
  });
  ClientConfig c;
  c.address = leader.address();
  c.ca_cert_file = leader.ca_file();
  auto client = ApiClient::create(c);
  ASSERT_TRUE(client.isOk());
  ASSERT_TRUE((*client)->call("POST", "/v1/a", json::object()).isOk());
  ASSERT_TRUE((*client)->call("POST", "/v1/b", json::object()).isOk());
  ASSERT_TRUE((*client)->call("GET", "/v1/c").isOk());
  std::lock_guard lock(mu);
  ASSERT_EQ(keys.size(), 4U);
  EXPECT_EQ(keys[0].size(), 32U);
  EXPECT_EQ(keys[0], keys[1]) << "the retry carries the first try's key";
  EXPECT_NE(keys[2], keys[0]) << "each call its own key";
  EXPECT_EQ(keys[2].size(), 32U);
  EXPECT_EQ(keys[3], "") << "reads carry none";
}

TEST(ApiClientTest, PathSegmentsStayOneSegment) {
  EXPECT_EQ(pathSegment("team-1"), "team-1");
  EXPECT_EQ(pathSegment("a/b c"), "a%2Fb%20c");
  EXPECT_EQ(pathSegment("..%"), "..%25");
  EXPECT_EQ(pathSegment("?x=1#"), "%3Fx%3D1%23");
}

}  // namespace
}  // namespace tessera::cli
