#include "api/client.h"

#include <openssl/rand.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <filesystem>
#include <optional>
#include <thread>

namespace tessera::api {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

constexpr size_t kMaxResponseBytes = size_t{64} * 1024 * 1024;

using core::unavailable;

core::StatusCode codeForHttp(unsigned status) {
  switch (status) {
    case 403:
      return core::StatusCode::kPermissionDenied;
    case 404:
      return core::StatusCode::kNotFound;
    case 409:
      return core::StatusCode::kAlreadyExists;
    case 429:
      return core::StatusCode::kResourceExhausted;
    default:
      return status >= 500 ? core::StatusCode::kUnavailable : core::StatusCode::kFailedPrecondition;
  }
}

// "<status>: <the server's messages>", from `{"errors": [...]}` or whatever text came back.
std::string errorMessage(unsigned status, const json& body, const std::string& raw,
                         std::string_view reason) {
  std::string messages;
  if (body.is_object() && body.contains("errors") && body["errors"].is_array()) {
    for (const json& e : body["errors"]) {
      if (!messages.empty()) {
        messages += "; ";
      }
      messages += e.is_string() ? e.get<std::string>() : e.dump();
    }
  }
  if (messages.empty()) {
    messages = raw.substr(0, 200);
    while (!messages.empty() && std::isspace(static_cast<unsigned char>(messages.back()))) {
      messages.pop_back();
    }
  }
  if (messages.empty()) {
    messages = std::string(reason);
  }
  return std::to_string(status) + ": " + messages;
}

// 128 random bits, hex: a change's Idempotency-Key.
std::string idempotencyKey() {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) {
    return {};  // No key: the change is not sent again once its fate is unknown.
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 15]);
  }
  return out;
}

bool isIpAddress(const std::string& host) {
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// One server address of the list a client may use.
struct Endpoint {
  std::string address;  // As given: "https://10.0.0.1:8200".
  bool tls = true;
  std::string host;  // Without IPv6 brackets.
  std::string port;
};

// Parses "https://HOST:PORT" (or http://); errors name the address.
core::Result<Endpoint> parseEndpoint(const std::string& a) {
  Endpoint e;
  e.address = a;
  std::string rest;
  if (a.rfind("https://", 0) == 0) {
    e.tls = true;
    rest = a.substr(8);
  } else if (a.rfind("http://", 0) == 0) {
    e.tls = false;
    rest = a.substr(7);
  } else {
    return core::invalidArgument("address '" + a +
                                 "' must start with https:// (or http:// for a listener "
                                 "without TLS), like https://127.0.0.1:8200");
  }
  while (!rest.empty() && rest.back() == '/') {
    rest.pop_back();
  }
  if (rest.find('/') != std::string::npos) {
    return core::invalidArgument("address '" + a + "' must be SCHEME://HOST:PORT, without a path");
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      return core::invalidArgument("address '" + a + "': missing ']' after an IPv6 address");
    }
    e.host = rest.substr(1, close - 1);
    const std::string after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        return core::invalidArgument("address '" + a + "': expected ':PORT' after ']'");
      }
      port = after.substr(1);
    }
  } else {
    const size_t colon = rest.rfind(':');
    e.host = rest.substr(0, colon);
    if (colon != std::string::npos) {
      port = rest.substr(colon + 1);
    }
  }
  if (port.empty()) {
    port = e.tls ? "443" : "80";
  }
  const bool numeric =
      port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      std::stoi(port) > 0 && std::stoi(port) <= 65535;
  if (e.host.empty() || !numeric) {
    return core::invalidArgument("address '" + a + "' must be SCHEME://HOST:PORT, like " +
                                 "https://127.0.0.1:8200");
  }
  e.port = port;
  return e;
}

}  // namespace

struct ApiClient::Impl {
  ClientConfig config;
  std::vector<Endpoint> endpoints;  // From config.address, a comma-separated list.
  size_t current = 0;               // The one in use.
  bool tls = true;                  // The current endpoint's.
  std::string host;                 // Without IPv6 brackets.
  std::string port;
  std::string address;  // The current endpoint's, for messages.

  void use(size_t i) {
    close();
    current = i;
    tls = endpoints[i].tls;
    host = endpoints[i].host;
    port = endpoints[i].port;
    address = endpoints[i].address;
  }
  asio::io_context io;
  asio::ssl::context ssl_ctx{asio::ssl::context::tls_client};
  // Exactly one of these while connected.
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  beast::flat_buffer buffer;
  std::string chroot_tenant;  // From the last answer's X-Tessera-Chroot.
  http::fields last_headers;  // The last answer's.

  bool connected() const { return plain.has_value() || secure.has_value(); }

  beast::tcp_stream& lowest() { return plain ? *plain : beast::get_lowest_layer(*secure); }

  void close() {
    if (connected()) {
      beast::error_code ignored;
      lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
      lowest().socket().close(ignored);
    }
    plain.reset();
    secure.reset();
    buffer.clear();
  }

  // Runs one asynchronous operation to completion on `io`: Beast's timeouts (expires_after)
  // apply only to asynchronous operations.
  template <typename Start>
  beast::error_code runOp(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }

  std::string hint() const {
    return tls ? "check TESSERA_ADDR (or --address) and TESSERA_CACERT (or --ca-cert)"
               : "check TESSERA_ADDR (or --address); a TLS listener needs https://";
  }

  core::Status connect() {
    tcp::resolver resolver(io);
    beast::error_code ec;
    const tcp::resolver::results_type endpoints = resolver.resolve(host, port, ec);
    if (ec) {
      return unavailable("cannot reach " + address + ": cannot resolve '" + host +
                         "': " + ec.message() + "; " + hint());
    }
    if (tls) {
      secure.emplace(io, ssl_ctx);
    } else {
      plain.emplace(io);
    }
    lowest().expires_after(config.timeout);
    ec = runOp([&](auto handler) { lowest().async_connect(endpoints, handler); });
    if (ec) {
      close();
      return unavailable("cannot reach " + address + ": " + ec.message() +
                         "; is the server running there? " + hint());
    }
    if (tls) {
      // SNI names the host; certificate verification checks the name (or IP address) too.
      if (!isIpAddress(host)) {
        SSL_set_tlsext_host_name(secure->native_handle(), host.c_str());
      }
      secure->set_verify_mode(asio::ssl::verify_peer);
      secure->set_verify_callback(asio::ssl::host_name_verification(host));
      lowest().expires_after(config.timeout);
      ec = runOp(
          [&](auto handler) { secure->async_handshake(asio::ssl::stream_base::client, handler); });
      if (ec) {
        close();
        std::string why = ec.message();
        if (why.find("certificate verify failed") != std::string::npos) {
          why +=
              " (the server's certificate is not signed by a CA this client trusts, or does "
              "not name '" +
              host + "')";
        }
        return unavailable("TLS handshake with " + address + " failed: " + why + "; " + hint());
      }
    }
    return core::Status::ok();
  }

  // One request and its response, on the open connection or a new one. `got_response` says
  // whether any byte of the response arrived (so a retry cannot repeat a request the server
  // answered).
  // `sent` says whether the request may have reached the server (not when connecting failed).
  core::Result<http::response<http::string_body>> roundTrip(
      const http::request<http::string_body>& req, bool& got_response, bool& sent) {
    got_response = false;
    sent = false;
    if (!connected()) {
      TESSERA_RETURN_IF_ERROR(connect());
    }
    sent = true;
    lowest().expires_after(config.timeout);
    beast::error_code ec = runOp([&](auto handler) {
      if (secure) {
        http::async_write(*secure, req, handler);
      } else {
        http::async_write(*plain, req, handler);
      }
    });
    if (ec) {
      close();
      return unavailable("cannot send the request to " + address + ": " + ec.message() + "; " +
                         hint());
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(kMaxResponseBytes);
    lowest().expires_after(config.timeout);
    ec = runOp([&](auto handler) {
      if (secure) {
        http::async_read(*secure, buffer, parser, handler);
      } else {
        http::async_read(*plain, buffer, parser, handler);
      }
    });
    got_response = parser.got_some();
    if (ec) {
      close();
      const std::string why =
          ec == beast::error::timeout ? "no answer within the timeout" : ec.message();
      return unavailable("no response from " + address + ": " + why + "; " + hint());
    }
    http::response<http::string_body> resp = parser.release();
    if (!resp.keep_alive()) {
      close();
    }
    return resp;
  }
};

ApiClient::ApiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiClient::~ApiClient() { impl_->close(); }

const std::string& ApiClient::address() const { return impl_->address; }

const std::string& ApiClient::chrootTenant() const { return impl_->chroot_tenant; }

std::string ApiClient::lastHeader(std::string_view name) const {
  const auto it = impl_->last_headers.find(beast::string_view(name.data(), name.size()));
  return it == impl_->last_headers.end() ? std::string() : std::string(it->value());
}

core::Result<std::unique_ptr<ApiClient>> ApiClient::create(ClientConfig config) {
  auto impl = std::make_unique<Impl>();
  // Several servers (replicas): "https://a:8200,https://b:8200"; the first is tried first.
  size_t begin = 0;
  while (begin <= config.address.size()) {
    size_t end = config.address.find(',', begin);
    if (end == std::string::npos) {
      end = config.address.size();
    }
    std::string one = config.address.substr(begin, end - begin);
    one.erase(0, one.find_first_not_of(" \t"));
    one.erase(one.find_last_not_of(" \t") + 1);
    if (!one.empty() || impl->endpoints.empty()) {
      TESSERA_ASSIGN_OR_RETURN(Endpoint e, parseEndpoint(one));
      impl->endpoints.push_back(std::move(e));
    }
    begin = end + 1;
  }
  impl->use(0);
  const bool any_tls = std::any_of(impl->endpoints.begin(), impl->endpoints.end(),
                                   [](const Endpoint& e) { return e.tls; });
  if (any_tls) {
    beast::error_code ec;
    if (config.ca_cert_file.empty()) {
      impl->ssl_ctx.set_default_verify_paths(ec);
    } else {
      std::error_code fec;
      if (!std::filesystem::is_regular_file(config.ca_cert_file, fec)) {
        return core::invalidArgument("CA certificate '" + config.ca_cert_file +
                                     "' (TESSERA_CACERT or --ca-cert) is not a readable file");
      }
      impl->ssl_ctx.load_verify_file(config.ca_cert_file, ec);
    }
    if (ec) {
      return core::invalidArgument("cannot load the CA certificate" +
                                   (config.ca_cert_file.empty()
                                        ? std::string("s of the system")
                                        : " '" + config.ca_cert_file + "'") +
                                   ": " + ec.message());
    }
  }
  if (config.client_cert_file.empty() != config.client_key_file.empty()) {
    return core::invalidArgument(
        "a client certificate needs its key and a key its certificate: set both "
        "TESSERA_CLIENT_CERT and TESSERA_CLIENT_KEY (or --client-cert and --client-key)");
  }
  if (!config.client_cert_file.empty()) {
    // Offered to listeners that require a client certificate (mTLS); others ignore it.
    for (const auto& [file, what] : {std::pair{config.client_cert_file, "client certificate"},
                                     std::pair{config.client_key_file, "client key"}}) {
      std::error_code fec;
      if (!std::filesystem::is_regular_file(file, fec)) {
        return core::invalidArgument(std::string(what) + " '" + file + "' (" +
                                     (std::string(what) == "client key"
                                          ? "TESSERA_CLIENT_KEY or --client-key"
                                          : "TESSERA_CLIENT_CERT or --client-cert") +
                                     ") is not a readable file");
      }
    }
    beast::error_code ec;
    impl->ssl_ctx.use_certificate_chain_file(config.client_cert_file, ec);
    if (ec) {
      return core::invalidArgument("cannot load the client certificate '" +
                                   config.client_cert_file + "': " + ec.message());
    }
    impl->ssl_ctx.use_private_key_file(config.client_key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return core::invalidArgument("cannot load the client key '" + config.client_key_file +
                                   "' (is it the key of '" + config.client_cert_file +
                                   "'?): " + ec.message());
    }
    if (SSL_CTX_check_private_key(impl->ssl_ctx.native_handle()) != 1) {
      return core::invalidArgument("the client key '" + config.client_key_file +
                                   "' does not belong to the certificate '" +
                                   config.client_cert_file + "'");
    }
  }
  impl->config = std::move(config);
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));
}

core::Result<json> ApiClient::call(std::string_view method, const std::string& target,
                                   const json& body) {
  Impl& im = *impl_;
  http::request<http::string_body> req;
  req.method_string(beast::string_view(method.data(), method.size()));
  req.target(target);
  req.version(11);
  req.set(http::field::host, im.host.find(':') != std::string::npos ? "[" + im.host + "]:" + im.port
                                                                    : im.host + ":" + im.port);
  req.set(http::field::user_agent, "tessera-cli/0.1.0");
  req.set(http::field::accept, "application/json");
  if (!im.config.token.empty()) {
    req.set("X-Tessera-Token", im.config.token);
  }
  if (!body.is_null()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
  }
  req.keep_alive(true);
  req.prepare_payload();

  // A read may be sent again anywhere; a change too, with its Idempotency-Key (the server
  // applies one key once), or, without one, only where it cannot have been received.
  const bool read = method == "GET" || method == "LIST";
  const std::string key = read ? std::string() : idempotencyKey();
  if (!key.empty()) {
    req.set("Idempotency-Key", key);
  }
  const bool resend = read || !key.empty();
  // The time for retries counts from the first failure: a long poll the server held for a
  // while, then lost with its connection (a leader restarting), is still tried again.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  auto backoff = std::chrono::milliseconds(50);
  size_t failed_in_round = 0;               // Servers that failed since the last pause.
  int redirects = 0;                        // Followed since the last failure.
  bool replicas = im.endpoints.size() > 1;  // Several servers: one out of reach is a failover.
  std::string problem;                      // The last reason to try elsewhere.
  // The next server of the list; after a whole round failed, a pause first (50 ms, doubling up
  // to 200 ms), unless the time for retries is spent (false).
  auto next = [&](std::string why) {
    problem = std::move(why);
    redirects = 0;
    const auto now = std::chrono::steady_clock::now();
    if (!deadline) {
      deadline = now + im.config.retry_for;
    }
    if (++failed_in_round >= im.endpoints.size()) {
      failed_in_round = 0;
      if (now >= *deadline) {
        return false;
      }
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(backoff, *deadline - now));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
    }
    im.use((im.current + 1) % im.endpoints.size());
    return true;
  };
  core::Result<http::response<http::string_body>> resp = unavailable("no server");
  im.last_headers.clear();
  while (true) {
    bool sent = false;
    resp = [&]() -> core::Result<http::response<http::string_body>> {
      const bool reused = im.connected();
      bool got_response = false;
      auto first = im.roundTrip(req, got_response, sent);
      if (first.isOk() || !reused || got_response) {
        return first;
      }
      // The server closed the idle keep-alive connection without reading this request.
      return im.roundTrip(req, got_response, sent);
    }();
    if (!resp.isOk()) {
      // That server is gone, or went while it had the request.
      if ((!sent || resend) && (replicas || failed_in_round + 1 < im.endpoints.size()) &&
          next(resp.status().message())) {
        continue;
      }
      if (sent && !read) {
        return unavailable(resp.status().message() +
                           " (the change may or may not have been applied)");
      }
      return resp.status();
    }
    im.last_headers = resp->base();
    const unsigned code = resp->result_int();
    const bool standby = !(*resp)["X-Tessera-Standby"].empty();
    replicas = replicas || standby;
    const std::string location((*resp)[http::field::location]);
    if (code == 307 || code == 308) {
      // A standby replica names the leader: the same request goes there (never a path
      // elsewhere: only the server part of Location is taken).
      const size_t scheme = location.find("://");
      const size_t path =
          scheme == std::string::npos ? std::string::npos : location.find('/', scheme + 3);
      auto leader = parseEndpoint(location.substr(0, path));
      if (!leader.isOk() || leader->tls != im.tls) {
        return unavailable("server " + im.address + " redirected to '" + location.substr(0, 200) +
                           "', which is not a server address of the same kind");
      }
      const bool self = leader->host == im.host && leader->port == im.port;
      if (self || redirects >= static_cast<int>(im.endpoints.size()) + 1) {
        // To itself, or round in a loop: no replica leads yet.
        if (next("no leader yet: " + im.address + " redirects " +
                 (self ? "to itself" : "in a loop"))) {
          continue;
        }
        break;
      }
      ++redirects;
      auto known = std::find_if(im.endpoints.begin(), im.endpoints.end(), [&](const Endpoint& e) {
        return e.host == leader->host && e.port == leader->port;
      });
      if (known == im.endpoints.end()) {
        im.endpoints.push_back(*leader);
        known = im.endpoints.end() - 1;
      }
      im.use(static_cast<size_t>(known - im.endpoints.begin()));
      continue;
    }
    // A standby that knows no leader yet, or an answer whose change may or may not have been
    // applied (sent again under its key): another try, elsewhere or later.
    const bool unknown_outcome =
        resend && !key.empty() && code == 503 && (*resp)["X-Tessera-Applied"] == "unknown";
    if (code == 503 && (standby || unknown_outcome) &&
        next(errorMessage(code, json::parse(resp->body(), nullptr, false), resp->body(),
                          std::string(resp->reason())))) {
      continue;
    }
    break;
  }
  if (resp.isOk() && resp->result_int() >= 300 && resp->result_int() < 400) {
    const int64_t ms = im.config.retry_for.count();
    return unavailable(
        "no leader answered " + std::string(method) + " " + target + " within " +
        (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") + " (" +
        problem + "); try again shortly");
  }
  const unsigned status = resp->result_int();
  im.chroot_tenant = std::string((*resp)["X-Tessera-Chroot"]);
  const std::string& raw = resp->body();
  json parsed = json::object();
  if (!raw.empty()) {
    parsed = json::parse(raw, nullptr, /*allow_exceptions=*/false);
  }
  if (status >= 400) {
    return core::Status(codeForHttp(status),
                        errorMessage(status, parsed, raw, std::string(resp->reason())));
  }
  if (parsed.is_discarded()) {
    return unavailable("the answer from " + im.address + " to " + std::string(method) + " " +
                       target + " is not JSON (status " + std::to_string(status) + ")");
  }
  return parsed;
}

std::string pathSegment(std::string_view name) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '-' || c == '_' || c == '.';
    if (plain) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

}  // namespace tessera::api
