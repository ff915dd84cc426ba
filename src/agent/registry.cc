#include "agent/registry.h"

#include <openssl/evp.h>
#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

namespace tessera::agent {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;

constexpr size_t kMaxSmallBody = size_t{16} << 20;  // Manifests, token answers, errors.
constexpr int kMaxRedirects = 5;

constexpr const char* kManifestTypes =
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, "
    "application/vnd.docker.distribution.manifest.v2+json";

std::string base64(std::string_view in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

struct Url {
  bool tls = true;
  std::string host;  // Without brackets.
  std::string port;
  std::string target = "/";  // Path and query.

  std::string origin() const {
    const bool v6 = host.find(':') != std::string::npos;
    return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" + port;
  }
};

core::Result<Url> parseUrl(const std::string& text) {
  Url u;
  std::string rest;
  if (text.starts_with("https://")) {
    rest = text.substr(8);
  } else if (text.starts_with("http://")) {
    u.tls = false;
    rest = text.substr(7);
  } else {
    return core::invalidArgument("'" + text.substr(0, 200) + "' is not an http(s):// address");
  }
  const size_t slash = rest.find_first_of("/?");
  std::string authority = rest.substr(0, slash);
  if (slash != std::string::npos) {
    u.target = rest.substr(slash);
    if (u.target.front() == '?') {
      u.target = "/" + u.target;
    }
  }
  if (authority.find('@') != std::string::npos || authority.empty()) {
    return core::invalidArgument("'" + text.substr(0, 200) + "' has no plain host");
  }
  if (authority.front() == '[') {
    const size_t close = authority.find(']');
    if (close == std::string::npos) {
      return core::invalidArgument("'" + text.substr(0, 200) + "': unclosed '['");
    }
    u.host = authority.substr(1, close - 1);
    authority = authority.substr(close + 1);
    u.port = authority.starts_with(":") ? authority.substr(1) : "";
  } else {
    const size_t colon = authority.rfind(':');
    u.host = authority.substr(0, colon);
    u.port = colon == std::string::npos ? "" : authority.substr(colon + 1);
  }
  if (u.port.empty()) {
    u.port = u.tls ? "443" : "80";
  }
  if (u.host.empty() || u.port.find_first_not_of("0123456789") != std::string::npos) {
    return core::invalidArgument("'" + text.substr(0, 200) + "' has no valid host and port");
  }
  return u;
}

// A URL relative to `base` (a Location header): absolute, or a path on the same origin.
core::Result<Url> resolveUrl(const Url& base, const std::string& location) {
  if (location.starts_with("http://") || location.starts_with("https://")) {
    return parseUrl(location);
  }
  if (!location.starts_with("/")) {
    return core::invalidArgument("a redirect to '" + location.substr(0, 200) + "'");
  }
  Url u = base;
  u.target = location;
  return u;
}

std::string percentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (std::isalnum(b) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

// The parameters of a WWW-Authenticate challenge: `Bearer realm="...",service="..."`.
std::map<std::string, std::string> challengeParams(std::string_view header, std::string* scheme) {
  std::map<std::string, std::string> out;
  size_t i = header.find(' ');
  *scheme = std::string(header.substr(0, i));
  for (char& c : *scheme) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  while (i != std::string_view::npos && i < header.size()) {
    while (i < header.size() && (header[i] == ' ' || header[i] == ',')) {
      ++i;
    }
    const size_t eq = header.find('=', i);
    if (eq == std::string_view::npos) {
      break;
    }
    std::string key(header.substr(i, eq - i));
    for (char& c : key) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    std::string value;
    i = eq + 1;
    if (i < header.size() && header[i] == '"') {
      ++i;
      while (i < header.size() && header[i] != '"') {
        if (header[i] == '\\' && i + 1 < header.size()) {
          ++i;
        }
        value += header[i++];
      }
      ++i;
    } else {
      const size_t end = header.find(',', i);
      value = std::string(header.substr(i, end == std::string_view::npos ? end : end - i));
      i = end;
    }
    out[key] = value;
  }
  return out;
}

// The registry's error codes from its JSON body: "MANIFEST_UNKNOWN: manifest unknown".
std::string registryErrors(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  std::string out;
  if (j.is_object() && j.contains("errors") && j["errors"].is_array()) {
    for (const json& e : j["errors"]) {
      if (!e.is_object()) {
        continue;
      }
      std::string one = e.value("code", "");
      if (e.contains("message") && e["message"].is_string()) {
        one += (one.empty() ? "" : ": ") + e["message"].get<std::string>();
      }
      if (!one.empty()) {
        out += (out.empty() ? "" : "; ") + one.substr(0, 200);
      }
    }
  }
  return out;
}

struct Response {
  int status = 0;
  http::fields headers;
  std::string body;  // Unless streamed to a sink (200 only).
};

}  // namespace

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
  EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
}

void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_.get(), md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

struct RegistrySession::Impl {
  RegistryOptions options;
  model::ImageRef ref;
  RegistryCredentials credentials;
  std::string ca_file;
  struct Endpoint {
    Url base;
    bool mirror = false;
    std::string authorization;  // The header that last worked (or "").
  };
  std::vector<Endpoint> endpoints;
  int chosen = -1;  // The endpoint that served the manifest.

  asio::io_context io;

  std::string where() const { return "image " + ref.reference; }

  template <typename Start>
  beast::error_code runOp(Start start) {
    beast::error_code result = asio::error::would_block;
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }

  // One request on a new connection. A 200's body goes to `sink` when one is given.
  core::Result<Response> once(const Url& url, const std::string& authorization,
                              const std::string& accept,
                              const std::function<core::Status(const void*, size_t)>* sink) {
    const std::string at = url.origin();
    auto unreachable = [&](const std::string& why) {
      return core::unavailable(where() + ": cannot reach the registry at " + at + ": " + why);
    };
    tcp::resolver resolver(io);
    beast::error_code ec;
    const auto endpoints_found = resolver.resolve(url.host, url.port, ec);
    if (ec) {
      return unreachable("cannot resolve '" + url.host + "': " + ec.message());
    }
    asio::ssl::context ctx(asio::ssl::context::tls_client);
    std::optional<beast::tcp_stream> plain;
    std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
    if (url.tls) {
      if (ca_file.empty()) {
        ctx.set_default_verify_paths(ec);
      } else {
        ctx.load_verify_file(ca_file, ec);
        if (ec) {
          return core::failedPrecondition(where() + ": cannot load the registry's CA file " +
                                          ca_file + ": " + ec.message());
        }
      }
      secure.emplace(io, ctx);
    } else {
      plain.emplace(io);
    }
    beast::tcp_stream& lowest = plain ? *plain : beast::get_lowest_layer(*secure);
    lowest.expires_after(options.timeout);
    ec = runOp([&](auto handler) { lowest.async_connect(endpoints_found, handler); });
    if (ec) {
      return unreachable(ec == beast::error::timeout ? "no answer within the timeout"
                                                     : ec.message());
    }
    if (secure) {
      boost::system::error_code ip_ec;
      (void)asio::ip::make_address(url.host, ip_ec);
      if (ip_ec) {
        SSL_set_tlsext_host_name(secure->native_handle(), url.host.c_str());
      }
      secure->set_verify_mode(asio::ssl::verify_peer);
      secure->set_verify_callback(asio::ssl::host_name_verification(url.host));
      lowest.expires_after(options.timeout);
      ec = runOp(
          [&](auto handler) { secure->async_handshake(asio::ssl::stream_base::client, handler); });
      if (ec) {
        std::string why = "TLS handshake failed: " + ec.message();
        if (why.find("certificate verify failed") != std::string::npos) {
          why +=
              " (its certificate is not signed by a CA this agent trusts for it: set ca_file "
              "in the agent's registry \"" +
              ref.registry + "\" block)";
        }
        return unreachable(why);
      }
    }
    http::request<http::empty_body> req(http::verb::get, url.target, 11);
    const bool default_port = url.port == (url.tls ? "443" : "80");
    req.set(http::field::host, default_port ? url.host : url.host + ":" + url.port);
    req.set(http::field::user_agent, "tessera-agent");
    if (!accept.empty()) {
      req.set(http::field::accept, accept);
    }
    if (!authorization.empty()) {
      req.set(http::field::authorization, authorization);
    }
    req.keep_alive(false);
    lowest.expires_after(options.timeout);
    ec = runOp([&](auto handler) {
      if (secure) {
        http::async_write(*secure, req, handler);
      } else {
        http::async_write(*plain, req, handler);
      }
    });
    if (ec) {
      return unreachable("cannot send: " + ec.message());
    }
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    // Not boost::none: Boost 1.74 compares a length with it as "greater", refusing every body.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    lowest.expires_after(options.timeout);
    ec = runOp([&](auto handler) {
      if (secure) {
        http::async_read_header(*secure, buffer, parser, handler);
      } else {
        http::async_read_header(*plain, buffer, parser, handler);
      }
    });
    if (ec) {
      return unreachable(ec == beast::error::timeout ? "no answer within the timeout"
                                                     : ec.message());
    }
    Response out;
    out.status = static_cast<int>(parser.get().result_int());
    out.headers = parser.get().base();
    const bool stream = sink != nullptr && out.status == 200;
    std::vector<char> chunk(size_t{1} << 20);
    core::Status st;
    while (!parser.is_done()) {
      parser.get().body().data = chunk.data();
      parser.get().body().size = chunk.size();
      lowest.expires_after(options.timeout);
      ec = runOp([&](auto handler) {
        if (secure) {
          http::async_read_some(*secure, buffer, parser, handler);
        } else {
          http::async_read_some(*plain, buffer, parser, handler);
        }
      });
      if (ec == http::error::need_buffer) {
        ec = {};
      }
      if (ec) {
        return unreachable("the answer broke off: " +
                           (ec == beast::error::timeout ? std::string("no data within the timeout")
                                                        : ec.message()));
      }
      const size_t got = chunk.size() - parser.get().body().size;
      if (stream) {
        TESSERA_RETURN_IF_ERROR(sink->operator()(chunk.data(), got));
      } else {
        out.body.append(chunk.data(), got);
        if (out.body.size() > kMaxSmallBody) {
          return core::failedPrecondition(where() + ": the registry's answer from " + at +
                                          " is over 16 MiB");
        }
      }
    }
    if (secure) {
      lowest.expires_after(std::chrono::seconds(1));
      (void)runOp([&](auto handler) { secure->async_shutdown(handler); });
    }
    return out;
  }

  // A request with redirects followed (a blob store's, say: the Authorization header goes only
  // to the registry's own origin).
  core::Result<Response> get(const Url& url, const std::string& authorization,
                             const std::string& accept,
                             const std::function<core::Status(const void*, size_t)>* sink) {
    Url at = url;
    for (int hop = 0; hop <= kMaxRedirects; ++hop) {
      const bool same_origin = at.origin() == url.origin();
      TESSERA_ASSIGN_OR_RETURN(Response r,
                               once(at, same_origin ? authorization : "", accept, sink));
      if (r.status < 300 || r.status >= 400 || r.status == 304) {
        return r;
      }
      const auto loc = r.headers.find(http::field::location);
      if (loc == r.headers.end()) {
        return r;
      }
      auto next = resolveUrl(at, std::string(loc->value()));
      if (!next.isOk()) {
        return core::unavailable(where() + ": the registry answered with " +
                                 next.status().message());
      }
      at = *next;
    }
    return core::unavailable(where() + ": more than " + std::to_string(kMaxRedirects) +
                             " redirects");
  }

  // The Authorization header that answers a 401's challenge, or why there is none.
  core::Result<std::string> answerChallenge(const Endpoint& e, const Response& r) {
    const auto h = r.headers.find(http::field::www_authenticate);
    const bool creds = !e.mirror && !credentials.empty();
    const std::string who = e.mirror ? "the mirror " + e.base.origin() : "registry " + ref.registry;
    if (h == r.headers.end()) {
      return core::permissionDenied(where() + ": unauthorized: " + who +
                                    " refused the pull and names no way to authenticate");
    }
    std::string scheme;
    const auto params =
        challengeParams(std::string_view(h->value().data(), h->value().size()), &scheme);
    if (scheme == "basic") {
      if (!creds) {
        return core::permissionDenied(
            where() + ": unauthorized: " + who +
            " needs credentials, and the workload has no pull secret for it (--pull-secret)");
      }
      return "Basic " + base64(credentials.username + ":" + credentials.password);
    }
    if (scheme != "bearer") {
      return core::permissionDenied(where() + ": unauthorized: " + who + " asks for '" + scheme +
                                    "' authentication, which this agent does not speak");
    }
    const auto realm = params.find("realm");
    if (realm == params.end()) {
      return core::permissionDenied(where() + ": unauthorized: " + who +
                                    "'s Bearer challenge names no realm");
    }
    auto token_url = parseUrl(realm->second);
    if (!token_url.isOk()) {
      return core::unavailable(where() + ": the token realm " + token_url.status().message());
    }
    std::string query;
    if (auto s = params.find("service"); s != params.end()) {
      query += "service=" + percentEncode(s->second);
    }
    query += std::string(query.empty() ? "" : "&") +
             "scope=" + percentEncode("repository:" + ref.repository + ":pull");
    token_url->target += (token_url->target.find('?') == std::string::npos ? "?" : "&") + query;
    const std::string basic =
        creds ? "Basic " + base64(credentials.username + ":" + credentials.password) : "";
    TESSERA_ASSIGN_OR_RETURN(Response t, get(*token_url, basic, "application/json", nullptr));
    if (t.status == 401 || t.status == 403) {
      return core::permissionDenied(
          where() + ": unauthorized: the token service " + token_url->origin() + " refused " +
          (creds ? "the pull secret's credentials" : "an anonymous pull (no pull secret)"));
    }
    if (t.status != 200) {
      return core::unavailable(where() + ": the token service " + token_url->origin() +
                               " answered " + std::to_string(t.status));
    }
    const json j = json::parse(t.body, nullptr, false);
    std::string token;
    for (const char* key : {"token", "access_token"}) {
      if (token.empty() && j.is_object() && j.contains(key) && j[key].is_string()) {
        token = j[key].get<std::string>();
      }
    }
    if (token.empty()) {
      return core::unavailable(where() + ": the token service " + token_url->origin() +
                               " gave no token");
    }
    return "Bearer " + token;
  }

  // GET <endpoint>/v2/<repository>/<kind>/<reference>, authenticating when challenged.
  core::Result<Response> fetch(Endpoint& e, const std::string& kind, const std::string& reference,
                               const std::string& accept,
                               const std::function<core::Status(const void*, size_t)>* sink) {
    Url url = e.base;
    url.target = "/v2/" + ref.repository + "/" + kind + "/" + reference;
    TESSERA_ASSIGN_OR_RETURN(Response r, get(url, e.authorization, accept, sink));
    if (r.status == 401) {
      TESSERA_ASSIGN_OR_RETURN(e.authorization, answerChallenge(e, r));
      TESSERA_ASSIGN_OR_RETURN(r, get(url, e.authorization, accept, sink));
      if (r.status == 401) {
        const std::string errors = registryErrors(r.body);
        const bool creds = !e.mirror && !credentials.empty();
        return core::permissionDenied(
            where() + ": unauthorized: " +
            (e.mirror ? "the mirror " + e.base.origin() : "registry " + ref.registry) +
            (creds ? " refused the pull secret's credentials"
                   : " needs credentials, and the workload has no pull secret for it "
                     "(--pull-secret)") +
            (errors.empty() ? "" : " (" + errors + ")"));
      }
    }
    return r;
  }

  core::Status statusError(const Endpoint& e, const Response& r, const std::string& what) {
    const std::string errors = registryErrors(r.body);
    const std::string who = e.mirror ? "the mirror " + e.base.origin() : "registry " + ref.registry;
    const std::string detail = errors.empty() ? "" : " (" + errors + ")";
    if (r.status == 404) {
      return core::notFound(where() + ": not found: " + who + " has no " + what + detail);
    }
    if (r.status == 403) {
      return core::permissionDenied(where() + ": unauthorized: " + who + " denies access to " +
                                    what + detail);
    }
    return core::unavailable(where() + ": " + who + " answered " + std::to_string(r.status) +
                             " for " + what + detail);
  }
};

RegistrySession::RegistrySession(const RegistryOptions& options, model::ImageRef ref,
                                 RegistryCredentials credentials)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->ref = std::move(ref);
  impl_->credentials = std::move(credentials);
  const auto cfg = options.hosts.find(impl_->ref.registry);
  if (cfg != options.hosts.end()) {
    impl_->ca_file = cfg->second.ca_file;
    for (const std::string& m : cfg->second.mirrors) {
      if (auto u = parseUrl(m); u.isOk()) {  // Checked when the config was read.
        impl_->endpoints.push_back({.base = *u, .mirror = true, .authorization = ""});
      }
    }
  }
  // Docker Hub's API is at registry-1.docker.io.
  const std::string host =
      impl_->ref.registry == "docker.io" ? "registry-1.docker.io" : impl_->ref.registry;
  if (auto u = parseUrl("https://" + host); u.isOk()) {
    impl_->endpoints.push_back({.base = *u, .mirror = false, .authorization = ""});
  }
}

RegistrySession::~RegistrySession() {
  OPENSSL_cleanse(impl_->credentials.password.data(), impl_->credentials.password.size());
}

std::string RegistrySession::where() const { return impl_->where(); }

core::Result<RegistryManifest> RegistrySession::manifest(const std::string& reference) {
  core::Status last = core::unavailable(impl_->where() + ": no registry to pull from");
  const size_t first = impl_->chosen >= 0 ? static_cast<size_t>(impl_->chosen) : 0;
  for (size_t i = first; i < impl_->endpoints.size(); ++i) {
    Impl::Endpoint& e = impl_->endpoints[i];
    auto r = impl_->fetch(e, "manifests", reference, kManifestTypes, nullptr);
    if (r.isOk() && r->status == 200) {
      RegistryManifest m;
      m.body = std::move(r->body);
      Sha256 digest;
      digest.update(m.body.data(), m.body.size());
      m.digest = "sha256:" + digest.hex();
      if (reference.starts_with("sha256:") && m.digest != reference) {
        return core::invalidArgument(impl_->where() + ": the manifest served for " + reference +
                                     " does not match that digest");
      }
      const auto ct = r->headers.find(http::field::content_type);
      m.media_type = ct == r->headers.end() ? "" : std::string(ct->value());
      m.media_type = m.media_type.substr(0, m.media_type.find(';'));
      const json j = json::parse(m.body, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return core::invalidArgument(impl_->where() + ": the manifest for " + reference +
                                     " is not a JSON object");
      }
      if (j.contains("mediaType") && j["mediaType"].is_string()) {
        m.media_type = j["mediaType"].get<std::string>();
      }
      impl_->chosen = static_cast<int>(i);
      return m;
    }
    last = r.isOk() ? impl_->statusError(e, *r, "manifest " + reference) : r.status();
    if (!e.mirror) {
      break;
    }
    // A mirror that fails in any way leaves the pull to the next one, then to the registry.
  }
  return last;
}

core::Status RegistrySession::blob(
    const std::string& digest, const std::function<core::Status(const void*, size_t)>& consume) {
  if (impl_->chosen < 0) {
    return core::failedPrecondition(impl_->where() + ": a blob before its manifest");
  }
  Impl::Endpoint& e = impl_->endpoints[static_cast<size_t>(impl_->chosen)];
  TESSERA_ASSIGN_OR_RETURN(Response r, impl_->fetch(e, "blobs", digest, "", &consume));
  if (r.status != 200) {
    return impl_->statusError(e, r, "blob " + digest);
  }
  return core::Status::ok();
}

}  // namespace tessera::agent
