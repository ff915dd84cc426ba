#include "server/request.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace tessera::server {
namespace {

HttpRequest request(std::string method, std::string target, std::string body = "",
                    size_t listener = 0) {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.body = std::move(body);
  r.listener = listener;
  return r;
}

TEST(RequestScopeTest, VaultsNamespaceHeaderIsATenantsChroot) {
  auto with = [](const std::string& ns, const std::string& target) {
    HttpRequest r = request("GET", target);
    r.headers.emplace_back("x-vault-namespace", ns);
    return r;
  };
  auto s = requestScope(with("team-1/", "/v1/secrets/kv/data/a"), "");
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->tenant, "team-1");
  EXPECT_EQ(s->path, "secrets/kv/data/a");
  // The root namespace, or none: the admin scope.
  for (const char* root : {"", "root", "/"}) {
    s = requestScope(with(root, "/v1/auth/token/lookup-self"), "");
    ASSERT_TRUE(s.isOk()) << root;
    EXPECT_FALSE(s->tenant.has_value()) << root;
  }
  // Inside a namespace, the admin scope's paths are out of reach, as on a chrooted listener.
  EXPECT_EQ(requestScope(with("team-1", "/v1/tenants/team-2/workloads"), "").status().code(),
            core::StatusCode::kNotFound);
  EXPECT_EQ(requestScope(with("team-1", "/v1/sys/nodes"), "").status().code(),
            core::StatusCode::kNotFound);
  // On a listener chrooted to team-1: only team-1.
  EXPECT_TRUE(requestScope(with("team-1", "/v1/workloads"), "team-1").isOk());
  EXPECT_EQ(requestScope(with("team-2", "/v1/workloads"), "team-1").status().code(),
            core::StatusCode::kNotFound);
  // Nested namespaces do not exist here; the error says what the header is.
  auto nested = requestScope(with("team-1/child", "/v1/workloads"), "");
  EXPECT_EQ(nested.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(nested.status().message().find("X-Vault-Namespace"), std::string::npos);
}

TEST(TakesBodyTest, PostPutAndPatchAlwaysOtherMethodsWhereTheRouteSays) {
  const RouteMatch workload = matchRoute(RouteScope::kTenant, "workloads/w", "GET");
  ASSERT_NE(workload.route, nullptr);
  EXPECT_TRUE(takesBody(*workload.route, "POST"));
  EXPECT_TRUE(takesBody(*workload.route, "PUT"));
  EXPECT_FALSE(takesBody(*workload.route, "GET"));
  EXPECT_FALSE(takesBody(*workload.route, "DELETE"));
  EXPECT_FALSE(takesBody(*workload.route, "LIST"));
  const RouteMatch kv = matchRoute(RouteScope::kTenant, "secrets/kv/data/a", "PATCH");
  ASSERT_NE(kv.route, nullptr);
  EXPECT_TRUE(takesBody(*kv.route, "PATCH"));
  // GET auth/token/lookup reads {"accessor"} from a body, as it always has.
  for (RouteScope scope : {RouteScope::kAdmin, RouteScope::kTenant}) {
    const RouteMatch lookup = matchRoute(scope, "auth/token/lookup", "GET");
    ASSERT_NE(lookup.route, nullptr);
    EXPECT_TRUE(takesBody(*lookup.route, "GET"));
  }
}

// Issue #36: a body that the route does not read is never parsed (so neither is a 1 MB one on
// a GET, twice, as it was), and one it reads is parsed as before.
TEST(ParseApiRequestTest, ParsesABodyOnlyForARouteAndMethodThatReadIt) {
  // Ignored, whatever it holds: a client's `{}`, hvac's params, client-go's DeleteOptions,
  // or something that is not JSON at all.
  for (const std::string& body :
       {std::string("{}"), std::string(R"({"username": "x"})"),
        std::string(
            R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})"),
        std::string("not json"), std::string("[1, 2]")}) {
    for (const char* method : {"GET", "DELETE", "LIST"}) {
      auto r = parseApiRequest(request(method, "/v1/tenants/t/workloads/w", body), "");
      ASSERT_TRUE(r.isOk()) << method << " " << body << ": " << r.status().message();
      EXPECT_EQ(r->body, nlohmann::json::object()) << method << " " << body;
      ASSERT_NE(r->match.route, nullptr);
      EXPECT_EQ(r->match.label, "tenant/workloads/{name}");
    }
  }
  auto list = parseApiRequest(request("GET", "/v1/tenants/t/workloads?list=true", "{oops"), "");
  ASSERT_TRUE(list.isOk());
  EXPECT_EQ(list->method, "LIST");
  // Read: parsed, and checked.
  auto post = parseApiRequest(request("PUT", "/v1/tenants/t/workloads/w", R"({"tasks": 2})"), "");
  ASSERT_TRUE(post.isOk());
  EXPECT_EQ(post->body["tasks"], 2);
  EXPECT_FALSE(
      parseApiRequest(request("POST", "/v1/tenants/t/workloads/w", "not json"), "").isOk());
  EXPECT_FALSE(parseApiRequest(request("POST", "/v1/tenants/t/workloads/w", "[1]"), "").isOk());
  auto lookup =
      parseApiRequest(request("GET", "/v1/auth/token/lookup", R"({"accessor": "a"})"), "");
  ASSERT_TRUE(lookup.isOk());
  EXPECT_EQ(lookup->body["accessor"], "a");
  // No route, or a method the route does not take (404, 405): nothing of the body is read.
  EXPECT_TRUE(parseApiRequest(request("POST", "/v1/no/such/route", "not json"), "").isOk());
  EXPECT_TRUE(parseApiRequest(request("POST", "/v1/tenants/t/workloads", "not json"), "").isOk());
}

TEST(BodyAllowanceTest, ARouteThatReadsNoBodyMayCarryASmallOneOnly) {
  ListenerConfig plain;
  ListenerConfig chroot;
  chroot.chroot_tenant = "t";
  const std::vector<ListenerConfig> listeners = {plain, chroot};
  // Reads a body: the listener's limit.
  for (const auto& [method, target] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/tenants/t/workloads/w"},
           {"PUT", "/v1/tenants/t/secrets/kv/data/a"},
           {"PATCH", "/v1/tenants/t/secrets/kv/data/a"},
           {"GET", "/v1/auth/token/lookup"},
           {"POST", "/v1/no/such/route"}}) {
    EXPECT_FALSE(bodyAllowance(request(method, target), listeners).has_value())
        << method << " " << target;
  }
  // Reads none: kIgnoredBodyBytes, and a 413 that names the route (never the caller's names).
  auto get = bodyAllowance(request("GET", "/v1/tenants/t/workloads/secret-name"), listeners);
  ASSERT_TRUE(get.has_value());
  EXPECT_EQ(get->max_bytes, kIgnoredBodyBytes);
  EXPECT_EQ(get->refusal,
            "GET workloads/{name} takes no request body (one of up to 4096 bytes is ignored)");
  auto chrooted = bodyAllowance(request("DELETE", "/v1/workloads/w", "", 1), listeners);
  ASSERT_TRUE(chrooted.has_value());
  EXPECT_EQ(chrooted->refusal.rfind("DELETE workloads/{name} takes no request body", 0), 0U);
  auto list = bodyAllowance(request("GET", "/v1/tenants/t/workloads?list=true"), listeners);
  ASSERT_TRUE(list.has_value());
  EXPECT_EQ(list->refusal.rfind("LIST workloads ", 0), 0U) << list->refusal;
  for (const auto& [method, target] :
       std::vector<std::pair<std::string, std::string>>{{"GET", "/ui/index.html"},
                                                        {"GET", "/v1/no/such/route"},
                                                        {"HEAD", "/v1/sys/health"},
                                                        {"GET", "/v1/tenants/t/a%2Fb"}}) {
    auto a = bodyAllowance(request(method, target), listeners);
    ASSERT_TRUE(a.has_value()) << method << " " << target;
    EXPECT_EQ(a->max_bytes, kIgnoredBodyBytes) << method << " " << target;
    EXPECT_EQ(a->refusal.find('"'), std::string::npos);
  }
}

// The Kubernetes API is under k8s/ in a tenant's scope, and at the root of a listener chrooted
// to the tenant (a kubeconfig's server: https://host:port); its protobuf bodies are read too.
TEST(ParseApiRequestTest, KubernetesPathsAtATenantsRootAndItsK8sPrefix) {
  auto prefixed = parseApiRequest(
      request("GET", "/v1/tenants/t/k8s/api/v1/namespaces/default/pods?limit=500"), "");
  ASSERT_TRUE(prefixed.isOk()) << prefixed.status().toString();
  EXPECT_EQ(prefixed->scope.tenant, "t");
  EXPECT_EQ(prefixed->scope.path, "k8s/api/v1/namespaces/default/pods");
  ASSERT_NE(prefixed->match.route, nullptr);
  EXPECT_EQ(prefixed->match.route->api, Api::kKube);
  for (const char* target : {"/api", "/apis/batch/v1", "/version?timeout=5s", "/openapi/v3"}) {
    auto rooted = parseApiRequest(request("GET", target), "t");
    ASSERT_TRUE(rooted.isOk()) << target << ": " << rooted.status().toString();
    EXPECT_EQ(rooted->scope.tenant, "t") << target;
    EXPECT_TRUE(rooted->scope.path.starts_with("k8s/")) << target;
    EXPECT_EQ(rooted->match.route->api, Api::kKube) << target;
  }
  // Not on a plain listener, and nothing that merely starts with the same letters.
  EXPECT_FALSE(parseApiRequest(request("GET", "/api/v1/pods"), "").isOk());
  EXPECT_FALSE(isKubeRoot("/apiary"));
  EXPECT_FALSE(isKubeRoot("/versions"));
  EXPECT_TRUE(isKubeRoot("/apis"));
  // A protobuf body is read as the JSON object it stands for (kube/protobuf.h), one that is
  // not well-formed refused, and a JSON one parsed as JSON.
  const std::string secret = std::string("\x0a\x04\x0a\x02hf", 6);  // metadata{name: "hf"}.
  const std::string type = std::string("\x0a\x02v1\x12\x06Secret", 12);
  HttpRequest pb = request("POST", "/v1/tenants/t/k8s/api/v1/namespaces/default/secrets",
                           std::string("k8s\0", 4) + "\x0a" + static_cast<char>(type.size()) +
                               type + "\x12" + static_cast<char>(secret.size()) + secret);
  pb.headers.emplace_back("content-type", "application/vnd.kubernetes.protobuf");
  auto proto = parseApiRequest(pb, "");
  ASSERT_TRUE(proto.isOk()) << proto.status().toString();
  EXPECT_EQ(proto->body["kind"], "Secret");
  EXPECT_EQ(proto->body["metadata"]["name"], "hf");
  pb.body = std::string("k8s\0\x0a", 5);
  auto cut = parseApiRequest(pb, "");
  ASSERT_FALSE(cut.isOk());
  EXPECT_EQ(cut.status().message(), "protobuf body: runtime.Unknown: field 1 is cut short");
  auto js = parseApiRequest(request("POST", "/v1/tenants/t/k8s/api/v1/namespaces/default/pods",
                                    R"({"metadata": {"name": "p"}})"),
                            "");
  ASSERT_TRUE(js.isOk());
  EXPECT_EQ(js->body["metadata"]["name"], "p");
}

}  // namespace
}  // namespace tessera::server
