// The HTTP(S) front door: listeners, TLS, HTTP/1.1 keep-alive, bounded requests, timeouts and
// graceful shutdown, over Boost.Beast and Asio. It knows nothing of the API: every request is
// handed to one `Handler` with the listener it came in on.
//
//   ListenerConfig l;
//   l.address = "127.0.0.1:0";                 // port 0: any free port; see ports()
//   l.tls_cert_file = "cert.pem"; l.tls_key_file = "key.pem";
//   auto server = HttpServer::create({l}, [](const HttpRequest& r) {
//     return HttpResponse{200, R"({"ok":true})"};
//   });
//   (*server)->start(4);                        // four I/O threads
//   ...
//   (*server)->shutdown(std::chrono::seconds(10));
//
// Limits: a request's header block and body are bounded per listener (431 and 413 beyond
// them); each request must arrive within the listener's timeout, and an idle keep-alive
// connection is closed after it. The handler runs on an I/O thread and may block briefly;
// it must be thread-safe. Shutdown stops accepting, lets requests in flight finish (up to the
// grace period) and closes every connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace tessera::server {

struct ListenerConfig {
  std::string address = "127.0.0.1:8200";  // HOST:PORT.
  // TLS: certificate chain and key (PEM). Both empty: plain HTTP, for tests and loopback only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // When set, clients must present a certificate signed by this CA (mutual TLS).
  std::string tls_client_ca_file;
  std::string chroot_tenant;  // Non-empty: every request is rooted in this tenant.
  size_t max_header_bytes = size_t{16} * 1024;
  size_t max_body_bytes = size_t{1024} * 1024;
  std::chrono::milliseconds request_timeout{30'000};
};

struct HttpRequest {
  std::string method;  // As sent ("GET", "POST", "LIST", ...).
  std::string target;  // Path and query, undecoded.
  std::vector<std::pair<std::string, std::string>> headers;  // Names lower-cased.
  std::string body;
  std::string remote;   // "address:port" of the peer.
  size_t listener = 0;  // Index into the listener configs.

  // The first header named `name` (lower case), or "".
  std::string header(std::string_view name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) {
        return v;
      }
    }
    return "";
  }
};

struct HttpResponse {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds every listener (errors name the address or the TLS file that failed).
  static core::Result<std::unique_ptr<HttpServer>> create(std::vector<ListenerConfig> listeners,
                                                          Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port each listener is bound to, in configuration order.
  std::vector<uint16_t> ports() const;
  const std::vector<ListenerConfig>& listeners() const;
  // Starts accepting, with `threads` I/O threads.
  void start(int threads);
  // Stops accepting, waits up to `grace` for requests in flight, then closes everything and
  // joins the threads. Idempotent.
  void shutdown(std::chrono::milliseconds grace);
  // Requests being handled or written right now.
  int64_t inFlight() const;

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::server
