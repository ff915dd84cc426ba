// Secrets and ConfigMaps through the Kubernetes API (docs/kubernetes.md, "Secrets and
// ConfigMaps"): create, get, list, delete, over the tenant's sealed KV (kube/<ns>/<resource>/).
// Authorization is the pipeline's, on the KV path the object is kept at (kube/access.h); a list
// shows only the objects the token may read.
#include <optional>
#include <set>

#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/objects.h"
#include "server/kube/patch.h"

namespace tessera::server {

using nlohmann::json;

core::Result<std::vector<std::string>> ControlPlane::kubeKvNamespaces(
    const std::string& tenant) const {
  std::vector<std::string> out;
  auto all = secrets_->kv().list(tenant, "kube/", true);
  if (!all.isOk()) {
    if (all.status().code() == core::StatusCode::kNotFound) {
      return out;
    }
    return all.status();
  }
  for (const std::string& n : *all) {
    if (n.ends_with("/")) {
      out.push_back(n.substr(0, n.size() - 1));
    }
  }
  return out;
}

core::Result<std::map<std::string, json>> ControlPlane::kubeKvSelected(
    const Request& r, const std::string& tenant, const std::string& resource,
    const kube::PodFilter& filter) const {
  const std::string kind = resource == "secrets" ? "Secret" : "ConfigMap";
  secrets::KvEngine& kv = secrets_->kv();
  std::vector<std::string> namespaces = {filter.ns};
  if (filter.ns.empty()) {  // -A: every namespace that holds any.
    TESSERA_ASSIGN_OR_RETURN(namespaces, kubeKvNamespaces(tenant));
  }
  std::map<std::string, json> out;
  for (const std::string& ns : namespaces) {
    const std::string folder = "kube/" + ns + "/" + resource + "/";
    auto names = kv.list(tenant, folder, true);
    if (!names.isOk()) {
      if (names.status().code() == core::StatusCode::kNotFound) {
        continue;
      }
      return names.status();
    }
    for (const std::string& name : *names) {
      if (name.ends_with("/") ||
          !authorizedOn(r, "secrets/kv/data/" + folder + name, Capability::kRead)) {
        continue;  // Only what the token may read (its values are in the list).
      }
      auto read = kv.read(tenant, folder + name, 0);
      if (!read.isOk()) {
        continue;  // Deleted meanwhile.
      }
      json object = kube::objectFromKv(kind, tenant, ns, name, read->data, read->version);
      if (filter.matches(object)) {
        out.emplace(ns + "/" + name, std::move(object));
      }
    }
  }
  return out;
}

HttpResponse ControlPlane::kubeKvObjects(Request& r, const kube::KubeTarget& t, bool table) {
  const bool secret = t.resource == "secrets";
  const std::string kind = secret ? "Secret" : "ConfigMap";
  const std::string tenant = *r.scope.tenant;
  const core::WallTime now = clock_.wallNow();
  const auto include = kube::includeObject(kube::queryParam(r.scope.query, "includeObject"));
  if (secrets_ == nullptr) {
    return kube::statusResponse(
        503, "this server has no secrets engine: " + t.resource + " are kept in it");
  }
  secrets::KvEngine& kv = secrets_->kv();
  auto failed = [&](const core::Status& st) {
    HttpResponse resp = api::fromStatus(st);
    kube::asStatus(resp);
    return resp;
  };
  if (core::Status st = secrets_->keys().addTenant(tenant); !st.isOk()) {
    return failed(st);  // Its key, made on first use (sealed: 503).
  }
  const json details = {{"name", t.name}, {"kind", t.resource}};
  if (t.verb == "list" || t.verb == "watch") {
    const std::string* ls = kube::queryParam(r.scope.query, "labelSelector");
    const std::string* fs = kube::queryParam(r.scope.query, "fieldSelector");
    auto filter = kube::PodFilter::parse(t.ns, ls == nullptr ? "" : *ls, fs == nullptr ? "" : *fs);
    if (!filter.isOk()) {
      return kube::statusResponse(400, filter.status().message());
    }
    if (t.verb == "watch") {
      return kubeWatch(r, std::move(filter).value(), table,
                       secret ? KubeWatchKind::kSecrets : KubeWatchKind::kConfigMaps);
    }
    auto selected = kubeKvSelected(r, tenant, t.resource, *filter);
    if (!selected.isOk()) {
      return failed(selected.status());
    }
    std::vector<json> items;
    for (auto& [key, object] : *selected) {
      items.push_back(std::move(object));
    }
    const std::string rv = std::to_string(registry_.revision());
    if (table) {
      return api::reply(200, kube::kvTable(kind, items, rv, include, now));
    }
    return api::reply(200, kube::list(kind + "List", "v1", std::move(items), rv));
  }
  // A new one (POST, or server-side apply of one that is not there), or a new version of one
  // (PUT, PATCH): `body` read as the object, its managers `managed`, written; 201 or 200.
  auto write = [&](const json& body, json managed, bool create, const std::string& created,
                   bool strict) -> HttpResponse {
    auto sub = kube::kvFromObject(body, kind, t.ns, strict, now);
    if (!sub.isOk()) {
      return kube::invalidObject(kind, "v1", t.name, sub.status().message());
    }
    const std::string path = kube::kvPathOf(t.resource, t.ns, sub->name);
    if (core::Status ok = secrets::KvEngine::checkPath(path); !ok.isOk() || !validName(t.ns)) {
      return kube::statusResponse(422, kind + " \"" + sub->name +
                                           "\" is invalid: metadata.name: Invalid value: \"" +
                                           sub->name + "\": a lowercase RFC 1123 subdomain");
    }
    if (!create && sub->name != t.name) {
      return kube::statusResponse(400, "the name of an object cannot change");
    }
    auto exists = kv.exists(tenant, path);
    if (!exists.isOk()) {
      return failed(exists.status());
    }
    if (create && *exists && kv.read(tenant, path, 0).isOk()) {
      return kube::statusResponse(409, t.resource + " \"" + sub->name + "\" already exists",
                                  {{"name", sub->name}, {"kind", t.resource}}, "AlreadyExists");
    }
    json& about = sub->data[std::string(kube::kKubeObjectKey)];
    if (!created.empty()) {
      about["creationTimestamp"] = created;
    }
    about["managedFields"] = std::move(managed);
    const json created_by = {{"accessor", r.token.accessor},
                             {"display_name", r.token.display_name}};
    // A key left by a deletion (its versions kept) is written over; a new one only if none.
    auto version = kv.write(tenant, path, sub->data,
                            *exists ? std::nullopt : std::optional<int64_t>(0), created_by);
    if (!version.isOk()) {
      return failed(version.status());
    }
    HttpResponse resp = api::reply(
        create ? 201 : 200, kube::objectFromKv(kind, tenant, t.ns, sub->name, sub->data, *version));
    for (const std::string& w : sub->warnings) {
      resp.headers.emplace_back("Warning", "299 - \"" + w + "\"");
    }
    return resp;
  };
  const std::string* validation = kube::queryParam(r.scope.query, "fieldValidation");
  const bool strict = validation != nullptr && *validation == "Strict";
  const std::string* manager = kube::queryParam(r.scope.query, "fieldManager");
  if (t.verb == "create") {
    return write(
        r.body,
        {{manager != nullptr ? *manager : "kubectl-create", json(kube::fieldPaths(r.body))}}, true,
        "", strict);
  }
  const std::string path = kube::kvPathOf(t.resource, t.ns, t.name);
  auto read = kv.read(tenant, path, 0);
  if (!read.isOk()) {
    if (read.status().code() == core::StatusCode::kNotFound && t.verb == "patch" &&
        kube::patchTypeOf(r.http.header("content-type")) == kube::PatchType::kApply &&
        manager != nullptr) {
      return write(r.body, {{*manager, json(kube::fieldPaths(r.body))}}, true, "", true);
    }
    if (read.status().code() == core::StatusCode::kNotFound) {
      return kube::statusResponse(404, t.resource + " \"" + t.name + "\" not found", details);
    }
    return failed(read.status());
  }
  if (!t.subresource.empty()) {
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  json object = kube::objectFromKv(kind, tenant, t.ns, t.name, read->data, read->version);
  if (t.verb == "get") {
    const std::string rv = std::to_string(read->version);
    return api::reply(200, table ? kube::kvTable(kind, {object}, rv, include, now) : object);
  }
  if (t.verb == "patch" || t.verb == "update") {
    const json about = read->data.value(std::string(kube::kKubeObjectKey), json::object());
    json managed = about.value("managedFields", json::object());
    json next;
    if (auto refused = kubeNextObject(r, t, object, managed, next)) {
      return *refused;
    }
    if (object.value("immutable", false) == true &&
        (next.value("data", json()) != object.value("data", json()) ||
         next.value("stringData", json()) != json() ||
         next.value("type", json()) != object.value("type", json()) ||
         next.value("immutable", json()) != true)) {
      return kube::statusResponse(422,
                                  kind + " \"" + t.name +
                                      "\" is invalid: data: Forbidden: field is immutable when "
                                      "`immutable` is set");
    }
    return write(next, std::move(managed), false, kube::textOr(about, "creationTimestamp"), false);
  }
  if (t.verb == "delete") {
    // Gone for good, with every version (as a deleted Secret is).
    if (core::Status st = kv.deleteKey(tenant, path); !st.isOk()) {
      return failed(st);
    }
    return api::reply(
        200,
        kube::status(200, "",
                     {{"name", t.name}, {"kind", t.resource}, {"uid", object["metadata"]["uid"]}}));
  }
  return kube::statusResponse(405,
                              "the server does not allow this method on the requested resource");
}

std::optional<HttpResponse> ControlPlane::kubeResolveEnv(Request& r, const std::string& tenant,
                                                         const std::string& ns,
                                                         kube::PodSubmission& sub,
                                                         std::set<std::string>& seal) {
  if (sub.env_refs.empty()) {
    return std::nullopt;
  }
  const std::string kind = sub.kube.value("kind", "Pod");
  auto refused = [&](unsigned code, const kube::EnvRef& ref, const std::string& message) {
    const std::string m = ref.field + ": " + message;
    return kube::statusResponse(
        code, kind + " \"" + sub.name + "\" is invalid: " + m,
        {{"name", sub.name},
         {"kind", kind},
         {"causes",
          {{{"reason", "FieldValueInvalid"}, {"message", message}, {"field", ref.field}}}}});
  };
  if (secrets_ == nullptr) {
    return refused(422, sub.env_refs[0],
                   "Forbidden: this server has no secrets engine, where Secrets and ConfigMaps "
                   "are kept");
  }
  json from_refs = json::object();  // envFrom's, then valueFrom's over them.
  json values = json::object();
  for (const kube::EnvRef& ref : sub.env_refs) {
    const std::string path = kube::kvPathOf(ref.resource, ns, ref.name);
    const std::string singular = ref.resource == "secrets" ? "secret" : "configmap";
    // A workload gets only what its submitter may read (docs/secrets.md), as for `secrets.kv`.
    if (!authorizedOn(r, "secrets/kv/data/" + path, Capability::kRead)) {
      return kube::statusResponse(403, kind + " \"" + sub.name + "\" is forbidden: " + ref.field +
                                           ": this token may not "
                                           "read " +
                                           singular + " \"" + ref.name + "\" (secrets/kv/data/" +
                                           path + ")");
    }
    auto read = secrets_->kv().read(tenant, path, 0);
    if (!read.isOk()) {
      if (read.status().code() != core::StatusCode::kNotFound) {
        HttpResponse resp = api::fromStatus(read.status());
        kube::asStatus(resp);
        return resp;
      }
      if (ref.optional) {
        continue;
      }
      return refused(422, ref, "Not found: " + singular + " \"" + ref.name + "\"");
    }
    if (ref.volume) {  // Read again as each task starts; only checked here.
      for (const std::string& key : ref.keys) {
        if (!read->data.contains(key) && !ref.optional) {
          return refused(422, ref,
                         "Not found: key \"" + key + "\" in " + singular + " \"" + ref.name + "\"");
        }
      }
      continue;
    }
    const bool secret = ref.resource == "secrets";
    for (const auto& [k, v] : read->data.items()) {
      if (k == kube::kKubeObjectKey || !v.is_string()) {
        continue;
      }
      if (ref.key.empty()) {  // envFrom: every key that makes a variable name.
        from_refs[ref.prefix + k] = v;
        if (secret) {
          seal.insert(ref.prefix + k);
        }
      } else if (k == ref.key) {
        values[ref.env] = v;
        if (secret) {
          seal.insert(ref.env);
        }
      }
    }
    if (!ref.key.empty() && !values.contains(ref.env) && !ref.optional) {
      return refused(422, ref,
                     "Not found: key \"" + ref.key + "\" in " + singular + " \"" + ref.name + "\"");
    }
  }
  json env = std::move(from_refs);
  env.update(sub.spec.value("env", json::object()));
  env.update(values);
  if (!env.empty()) {
    sub.spec["env"] = std::move(env);
  }
  return std::nullopt;
}

}  // namespace tessera::server
