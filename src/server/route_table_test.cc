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
