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
  kScheduler,
  kSecrets,
  kLeases,
  kGrants,
  kWorkloads,
  kAudit,
  kConsole,  // The web console's files (server/console.h): `/`, `/ui`, `/ui/<file>`
  kKube,     // The Kubernetes API under k8s/ (server/kube/kube_api.cc, docs/kubernetes.md)
};

// What a request to a route must be allowed before its handler runs: capabilities of the
// token's ACL policies (server/acl.h) on the request's path, or of the grant it comes in on. The
// pipeline (ControlPlane::serve) checks it, never the handler; a handler only checks paths other
// than its own (each workload a list shows, the secrets a workload asks for).
enum class Access : uint8_t {
  kNone,   // No token at all: an unauthenticated route.
  kToken,  // Any valid token: the route concerns only the token itself (lookup-self ...).
  kRead,
  kList,
  kReadOrList,
  kCreate,
  kUpdate,
  kCreateOrUpdate,  // Either will do.
  kPatch,
  kDelete,
  kSudo,        // Root, or sudo on the path: operations that affect every tenant.
  kWrite,       // Create where the object is not there yet, update where it is (Vault's
                // existence check: ControlPlane::objectExists).
  kListFolder,  // List, on the path with a trailing '/' (Vault's LIST of a folder, so that
                // `path "secrets/kv/metadata/dev/*"` lists metadata/dev/).
  kKube,        // The Kubernetes verb's capability on the Tessera path its object maps to
                // (pods/x -> workloads/x; server/kube/access.h).
};

// How an Access reads in docs and tests ("read", "create|update", ...).
std::string_view accessName(Access a);

// A method whose access differs from the default (accessFor).
struct MethodAccess {
  std::string_view method;
  Access access;
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
  // Where a method needs other than the default: GET read, LIST list, POST write, PATCH patch,
  // DELETE delete (accessFor).
  std::vector<MethodAccess> access = {};
  // Whether an answer carries secret values (a KV secret, a credential, a token): it is sent
  // only once its audit records are on stable storage, whatever audit_durable_answers says.
  bool reveals_secrets = false;
  // Whether the handler needs to know if the token also holds sudo on the path (Request::sudo):
  // token creation, where sudo allows an orphan token, as in Vault.
  bool asks_sudo = false;
};

// What `method` on `route` must be allowed (Access::kNone for an unauthenticated route).
Access accessFor(const RouteSpec& route, std::string_view method);

// Whether `method` on `route` may change state: anything but GET and LIST, unless the route
// declares it a read (POST leases/lookup). A request that does not is audited as a read.
bool changesState(const RouteSpec& route, std::string_view method);

// Every route, in matching order.
const std::vector<RouteSpec>& routeTable();
// The Kubernetes API's routes (server/kube/kube_routes.cc), the table's last.
std::vector<RouteSpec> kubeRoutes();

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
