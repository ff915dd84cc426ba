#include "server/kube/access.h"

#include <set>
#include <vector>

#include "core/strings.h"

namespace tessera::server::kube {

const std::string* queryParam(const std::map<std::string, std::string>& query, const char* key) {
  auto it = query.find(key);
  return it == query.end() ? nullptr : &it->second;
}

bool queryBool(const std::string* value, bool fallback) {
  if (value == nullptr) {
    return fallback;
  }
  static const std::set<std::string> kTrue = {"1", "t", "T", "TRUE", "true", "True"};
  static const std::set<std::string> kFalse = {"0", "f", "F", "FALSE", "false", "False"};
  if (kTrue.contains(*value)) {
    return true;
  }
  if (kFalse.contains(*value)) {
    return false;
  }
  return fallback;
}

KubeTarget kubeTarget(std::string_view path, std::string_view method,
                      const std::map<std::string, std::string>& query, const nlohmann::json& body) {
  KubeTarget t;
  const std::vector<std::string> s = core::splitList(path, '/');
  size_t i = 1;  // After "k8s".
  if (s.size() > i && s[i] == "api") {
    i += 1;
  } else if (s.size() > i + 1 && s[i] == "apis") {
    t.group = s[i + 1];
    i += 2;
  } else {
    return t;  // /version, /openapi, /apis: discovery.
  }
  if (s.size() <= i) {
    return t;
  }
  t.version = s[i++];
  if (s.size() > i + 2 && s[i] == "namespaces") {
    t.ns = s[i + 1];
    i += 2;
  }
  if (s.size() <= i) {
    return t;  // /api/v1: discovery.
  }
  t.resource = s[i++];
  if (s.size() > i) {
    t.name = s[i++];
  }
  if (s.size() > i) {
    t.subresource = s[i++];
  }
  // /api/v1/namespaces/<name>: the namespace itself.
  if (t.resource.empty() && !t.ns.empty()) {
    t.resource = "namespaces";
    t.name = t.ns;
    t.ns.clear();
  }
  if (method == "GET") {
    t.verb = !t.name.empty()                                ? "get"
             : queryBool(queryParam(query, "watch"), false) ? "watch"
                                                            : "list";
  } else if (method == "POST") {
    t.verb = "create";
    if (t.name.empty() && body.is_object()) {
      const nlohmann::json& m = body.value("metadata", nlohmann::json::object());
      if (m.is_object() && m.contains("name") && m["name"].is_string()) {
        t.name = m["name"];
      }
    }
  } else if (method == "PUT") {
    t.verb = "update";
  } else if (method == "PATCH") {
    t.verb = "patch";
  } else if (method == "DELETE") {
    t.verb = t.name.empty() ? "deletecollection" : "delete";
  }
  return t;
}

std::optional<TesseraAccess> tesseraAccess(const KubeTarget& t) {
  if (t.resource.empty()) {
    return std::nullopt;
  }
  Capability cap = Capability::kRead;
  if (t.verb == "list" || t.verb == "watch") {
    cap = Capability::kList;
  } else if (t.verb == "create") {
    cap = Capability::kCreate;
  } else if (t.verb == "update" || t.verb == "patch") {
    cap = Capability::kUpdate;
  } else if (t.verb == "delete" || t.verb == "deletecollection") {
    cap = Capability::kDelete;
  }
  // Nodes are Tessera's nodes (capacity only); events are of workloads.
  if (t.group.empty() && t.resource == "nodes") {
    return TesseraAccess{"nodes", t.name.empty() ? Capability::kList : Capability::kRead};
  }
  if (t.group.empty() && t.resource == "events") {
    return TesseraAccess{"workloads", Capability::kList};
  }
  // Secrets and ConfigMaps are KV keys of the tenant (kube/<ns>/<resource>/<name>).
  if (t.group.empty() && (t.resource == "secrets" || t.resource == "configmaps")) {
    if (t.verb == "list" || t.verb == "watch") {
      return TesseraAccess{t.ns.empty()
                               ? "secrets/kv/metadata/kube/"
                               : "secrets/kv/metadata/kube/" + t.ns + "/" + t.resource + "/",
                           Capability::kList};
    }
    return TesseraAccess{"secrets/kv/data/kube/" + t.ns + "/" + t.resource + "/" + t.name, cap};
  }
  // Pods and Jobs are workloads.
  const bool jobs = t.group == "batch" && t.resource == "jobs";
  if (jobs || (t.group.empty() && (t.resource == "pods" || t.resource == "namespaces"))) {
    if (t.resource == "namespaces") {
      // Reading them lists the tenant's objects; a created one is kept in its KV
      // (kube/<name>/namespace), as its Secrets are.
      if (t.verb == "get" || t.verb == "list" || t.verb == "watch") {
        return TesseraAccess{"workloads", Capability::kList};
      }
      return TesseraAccess{"secrets/kv/data/kube/" + t.name + "/namespace", cap};
    }
    if (t.subresource == "log") {
      return TesseraAccess{"workloads/" + t.name + "/logs", Capability::kRead};
    }
    return TesseraAccess{t.name.empty() ? "workloads" : "workloads/" + t.name, cap};
  }
  return std::nullopt;
}

nlohmann::json accessReview(const nlohmann::json& review,
                            const std::function<bool(const std::string&, Capability)>& allowed) {
  nlohmann::json out = review.is_object() ? review : nlohmann::json::object();
  out["apiVersion"] = "authorization.k8s.io/v1";
  out["kind"] = "SelfSubjectAccessReview";
  if (!out.contains("metadata") || !out["metadata"].is_object()) {
    out["metadata"] = nlohmann::json::object();
  }
  const nlohmann::json spec = out.value("spec", nlohmann::json::object());
  const nlohmann::json none = nlohmann::json::object();
  auto text = [](const nlohmann::json& o, const char* k) {
    return o.is_object() && o.contains(k) && o[k].is_string() ? o[k].get<std::string>() : "";
  };
  bool ok = false;
  std::string reason;
  if (spec.is_object() && spec.contains("resourceAttributes")) {
    const nlohmann::json& a = spec["resourceAttributes"];
    KubeTarget t;
    t.group = text(a, "group");
    t.version = text(a, "version");
    t.resource = text(a, "resource");
    t.ns = text(a, "namespace");
    t.name = text(a, "name");
    t.subresource = text(a, "subresource");
    t.verb = text(a, "verb");
    static const std::set<std::string> kVerbs = {"get",    "list",  "watch",  "create",
                                                 "update", "patch", "delete", "deletecollection"};
    const auto need = kVerbs.contains(t.verb) ? tesseraAccess(t) : std::nullopt;
    if (!need) {
      reason = "Tessera does not serve " + t.verb + " on \"" + t.resource + "\"" +
               (t.group.empty() ? "" : " in API group \"" + t.group + "\"");
    } else {
      ok = allowed(need->path, need->capability);
      reason =
          std::string(ok ? "allowed" : "not allowed") + " by the token's policies on " + need->path;
    }
  } else if (spec.is_object() && spec.contains("nonResourceAttributes")) {
    const nlohmann::json& a = spec["nonResourceAttributes"];
    const std::string path = text(a, "path");
    ok = text(a, "verb") == "get" &&
         (path == "/api" || path == "/apis" || path == "/version" || path.starts_with("/api/") ||
          path.starts_with("/apis/") || path.starts_with("/openapi"));
    reason = ok ? "discovery is open to any token" : "Tessera serves no such path";
  } else {
    reason = "the review names neither resourceAttributes nor nonResourceAttributes";
  }
  out["status"] = {{"allowed", ok}, {"reason", reason}};
  if (!ok) {
    out["status"]["denied"] = false;  // Not denied by a rule: just not allowed (as RBAC says).
  }
  return out;
}

std::string forbiddenMessage(const KubeTarget& t, const std::string& user) {
  std::string what = t.resource + (t.group.empty() ? "" : "." + t.group);
  if (!t.name.empty()) {
    what += " \"" + t.name + "\"";
  }
  const std::string resource = t.resource + (t.subresource.empty() ? "" : "/" + t.subresource);
  std::string msg = what + " is forbidden: User \"" + user + "\" cannot " + t.verb +
                    " resource \"" + resource + "\" in API group \"" + t.group + "\"";
  if (!t.ns.empty()) {
    msg += " in the namespace \"" + t.ns + "\"";
  }
  return msg;
}

}  // namespace tessera::server::kube
