// The untrusted part of a request, read before anything is authorized: its scope, method, route,
// token and JSON body. Kept apart from the handlers so that it can be fuzzed on its own
// (fuzz/http_request_fuzz.cc).
//
//   auto r = parseApiRequest(http_request, listener.chroot_tenant);
//   if (!r.isOk()) ...  // kNotFound -> 404, kInvalidArgument -> 400
//
// Bodies: a request's body is parsed only when its route and method take one (route_table.h,
// takesBody: POST, PUT, PATCH, and GET auth/token/lookup), and then once, by the one call of
// parseApiRequest that serves it (never on an I/O thread: admission reads only the head). Any
// other request may carry a small body (kIgnoredBodyBytes), which is ignored unread, as Vault
// ignores bodies of GET, LIST and DELETE and Kubernetes those of GET: real clients send them
// (hvac a small JSON object on some GETs and DELETEs, client-go and python-kubernetes a
// DeleteOptions on DELETE, `curl -X GET -d '{}'`). A larger one is refused with 413 before any
// of it is read (bodyAllowance, the HTTP server's body policy): it is data the client means us
// to use, and we would not.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/http_server.h"
#include "server/route.h"
#include "server/route_table.h"

namespace tessera::server {

// The most a request whose route reads no body may carry (ignored).
inline constexpr size_t kIgnoredBodyBytes = 4096;

struct ApiRequest {
  ScopedPath scope;
  std::string method;  // GET, LIST (also GET ?list=true), POST (also PUT), DELETE, ...
  std::string token;   // From X-Tessera-Token or "Authorization: Bearer"; may be empty.
  RouteMatch match;    // Its route in the table (route null: none, 404).
  // Always an object; {} unless the route takes a body (takesBody) and one was sent.
  nlohmann::json body = nlohmann::json::object();
};

// The token a request carries (X-Tessera-Token, else "Authorization: Bearer"), or "".
std::string requestToken(const HttpRequest& http);

// The request's scope: its target's (route.h scopeTarget), on a listener chrooted to
// `chroot_tenant` ("" for none). Vault's namespace header, `X-Vault-Namespace: <tenant>`, acts
// as a chroot to that tenant (Tessera's namespaces are its tenants, one level deep; "" and
// "root" name the admin scope): on a chrooted listener it may name only that listener's tenant
// (another is NOT_FOUND), and a name that is no tenant name is INVALID_ARGUMENT.
core::Result<ScopedPath> requestScope(const HttpRequest& http, std::string_view chroot_tenant);

// Whether `target` is one of the Kubernetes API's roots (/version, /api, /apis, /openapi and
// below): on a listener chrooted to a tenant they are its k8s/ paths.
bool isKubeRoot(std::string_view target);

core::Result<ApiRequest> parseApiRequest(const HttpRequest& http, std::string_view chroot_tenant);

// What the request whose head is `head` may carry as a body: nullopt (its listener's
// max_body_bytes) when its route reads one, or when it is no API request; else at most
// kIgnoredBodyBytes, with a 413 naming the route. For HttpServer's body policy: pure, cheap (no
// body, no token lookup), thread-safe. `listeners` as for ControlPlane::handle (the chroot).
std::optional<BodyAllowance> bodyAllowance(const HttpRequest& head,
                                           const std::vector<ListenerConfig>& listeners);

// Vault-style durations: whole seconds as a number, or "90s", "30m", "4h", "7d".
core::Result<int64_t> parseDurationSeconds(const nlohmann::json& j, const std::string& field);

}  // namespace tessera::server
