// The Kubernetes API's routes (docs/kubernetes.md), part of the one route table
// (server/route_table.h): under k8s/ in the tenant's scope, and at the root of a listener chrooted
// to the tenant. Discovery answers any token; every object's verb is authorized on the Tessera
// path it maps to (Access::kKube, server/kube/access.h).
#include "server/route_table.h"

namespace tessera::server {

namespace {

// A route whose methods each need `access`; `body_methods` as RouteSpec's (kubectl's DELETE
// sends DeleteOptions).
constexpr bool kReveals = true;  // RouteSpec::reveals_secrets

RouteSpec kube(std::string_view pattern, std::vector<std::string_view> methods,
               std::string_view summary, Access access,
               std::vector<std::string_view> body_methods = {}, bool reveals = false) {
  std::vector<MethodAccess> each;
  for (std::string_view m : methods) {
    each.push_back({m, access});
  }
  return {RouteScope::kTenant,
          pattern,
          std::move(methods),
          Api::kKube,
          true,
          summary,
          std::move(body_methods),
          std::move(each),
          reveals,
          false};
}

}  // namespace

std::vector<RouteSpec> kubeRoutes() {
  constexpr Access kToken = Access::kToken;
  constexpr Access kVerb = Access::kKube;
  return {
      kube("k8s/version", {"GET"}, "Kubernetes: the server's version", kToken),
      kube("k8s/api", {"GET"}, "Kubernetes: core API discovery", kToken),
      kube("k8s/apis", {"GET"}, "Kubernetes: API group discovery", kToken),
      kube("k8s/api/v1", {"GET"}, "Kubernetes: core/v1 resources", kToken),
      kube("k8s/api/v1/namespaces", {"GET", "POST"},
           "Kubernetes: list the tenant's namespaces, create one", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}", {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: a namespace", kVerb, {"DELETE"}),
      kube("k8s/api/v1/namespaces/{namespace}/pods", {"GET", "POST"},
           "Kubernetes: list (?watch), create pods", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/pods/{name}", {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: a pod: read, replace (PUT), patch, delete", kVerb, {"DELETE"}),
      kube("k8s/api/v1/namespaces/{namespace}/pods/{name}/log", {"GET"},
           "Kubernetes: a pod's log (?tailLines=&limitBytes=)", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/pods/{name}/status", {"GET"},
           "Kubernetes: a pod, for its status (the clients' read_namespaced_pod_status)", kVerb),
      kube("k8s/api/v1/pods", {"GET"}, "Kubernetes: pods in every namespace (-A)", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/events", {"GET"},
           "Kubernetes: events of the namespace's workloads (scheduling, evictions, ends)", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/events/{name}", {"GET"}, "Kubernetes: an event",
           kVerb),
      kube("k8s/api/v1/events", {"GET"}, "Kubernetes: events in every namespace (-A)", kVerb),
      kube("k8s/api/v1/nodes", {"GET"}, "Kubernetes: the nodes the tenant may use (read-only)",
           kVerb),
      kube("k8s/api/v1/nodes/{name}", {"GET"}, "Kubernetes: a node (read-only)", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/secrets", {"GET", "POST"},
           "Kubernetes: list, create Secrets (the tenant's KV)", kVerb, {}, kReveals),
      kube("k8s/api/v1/namespaces/{namespace}/secrets/{name}", {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: a Secret: read, replace (PUT), patch, delete", kVerb, {"DELETE"}, kReveals),
      kube("k8s/api/v1/secrets", {"GET"}, "Kubernetes: Secrets in every namespace (-A)", kVerb, {},
           kReveals),
      kube("k8s/api/v1/namespaces/{namespace}/configmaps", {"GET", "POST"},
           "Kubernetes: list, create ConfigMaps (the tenant's KV)", kVerb),
      kube("k8s/api/v1/namespaces/{namespace}/configmaps/{name}",
           {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: a ConfigMap: read, replace (PUT), patch, delete", kVerb, {"DELETE"}),
      kube("k8s/api/v1/configmaps", {"GET"}, "Kubernetes: ConfigMaps in every namespace (-A)",
           kVerb),
      kube("k8s/apis/batch/v1/namespaces/{namespace}/jobs", {"GET", "POST"},
           "Kubernetes: list (?watch), create Jobs", kVerb),
      kube("k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
           {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: a Job: read, replace (PUT), patch, delete (its pods with it)", kVerb,
           {"DELETE"}),
      kube("k8s/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status", {"GET"},
           "Kubernetes: a Job, for its status (the clients' read_namespaced_job_status)", kVerb),
      kube("k8s/apis/batch/v1/jobs", {"GET"}, "Kubernetes: Jobs in every namespace (-A)", kVerb),
      kube("k8s/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {"POST"},
           "Kubernetes: what this token may do (kubectl auth can-i), from its policies", kToken),
      kube("k8s/apis/{group}/{version}", {"GET"}, "Kubernetes: a group-version's resources",
           kToken),
      kube("k8s/openapi/v3", {"GET"},
           "Kubernetes: the OpenAPI v3 index (what kubectl validates against)", kToken),
      kube("k8s/openapi/v3/{gv+}", {"GET"}, "Kubernetes: a group-version's OpenAPI v3 document",
           kToken),
      // Anything else under k8s/ is answered as Kubernetes answers it (a Status 404).
      kube("k8s/{path*}", {"GET", "POST", "PATCH", "DELETE"},
           "Kubernetes: what Tessera does not serve (404 Status)", kToken),
  };
}

}  // namespace tessera::server
