#include "secrets/aws_sts.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <memory>

#include "secrets/database.h"

namespace tessera::secrets {

namespace {

using nlohmann::json;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;

constexpr size_t kMaxAnswerBytes = 1 << 20;

std::string configKey(const std::string& tenant) { return "/secrets/" + tenant + "/aws/config"; }
std::string rolePrefix(const std::string& tenant) { return "/secrets/" + tenant + "/aws/roles/"; }

core::Status checkTenant(const std::string& tenant) { return checkEngineTenant(tenant, "aws"); }

std::string urlEncode(std::string_view s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string xmlDecode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    static const std::pair<std::string_view, char> kEntities[] = {
        {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
    bool done = false;
    for (const auto& [name, ch] : kEntities) {
      if (s.substr(i, name.size()) == name) {
        out += ch;
        i += name.size() - 1;
        done = true;
        break;
      }
    }
    if (!done) {
      out += '&';
    }
  }
  return out;
}

// One HTTP exchange, run on `io` with async operations so the deadline holds for every step.
template <class Stream>
void exchange(Stream& stream, const StsEndpoint& ep, const std::string& form,
              std::shared_ptr<http::response<http::string_body>> resp,
              std::shared_ptr<beast::error_code> result) {
  auto req = std::make_shared<http::request<http::string_body>>(http::verb::post, ep.target, 11);
  req->set(http::field::host, ep.host);
  req->set(http::field::content_type, "application/x-www-form-urlencoded; charset=utf-8");
  req->set(http::field::accept, "text/xml");
  req->set(http::field::user_agent, "tessera");
  req->body() = form;
  req->prepare_payload();
  http::async_write(stream, *req, [&stream, req, resp, result](beast::error_code ec, size_t) {
    if (ec) {
      *result = ec;
      return;
    }
    auto buf = std::make_shared<beast::flat_buffer>();
    auto parser = std::make_shared<http::response_parser<http::string_body>>();
    parser->body_limit(kMaxAnswerBytes);
    http::async_read(stream, *buf, *parser,
                     [buf, parser, resp, result](beast::error_code e, size_t) {
                       *result = e;
                       if (!e) {
                         *resp = parser->release();
                       }
                     });
  });
}

}  // namespace

std::optional<std::string> xmlTagText(std::string_view xml, std::string_view tag) {
  const std::string open = "<" + std::string(tag) + ">";
  const std::string close = "</" + std::string(tag) + ">";
  const size_t start = xml.find(open);
  if (start == std::string_view::npos) {
    return std::nullopt;
  }
  const size_t from = start + open.size();
  const size_t end = xml.find(close, from);
  if (end == std::string_view::npos) {
    return std::nullopt;
  }
  return xmlDecode(xml.substr(from, end - from));
}

core::Result<StsCredentials> parseStsResponse(std::string_view xml) {
  if (xml.find("<ErrorResponse") != std::string_view::npos ||
      xml.find("<Error>") != std::string_view::npos) {
    const auto code = xmlTagText(xml, "Code");
    const auto message = xmlTagText(xml, "Message");
    return core::failedPrecondition("STS refused: " + code.value_or("(no code)").substr(0, 128) +
                                    ": " + message.value_or("(no message)").substr(0, 1024));
  }
  const auto creds = xmlTagText(xml, "Credentials");
  if (!creds) {
    return core::internalError(
        "STS answered no <Credentials> (not an AssumeRoleWithWebIdentityResponse, or cut short)");
  }
  StsCredentials out;
  const std::pair<const char*, std::string*> fields[] = {
      {"AccessKeyId", &out.access_key_id},
      {"SecretAccessKey", &out.secret_access_key},
      {"SessionToken", &out.session_token},
      {"Expiration", &out.expiration}};
  for (const auto& [tag, field] : fields) {
    auto v = xmlTagText(*creds, tag);
    if (!v || v->empty()) {
      return core::internalError(std::string("STS answered credentials without <") + tag + ">");
    }
    *field = std::move(*v);
  }
  return out;
}

core::Result<int64_t> clampStsDuration(int64_t role_ttl_s, int64_t role_max_ttl_s,
                                       std::optional<int64_t> grant_left_s,
                                       std::optional<int64_t> token_left_s) {
  int64_t d = role_ttl_s > 0 ? role_ttl_s : kStsDefaultTtlSeconds;
  std::string why = "the role's ttl";
  auto lower = [&](int64_t v, const char* what) {
    if (v < d) {
      d = v;
      why = what;
    }
  };
  if (role_max_ttl_s > 0) {
    lower(role_max_ttl_s, "the role's max_ttl");
  }
  if (grant_left_s) {
    lower(*grant_left_s, "the grant's remaining window");
  }
  if (token_left_s) {
    lower(*token_left_s, "the token's remaining TTL");
  }
  if (d < kStsMinDurationSeconds) {
    return core::invalidArgument("aws: " + why + " (" + std::to_string(std::max<int64_t>(d, 0)) +
                                 " s) is shorter than STS's 15-minute minimum session (900 s); "
                                 "no session is started rather than one that outlives it");
  }
  return std::min(d, kStsMaxDurationSeconds);
}

core::Result<StsEndpoint> parseStsEndpoint(std::string_view url) {
  const std::string bad = "aws: \"sts_endpoint\" '" + std::string(url.substr(0, 256)) + "' ";
  StsEndpoint ep;
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    ep.tls = false;
    rest = url.substr(7);
  } else {
    return core::invalidArgument(bad + "must be an https:// URL");
  }
  if (url.size() > 2048 || url.find_first_of("?#@ \t\r\n") != std::string_view::npos) {
    return core::invalidArgument(bad + "must have no user, query, fragment or spaces");
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  ep.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  std::string_view host = authority;
  std::string_view port;
  if (!authority.empty() && authority[0] == '[') {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return core::invalidArgument(bad + "has a bad host");
    }
    host = authority.substr(1, close - 1);
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') {
        return core::invalidArgument(bad + "has a bad host");
      }
      port = after.substr(1);
    }
  } else if (const size_t colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (host.empty()) {
    return core::invalidArgument(bad + "has no host");
  }
  if (!port.empty()) {
    int n = 0;
    auto [p, ec] = std::from_chars(port.data(), port.data() + port.size(), n);
    if (ec != std::errc() || p != port.data() + port.size() || n < 1 || n > 65535) {
      return core::invalidArgument(bad + "has a bad port");
    }
  }
  ep.host = std::string(host);
  ep.port = port.empty() ? (ep.tls ? "443" : "80") : std::string(port);
  if (!ep.tls && ep.host != "127.0.0.1" && ep.host != "localhost" && ep.host != "::1") {
    return core::invalidArgument(bad +
                                 "must be https:// (plain http:// only to a loopback address, "
                                 "for tests)");
  }
  return ep;
}

std::string assumeRoleWithWebIdentityForm(const std::string& role_arn,
                                          const std::string& session_name,
                                          const std::string& web_identity_token,
                                          int64_t duration_s) {
  return "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=" + urlEncode(role_arn) +
         "&RoleSessionName=" + urlEncode(session_name) +
         "&WebIdentityToken=" + urlEncode(web_identity_token) +
         "&DurationSeconds=" + std::to_string(duration_s);
}

std::string stsSessionName(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '+' || c == '=' || c == ',' || c == '.' || c == '@' ||
                    c == '-';
    out += ok ? c : '-';
  }
  while (out.size() < 2) {
    out += '-';
  }
  return out;
}

core::Result<StsCredentials> callSts(const StsEndpoint& ep, const std::string& form,
                                     std::chrono::milliseconds timeout) {
  const std::string where = (ep.tls ? "https://" : "http://") + ep.host + ":" + ep.port + ep.target;
  auto fail = [&](const std::string& what) {
    return core::unavailable("aws: STS at " + where + ": " + what);
  };
  asio::io_context io;
  auto resp = std::make_shared<http::response<http::string_body>>();
  auto result = std::make_shared<beast::error_code>(asio::error::timed_out);
  std::string step = "resolve";
  asio::ip::tcp::resolver resolver(io);
  asio::ssl::context ctx(asio::ssl::context::tls_client);
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;
  if (ep.tls) {
    ctx.set_default_verify_paths();
    ctx.set_verify_mode(asio::ssl::verify_peer);
    ctx.set_verify_callback(asio::ssl::host_name_verification(ep.host));
    tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(io, ctx);
    if (SSL_set_tlsext_host_name(tls->native_handle(), ep.host.c_str()) != 1) {
      return fail("cannot set the TLS server name");
    }
  } else {
    plain = std::make_unique<beast::tcp_stream>(io);
  }
  beast::tcp_stream& tcp = ep.tls ? beast::get_lowest_layer(*tls) : *plain;
  tcp.expires_after(timeout);
  resolver.async_resolve(
      ep.host, ep.port,
      [&](beast::error_code ec, const asio::ip::tcp::resolver::results_type& addrs) {
        if (ec) {
          *result = ec;
          return;
        }
        step = "connect";
        tcp.async_connect(addrs, [&](beast::error_code ec2, const asio::ip::tcp::endpoint&) {
          if (ec2) {
            *result = ec2;
            return;
          }
          step = "exchange";
          if (!ep.tls) {
            exchange(*plain, ep, form, resp, result);
            return;
          }
          step = "TLS handshake";
          tls->async_handshake(asio::ssl::stream_base::client, [&](beast::error_code ec3) {
            if (ec3) {
              *result = ec3;
              return;
            }
            step = "exchange";
            exchange(*tls, ep, form, resp, result);
          });
        });
      });
  io.run_for(timeout + std::chrono::seconds(1));
  if (!io.stopped()) {
    io.stop();
    *result = asio::error::timed_out;
  }
  if (*result) {
    const bool timed_out = *result == beast::error::timeout || *result == asio::error::timed_out;
    return fail(step + " failed: " +
                (timed_out ? "no answer within " + std::to_string(timeout.count()) + " ms"
                           : result->message()));
  }
  auto creds = parseStsResponse(resp->body());
  if (!creds.isOk()) {
    return fail(creds.status().message() + " (HTTP " + std::to_string(resp->result_int()) + ")");
  }
  return creds;
}

core::Status AwsEngine::checkRoleName(const std::string& name) {
  const bool ok =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
      });
  if (!ok) {
    return core::invalidArgument("aws: bad role name '" + name.substr(0, 64) +
                                 "' (1 to 64 of a-z, 0-9, '_' and '-')");
  }
  return core::Status::ok();
}

core::Status AwsEngine::putConfig(const std::string& tenant, const json& body) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  if (!body.is_object()) {
    return core::invalidArgument("aws: the config is an object {\"sts_endpoint\", \"region\"}");
  }
  json out = json::object();
  for (const auto& [k, v] : body.items()) {
    if (k != "sts_endpoint" && k != "region") {
      return core::invalidArgument("aws: unknown config field \"" + k.substr(0, 64) + "\"");
    }
    if (!v.is_string()) {
      return core::invalidArgument("aws: \"" + k + "\" must be a string");
    }
    out[k] = v;
  }
  if (!out.contains("sts_endpoint")) {
    return core::invalidArgument("aws: \"sts_endpoint\" is required");
  }
  TESSERA_RETURN_IF_ERROR(parseStsEndpoint(out["sts_endpoint"].get<std::string>()).status());
  if (out.contains("region")) {
    const std::string r = out["region"].get<std::string>();
    if (r.empty() || r.size() > 32 ||
        r.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
      return core::invalidArgument("aws: \"region\" '" + r.substr(0, 32) +
                                   "' is not a region name such as eu-west-1");
    }
  }
  return storeSealed(store_, keys_, tenant, configKey(tenant), out);
}

core::Result<json> AwsEngine::readConfig(const std::string& tenant) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> j,
                           loadSealed(store_, keys_, tenant, configKey(tenant), "aws"));
  if (!j) {
    return core::notFound("aws: not configured; write secrets/aws/config {\"sts_endpoint\"}");
  }
  return *j;
}

core::Status AwsEngine::putRole(const std::string& tenant, const std::string& name,
                                const json& body) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkRoleName(name));
  if (!body.is_object()) {
    return core::invalidArgument("aws: a role is an object {\"role_arn\", \"ttl\", \"max_ttl\"}");
  }
  std::string arn;
  int64_t ttl = kStsDefaultTtlSeconds;
  int64_t max_ttl = 0;
  for (const auto& [k, v] : body.items()) {
    if (k == "role_arn") {
      if (!v.is_string()) {
        return core::invalidArgument("aws: \"role_arn\" must be a string");
      }
      arn = v.get<std::string>();
    } else if (k == "ttl") {
      TESSERA_ASSIGN_OR_RETURN(ttl, parseSeconds(v, k, "aws"));
    } else if (k == "max_ttl") {
      TESSERA_ASSIGN_OR_RETURN(max_ttl, parseSeconds(v, k, "aws"));
    } else {
      return core::invalidArgument("aws: unknown role field \"" + k.substr(0, 64) + "\"");
    }
  }
  if (arn.rfind("arn:", 0) != 0 || arn.size() < 20 || arn.size() > 2048 ||
      arn.find(":role/") == std::string::npos) {
    return core::invalidArgument(
        "aws: \"role_arn\" must be a role's ARN, such as "
        "arn:aws:iam::123456789012:role/NAME");
  }
  if (ttl < kStsMinDurationSeconds || ttl > kStsMaxDurationSeconds) {
    return core::invalidArgument("aws: \"ttl\" must be between 900 s and 43200 s (STS's bounds)");
  }
  if (max_ttl != 0 && (max_ttl < kStsMinDurationSeconds || max_ttl > kStsMaxDurationSeconds)) {
    return core::invalidArgument(
        "aws: \"max_ttl\" must be 0 (none) or between 900 s and 43200 s (STS's bounds)");
  }
  if (max_ttl != 0 && ttl > max_ttl) {
    return core::invalidArgument("aws: \"ttl\" must not exceed \"max_ttl\"");
  }
  return storeSealed(store_, keys_, tenant, rolePrefix(tenant) + name,
                     {{"role_arn", arn}, {"ttl", ttl}, {"max_ttl", max_ttl}});
}

core::Result<json> AwsEngine::readRole(const std::string& tenant, const std::string& name) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkRoleName(name));
  TESSERA_ASSIGN_OR_RETURN(std::optional<json> j,
                           loadSealed(store_, keys_, tenant, rolePrefix(tenant) + name, "aws"));
  if (!j) {
    return core::notFound("aws: no role '" + name + "'");
  }
  return *j;
}

core::Status AwsEngine::deleteRole(const std::string& tenant, const std::string& name) {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  TESSERA_RETURN_IF_ERROR(checkRoleName(name));
  TESSERA_ASSIGN_OR_RETURN(store::DeleteResult d, store_.deleteRange(rolePrefix(tenant) + name));
  if (d.deleted == 0) {
    return core::notFound("aws: no role '" + name + "'");
  }
  return core::Status::ok();
}

core::Result<std::vector<std::string>> AwsEngine::listRoles(const std::string& tenant) const {
  TESSERA_RETURN_IF_ERROR(checkTenant(tenant));
  const std::string prefix = rolePrefix(tenant);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(prefix, store::prefixEnd(prefix)));
  std::vector<std::string> names;
  for (const store::KeyValue& kv : r.kvs) {
    names.push_back(kv.key.substr(prefix.size()));
  }
  return names;
}

}  // namespace tessera::secrets
