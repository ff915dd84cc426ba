#include "server/http_server.h"

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <boost/beast/version.hpp>
#include <cctype>
#include <charconv>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace tessera::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

struct HttpServer::Impl {
  asio::io_context io;
  std::vector<ListenerConfig> configs;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
  std::vector<std::unique_ptr<ssl::context>> tls;  // Null for plain listeners.
  AsyncHandler handler;
  Admitter admitter;
  RefusalObserver refused;  // May be null.
  BodyPolicy body_policy;
  std::vector<std::thread> threads;
  std::unique_ptr<FairPool> pool;  // Created by start(); stopped before the I/O threads end.
  // Keeps the I/O threads running while a request is with a worker and nothing else is pending.
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::atomic<int64_t> in_flight{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  // One per connection: closes it if it is still open and says whether it was. Pruned of
  // closed connections as it grows.
  std::vector<std::function<bool(bool)>> closers;
  size_t prune_at = 64;
  bool shut = false;

  void accept(size_t i);
  template <typename S>
  void track(const std::shared_ptr<S>& session) {
    std::lock_guard lock(mu);
    if (closers.size() >= prune_at) {
      std::erase_if(closers, [](const auto& alive) { return !alive(false); });
      prune_at = 2 * closers.size() + 64;
    }
    closers.push_back([w = std::weak_ptr<S>(session)](bool close_it) {
      auto p = w.lock();
      if (p != nullptr && close_it) {
        p->closeAsync();
      }
      return p != nullptr && p->isOpen();
    });
  }
};

bool ResponseStream::write(std::string data) {
  std::lock_guard lock(mu_);
  if (ended_) {
    return false;
  }
  if (data.empty()) {
    return true;
  }
  if (!sink_) {
    pending_.push_back(std::move(data));
  } else {
    sink_(std::move(data), false);  // Only posts to the connection: cheap, and in order.
  }
  return true;
}

void ResponseStream::end() {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard lock(mu_);
    if (ended_) {
      return;
    }
    ended_ = true;
    if (sink_ && !end_sent_) {
      end_sent_ = true;
      sink_(std::string(), true);
    }
    run = std::move(on_end_);
  }
  for (auto& fn : run) {
    fn();
  }
}

bool ResponseStream::open() const {
  std::lock_guard lock(mu_);
  return !ended_;
}

void ResponseStream::onEnd(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (!ended_) {
      on_end_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void ResponseStream::attach(std::function<void(std::string, bool)> sink) {
  std::lock_guard lock(mu_);
  sink_ = std::move(sink);
  for (std::string& chunk : pending_) {
    sink_(std::move(chunk), false);
  }
  pending_.clear();
  if (ended_ && !end_sent_) {
    end_sent_ = true;
    sink_(std::string(), true);
  }
}

void ResponseStream::closed() {
  std::vector<std::function<void()>> run;
  {
    std::lock_guard lock(mu_);
    sink_ = nullptr;
    if (ended_) {
      return;
    }
    ended_ = true;
    run = std::move(on_end_);
  }
  for (auto& fn : run) {
    fn();
  }
}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

HttpResponse errorResponse(unsigned status, std::string_view message) {
  HttpResponse r;
  r.status = status;
  r.body = std::string(R"({"errors":[")") + std::string(message) + "\"]}";
  return r;
}

// Whether `v` is a valid Host field value (RFC 9112 section 3.2, RFC 3986 section 3.2.2):
// uri-host [":" port], where an empty value is allowed.
bool validHost(std::string_view v) {
  size_t i = 0;
  if (!v.empty() && v.front() == '[') {
    const size_t close = v.find(']');
    if (close == std::string_view::npos || close == 1) {
      return false;
    }
    for (char c : v.substr(1, close - 1)) {
      if (std::isxdigit(static_cast<unsigned char>(c)) == 0 && c != ':' && c != '.') {
        return false;
      }
    }
    i = close + 1;
  } else {
    constexpr std::string_view kRegName = "-._~%!$&'()*+,;=";
    for (; i < v.size() && v[i] != ':'; ++i) {
      if (std::isalnum(static_cast<unsigned char>(v[i])) == 0 &&
          kRegName.find(v[i]) == std::string_view::npos) {
        return false;
      }
    }
  }
  if (i == v.size()) {
    return true;
  }
  if (v[i] != ':') {
    return false;
  }
  for (++i; i < v.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(v[i])) == 0) {
      return false;
    }
  }
  return true;
}

// Why a request's head must be refused (400, then the connection closed), or "" if its framing
// is sound. Beast's parser already refuses a bad or conflicting Content-Length, and
// Transfer-Encoding: chunked with a Content-Length; what it takes leniently is refused here,
// after RFC 9112, since a proxy in front of the server may read such a message differently and
// smuggle a request past itself (section 11.2):
//   - an HTTP/1.1 request without Host, or any request with two or an invalid one (3.2: MUST);
//   - Transfer-Encoding on HTTP/1.0 (6.1: MUST treat the framing as faulty);
//   - Transfer-Encoding with Content-Length (6.1: MAY reject, MUST close; 6.3);
//   - any transfer coding but `chunked`, alone and once: Beast reads "gzip, chunked" as chunked
//     and takes an unknown coding, or `chunked` before another, as no body at all, leaving it
//     to be read as the next request. With chunked not last, 6.3 says MUST 400; for a coding
//     the server does not implement (gzip, deflate, compress) 6.1 says SHOULD 501, and we
//     answer 400 as well: the framing is what is refused.
std::string framingError(const http::request_parser<http::string_body>& parser) {
  const auto& req = parser.get();
  int hosts = 0;
  bool bad_host = false;
  std::vector<std::string> codings;
  bool has_length = false;
  for (const auto& field : req) {
    if (field.name() == http::field::host) {
      ++hosts;
      bad_host |= !validHost({field.value().data(), field.value().size()});
    } else if (field.name() == http::field::content_length) {
      has_length = true;
    } else if (field.name() == http::field::transfer_encoding) {
      const std::string_view value(field.value().data(), field.value().size());
      size_t from = 0;
      while (from <= value.size()) {
        size_t comma = value.find(',', from);
        if (comma == std::string_view::npos) {
          comma = value.size();
        }
        std::string_view coding = value.substr(from, comma - from);
        while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
          coding.remove_prefix(1);
        }
        while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
          coding.remove_suffix(1);
        }
        std::string c = lower(coding);
        for (char& ch : c) {  // It goes into the answer: only a token's characters.
          if (std::isalnum(static_cast<unsigned char>(ch)) == 0 &&
              std::string_view("!#$%&'*+-.^_`|~").find(ch) == std::string_view::npos) {
            ch = '?';
          }
        }
        codings.push_back(std::move(c));
        from = comma + 1;
      }
    }
  }
  if (hosts > 1) {
    return "more than one Host header";
  }
  if (hosts == 0 && req.version() >= 11) {
    return "an HTTP/1.1 request needs a Host header";
  }
  if (bad_host) {
    return "invalid Host header";
  }
  if (codings.empty()) {
    return "";
  }
  if (req.version() < 11) {
    return "Transfer-Encoding in an HTTP/1.0 request";
  }
  if (has_length) {
    return "Transfer-Encoding with Content-Length";
  }
  for (const std::string& coding : codings) {
    if (coding != "chunked") {
      return "transfer coding '" + coding.substr(0, 64) +
             "' is not supported: only Transfer-Encoding: chunked";
    }
  }
  if (codings.size() > 1) {
    return "chunked applied more than once";
  }
  return "";
}

// The one answer to a request, however many copies of its Reply there are: the first send wins,
// and if none comes before the last copy goes, a 500.
class Answer {
 public:
  explicit Answer(std::function<void(HttpResponse)> write) : write_(std::move(write)) {}
  ~Answer() {
    if (!sent_.exchange(true)) {
      write_(errorResponse(500, "internal error: the request was never answered"));
    }
  }
  Answer(const Answer&) = delete;
  Answer& operator=(const Answer&) = delete;
  void send(HttpResponse resp) {
    if (!sent_.exchange(true)) {
      write_(std::move(resp));
    }
  }

 private:
  std::function<void(HttpResponse)> write_;
  std::atomic<bool> sent_{false};
};

// One connection. `Stream` is beast::tcp_stream or beast::ssl_stream<beast::tcp_stream>.
template <typename Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl& server, size_t listener, Stream stream)
      : server_(server), listener_(listener), stream_(std::move(stream)) {}

  void run() {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      read();
    } else {
      beast::get_lowest_layer(stream_).expires_after(config().request_timeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) {
                                  self->read();
                                }
                              });
    }
  }

  // From any thread: closes the connection on its own strand.
  void closeAsync() {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] { self->close(); });
  }
  bool isOpen() const { return open_; }

 private:
  const ListenerConfig& config() const { return server_.configs[listener_]; }

  void close() {
    open_ = false;
    if (streaming_) {
      streaming_->closed();  // The client went, or the server stops: the producer stops.
      streaming_.reset();
    }
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).socket().close(ec);
  }

  void read() {
    if (server_.stopping) {
      close();
      return;
    }
    parser_.emplace();
    request_.reset();
    parser_->header_limit(static_cast<uint32_t>(config().max_header_bytes));
    parser_->body_limit(config().max_body_bytes);
    body_refusal_ = "request body too large";
    beast::get_lowest_layer(stream_).expires_after(config().request_timeout);
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->onHeader(ec); });
  }

  // The header is read, none of the body: refuse bad framing and a body larger than the request
  // may carry before reading any of it; then read the body.
  void onHeader(beast::error_code ec) {
    if (ec) {
      onRead(ec);
      return;
    }
    if (const std::string why = framingError(*parser_); !why.empty()) {
      linger_ = true;  // A body may be on its way, of a length we cannot tell.
      head_ = parser_->get().method() == http::verb::head;
      reply(refused(errorResponse(400, "malformed HTTP request: " + why)), false);
      return;
    }
    size_t limit = config().max_body_bytes;
    if (server_.body_policy) {
      std::optional<BodyAllowance> allowed;
      try {
        request_ = head(parser_->get());
        allowed = server_.body_policy(*request_);
      } catch (const std::exception&) {
        allowed.reset();
      }
      if (allowed && allowed->max_bytes < limit) {
        limit = allowed->max_bytes;
        body_refusal_ = std::move(allowed->refusal);
      }
    }
    if (parser_->content_length().value_or(0) > limit) {
      onRead(http::error::body_limit);
      return;
    }
    parser_->body_limit(limit);  // A chunked body is counted as it comes.
    if (parser_->is_done()) {
      onRead({});
      return;
    }
    http::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, size_t) { self->onRead(ec); });
  }

  // The request's method, target and headers (no body), as the handler will see them.
  HttpRequest head(const http::request<http::string_body>& req) const {
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& field : req) {
      const auto name = field.name_string();
      r.headers.emplace_back(lower({name.data(), name.size()}), std::string(field.value()));
    }
    r.listener = listener_;
    return r;
  }

  void onRead(beast::error_code ec) {
    head_ = false;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::operation_aborted) {
      close();
      return;
    }
    if (ec == http::error::body_limit) {
      linger_ = true;  // The body may still be on its way.
      reply(refused(errorResponse(413, body_refusal_)), false);
      return;
    }
    if (ec == http::error::header_limit) {
      reply(refused(errorResponse(431, "request header fields too large")), false);
      return;
    }
    if (ec) {
      if (parser_->got_some()) {
        linger_ = true;
        reply(refused(errorResponse(400, ec == http::error::bad_content_length
                                             ? "malformed HTTP request: invalid or conflicting "
                                               "Content-Length"
                                         : ec == http::error::bad_transfer_encoding
                                             ? "malformed HTTP request: Transfer-Encoding with "
                                               "Content-Length, or repeated"
                                             : "malformed HTTP request")),
              false);
      } else {
        close();
      }
      return;
    }
    http::request<http::string_body>& req = parser_->get();
    head_ = req.method() == http::verb::head;
    HttpRequest r = request_ ? std::move(*request_) : head(req);  // The body policy's, if any.
    request_.reset();
    r.body = std::move(req.body());
    beast::error_code ep_ec;
    const tcp::endpoint peer = beast::get_lowest_layer(stream_).socket().remote_endpoint(ep_ec);
    if (!ep_ec) {
      r.remote = peer.address().to_string() + ":" + std::to_string(peer.port());
    }
    ++server_.in_flight;
    const bool keep_alive = req.keep_alive() && !server_.stopping;
    Admission admission;
    if (server_.admitter) {
      try {
        admission = server_.admitter(r);
      } catch (const std::exception& e) {
        admission.response = refused(errorResponse(500, "internal error"), &r);
      }
    }
    if (admission.response) {
      replyLater(std::move(*admission.response), keep_alive);
      return;
    }
    // What the request costs its key in the pool besides a fixed amount: its body's bytes.
    const size_t body_bytes = r.body.size();
    // The handler may block: it runs on a worker, and the reply comes back to this strand,
    // from the worker or from whichever thread answers later (at once if that is this strand's
    // own: a handler run here, see Admission::run_now).
    // Shared with this strand, which records it if the queue is full.
    auto shared = std::make_shared<const HttpRequest>(std::move(r));
    FairPool::Job job = [self = this->shared_from_this(), shared, keep_alive]() {
      const HttpRequest& r = *shared;
      auto answer = std::make_shared<Answer>([self, keep_alive](HttpResponse resp) {
        asio::dispatch(self->stream_.get_executor(),
                       [self, resp = std::move(resp), keep_alive]() mutable {
                         self->replyLater(std::move(resp), keep_alive);
                       });
      });
      try {
        self->server_.handler(r, [answer](HttpResponse resp) { answer->send(std::move(resp)); });
      } catch (const std::exception& e) {
        answer->send(self->refused(errorResponse(500, "internal error"), &r));
      }
    };
    if (admission.run_now &&
        server_.pool->runNowIfFree(admission.key, admission.limits, job, body_bytes)) {
      return;
    }
    const bool queued =
        server_.pool->submit(admission.key, admission.limits, std::move(job), body_bytes);
    if (!queued) {
      HttpResponse resp = errorResponse(429, "too many requests waiting; slow down");
      resp.headers.emplace_back("Retry-After", "1");
      resp.delay = admission.reject_delay;
      replyLater(refused(std::move(resp), shared.get()), keep_alive);
    }
  }

  // Tells the server's refusal observer of `resp`, an answer given without the handler to
  // `req`, or to what the parser read of the request in hand if null; returns `resp`.
  HttpResponse refused(HttpResponse resp, const HttpRequest* req = nullptr) {
    if (!server_.refused) {
      return resp;
    }
    HttpRequest head;
    if (req == nullptr) {
      // What the parser read of the request line and fields (a 413 comes before the header is
      // complete, and a 431 in its midst).
      if (parser_ && parser_->got_some()) {
        const http::request<http::string_body>& got = parser_->get();
        head.method = std::string(got.method_string());
        head.target = std::string(got.target());
        for (const auto& field : got) {
          const auto name = field.name_string();
          head.headers.emplace_back(lower({name.data(), name.size()}), std::string(field.value()));
        }
      }
      beast::error_code ec;
      const tcp::endpoint peer = beast::get_lowest_layer(stream_).socket().remote_endpoint(ec);
      if (!ec) {
        head.remote = peer.address().to_string() + ":" + std::to_string(peer.port());
      }
      head.listener = listener_;
      req = &head;
    }
    try {
      server_.refused(*req, resp);
    } catch (const std::exception&) {
      // The refusal goes out all the same.
    }
    return resp;
  }

  // Writes a counted response, after its delay if it has one.
  void replyLater(HttpResponse resp, bool keep_alive) {
    if (resp.delay.count() > 0) {
      auto timer = std::make_shared<asio::steady_timer>(stream_.get_executor(), resp.delay);
      timer->async_wait([self = this->shared_from_this(), timer, resp = std::move(resp),
                         keep_alive](beast::error_code) mutable {
        self->reply(std::move(resp), keep_alive && !self->server_.stopping, /*counted=*/true);
      });
      return;
    }
    reply(std::move(resp), keep_alive && !server_.stopping, /*counted=*/true);
  }

  // The status line and headers of `resp` (a header given twice, e.g. Warning, is sent twice).
  template <typename Body>
  void fillHeaders(http::response<Body>& msg, const HttpResponse& resp) const {
    msg.version(11);
    msg.result(resp.status);
    msg.set(http::field::server, "tessera");
    msg.set(http::field::content_type, resp.content_type);
    for (const auto& [k, v] : resp.headers) {
      msg.insert(k, v);
    }
    if (!config().chroot_tenant.empty()) {
      // Tells a client that this listener's /v1/ is one tenant's (it writes paths accordingly).
      msg.set("X-Tessera-Chroot", config().chroot_tenant);
    }
  }

  // A streamed answer (HttpResponse::stream): the headers, then each chunk as the producer
  // writes it, until it ends the stream (then the connection closes) or the client goes.
  void streamReply(HttpResponse resp, bool counted) {
    auto msg = std::make_shared<http::response<http::empty_body>>();
    fillHeaders(*msg, resp);
    msg->keep_alive(false);
    msg->chunked(true);
    auto serializer = std::make_shared<http::response_serializer<http::empty_body>>(*msg);
    streaming_ = resp.stream;
    // A watch may stay quiet for long: no idle timeout while it streams.
    beast::get_lowest_layer(stream_).expires_never();
    http::async_write_header(
        stream_, *serializer,
        [self = this->shared_from_this(), msg, serializer, counted, first = std::move(resp.body)](
            beast::error_code ec, size_t) mutable {
          if (counted) {
            --self->server_.in_flight;  // Streaming holds up no shutdown: it is cut.
          }
          if (ec || !self->streaming_) {
            self->close();
            return;
          }
          if (!first.empty() && !self->head_) {
            self->out_.emplace_back(std::move(first), false);
          }
          std::weak_ptr<Session> weak = self;
          const bool head = self->head_;
          self->streaming_->attach([weak, head](std::string chunk, bool last) {
            auto s = weak.lock();
            if (s == nullptr || (head && !last)) {
              return;
            }
            asio::post(s->stream_.get_executor(), [s, chunk = std::move(chunk), last]() mutable {
              s->out_.emplace_back(std::move(chunk), last);
              s->pump();
            });
          });
          self->awaitHangUp();
          self->pump();
        });
  }

  // Writes the next queued chunk of a streamed answer, one at a time.
  void pump() {
    if (writing_ || out_.empty() || !open_) {
      return;
    }
    auto [data, last] = std::move(out_.front());
    out_.pop_front();
    writing_ = true;
    auto self = this->shared_from_this();
    if (last) {
      asio::async_write(stream_, http::make_chunk_last(), [self](beast::error_code, size_t) {
        self->writing_ = false;
        self->streaming_.reset();
        self->close();
      });
      return;
    }
    auto held = std::make_shared<std::string>(std::move(data));
    asio::async_write(stream_, http::make_chunk(asio::buffer(*held)),
                      [self, held](beast::error_code ec, size_t) {
                        self->writing_ = false;
                        if (ec) {
                          self->close();
                          return;
                        }
                        self->pump();
                      });
  }

  // While a stream runs, a read that ends means the client went.
  void awaitHangUp() {
    hangup_.resize(512);
    stream_.async_read_some(asio::buffer(hangup_),
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) {
                                self->close();
                                return;
                              }
                              if (self->open_) {
                                self->awaitHangUp();  // Bytes after the request: ignored.
                              }
                            });
  }

  void reply(HttpResponse resp, bool keep_alive, bool counted = false) {
    if (resp.stream != nullptr) {
      streamReply(std::move(resp), counted);
      return;
    }
    auto msg = std::make_shared<http::response<http::string_body>>();
    fillHeaders(*msg, resp);
    msg->body() = std::move(resp.body);
    msg->keep_alive(keep_alive);
    msg->prepare_payload();
    if (head_) {
      // The headers a GET would have, and no body: a keep-alive client reads none after a HEAD.
      msg->body().clear();
    }
    beast::get_lowest_layer(stream_).expires_after(config().request_timeout);
    http::async_write(
        stream_, *msg,
        [self = this->shared_from_this(), msg, keep_alive, counted](beast::error_code ec, size_t) {
          if (counted) {
            --self->server_.in_flight;
          }
          if (!ec && !keep_alive && self->linger_) {
            self->lingerThenClose();
            return;
          }
          if (ec || !keep_alive) {
            self->close();
            return;
          }
          self->read();
        });
  }

  // After refusing a request whose body is still coming (413): stop sending, read and drop what
  // the client still sends (for a while, up to a bound), then close. Closing at once would make
  // the kernel answer the unread bytes with a reset, which can destroy the 413 on its way to a
  // client still busy writing, so that it sees a broken connection instead of the reason.
  void lingerThenClose() {
    constexpr auto kLingerTime = std::chrono::seconds(5);
    auto& tcp = beast::get_lowest_layer(stream_);
    beast::error_code ec;
    tcp.socket().shutdown(tcp::socket::shutdown_send, ec);
    tcp.expires_after(kLingerTime);
    drain_.resize(64 * 1024);
    drain();
  }
  void drain() {
    constexpr size_t kLingerBytes = size_t{256} << 20;
    beast::get_lowest_layer(stream_).async_read_some(
        asio::buffer(drain_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
          self->drained_ += n;
          if (ec || self->drained_ > kLingerBytes || self->server_.stopping) {
            self->close();
            return;
          }
          self->drain();
        });
  }

  HttpServer::Impl& server_;
  size_t listener_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<HttpRequest> request_;  // The request's head, once the body policy has seen it.
  bool head_ = false;                   // The request being answered is a HEAD.
  std::string body_refusal_;            // The 413's message for a body over the request's limit.
  bool linger_ = false;  // Drain the client's bytes before closing (lingerThenClose).
  std::vector<char> drain_;
  size_t drained_ = 0;
  std::atomic<bool> open_{true};
  // A streamed answer: its producer's end, the chunks queued for the connection, whether one is
  // being written, and the buffer of the read that notices the client going.
  std::shared_ptr<ResponseStream> streaming_;
  std::deque<std::pair<std::string, bool>> out_;
  bool writing_ = false;
  std::vector<char> hangup_;
};

core::Result<tcp::endpoint> parseAddress(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return core::invalidArgument("listener address '" + address + "' is not HOST:PORT");
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  uint16_t port = 0;
  const std::string p = address.substr(colon + 1);
  auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
  if (ec != std::errc() || end != p.data() + p.size()) {
    return core::invalidArgument("listener address '" + address + "': bad port '" + p + "'");
  }
  beast::error_code aec;
  const asio::ip::address ip =
      asio::ip::make_address(host == "localhost" ? "127.0.0.1" : host, aec);
  if (aec) {
    return core::invalidArgument("listener address '" + address + "': '" + host +
                                 "' is not an IP address");
  }
  return tcp::endpoint(ip, port);
}

// The listener's TLS context from its files (nullptr: no TLS).
core::Result<std::unique_ptr<ssl::context>> tlsContext(const ListenerConfig& l) {
  if (l.tls_cert_file.empty() && l.tls_key_file.empty()) {
    return std::unique_ptr<ssl::context>();
  }
  if (l.tls_cert_file.empty() || l.tls_key_file.empty()) {
    return core::invalidArgument("listener " + l.address +
                                 ": tls_cert_file and tls_key_file go together");
  }
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  beast::error_code ec;
  ctx->use_certificate_chain_file(l.tls_cert_file, ec);
  if (ec) {
    return core::invalidArgument("listener " + l.address + ": tls_cert_file '" + l.tls_cert_file +
                                 "': " + ec.message());
  }
  ctx->use_private_key_file(l.tls_key_file, ssl::context::pem, ec);
  if (ec) {
    return core::invalidArgument("listener " + l.address + ": tls_key_file '" + l.tls_key_file +
                                 "': " + ec.message());
  }
  if (!l.tls_client_ca_file.empty()) {
    ctx->load_verify_file(l.tls_client_ca_file, ec);
    if (ec) {
      return core::invalidArgument("listener " + l.address + ": tls_client_ca_file '" +
                                   l.tls_client_ca_file + "': " + ec.message());
    }
    ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

}  // namespace

core::Status HttpServer::checkListener(const ListenerConfig& listener) {
  TESSERA_RETURN_IF_ERROR(parseAddress(listener.address).status());
  return tlsContext(listener).status();
}

void HttpServer::Impl::accept(size_t i) {
  acceptors[i]->async_accept(
      asio::make_strand(io), [this, i](beast::error_code ec, tcp::socket socket) {
        if (ec) {
          return;  // Closed at shutdown (or a transient failure: the loop below re-arms).
        }
        if (!stopping) {
          // Answers and a stream's chunks go out as written: with Nagle's algorithm, a small
          // write after another waits for the client's (delayed) ACK, up to 40 ms a watch event.
          beast::error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);
          beast::tcp_stream stream(std::move(socket));
          if (tls[i] == nullptr) {
            auto s = std::make_shared<Session<beast::tcp_stream>>(*this, i, std::move(stream));
            track(s);
            s->run();
          } else {
            auto s = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
                *this, i, beast::ssl_stream<beast::tcp_stream>(std::move(stream), *tls[i]));
            track(s);
            s->run();
          }
        }
        if (!stopping) {
          accept(i);
        }
      });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { shutdown(std::chrono::milliseconds(0)); }

core::Result<std::unique_ptr<HttpServer>> HttpServer::create(std::vector<ListenerConfig> listeners,
                                                             Handler handler, Admitter admitter,
                                                             BodyPolicy body_policy) {
  return create(
      std::move(listeners),
      [handler = std::move(handler)](const HttpRequest& r, const Reply& reply) {
        reply(handler(r));
      },
      std::move(admitter), std::move(body_policy));
}

core::Result<std::unique_ptr<HttpServer>> HttpServer::create(std::vector<ListenerConfig> listeners,
                                                             AsyncHandler handler,
                                                             Admitter admitter,
                                                             BodyPolicy body_policy) {
  auto impl = std::make_unique<Impl>();
  impl->handler = std::move(handler);
  impl->admitter = std::move(admitter);
  impl->body_policy = std::move(body_policy);
  for (const ListenerConfig& l : listeners) {
    TESSERA_ASSIGN_OR_RETURN(tcp::endpoint ep, parseAddress(l.address));
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ssl::context> ctx, tlsContext(l));
    auto acceptor = std::make_unique<tcp::acceptor>(impl->io);
    beast::error_code ec;
    acceptor->open(ep.protocol(), ec);
    if (!ec) {
      acceptor->set_option(asio::socket_base::reuse_address(true), ec);
    }
    if (!ec) {
      acceptor->bind(ep, ec);
    }
    if (!ec) {
      acceptor->listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return core::failedPrecondition("listener " + l.address + ": cannot listen: " + ec.message());
    }
    impl->acceptors.push_back(std::move(acceptor));
    impl->tls.push_back(std::move(ctx));
  }
  impl->configs = std::move(listeners);
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

std::vector<uint16_t> HttpServer::ports() const {
  std::vector<uint16_t> out;
  for (const auto& a : impl_->acceptors) {
    beast::error_code ec;
    out.push_back(a->local_endpoint(ec).port());
  }
  return out;
}

const std::vector<ListenerConfig>& HttpServer::listeners() const { return impl_->configs; }

int64_t HttpServer::inFlight() const { return impl_->in_flight; }

void HttpServer::setRefusalObserver(RefusalObserver observer) {
  impl_->refused = std::move(observer);
}

void HttpServer::start(int io_threads, int workers) {
  impl_->pool = std::make_unique<FairPool>(workers);
  impl_->work.emplace(impl_->io.get_executor());
  for (size_t i = 0; i < impl_->acceptors.size(); ++i) {
    impl_->accept(i);
  }
  for (int t = 0; t < std::max(1, io_threads); ++t) {
    impl_->threads.emplace_back([this] { impl_->io.run(); });
  }
}

void HttpServer::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->shut) {
      return;
    }
    impl_->shut = true;
  }
  impl_->stopping = true;
  asio::post(impl_->io, [this] {
    for (auto& a : impl_->acceptors) {
      beast::error_code ec;
      a->close(ec);
    }
  });
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (impl_->in_flight > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::vector<std::function<bool(bool)>> closers;
  {
    std::lock_guard lock(impl_->mu);
    closers.swap(impl_->closers);
  }
  for (const auto& close : closers) {
    close(true);
  }
  // Let the closes run on their strands, then stop the workers (requests still waiting are
  // dropped with their connections) and the loop.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (impl_->pool != nullptr) {
    impl_->pool->stop();
  }
  impl_->work.reset();
  impl_->io.stop();
  for (std::thread& t : impl_->threads) {
    if (t.joinable()) {
      t.join();
    }
  }
}

}  // namespace tessera::server
