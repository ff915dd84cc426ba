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
//   (*server)->start(2, 16);                    // two I/O threads, 16 workers
//   ...
//   (*server)->shutdown(std::chrono::seconds(10));
//
// Limits: a request's header block and body are bounded per listener (431 and 413 beyond
// them), and a body policy may bound a request's body further from its head alone (a route that
// reads no body), refusing it with 413 before any of it is read; each request must arrive within
// the listener's timeout, and an idle keep-alive connection is closed after it. Framing is
// strict (RFC 9112), since a proxy in front may read a lenient message differently (request
// smuggling): an HTTP/1.1 request without exactly one valid Host, any Transfer-Encoding but
// `chunked` alone, Transfer-Encoding with Content-Length or on HTTP/1.0, and conflicting
// Content-Lengths are answered 400 and the connection is closed. I/O threads read, write and
// admit requests; the handler runs on a pool of worker threads (it may block, and must be
// thread-safe) that serves the admitter's keys in turn by what their requests cost (a fixed
// amount plus the body's bytes, FairPool), so one key's flood delays another key's request by
// at most one handler, however large its bodies. A request the admitter marks `run_now` (it
// never blocks) runs on its I/O thread instead, within its key's places. Shutdown stops
// accepting, lets requests in flight finish (up to the grace period) and closes every connection.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "server/fair_pool.h"

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

// The body of a streamed answer (a Kubernetes watch, `logs -f`): written as HTTP/1.1 chunks, each
// flushed as it is written, until the producer ends it or the client goes; the connection closes
// after it. The producer keeps a shared_ptr and calls write() from any thread.
class ResponseStream {
 public:
  // Queues `data` as one chunk (nothing for empty data). False once the stream has ended or
  // the client has gone: the producer stops and drops it.
  bool write(std::string data);
  // Ends the stream (the terminating chunk). Idempotent.
  void end();
  bool open() const;
  // Called once when the stream ends, whoever ends it (the producer, the client going, the
  // server stopping), on whichever thread that happens; at once if it has ended already.
  void onEnd(std::function<void()> fn);

  // For the HTTP server: where chunks go (`last`: the terminating one). Chunks written before
  // it is attached are kept and go first.
  void attach(std::function<void(std::string chunk, bool last)> sink);
  // For the HTTP server: the client went, or the server stops.
  void closed();

 private:
  mutable std::mutex mu_;
  std::function<void(std::string, bool)> sink_;
  std::vector<std::string> pending_;
  bool ended_ = false;
  bool end_sent_ = false;
  std::vector<std::function<void()>> on_end_;
};

struct HttpResponse {
  unsigned status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers = {};
  // Written only after this long, without reading the connection's next request meanwhile: the
  // server's backpressure on a client it refuses (a client that retries at once then costs a
  // refusal per delay per connection, not a core).
  std::chrono::milliseconds delay{0};
  // Set: `body` is the first chunk of a streamed answer, and the rest comes through `stream`
  // (Transfer-Encoding: chunked; a HEAD gets the headers only).
  std::shared_ptr<ResponseStream> stream = nullptr;
};

// What the admitter decides about a request on the I/O thread, before it waits for a worker.
struct Admission {
  std::optional<HttpResponse> response;  // Set: answered with this at once, never handled.
  std::string key;                       // Requests wait per key; keys take turns (FairPool).
  FairLimits limits;
  // When the key's queue is full the answer is 429, sent after this delay (see
  // HttpResponse::delay).
  std::chrono::milliseconds reject_delay{0};
  // The handler will not block (a read served from memory, whose answer waits for no disk):
  // it runs on the I/O thread, saving the hand-off to a worker and back, when the key has a
  // free place and nothing waiting (FairPool::runNowIfFree); otherwise it waits for a worker
  // like any other.
  bool run_now = false;
};

// What a request may carry as a body, decided from its head (method, target, headers; the body
// is empty) on its I/O thread once the header is read and before any of the body is.
struct BodyAllowance {
  size_t max_bytes = 0;
  std::string refusal;  // The 413's message for a larger body.
};

// Answers one request: call it once, from any thread (it only queues the write; later calls are
// ignored). A Reply dropped without being called answers 500, so no request is left hanging.
using Reply = std::function<void(HttpResponse)>;
// Told of every answer the HTTP layer gives without the handler: a 413 (body too large), 431,
// 400 (malformed HTTP), 429 (the key's queue is full), 500 (the admitter or the handler threw),
// with the request as far as it was read. It must not block (it runs on an I/O thread).
using RefusalObserver = std::function<void(const HttpRequest&, const HttpResponse&)>;

class HttpServer {
 public:
  // Runs on a worker thread and may block (disk flushes).
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // Runs on a worker thread and answers through its Reply, there or later from another thread:
  // a request waiting on something slow (a disk flush) then holds no worker meanwhile.
  using AsyncHandler = std::function<void(const HttpRequest&, Reply)>;
  // Runs on an I/O thread for every request and must not block: it decides whom the request
  // counts against (and may answer cheap refusals itself).
  using Admitter = std::function<Admission(const HttpRequest&)>;
  // Runs on an I/O thread for every request once its header is read, must not block, and may
  // lower the listener's max_body_bytes for it (nullopt: the listener's limit).
  using BodyPolicy = std::function<std::optional<BodyAllowance>(const HttpRequest& head)>;

  // Binds every listener (errors name the address or the TLS file that failed). Without an
  // admitter every request has the same key; without a body policy every request may carry its
  // listener's max_body_bytes.
  static core::Result<std::unique_ptr<HttpServer>> create(std::vector<ListenerConfig> listeners,
                                                          Handler handler,
                                                          Admitter admitter = nullptr,
                                                          BodyPolicy body_policy = nullptr);
  static core::Result<std::unique_ptr<HttpServer>> create(std::vector<ListenerConfig> listeners,
                                                          AsyncHandler handler,
                                                          Admitter admitter = nullptr,
                                                          BodyPolicy body_policy = nullptr);
  // What `create` would refuse in `listener` without binding it: an address that is no
  // IP:PORT, TLS files that do not load (`tessera server -validate`).
  static core::Status checkListener(const ListenerConfig& listener);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port each listener is bound to, in configuration order.
  std::vector<uint16_t> ports() const;
  const std::vector<ListenerConfig>& listeners() const;
  // Call before start(): `observer` is told of the HTTP layer's own refusals (for the audit log).
  void setRefusalObserver(RefusalObserver observer);
  // Starts accepting, with `io_threads` threads for TLS and HTTP and `workers` threads that run
  // the handler.
  void start(int io_threads, int workers);
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
