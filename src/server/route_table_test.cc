#include "server/route_table.h"

#include <gtest/gtest.h>

#include <set>

namespace tessera::server {
namespace {

using nlohmann::json;

// A path that `pattern` matches, with every parameter filled in.
std::string samplePath(std::string_view pattern) {
  std::string out;
  size_t i = 0;
  while (i < pattern.size()) {
    if (pattern[i] == '{') {
      const size_t end = pattern.find('}', i);
      out += "x";
      i = end + 1;
    } else {
      out += pattern[i++];
    }
  }
  return out;
}

TEST(RouteTableTest, MatchesPathsAndMethodsAndNamesTheParameters) {
  RouteMatch m = matchRoute(RouteScope::kTenant, "workloads/train", "GET");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->api, Api::kWorkloads);
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.params, (std::map<std::string, std::string>{{"name", "train"}}));
  EXPECT_EQ(m.label, "tenant/workloads/{name}");
  // PUT is POST; PATCH is not taken there.
  EXPECT_TRUE(matchRoute(RouteScope::kTenant, "workloads/train", "PUT").allowed);
  EXPECT_FALSE(matchRoute(RouteScope::kTenant, "workloads/train", "PATCH").allowed);
  EXPECT_FALSE(matchRoute(RouteScope::kTenant, "workloads", "GET").allowed);  // LIST only.
  // The rest of a path.
  m = matchRoute(RouteScope::kTenant, "secrets/kv/data/app/db/main", "PATCH");
  ASSERT_NE(m.route, nullptr);
  EXPECT_TRUE(m.allowed);
  EXPECT_EQ(m.params.at("path"), "app/db/main");
  EXPECT_EQ(m.label, "tenant/secrets/kv/data/{path+}");
  EXPECT_EQ(matchRoute(RouteScope::kTenant, "secrets/kv/data", "GET").route, nullptr);  // '+'
  m = matchRoute(RouteScope::kTenant, "secrets/kv/metadata", "LIST");
  ASSERT_NE(m.route, nullptr);  // '*': the whole tree.
  EXPECT_EQ(m.params.at("path"), "");
  m = matchRoute(RouteScope::kAdmin, "sys/nodes/gpu-1/logs/17", "POST");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.params, (std::map<std::string, std::string>{{"node", "gpu-1"}, {"id", "17"}}));
  // Scopes are apart: a tenant path is nothing in the admin scope, and the reverse.
  EXPECT_EQ(matchRoute(RouteScope::kAdmin, "workloads/train", "GET").route, nullptr);
  EXPECT_EQ(matchRoute(RouteScope::kTenant, "sys/doctor", "GET").route, nullptr);
  // Nothing: no route, and a label that carries none of the caller's names.
  m = matchRoute(RouteScope::kTenant, "workloads/train/secret-name", "GET");
  EXPECT_EQ(m.route, nullptr);
  EXPECT_EQ(m.label, "unmatched");
  EXPECT_TRUE(m.params.empty());
  // Token operations read nothing on a GET that could change a token.
  EXPECT_FALSE(matchRoute(RouteScope::kAdmin, "auth/token/renew-self", "GET").allowed);
  EXPECT_FALSE(matchRoute(RouteScope::kAdmin, "auth/token/revoke-self", "HEAD").allowed);
}

TEST(RouteTableTest, EveryRouteIsReachableAndDeclaredOnce) {
  std::set<std::pair<RouteScope, std::string_view>> seen;
  for (const RouteSpec& route : routeTable()) {
    EXPECT_TRUE(seen.emplace(route.scope, route.pattern).second) << route.pattern;
    EXPECT_FALSE(route.methods.empty()) << route.pattern;
    EXPECT_FALSE(route.summary.empty()) << route.pattern;
    for (std::string_view method : route.methods) {
      EXPECT_TRUE(method == "GET" || method == "LIST" || method == "POST" || method == "PATCH" ||
                  method == "DELETE")
          << route.pattern << " " << method;
    }
    if (route.scope == RouteScope::kRoot) {
      continue;
    }
    // No earlier, wider pattern shadows it.
    const RouteMatch m = matchRoute(route.scope, samplePath(route.pattern), route.methods[0]);
    EXPECT_EQ(m.route, &route) << route.pattern << " is shadowed by "
                               << (m.route != nullptr ? m.route->pattern : "nothing");
  }
}

TEST(RouteTableTest, AllowListsPutWithPost) {
  const RouteMatch m = matchRoute(RouteScope::kTenant, "queues/team-a", "PATCH");
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(allowHeader(*m.route), "GET, POST, PUT, DELETE");
}

TEST(RouteTableTest, TheOpenApiDocumentHasEveryRouteAndMethod) {
  const json doc = openApiDocument("1.2.3");
  EXPECT_EQ(doc["openapi"], "3.0.3");
  EXPECT_EQ(doc["info"]["version"], "1.2.3");
  const json& paths = doc["paths"];
  size_t operations = 0;
  for (const RouteSpec& route : routeTable()) {
    std::string path;
    if (route.scope == RouteScope::kRoot) {
      path = route.pattern;
    } else {
      path = std::string(route.scope == RouteScope::kTenant ? "/v1/tenants/{tenant}/" : "/v1/") +
             std::string(route.pattern);
      for (const char* kind : {"*}", "+}"}) {
        for (size_t at = path.find(kind); at != std::string::npos; at = path.find(kind)) {
          path.erase(at, 1);
        }
      }
    }
    ASSERT_TRUE(paths.contains(path)) << path;
    for (std::string_view method : route.methods) {
      const std::string op = method == "LIST"    ? "get"
                             : method == "GET"   ? "get"
                             : method == "POST"  ? "post"
                             : method == "PATCH" ? "patch"
                                                 : "delete";
      EXPECT_TRUE(paths[path].contains(op)) << path << " " << method;
    }
    const bool lists =
        std::find(route.methods.begin(), route.methods.end(), "LIST") != route.methods.end();
    if (lists) {
      EXPECT_EQ(paths[path]["get"]["parameters"][0]["name"], "list") << path;
    }
    EXPECT_EQ(paths[path][route.methods[0] == "LIST" ? "get" : [&] {
                std::string m(route.methods[0]);
                std::transform(m.begin(), m.end(), m.begin(), ::tolower);
                return m;
              }()]["security"]
                  .empty(),
              !route.authenticated)
        << path;
    operations += route.methods.size();
  }
  EXPECT_GT(operations, 100U);
}

}  // namespace
}  // namespace tessera::server

namespace tessera::server {
namespace {

// Every route's authorization as the pipeline applies it: the route table is where it is
// declared, and this list is where a change to it shows up in review. One line per route and
// method: scope, pattern, method, what the token must be allowed; then "secrets" for an answer
// that reveals them and "sudo?" where the handler learns whether the token holds sudo.
std::string accessTable() {
  std::string out;
  for (const RouteSpec& route : routeTable()) {
    for (std::string_view method : route.methods) {
      out += std::string(route.scope == RouteScope::kAdmin    ? "admin "
                         : route.scope == RouteScope::kTenant ? "tenant "
                                                              : "root ") +
             std::string(route.pattern) + " " + std::string(method) + ": " +
             std::string(accessName(accessFor(route, method))) +
             (changesState(route, method) ? "" : " (reads)") +
             (route.reveals_secrets ? " secrets" : "") + (route.asks_sudo ? " sudo?" : "") + "\n";
    }
  }
  return out;
}

TEST(RouteAccessTest, EveryRouteSaysWhatItNeeds) {
  EXPECT_EQ(accessTable(), R"(admin sys/health GET: none (no token) (reads)
admin sys/openapi GET: none (no token) (reads)
admin sys/seal-status GET: none (no token) (reads)
admin sys/init POST: none (no token)
admin sys/unseal POST: none (no token)
admin sys/generate-root POST: none (no token)
root /.well-known/openid-configuration GET: none (no token) (reads)
root /.well-known/jwks.json GET: none (no token) (reads)
root / GET: none (no token) (reads)
root /ui GET: none (no token) (reads)
root /ui/{file} GET: none (no token) (reads)
admin sys/metrics GET: read (reads)
admin tenants GET: list (reads)
admin tenants LIST: list (reads)
admin tenants/{tenant} GET: read (reads)
admin tenants/{tenant} POST: create (new) or update (existing)
admin tenants/{tenant} DELETE: delete
admin sys/policies GET: list (reads)
admin sys/policies LIST: list (reads)
admin sys/policies/{name} GET: read (reads)
admin sys/policies/{name} POST: create (new) or update (existing)
admin sys/policies/{name} DELETE: delete
admin sys/nodes/join POST: none (no token)
admin sys/nodes/join-tokens GET: read|list (reads) secrets
admin sys/nodes/join-tokens LIST: read|list (reads) secrets
admin sys/nodes/join-tokens POST: create|update secrets
admin sys/nodes/join-tokens/{accessor} DELETE: delete
admin sys/nodes/{node}/credential POST: update secrets
admin sys/nodes/{node}/heartbeat POST: update
admin sys/nodes/{node}/tasks GET: read (reads)
admin sys/nodes/{node}/logs/{id} POST: update
admin nodes GET: read|list (reads)
admin nodes LIST: read|list (reads)
admin nodes/{node} GET: read (reads)
admin nodes/{node} DELETE: delete
admin nodes/{node}/{op} POST: update
admin sys/pools GET: read|list (reads)
admin sys/pools LIST: read|list (reads)
admin sys/pools/{pool} GET: read|list (reads)
admin sys/pools/{pool} POST: create|update
admin sys/pools/{pool} DELETE: delete
admin queues GET: read|list (reads)
admin queues LIST: read|list (reads)
admin sys/key-status GET: sudo (reads)
admin sys/seal POST: sudo
admin sys/rotate POST: sudo
admin sys/rewrap POST: sudo
admin sys/leases/count GET: read (reads)
admin sys/leases/count LIST: read (reads)
admin sys/leases/revoke-force POST: sudo
admin sys/leases GET: read (reads)
admin sys/leases LIST: read (reads)
admin sys/scheduler GET: read (reads)
admin sys/doctor GET: sudo (reads)
admin auth/token/create POST: create|update secrets sudo?
admin auth/token/lookup-self GET: any valid token (reads)
admin auth/token/lookup-self POST: any valid token
admin auth/token/renew-self POST: any valid token
admin auth/token/revoke-self POST: any valid token
admin auth/token/lookup GET: create|update (reads)
admin auth/token/lookup POST: create|update
admin auth/token/renew POST: create|update
admin auth/token/revoke POST: create|update
admin auth/token/lookup-accessor POST: create|update
admin auth/token/renew-accessor POST: create|update
admin auth/token/revoke-accessor POST: create|update
tenant auth/token/create POST: create|update secrets sudo?
tenant auth/token/lookup-self GET: any valid token (reads)
tenant auth/token/lookup-self POST: any valid token
tenant auth/token/renew-self POST: any valid token
tenant auth/token/revoke-self POST: any valid token
tenant auth/token/lookup GET: create|update (reads)
tenant auth/token/lookup POST: create|update
tenant auth/token/renew POST: create|update
tenant auth/token/revoke POST: create|update
tenant auth/token/lookup-accessor POST: create|update
tenant auth/token/renew-accessor POST: create|update
tenant auth/token/revoke-accessor POST: create|update
admin auth/token/roles GET: list (reads)
admin auth/token/roles LIST: list (reads)
admin auth/token/roles/{name} GET: read (reads)
admin auth/token/roles/{name} POST: create (new) or update (existing)
admin auth/token/roles/{name} DELETE: delete
admin auth/token/create/{role} POST: create|update secrets
tenant auth/token/roles GET: list (reads)
tenant auth/token/roles LIST: list (reads)
tenant auth/token/roles/{name} GET: read (reads)
tenant auth/token/roles/{name} POST: create (new) or update (existing)
tenant auth/token/roles/{name} DELETE: delete
tenant auth/token/create/{role} POST: create|update secrets
tenant workloads LIST: list (reads)
tenant workloads/{name} GET: read (reads)
tenant workloads/{name} POST: create (new) or update (existing)
tenant workloads/{name} DELETE: delete
tenant workloads/{name}/events GET: read (reads)
tenant workloads/{name}/suspend POST: update
tenant workloads/{name}/resume POST: update
tenant workloads/{name}/logs GET: read (reads)
tenant policies GET: list (reads)
tenant policies LIST: list (reads)
tenant policies/{name} GET: read (reads)
tenant policies/{name} POST: create (new) or update (existing)
tenant policies/{name} DELETE: delete
tenant nodes GET: read|list (reads)
tenant nodes LIST: read|list (reads)
tenant queues GET: read|list (reads)
tenant queues LIST: read|list (reads)
tenant metrics GET: read (reads)
tenant queues/{queue} GET: read (reads)
tenant queues/{queue} POST: create (new) or update (existing)
tenant queues/{queue} DELETE: delete
tenant audit GET: read (reads)
tenant grants GET: list (reads)
tenant grants LIST: list (reads)
tenant grants POST: create
tenant grants/{id} DELETE: delete
tenant leases GET: list (reads)
tenant leases LIST: list (reads)
tenant leases/lookup POST: read (reads)
tenant leases/renew POST: update
tenant leases/revoke POST: update
tenant leases/revoke-prefix/{prefix*} POST: update
tenant secrets/kv/config GET: read (reads)
tenant secrets/kv/config POST: update
tenant secrets/kv/data/{path+} GET: read (reads) secrets
tenant secrets/kv/data/{path+} POST: create (new) or update (existing) secrets
tenant secrets/kv/data/{path+} PATCH: patch secrets
tenant secrets/kv/data/{path+} DELETE: delete secrets
tenant secrets/kv/metadata/{path*} GET: read (reads)
tenant secrets/kv/metadata/{path*} LIST: list (on the path with a trailing /) (reads)
tenant secrets/kv/metadata/{path*} POST: create (new) or update (existing)
tenant secrets/kv/metadata/{path*} PATCH: patch
tenant secrets/kv/metadata/{path*} DELETE: delete
tenant secrets/kv/subkeys/{path+} GET: read (reads)
tenant secrets/kv/delete/{path+} POST: update
tenant secrets/kv/undelete/{path+} POST: update
tenant secrets/kv/destroy/{path+} POST: update
tenant secrets/db/config GET: list (on the path with a trailing /) (reads)
tenant secrets/db/config LIST: list (on the path with a trailing /) (reads)
tenant secrets/db/config/{name} GET: read (reads)
tenant secrets/db/config/{name} POST: create (new) or update (existing)
tenant secrets/db/config/{name} DELETE: delete
tenant secrets/db/roles GET: list (on the path with a trailing /) (reads)
tenant secrets/db/roles LIST: list (on the path with a trailing /) (reads)
tenant secrets/db/roles/{name} GET: read (reads)
tenant secrets/db/roles/{name} POST: create (new) or update (existing)
tenant secrets/db/roles/{name} DELETE: delete
tenant secrets/db/creds/{role} GET: read (reads) secrets
tenant secrets/aws/config GET: read (reads)
tenant secrets/aws/config POST: update
tenant secrets/aws/roles GET: list (on the path with a trailing /) (reads)
tenant secrets/aws/roles LIST: list (on the path with a trailing /) (reads)
tenant secrets/aws/roles/{name} GET: read (reads)
tenant secrets/aws/roles/{name} POST: create (new) or update (existing)
tenant secrets/aws/roles/{name} DELETE: delete
tenant secrets/aws/creds/{role} GET: read (reads) secrets
tenant secrets/aws/creds/{role} POST: read (reads) secrets
tenant k8s/version GET: any valid token (reads)
tenant k8s/api GET: any valid token (reads)
tenant k8s/apis GET: any valid token (reads)
tenant k8s/api/v1 GET: any valid token (reads)
tenant k8s/api/v1/namespaces GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace} POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace} PATCH: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace} DELETE: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/pods GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/pods POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/pods/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/pods/{name} POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/pods/{name} PATCH: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/pods/{name} DELETE: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/pods/{name}/log GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/pods/{name}/status GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/pods GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/events GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/events/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/events GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/nodes GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/nodes/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/secrets GET: the Kubernetes verb's, on its object's Tessera path (reads) secrets
tenant k8s/api/v1/namespaces/{namespace}/secrets POST: the Kubernetes verb's, on its object's Tessera path secrets
tenant k8s/api/v1/namespaces/{namespace}/secrets/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads) secrets
tenant k8s/api/v1/namespaces/{namespace}/secrets/{name} POST: the Kubernetes verb's, on its object's Tessera path secrets
tenant k8s/api/v1/namespaces/{namespace}/secrets/{name} PATCH: the Kubernetes verb's, on its object's Tessera path secrets
tenant k8s/api/v1/namespaces/{namespace}/secrets/{name} DELETE: the Kubernetes verb's, on its object's Tessera path secrets
tenant k8s/api/v1/secrets GET: the Kubernetes verb's, on its object's Tessera path (reads) secrets
tenant k8s/api/v1/namespaces/{namespace}/configmaps GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/configmaps POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/configmaps/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/api/v1/namespaces/{namespace}/configmaps/{name} POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/configmaps/{name} PATCH: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/namespaces/{namespace}/configmaps/{name} DELETE: the Kubernetes verb's, on its object's Tessera path
tenant k8s/api/v1/configmaps GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name} GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name} POST: the Kubernetes verb's, on its object's Tessera path
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name} PATCH: the Kubernetes verb's, on its object's Tessera path
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name} DELETE: the Kubernetes verb's, on its object's Tessera path
tenant k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/apis/batch/v1/jobs GET: the Kubernetes verb's, on its object's Tessera path (reads)
tenant k8s/apis/authorization.k8s.io/v1/selfsubjectaccessreviews POST: any valid token
tenant k8s/apis/{group}/{version} GET: any valid token (reads)
tenant k8s/openapi/v3 GET: any valid token (reads)
tenant k8s/openapi/v3/{gv+} GET: any valid token (reads)
tenant k8s/{path*} GET: any valid token (reads)
tenant k8s/{path*} POST: any valid token
tenant k8s/{path*} PATCH: any valid token
tenant k8s/{path*} DELETE: any valid token
)");
}

// The defaults, where a route declares nothing else; and what a method the route does not list
// would need is never asked (the pipeline answers 405 first).
TEST(RouteAccessTest, DefaultsFollowTheMethod) {
  const RouteSpec route{RouteScope::kTenant,
                        "things/{name}",
                        {"GET", "LIST", "POST", "PATCH", "DELETE"},
                        Api::kWorkloads,
                        true,
                        "test"};
  EXPECT_EQ(accessFor(route, "GET"), Access::kRead);
  EXPECT_EQ(accessFor(route, "LIST"), Access::kList);
  EXPECT_EQ(accessFor(route, "POST"), Access::kWrite);
  EXPECT_EQ(accessFor(route, "PUT"), Access::kWrite);
  EXPECT_EQ(accessFor(route, "PATCH"), Access::kPatch);
  EXPECT_EQ(accessFor(route, "DELETE"), Access::kDelete);
  EXPECT_TRUE(changesState(route, "POST"));
  EXPECT_FALSE(changesState(route, "GET"));
  RouteSpec open = route;
  open.authenticated = false;
  EXPECT_EQ(accessFor(open, "POST"), Access::kNone);
  RouteSpec lookup = route;
  lookup.access = {{"POST", Access::kRead}};
  EXPECT_EQ(accessFor(lookup, "POST"), Access::kRead);
  EXPECT_FALSE(changesState(lookup, "POST"));  // Audited as a read.
}

}  // namespace
}  // namespace tessera::server
