#include "server/request.h"

#include <charconv>

#include "server/kube/protobuf.h"

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

bool isKubeRoot(std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  for (std::string_view root : {"/version", "/api", "/apis", "/openapi"}) {
    if (path == root ||
        (path.starts_with(root) && path.size() > root.size() && path[root.size()] == '/')) {
      return true;
    }
  }
  return false;
}

core::Result<ScopedPath> requestScope(const HttpRequest& http, std::string_view chroot_tenant) {
  const std::string header = http.header("x-vault-namespace");
  std::string_view ns = header;
  while (!ns.empty() && ns.front() == '/') {
    ns.remove_prefix(1);
  }
  while (!ns.empty() && ns.back() == '/') {
    ns.remove_suffix(1);
  }
  if (ns.empty() || ns == "root") {
    if (!chroot_tenant.empty() && isKubeRoot(http.target)) {
      // A listener chrooted to a tenant also answers the Kubernetes API at its root, so a
      // kubeconfig's server: is just https://host:port (docs/kubernetes.md).
      return scopeTarget("/v1/k8s" + http.target, chroot_tenant);
    }
    return scopeTarget(http.target, chroot_tenant);
  }
  if (!validName(ns)) {
    return core::invalidArgument(
        "X-Vault-Namespace: '" + std::string(ns.substr(0, 64)) +
        "' is not a tenant name (Tessera's namespaces are its tenants, one level deep)");
  }
  if (!chroot_tenant.empty() && ns != chroot_tenant) {
    return core::notFound("not found");
  }
  return scopeTarget(http.target, ns);
}

core::Result<ApiRequest> parseApiRequest(const HttpRequest& http, std::string_view chroot_tenant) {
  ApiRequest r;
  TESSERA_ASSIGN_OR_RETURN(r.scope, requestScope(http, chroot_tenant));
  r.method = http.method;
  if (r.method == "GET" && r.scope.query.contains("list")) {
    r.method = "LIST";
  }
  if (r.method == "PUT") {
    r.method = "POST";
  }
  r.token = requestToken(http);
  r.match =
      matchRoute(r.scope.tenant ? RouteScope::kTenant : RouteScope::kAdmin, r.scope.path, r.method);
  // A body is parsed only for a route and method that read one; any other is ignored (a small
  // one: bodyAllowance refuses a larger one before it is read).
  // The Kubernetes API's bodies may be protobuf (kubectl's typed clients send it): read as
  // the JSON object a JSON client would have sent (kube/protobuf.h).
  const bool protobuf = r.match.route != nullptr && r.match.route->api == Api::kKube &&
                        http.header("content-type").starts_with(kube::kProtobufType);
  if (protobuf && !http.body.empty() && r.match.allowed && takesBody(*r.match.route, r.method)) {
    TESSERA_ASSIGN_OR_RETURN(r.body, kube::decodeProtobuf(http.body));
  }
  if (!http.body.empty() && r.match.route != nullptr && r.match.allowed && !protobuf &&
      takesBody(*r.match.route, r.method)) {
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
    // A JSON patch (RFC 6902) to the Kubernetes API is a list of operations.
    const bool json_patch = r.match.route->api == Api::kKube && r.method == "PATCH" &&
                            http.header("content-type").starts_with("application/json-patch+json");
    if (!r.body.is_object() && !(json_patch && r.body.is_array())) {
      return core::invalidArgument("the request body must be a JSON object");
    }
  }
  return r;
}

std::optional<BodyAllowance> bodyAllowance(const HttpRequest& head,
                                           const std::vector<ListenerConfig>& listeners) {
  std::string method = head.method;
  if (method == "POST" || method == "PUT" || method == "PATCH") {
    return std::nullopt;  // Whatever its route: one that takes no such method answers 405.
  }
  const std::string_view chroot =
      head.listener < listeners.size() ? listeners[head.listener].chroot_tenant : "";
  auto scope = requestScope(head, chroot);
  if (!scope.isOk()) {
    // Not an API path (the console's files, OIDC discovery: GETs that read no body) or a
    // malformed one, answered 404 or 400 whatever it carries.
    return BodyAllowance{kIgnoredBodyBytes, method + " takes no request body here"};
  }
  if (method == "GET" && scope->query.contains("list")) {
    method = "LIST";
  }
  const RouteMatch m =
      matchRoute(scope->tenant ? RouteScope::kTenant : RouteScope::kAdmin, scope->path, method);
  if (m.route != nullptr && m.allowed && takesBody(*m.route, method)) {
    return std::nullopt;
  }
  // The route's pattern, never the caller's names (the message is not escaped either).
  const std::string what = m.route == nullptr ? "this path" : std::string(m.route->pattern);
  return BodyAllowance{kIgnoredBodyBytes,
                       method + " " + what + " takes no request body (one of up to " +
                           std::to_string(kIgnoredBodyBytes) + " bytes is ignored)"};
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
