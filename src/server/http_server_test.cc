#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "server/certs.h"

namespace tessera::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

// Echoes the method, target and body; "/slow" sleeps first.
HttpResponse echo(const HttpRequest& r) {
  if (r.target == "/slow") {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  HttpResponse resp;
  resp.body = r.method + " " + r.target + " " + r.body + " " + r.header("x-tessera-token");
  resp.content_type = "text/plain";
  return resp;
}

std::unique_ptr<HttpServer> start(ListenerConfig l) {
  auto s = HttpServer::create({std::move(l)}, echo);
  EXPECT_TRUE(s.isOk()) << s.status().message();
  (*s)->start(2, 4);
  return std::move(s).value();
}

TEST(HttpServerTest, ServesKeepAliveRequestsOnOneConnection) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto server = start(l);
  asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  for (int i = 0; i < 3; ++i) {
    http::request<http::string_body> req{http::verb::post, "/v1/x?i=" + std::to_string(i), 11};
    req.set(http::field::host, "a");
    req.set("X-Tessera-Token", "tok");
    req.body() = "body";
    req.prepare_payload();
    http::write(stream, req);
    beast::flat_buffer buf;
    http::response<http::string_body> resp;
    http::read(stream, buf, resp);
    EXPECT_EQ(resp.result_int(), 200U);
    EXPECT_EQ(resp.body(), "POST /v1/x?i=" + std::to_string(i) + " body tok");
    EXPECT_TRUE(resp.keep_alive());
  }
  // A custom method (Vault's LIST) reaches the handler as sent.
  http::request<http::string_body> list;
  list.method_string("LIST");
  list.target("/v1/workloads");
  list.version(11);
  list.set(http::field::host, "a");
  http::write(stream, list);
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  http::read(stream, buf, resp);
  EXPECT_EQ(resp.body(), "LIST /v1/workloads  ");
  server->shutdown(std::chrono::seconds(1));
}

// Sends raw bytes and returns the status line's code (0 if the connection closed first).
unsigned rawStatus(uint16_t port, const std::string& bytes) {
  asio::io_context io;
  tcp::socket sock(io);
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  asio::write(sock, asio::buffer(bytes));
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  beast::error_code ec;
  http::read(sock, buf, resp, ec);
  return ec ? 0 : resp.result_int();
}

TEST(HttpServerTest, BoundsHeadersAndBodies) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.max_header_bytes = 1024;
  l.max_body_bytes = 100;
  auto server = start(l);
  const uint16_t port = server->ports()[0];
  EXPECT_EQ(rawStatus(port, "GET /v1/x HTTP/1.1\r\nHost: a\r\n\r\n"), 200U);
  EXPECT_EQ(rawStatus(port, "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n" +
                                std::string(101, 'x')),
            413U);
  EXPECT_EQ(rawStatus(port, "GET /v1/x HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(2000, 'y') +
                                "\r\n\r\n"),
            431U);
  EXPECT_EQ(rawStatus(port, "GARBAGE\r\n\r\n"), 400U);
  server->shutdown(std::chrono::seconds(1));
}

// Every answer the HTTP layer gives without the handler reaches the refusal observer (for the
// audit log), with the request as far as it was read; a handled request does not.
TEST(HttpServerTest, TheHttpLayersOwnRefusalsAreToldToTheObserver) {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::atomic<bool> blocking{false};
  HttpServer::Handler handler = [&](const HttpRequest& r) -> HttpResponse {
    if (r.target == "/block") {
      blocking = true;
      opened.wait();
    }
    return {200, r.target};
  };
  HttpServer::Admitter admitter = [](const HttpRequest& r) {
    if (r.target == "/admit-throws") {
      throw std::runtime_error("admitter bug");
    }
    Admission a;
    a.key = "a";
    a.limits = {1, 1};  // One running, one waiting.
    return a;
  };
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.max_header_bytes = 1024;
  l.max_body_bytes = 100;
  auto created = HttpServer::create({l}, handler, admitter);
  ASSERT_TRUE(created.isOk());
  auto server = std::move(created).value();
  std::mutex mu;
  std::vector<std::pair<unsigned, std::string>> seen;  // (status, "METHOD target token")
  server->setRefusalObserver([&](const HttpRequest& r, const HttpResponse& resp) {
    std::lock_guard lock(mu);
    EXPECT_TRUE(r.remote.starts_with("127.0.0.1:")) << r.remote;
    seen.emplace_back(resp.status, r.method + " " + r.target + " " + r.header("x-tessera-token"));
  });
  server->start(1, 1);
  const uint16_t port = server->ports()[0];
  EXPECT_EQ(rawStatus(port, "GET /fine HTTP/1.1\r\nHost: a\r\n\r\n"), 200U);
  EXPECT_EQ(rawStatus(port,
                      "POST /big HTTP/1.1\r\nHost: a\r\nX-Tessera-Token: t1\r\n"
                      "Content-Length: 101\r\n\r\n" +
                          std::string(101, 'x')),
            413U);
  EXPECT_EQ(rawStatus(port, "GET /v1/x HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(2000, 'y') +
                                "\r\n\r\n"),
            431U);
  EXPECT_EQ(rawStatus(port, "GARBAGE\r\n\r\n"), 400U);
  EXPECT_EQ(rawStatus(port, "GET /admit-throws HTTP/1.1\r\nHost: a\r\n\r\n"), 500U);
  // Key a: one request running (held), one waiting; the next finds the queue full.
  asio::io_context io;
  beast::tcp_stream blocked(io);
  beast::tcp_stream waiting(io);
  blocked.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  waiting.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> block{http::verb::get, "/block", 11};
  block.set(http::field::host, "a");  // HTTP/1.1 without a Host is refused (RFC 9112).
  http::write(blocked, block);
  // Bounded waits: a request the server refuses must fail the test, not hang it.
  auto within10s = [](const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };
  auto inFlightReaches = [&](int64_t n) {
    return within10s([&] { return server->inFlight() >= n; });
  };
  // In the handler itself (not only counted: an earlier answer still being written counts too,
  // and /wait must not overtake it).
  if (!within10s([&] { return blocking.load(); }) || !inFlightReaches(1)) {
    gate.set_value();
    FAIL() << "the blocking request never reached the handler";
  }
  http::request<http::string_body> wait{http::verb::get, "/wait", 11};
  wait.set(http::field::host, "a");
  http::write(waiting, wait);
  if (!inFlightReaches(2)) {
    gate.set_value();
    FAIL() << "the waiting request was never queued";
  }
  EXPECT_EQ(rawStatus(port, "GET /queued HTTP/1.1\r\nHost: a\r\nX-Tessera-Token: t2\r\n\r\n"),
            429U);
  gate.set_value();
  for (beast::tcp_stream* s : {&blocked, &waiting}) {
    beast::flat_buffer buf;
    http::response<http::string_body> resp;
    http::read(*s, buf, resp);
    EXPECT_EQ(resp.result_int(), 200U);
  }
  server->shutdown(std::chrono::seconds(1));
  std::lock_guard lock(mu);
  const std::vector<std::pair<unsigned, std::string>> want = {
      {413, "POST /big t1"},        // What was read of the request comes along:
      {431, "GET /v1/x "},          // the request line and the fields before the limit,
      {400, "  "},                  // nothing that parses (the peer's address only),
      {500, "GET /admit-throws "},  // or the whole request.
      {429, "GET /queued t2"}};
  EXPECT_EQ(seen, want);
}

TEST(HttpServerTest, ABodyOverTheLimitThatIsActuallySentGetsA413NotAReset) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.max_body_bytes = 1000;
  auto server = start(l);
  const uint16_t port = server->ports()[0];
  // 8 MiB, sent whole while the server answers after the headers: more than the socket buffers
  // hold, so a server that closed at once would reset the connection under the client.
  const std::string body(size_t{8} << 20, 'x');
  for (int attempt = 0; attempt < 3; ++attempt) {
    asio::io_context io;
    tcp::socket sock(io);
    sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    std::thread writer([&] {
      beast::error_code ec;
      asio::write(sock,
                  asio::buffer("POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n"),
                  ec);
      asio::write(sock, asio::buffer(body), ec);
      EXPECT_FALSE(ec) << "the server broke the connection while the body was sent: "
                       << ec.message();
    });
    writer.join();
    beast::flat_buffer buf;
    http::response<http::string_body> resp;
    beast::error_code ec;
    http::read(sock, buf, resp, ec);
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(resp.result_int(), 413U);
    EXPECT_NE(resp.body().find("too large"), std::string::npos);
  }
  server->shutdown(std::chrono::seconds(1));
}

// Every answer to `bytes` sent at once on a new connection, until the server closes it.
struct Exchange {
  std::vector<http::response<http::string_body>> answers;
  bool closed = false;   // By the server (not an error of ours).
  double closed_s = -1;  // Seconds from the write until then.
};
Exchange sendRaw(uint16_t port, const std::string& bytes) {
  asio::io_context io;
  tcp::socket sock(io);
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  const auto t0 = std::chrono::steady_clock::now();
  asio::write(sock, asio::buffer(bytes));
  Exchange out;
  beast::flat_buffer buf;
  while (true) {
    http::response<http::string_body> resp;
    beast::error_code ec;
    http::read(sock, buf, resp, ec);
    if (ec) {
      out.closed = ec == http::error::end_of_stream || ec == asio::error::eof ||
                   ec == asio::error::connection_reset;
      out.closed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return out;
    }
    out.answers.push_back(std::move(resp));
  }
}

// Issue #36: framing that a proxy in front could read differently from us (request smuggling,
// RFC 9112 section 11.2) is refused with one 400, and the connection is closed: whatever
// follows on it, a request hidden in a body included, is never answered.
TEST(HttpServerTest, AmbiguousFramingIsRefusedWith400ThenClosed) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto server = start(l);
  const uint16_t port = server->ports()[0];
  // After each request, one that would be answered if the connection were still read (and
  // that closes it when it is).
  const std::string next = "GET /smuggled HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  const std::string chunked_body = "5\r\nhello\r\n0\r\n\r\n";
  struct Case {
    std::string name;
    std::string head;  // Up to the blank line, which is added.
    std::string body;
    std::string why;  // In the 400's message.
  };
  const std::vector<Case> refused = {
      {"no Host in HTTP/1.1", "GET /v1/x HTTP/1.1\r\n", "", "needs a Host"},
      {"two Hosts", "GET /v1/x HTTP/1.1\r\nHost: a\r\nHost: b\r\n", "", "more than one Host"},
      {"an invalid Host", "GET /v1/x HTTP/1.1\r\nHost: a/b@c\r\n", "", "invalid Host"},
      {"two Hosts in HTTP/1.0", "GET /v1/x HTTP/1.0\r\nHost: a\r\nHost: b\r\n", "",
       "more than one Host"},
      {"gzip, chunked", "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n",
       chunked_body, "'gzip' is not supported"},
      {"gzip then chunked on two lines",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: "
       "chunked\r\n",
       chunked_body, "'gzip' is not supported"},
      {"chunked, gzip", "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n",
       chunked_body, "'gzip' is not supported"},
      {"an unknown coding alone", "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: x-foo\r\n",
       chunked_body, "'x-foo' is not supported"},
      {"identity", "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n", "",
       "'identity' is not supported"},
      {"chunked twice", "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n",
       chunked_body, "more than once"},
      {"chunked with Content-Length",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n",
       chunked_body, "Content-Length"},
      {"Content-Length with chunked",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n",
       chunked_body, "Content-Length"},
      {"an unknown coding with Content-Length",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n",
       "hello", "Content-Length"},
      {"two Content-Lengths that differ",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n", "hello",
       "Content-Length"},
      {"a list of Content-Lengths that differ",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n", "hello", "Content-Length"},
      {"chunked in HTTP/1.0", "POST /v1/x HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n",
       chunked_body, "HTTP/1.0"},
  };
  for (const Case& c : refused) {
    const Exchange e = sendRaw(port, c.head + "\r\n" + c.body + next);
    ASSERT_EQ(e.answers.size(), 1U) << c.name << ": the request after it was answered too";
    EXPECT_EQ(e.answers[0].result_int(), 400U) << c.name << ": " << e.answers[0].body();
    EXPECT_NE(e.answers[0].body().find(c.why), std::string::npos)
        << c.name << ": " << e.answers[0].body();
    EXPECT_FALSE(e.answers[0].keep_alive()) << c.name;
    EXPECT_TRUE(e.closed) << c.name;
    EXPECT_LT(e.closed_s, 3.0) << c.name << ": the connection was left open";
  }
  // What is sound is served, and the connection stays in step.
  const std::vector<std::pair<std::string, std::string>> served = {
      {"HTTP/1.1 with one Host", "GET /v1/x HTTP/1.1\r\nHost: a\r\n\r\n"},
      {"an empty Host", "GET /v1/x HTTP/1.1\r\nHost:\r\n\r\n"},
      {"an IPv6 Host with a port", "GET /v1/x HTTP/1.1\r\nHost: [::1]:8200\r\n\r\n"},
      {"HTTP/1.0 without Host", "GET /v1/x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"},
      {"chunked",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n" + chunked_body},
      {"the same Content-Length twice",
       "POST /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"},
  };
  for (const auto& [name, bytes] : served) {
    const Exchange e = sendRaw(port, bytes + next);
    ASSERT_EQ(e.answers.size(), 2U) << name;
    EXPECT_EQ(e.answers[0].result_int(), 200U) << name << ": " << e.answers[0].body();
    EXPECT_EQ(e.answers[1].body(), "GET /smuggled  ") << name;
  }
  EXPECT_EQ(sendRaw(port, served[4].second + next).answers.at(0).body(), "POST /v1/x hello ");
  server->shutdown(std::chrono::seconds(1));
}

// A body policy lowers a request's body limit from its head alone: a body over it is refused
// with the policy's 413 before any of it is read, and the server never waits for it.
TEST(HttpServerTest, ABodyThePolicyRefusesGetsA413BeforeItIsRead) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.max_body_bytes = 1 << 20;
  HttpServer::BodyPolicy policy = [](const HttpRequest& head) -> std::optional<BodyAllowance> {
    EXPECT_TRUE(head.body.empty());
    if (head.method == "GET") {
      return BodyAllowance{16, "GET takes no body"};
    }
    return std::nullopt;
  };
  auto created = HttpServer::create({l}, echo, nullptr, policy);
  ASSERT_TRUE(created.isOk());
  auto server = std::move(created).value();
  server->start(1, 2);
  const uint16_t port = server->ports()[0];
  // Announced but never sent: answered at once, not after the request timeout.
  const auto t0 = std::chrono::steady_clock::now();
  Exchange e = sendRaw(port, "GET /v1/x HTTP/1.1\r\nHost: a\r\nContent-Length: 1048576\r\n\r\n");
  ASSERT_EQ(e.answers.size(), 1U);
  EXPECT_EQ(e.answers[0].result_int(), 413U);
  EXPECT_NE(e.answers[0].body().find("GET takes no body"), std::string::npos);
  EXPECT_TRUE(e.closed);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));  // Not the 30 s.
  // A chunked one is counted as it comes.
  e = sendRaw(port,
              "GET /v1/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
              "20\r\n" +
                  std::string(32, 'x') + "\r\n0\r\n\r\n");
  ASSERT_EQ(e.answers.size(), 1U);
  EXPECT_EQ(e.answers[0].result_int(), 413U);
  EXPECT_NE(e.answers[0].body().find("GET takes no body"), std::string::npos);
  // Within it, or another method under the listener's own limit: served.
  e = sendRaw(port,
              "GET /v1/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_FALSE(e.answers.empty());
  EXPECT_EQ(e.answers[0].body(), "GET /v1/x {} ");
  const std::string big(100'000, 'x');
  e = sendRaw(
      port,
      "POST /v1/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\nContent-Length: 100000\r\n\r\n" +
          big);
  ASSERT_FALSE(e.answers.empty());
  EXPECT_EQ(e.answers[0].result_int(), 200U);
  server->shutdown(std::chrono::seconds(1));
}

TEST(HttpServerTest, IdleConnectionsTimeOut) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.request_timeout = std::chrono::milliseconds(200);
  auto server = start(l);
  asio::io_context io;
  tcp::socket sock(io);
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  asio::write(sock, asio::buffer(std::string("GET /v1/x HTTP/1.1\r\n")));  // Never finished.
  char c;
  beast::error_code ec;
  const auto t0 = std::chrono::steady_clock::now();
  sock.read_some(asio::buffer(&c, 1), ec);
  EXPECT_TRUE(ec);  // Closed by the server.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  server->shutdown(std::chrono::seconds(1));
}

// Sends `target` on a kept-alive connection and returns the response.
http::response<http::string_body> get(beast::tcp_stream& stream, const std::string& target) {
  http::request<http::string_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "a");
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  http::read(stream, buf, resp);
  return resp;
}

TEST(HttpServerTest, AnAsyncHandlerAnswersOnceFromAnyThreadAndNeverLeavesARequestHanging) {
  std::mutex mu;
  std::vector<std::thread> later;  // Threads answering after the handler has returned.
  std::promise<void> gate;         // Opened once another request has been answered meanwhile.
  std::shared_future<void> opened = gate.get_future().share();
  HttpServer::AsyncHandler handler = [&](const HttpRequest& r, const Reply& reply) {
    if (r.target == "/later") {
      // Answered from another thread, after the handler (and its worker) are done.
      std::lock_guard lock(mu);
      later.emplace_back([reply, opened] {
        const bool in_time = opened.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
        reply({200, in_time ? "later" : "the worker was held: nothing else was served"});
      });
    } else if (r.target == "/twice") {
      reply({200, "first"});
      reply({201, "second"});  // Ignored.
    } else if (r.target == "/dropped") {
      // Never answered: the Reply goes with the handler, and the client gets a 500.
    } else if (r.target == "/throws") {
      throw std::runtime_error("boom");
    } else {
      reply({200, "now"});
    }
  };
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto created = HttpServer::create({l}, handler);
  ASSERT_TRUE(created.isOk());
  auto server = std::move(created).value();
  server->start(1, 1);  // One worker: "/later" must not hold it while it waits.
  asio::io_context io;
  beast::tcp_stream waiting(io);
  beast::tcp_stream other(io);
  waiting.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  other.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  http::request<http::string_body> req{http::verb::get, "/later", 11};
  req.set(http::field::host, "a");
  http::write(waiting, req);
  // While "/later" waits for its answer, the only worker serves another connection.
  EXPECT_EQ(get(other, "/now").body(), "now");
  gate.set_value();
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  http::read(waiting, buf, resp);
  EXPECT_EQ(resp.result_int(), 200U);
  EXPECT_EQ(resp.body(), "later");
  auto twice = get(other, "/twice");
  EXPECT_EQ(twice.result_int(), 200U);
  EXPECT_EQ(twice.body(), "first");
  EXPECT_EQ(get(other, "/dropped").result_int(), 500U);
  EXPECT_EQ(get(other, "/throws").result_int(), 500U);
  EXPECT_EQ(get(other, "/now").body(), "now");  // The connection is still in step.
  // Nothing left in flight: the count drops when a write completes on the server, which may
  // be a moment after the client has read the answer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server->inFlight() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(server->inFlight(), 0);
  server->shutdown(std::chrono::seconds(1));
  for (std::thread& t : later) {
    t.join();
  }
}

TEST(HttpServerTest, ARequestMarkedRunNowIsHandledOnItsIoThreadWithinItsKeysPlaces) {
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  HttpServer::Handler handler = [&](const HttpRequest& r) -> HttpResponse {
    if (r.target == "/block") {
      opened.wait();
    }
    return {200, r.target};
  };
  // "/now..." is marked to run now; each target's first segment after the slash is its key.
  HttpServer::Admitter admitter = [](const HttpRequest& r) {
    Admission a;
    a.key = r.target.starts_with("/now-b") ? "b" : "a";
    a.limits = {1, 8};
    a.run_now = r.target.starts_with("/now");
    return a;
  };
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto created = HttpServer::create({l}, handler, admitter);
  ASSERT_TRUE(created.isOk());
  auto server = std::move(created).value();
  server->start(1, 1);
  asio::io_context io;
  beast::tcp_stream blocked(io);
  beast::tcp_stream other(io);
  blocked.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  other.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), server->ports()[0]));
  // The only worker is held by key a's request, which holds a's only place too.
  http::request<http::string_body> req{http::verb::get, "/block", 11};
  req.set(http::field::host, "a");
  http::write(blocked, req);
  while (server->inFlight() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Key b's quick read needs no worker: it is answered on the I/O thread meanwhile.
  EXPECT_EQ(get(other, "/now-b").body(), "/now-b");
  // Key a's has no free place: it waits for a worker like any other, after the blocked one.
  http::request<http::string_body> mine{http::verb::get, "/now-a", 11};
  mine.set(http::field::host, "a");
  http::write(other, mine);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(server->inFlight(), 2);
  gate.set_value();
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  http::read(blocked, buf, resp);
  EXPECT_EQ(resp.body(), "/block");
  http::response<http::string_body> waited;
  beast::flat_buffer buf2;
  http::read(other, buf2, waited);
  EXPECT_EQ(waited.body(), "/now-a");
  server->shutdown(std::chrono::seconds(1));
}

TEST(HttpServerTest, ShutdownLetsRequestsInFlightFinish) {
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto server = start(l);
  const uint16_t port = server->ports()[0];
  unsigned status = 0;
  std::thread client([&] { status = rawStatus(port, "GET /slow HTTP/1.1\r\nHost: a\r\n\r\n"); });
  while (server->inFlight() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  server->shutdown(std::chrono::seconds(5));
  client.join();
  EXPECT_EQ(status, 200U);
  // No longer accepting.
  asio::io_context io;
  tcp::socket sock(io);
  beast::error_code ec;
  sock.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port), ec);
  EXPECT_TRUE(ec);
}

TEST(HttpServerTest, TlsWithAndWithoutClientCertificates) {
  auto ca = CertAuthority::create("test CA", std::chrono::hours(1));
  ASSERT_TRUE(ca.isOk()) << ca.status().message();
  auto leaf = (*ca)->issue("localhost", {"localhost"}, {"127.0.0.1"}, false);
  auto client_cert = (*ca)->issue("client", {}, {}, true);
  ASSERT_TRUE(leaf.isOk() && client_cert.isOk());
  const std::string dir = ::testing::TempDir() + "/tls-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(writeFile(dir + "/ca.pem", (*ca)->certPem(), false).isOk());
  ASSERT_TRUE(writeFile(dir + "/cert.pem", leaf->cert_pem, false).isOk());
  ASSERT_TRUE(writeFile(dir + "/key.pem", leaf->key_pem, true).isOk());
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  l.tls_cert_file = dir + "/cert.pem";
  l.tls_key_file = dir + "/key.pem";
  ListenerConfig mtls = l;
  mtls.tls_client_ca_file = dir + "/ca.pem";
  auto server = HttpServer::create({l, mtls}, echo);
  ASSERT_TRUE(server.isOk()) << server.status().message();
  (*server)->start(2, 4);
  auto get = [&](uint16_t port, bool with_client_cert) -> std::string {
    asio::io_context io;
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    ctx.add_certificate_authority(asio::buffer((*ca)->certPem()));
    ctx.set_verify_mode(asio::ssl::verify_peer);
    if (with_client_cert) {
      ctx.use_certificate_chain(asio::buffer(client_cert->cert_pem));
      ctx.use_private_key(asio::buffer(client_cert->key_pem), asio::ssl::context::pem);
    }
    beast::ssl_stream<beast::tcp_stream> stream(io, ctx);
    SSL_set_tlsext_host_name(stream.native_handle(), "localhost");
    stream.set_verify_callback(asio::ssl::host_name_verification("localhost"));
    beast::get_lowest_layer(stream).connect(
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
    beast::error_code ec;
    stream.handshake(asio::ssl::stream_base::client, ec);
    if (ec) {
      return "handshake: " + ec.message();
    }
    http::request<http::string_body> req{http::verb::get, "/v1/tls", 11};
    req.set(http::field::host, "localhost");
    http::write(stream, req, ec);
    beast::flat_buffer buf;
    http::response<http::string_body> resp;
    http::read(stream, buf, resp, ec);
    return ec ? "read: " + ec.message() : resp.body();
  };
  const std::vector<uint16_t> ports = (*server)->ports();
  EXPECT_EQ(get(ports[0], false), "GET /v1/tls  ");
  EXPECT_EQ(get(ports[1], true), "GET /v1/tls  ");
  EXPECT_NE(get(ports[1], false), "GET /v1/tls  ");  // mTLS listener: no certificate, no entry.
  (*server)->shutdown(std::chrono::seconds(1));
}

TEST(HttpServerTest, ConfigErrorsNameTheListener) {
  ListenerConfig l;
  l.address = "nonsense";
  auto s = HttpServer::create({l}, echo);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("'nonsense' is not HOST:PORT"), std::string::npos);
  l.address = "127.0.0.1:0";
  l.tls_cert_file = "/nonexistent/cert.pem";
  l.tls_key_file = "/nonexistent/key.pem";
  s = HttpServer::create({l}, echo);
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("tls_cert_file '/nonexistent/cert.pem'"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace tessera::server

namespace tessera::server {
namespace {

// A streamed answer (a watch): chunks written from another thread arrive as HTTP/1.1 chunks in
// order, after the first; end() finishes the answer; a client that goes ends the stream, so
// its producer stops.
TEST(HttpServerStreamTest, ChunksArriveInOrderAndAClientThatGoesEndsTheStream) {
  std::mutex mu;
  std::vector<std::shared_ptr<ResponseStream>> streams;
  HttpServer::Handler handler = [&](const HttpRequest&) {
    HttpResponse resp;
    resp.body = "first\n";
    resp.stream = std::make_shared<ResponseStream>();
    std::lock_guard lock(mu);
    streams.push_back(resp.stream);
    return resp;
  };
  ListenerConfig l;
  l.address = "127.0.0.1:0";
  auto created = HttpServer::create({l}, handler);
  ASSERT_TRUE(created.isOk());
  auto server = std::move(created).value();
  server->start(1, 1);
  const uint16_t port = server->ports()[0];
  auto latest = [&]() -> std::shared_ptr<ResponseStream> {
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard lock(mu);
        if (!streams.empty()) {
          auto s = streams.back();
          streams.clear();
          return s;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return nullptr;
  };

  // Read it whole: the writes, then the end.
  asio::io_context io;
  beast::tcp_stream client(io);
  client.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req{http::verb::get, "/watch", 11};
  req.set(http::field::host, "a");
  http::write(client, req);
  auto stream = latest();
  ASSERT_NE(stream, nullptr);
  std::thread producer([stream] {
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(stream->write("event " + std::to_string(i) + "\n"));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    stream->end();
  });
  beast::flat_buffer buf;
  http::response<http::string_body> resp;
  http::read(client, buf, resp);
  producer.join();
  EXPECT_EQ(resp.result_int(), 200U);
  EXPECT_TRUE(resp.chunked());
  EXPECT_EQ(resp.body(), "first\nevent 0\nevent 1\nevent 2\n");
  EXPECT_FALSE(stream->write("late"));  // Ended: the producer is told to stop.

  // A client that goes: the stream ends by itself, and says so.
  beast::tcp_stream leaver(io);
  leaver.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::write(leaver, req);
  auto second = latest();
  ASSERT_NE(second, nullptr);
  std::promise<void> ended;
  second->onEnd([&] { ended.set_value(); });
  EXPECT_TRUE(second->write("hello\n"));
  leaver.socket().shutdown(tcp::socket::shutdown_both);
  leaver.close();
  EXPECT_EQ(ended.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_FALSE(second->open());

  // The server stopping ends the streams still open.
  beast::tcp_stream staying(io);
  staying.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  http::write(staying, req);
  auto third = latest();
  ASSERT_NE(third, nullptr);
  server->shutdown(std::chrono::milliseconds(100));
  EXPECT_FALSE(third->open());
}

}  // namespace
}  // namespace tessera::server
