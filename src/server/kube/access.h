// What a Kubernetes API request is (its verb, resource, namespace, name, subresource), read from
// its path inside k8s/, and the Tessera path and capability it needs: the one authorizer behind
// both APIs (ControlPlane::authorize) and SelfSubjectAccessReview.
//
//   auto t = kube::kubeTarget("k8s/api/v1/namespaces/default/pods/x", "DELETE", query, body);
//   // t.verb == "delete", t.resource == "pods", t.ns == "default", t.name == "x"
//   auto need = kube::tesseraAccess(t);   // {"workloads/x", Capability::kDelete}
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "server/acl.h"

namespace tessera::server::kube {

// A query parameter's value, or null when the request has none.
const std::string* queryParam(const std::map<std::string, std::string>& query, const char* key);
// Whether a query boolean is true, read as Go's strconv.ParseBool (the Python client sends
// "True"); `fallback` when absent or unreadable.
bool queryBool(const std::string* value, bool fallback);

struct KubeTarget {
  std::string group;  // "" : the core group.
  std::string version;
  std::string resource;     // "pods", "namespaces", ... ("" : discovery, /version).
  std::string ns;           // "" : cluster-scoped, or every namespace.
  std::string name;         // "" : the collection.
  std::string subresource;  // "log", "status", ...
  std::string verb;         // get, list, watch, create, update, patch, delete, deletecollection.
};

// `path` is inside the tenant's scope ("k8s/api/v1/..."); `method` as sent (PUT is update).
// For a create the object's name is read from the body (metadata.name).
KubeTarget kubeTarget(std::string_view path, std::string_view method,
                      const std::map<std::string, std::string>& query, const nlohmann::json& body);

// The Tessera path (inside the tenant) and capability that the verb needs; nullopt where any
// token may ask (discovery, /version) or for a resource Tessera does not serve (answered 404).
struct TesseraAccess {
  std::string path;
  Capability capability;
};
std::optional<TesseraAccess> tesseraAccess(const KubeTarget& t);

// A SelfSubjectAccessReview (`kubectl auth can-i`) answered from the same mapping: the review
// with its `status` ({"allowed": ..., "reason": ...}); `allowed(path, capability)` asks the
// token's policies. A resource Tessera does not serve is not allowed, saying so; of the
// non-resource paths, only discovery's (GET /api, /apis, /version, /openapi) are.
nlohmann::json accessReview(const nlohmann::json& review,
                            const std::function<bool(const std::string&, Capability)>& allowed);

// Kubernetes' Forbidden message: `pods "x" is forbidden: User "u" cannot delete resource "pods"
// in API group "" in the namespace "default"` (scripts grep for it).
std::string forbiddenMessage(const KubeTarget& t, const std::string& user);

}  // namespace tessera::server::kube
