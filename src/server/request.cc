#include "server/request.h"

#include <charconv>

namespace tessera::server {

std::string requestToken(const HttpRequest& http) {
  std::string token = http.header("x-tessera-token");
  if (token.empty()) {
    token = http.header("x-vault-token");  // So Vault's own clients need no change.
  }
  if (token.empty()) {
    const std::string auth = http.header("authorization");
    if (auth.rfind("Bearer ", 0) == 0) {
      token = auth.substr(7);
    }
  }
  return token;
}

core::Result<ApiRequest> parseApiRequest(const HttpRequest& http, std::string_view chroot_tenant) {
  ApiRequest r;
  TESSERA_ASSIGN_OR_RETURN(r.scope, scopeTarget(http.target, chroot_tenant));
  r.method = http.method;
  if (r.method == "GET" && r.scope.query.contains("list")) {
    r.method = "LIST";
  }
  if (r.method == "PUT") {
    r.method = "POST";
  }
  r.token = requestToken(http);
  if (!http.body.empty()) {
    // Depth-limited like config files: hostile nesting must not exhaust the stack.
    int depth = 0;
    bool too_deep = false;
    nlohmann::json::parser_callback_t limit = [&](int d, nlohmann::json::parse_event_t,
                                                  nlohmann::json&) {
      depth = d;
      too_deep |= d > 64;
      return !too_deep;
    };
    try {
      r.body = nlohmann::json::parse(http.body, limit);
    } catch (const nlohmann::json::exception&) {
      return core::invalidArgument("the request body is not valid JSON");
    }
    if (too_deep) {
      return core::invalidArgument("the request body nests deeper than 64 levels");
    }
    if (!r.body.is_object()) {
      return core::invalidArgument("the request body must be a JSON object");
    }
  }
  return r;
}

core::Result<int64_t> parseDurationSeconds(const nlohmann::json& j, const std::string& field) {
  const std::string expected = field + ": expected a duration like \"90s\", \"30m\" or \"4h\"";
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0 || v > 100LL * 365 * 86400) {
      return core::invalidArgument(expected);
    }
    return v;
  }
  if (!j.is_string()) {
    return core::invalidArgument(expected);
  }
  const std::string s = j.get<std::string>();
  int64_t n = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  const std::string unit(end, s.data() + s.size());
  const int64_t mult = unit.empty() || unit == "s" ? 1
                       : unit == "m"               ? 60
                       : unit == "h"               ? 3600
                       : unit == "d"               ? 86400
                                                   : -1;
  if (ec != std::errc() || end == s.data() || n < 0 || mult < 0 || n > 100LL * 365 * 86400 / mult) {
    return core::invalidArgument(expected);
  }
  return n * mult;
}

}  // namespace tessera::server
