// Namespaces through the Kubernetes API (docs/kubernetes.md, "Namespaces"). A tenant's
// namespaces are `default`, every one its pods, Jobs, Secrets or ConfigMaps are in, and those
// created (`kubectl create namespace`, a Namespace in `kubectl apply -f`): a created one is a KV
// key of the tenant, kube/<name>/namespace, holding its labels and annotations. Deleting one
// deletes its Secrets and ConfigMaps; one that still holds pods or Jobs is refused (409), never
// emptied behind the user's back.
#include <map>

#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/objects.h"
#include "server/kube/patch.h"

namespace tessera::server {

using nlohmann::json;

namespace {

std::string namespaceKey(const std::string& name) { return "kube/" + name + "/namespace"; }

// What is known of one namespace.
struct Namespace {
  std::string created;  // "" : not known (default, before anything is in it).
  json about;           // Its KV key's object data (labels, annotations, managedFields); null.
  int64_t version = 0;  // Its KV key's version; 0: none.
  size_t workloads = 0;
};

// The namespace as Kubernetes shows it.
json namespaceView(const std::string& name, const Namespace& n, core::WallTime now) {
  json object =
      kube::namespaceObject(name, n.created.empty() ? core::formatRfc3339(now) : n.created);
  if (n.about.is_object()) {
    for (const char* field : {"labels", "annotations"}) {
      if (n.about.contains(field) && n.about[field].is_object()) {
        object["metadata"][field].update(n.about[field]);
      }
    }
  }
  object["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;  // Always its own.
  if (n.version > 0) {
    object["metadata"]["resourceVersion"] = std::to_string(n.version);
  }
  return object;
}

// The labels and annotations of a Namespace object's metadata, checked: maps of strings.
core::Result<json> namespaceAbout(const json& body) {
  json about = json::object();
  const json metadata = body.value("metadata", json::object());
  for (const char* field : {"labels", "annotations"}) {
    if (!metadata.contains(field) || metadata[field].is_null()) {
      continue;
    }
    if (!metadata[field].is_object()) {
      return core::invalidArgument(std::string("metadata.") + field +
                                   ": expected a map of strings");
    }
    for (const auto& [k, v] : metadata[field].items()) {
      if (!v.is_string()) {
        return core::invalidArgument(std::string("metadata.") + field + "[" + k +
                                     "]: expected a string");
      }
    }
    if (!metadata[field].empty()) {
      about[field] = metadata[field];
    }
  }
  if (about.contains("labels")) {
    about["labels"].erase("kubernetes.io/metadata.name");  // Kubernetes sets it, always.
  }
  return about;
}

}  // namespace

HttpResponse ControlPlane::kubeNamespaces(Request& r, const kube::KubeTarget& t, bool table) {
  const std::string tenant = *r.scope.tenant;
  const core::WallTime now = clock_.wallNow();
  const std::string rv = std::to_string(registry_.revision());
  const json details = {{"name", t.name}, {"kind", "namespaces"}};
  auto failed = [&](const core::Status& st) {
    HttpResponse resp = api::fromStatus(st);
    kube::asStatus(resp);
    return resp;
  };
  // Every namespace of the tenant: default, its workloads', its KV objects' and those created.
  std::map<std::string, Namespace> known = {{"default", {}}};
  for (const WorkloadPtr& w : registry_.list(tenant)) {
    Namespace& n = known[kube::namespaceOf(*w)];
    ++n.workloads;
    if (n.created.empty() || w->submitted < n.created) {
      n.created = w->submitted;
    }
  }
  if (secrets_ != nullptr) {
    if (core::Status st = secrets_->keys().addTenant(tenant); !st.isOk()) {
      return failed(st);  // Its key, made on first use (sealed: 503).
    }
    auto folders = kubeKvNamespaces(tenant);
    if (!folders.isOk()) {
      return failed(folders.status());
    }
    for (const std::string& name : *folders) {
      if (!validName(name)) {
        continue;
      }
      Namespace& n = known[name];
      if (auto read = secrets_->kv().read(tenant, namespaceKey(name), 0); read.isOk()) {
        n.about = read->data.value(std::string(kube::kKubeObjectKey), json::object());
        n.version = read->version;
        n.created = kube::textOr(n.about, "creationTimestamp", n.created);
      }
    }
  }
  const auto include = kube::includeObject(kube::queryParam(r.scope.query, "includeObject"));
  if (t.verb == "list" || t.verb == "watch") {
    if (t.verb == "watch") {
      return kube::statusResponse(405, "watching namespaces is not served");
    }
    std::vector<json> items;
    for (const auto& [name, n] : known) {
      items.push_back(namespaceView(name, n, now));
    }
    if (table) {
      return api::reply(200, kube::namespaceTable(items, rv, include, now));
    }
    return api::reply(200, kube::list("NamespaceList", "v1", std::move(items), rv));
  }
  const std::string* validation = kube::queryParam(r.scope.query, "fieldValidation");
  const bool strict = validation != nullptr && *validation == "Strict";
  const std::string* manager = kube::queryParam(r.scope.query, "fieldManager");
  // Writes namespace `name`'s key: `body`'s labels and annotations, its managers `managed`.
  auto write = [&](const std::string& name, const json& body, json managed, bool create,
                   const std::string& created) -> HttpResponse {
    if (secrets_ == nullptr) {
      return kube::statusResponse(
          503, "this server has no secrets engine: created namespaces are kept in it");
    }
    auto metadata = kube::objectMetadata(body, "Namespace", "v1", "");
    if (!metadata.isOk()) {
      return kube::invalidObject("Namespace", "v1", name, metadata.status().message());
    }
    static const std::set<std::string> kFields = {"apiVersion", "kind", "metadata", "spec",
                                                  "status"};
    std::vector<std::string> warnings;
    for (const auto& [key, value] : body.items()) {
      if (!kFields.contains(key)) {
        if (strict) {
          return kube::statusResponse(400, "strict decoding error: unknown field \"" + key + "\"");
        }
        warnings.push_back(key + " is not a field of a Namespace and is ignored");
      }
    }
    const std::string named = (*metadata)["name"];
    if (!validName(named)) {
      return kube::invalidObject(
          "Namespace", "v1", named,
          "metadata.name: Invalid value: \"" + named +
              "\": a lowercase RFC 1123 label must consist of lower case alphanumeric "
              "characters or '-', and must start and end with an alphanumeric character");
    }
    if (!create && named != name) {
      return kube::statusResponse(400, "the name of an object cannot change");
    }
    if (create && known.contains(named)) {
      return kube::statusResponse(409, "namespaces \"" + named + "\" already exists",
                                  {{"name", named}, {"kind", "namespaces"}}, "AlreadyExists");
    }
    auto about = namespaceAbout(body);
    if (!about.isOk()) {
      return kube::invalidObject("Namespace", "v1", named, about.status().message());
    }
    (*about)["creationTimestamp"] = created.empty() ? core::formatRfc3339(now) : created;
    (*about)["managedFields"] = std::move(managed);
    const json data = {{std::string(kube::kKubeObjectKey), *about}};
    const json by = {{"accessor", r.token.accessor}, {"display_name", r.token.display_name}};
    auto version = secrets_->kv().write(tenant, namespaceKey(named), data, std::nullopt, by);
    if (!version.isOk()) {
      return failed(version.status());
    }
    Namespace n = known[named];
    n.about = *about;
    n.version = *version;
    n.created = (*about)["creationTimestamp"];
    HttpResponse resp = api::reply(create ? 201 : 200, namespaceView(named, n, now));
    for (const std::string& w : warnings) {
      resp.headers.emplace_back("Warning", "299 - \"" + w + "\"");
    }
    return resp;
  };
  if (t.verb == "create") {
    return write(
        "", r.body,
        {{manager != nullptr ? *manager : "kubectl-create", json(kube::fieldPaths(r.body))}}, true,
        "");
  }
  auto found = known.find(t.name);
  if (found == known.end()) {
    if (t.verb == "patch" && manager != nullptr &&
        kube::patchTypeOf(r.http.header("content-type")) == kube::PatchType::kApply) {
      return write(t.name, r.body, {{*manager, json(kube::fieldPaths(r.body))}}, true, "");
    }
    return kube::statusResponse(404, "namespaces \"" + t.name + "\" not found", details);
  }
  const json object = namespaceView(t.name, found->second, now);
  if (t.verb == "get") {
    if (!t.subresource.empty()) {
      return kube::statusResponse(404, "the server could not find the requested resource");
    }
    return api::reply(200, table ? kube::namespaceTable({object}, rv, include, now) : object);
  }
  if (t.verb == "patch" || t.verb == "update") {
    const json about = found->second.about.is_object() ? found->second.about : json::object();
    json managed = about.value("managedFields", json::object());
    json next;
    if (auto refused = kubeNextObject(r, t, object, managed, next)) {
      return *refused;
    }
    return write(t.name, next, std::move(managed), false, kube::textOr(about, "creationTimestamp"));
  }
  if (t.verb != "delete") {
    return kube::statusResponse(405,
                                "the server does not allow this method on the requested resource");
  }
  if (t.name == "default") {
    return kube::statusResponse(403,
                                "namespaces \"default\" is forbidden: this namespace may not be "
                                "deleted",
                                details, "Forbidden");
  }
  if (found->second.workloads > 0) {
    return kube::statusResponse(
        409,
        "namespaces \"" + t.name + "\" still holds " + std::to_string(found->second.workloads) +
            " pods and Jobs: delete them first (Tessera does not delete a namespace's workloads "
            "for you)",
        details, "Conflict");
  }
  // Its Secrets and ConfigMaps go with it, each as the token may delete it; then its key.
  std::vector<std::string> doomed;
  if (secrets_ != nullptr) {
    for (const char* resource : {"secrets", "configmaps"}) {
      const std::string folder = "kube/" + t.name + "/" + resource + "/";
      auto names = secrets_->kv().list(tenant, folder, true);
      for (const std::string& name : names.isOk() ? *names : std::vector<std::string>{}) {
        if (name.ends_with("/")) {
          continue;
        }
        if (!authorizedOn(r, "secrets/kv/data/" + folder + name, Capability::kDelete)) {
          return kube::statusResponse(403,
                                      "namespaces \"" + t.name +
                                          "\" is forbidden: this token may "
                                          "not delete " +
                                          std::string(resource) + " \"" + name + "\" in it",
                                      details, "Forbidden");
        }
        doomed.push_back(folder + name);
      }
    }
    if (found->second.version > 0) {
      doomed.push_back(namespaceKey(t.name));
    }
    for (const std::string& path : doomed) {
      if (core::Status st = secrets_->kv().deleteKey(tenant, path);
          !st.isOk() && st.code() != core::StatusCode::kNotFound) {
        return failed(st);
      }
    }
  }
  json gone = object;
  gone["status"]["phase"] = "Terminating";
  return api::reply(200, gone);
}

}  // namespace tessera::server
