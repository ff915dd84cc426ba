// The API's routes, as one table: every path the server answers, its scope, its methods and what
// it is for. The request pipeline (ControlPlane::serve) matches each request against it before a
// handler runs, so a path outside it is a 404 and a method a route does not list is a 405 (with
// `Allow`), whatever the handler would have done; metrics are labelled by the route's pattern,
// never by the caller's names; and `GET /v1/sys/openapi` is generated from it. Modelled on
// Vault's `framework.Path` (a pattern and its operations) and Envoy's admin handler table.
//
//   const RouteMatch m = matchRoute(RouteScope::kTenant, "workloads/train", "GET");
//   // m.route->api == Api::kWorkloads, m.params == {{"name", "train"}}, m.allowed == true
//
// Patterns are '/'-separated segments inside the scope: a literal, `{name}` (one segment),
// `{name*}` (the rest, zero or more segments) or `{name+}` (the rest, one or more). Methods are
// the API's (server/request.h): PUT arrives as POST, `GET ?list=true` as LIST. The first route
// whose pattern matches wins, so more specific patterns come first. Pure; thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::server {

enum class RouteScope {
  kAdmin,   // /v1/<path>
  kTenant,  // /v1/tenants/<t>/<path>, or /v1/<path> on a listener chrooted to a tenant
  kRoot,    // Outside /v1/ (the pattern is the whole path): the OIDC discovery documents
};

// Which handler answers a route (ControlPlane::route).
enum class Api {
  kHealth,
  kSealUnauthenticated,  // sys/seal-status, sys/init, sys/unseal, sys/generate-root
  kWellKnown,
  kOpenApi,
  kMetrics,
  kTenantMetrics,
  kTenants,
  kTokens,
  kPolicies,
  kNodeHeartbeat,
  kNodeTasks,
  kNodeLogs,
  kNodes,
  kNodeJoin,
  kJoinTokens,
  kNodeCredential,
  kNodeAdmin,
  kPools,
  kQueues,
  kSeal,
  kAdminLeases,
  kDoctor,
  kSecrets,
  kLeases,
  kGrants,
  kWorkloads,
  kAudit,
  kConsole,  // The web console's files (server/console.h): `/`, `/ui`, `/ui/<file>`
};

struct RouteSpec {
  RouteScope scope;
  std::string_view pattern;
  std::vector<std::string_view> methods;  // GET, LIST, POST, PATCH, DELETE.
  Api api;
  bool authenticated;  // False: answered without a token (and before any tenant check).
  std::string_view summary;
  // Methods besides POST and PATCH whose requests carry a JSON body the handler reads (see
  // takesBody); none by default.
  std::vector<std::string_view> body_methods = {};
};

// Every route, in matching order.
const std::vector<RouteSpec>& routeTable();

struct RouteMatch {
  const RouteSpec* route = nullptr;           // Null: no route has this path (404).
  bool allowed = false;                       // The route lists the method; else 405.
  std::map<std::string, std::string> params;  // By the pattern's names ("name", "path", ...).
  std::string label;  // For metrics: "tenant/workloads/{name}", or "unmatched".
};

// Matches `path` (inside its scope, no leading '/') and `method` against the table.
RouteMatch matchRoute(RouteScope scope, std::string_view path, std::string_view method);

// The `Allow` header's value for a route (with PUT wherever it lists POST).
std::string allowHeader(const RouteSpec& route);

// Whether a request to `route` with `method` (the API's: PUT is POST) carries a body its
// handler reads: POST and PATCH always, GET, LIST and DELETE where the route says so
// (RouteSpec::body_methods). Any other request's body is never parsed (server/request.h).
bool takesBody(const RouteSpec& route, std::string_view method);

// An OpenAPI 3.0 document of every route (`GET /v1/sys/openapi`).
nlohmann::json openApiDocument(std::string_view version);

}  // namespace tessera::server
