// PUT and PATCH (merge, JSON, strategic merge, server-side apply) of pods and Jobs
// (docs/kubernetes.md, "Changing objects"): the object with the change applied is compared with
// the current one; of a workload, only its labels and annotations may change (Tessera runs a
// workload as it was submitted, as Kubernetes keeps a pod's spec), and field managers are kept
// in its record for server-side apply's conflicts.
#include "core/rfc3339.h"
#include "model/node.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/objects.h"
#include "server/kube/patch.h"

namespace tessera::server {

using nlohmann::json;

namespace {

std::string fieldManager(const std::map<std::string, std::string>& query, kube::PatchType type,
                         bool put) {
  if (const std::string* m = kube::queryParam(query, "fieldManager")) {
    return *m;
  }
  return put ? "kubectl-replace" : type == kube::PatchType::kApply ? "" : "kubectl-patch";
}

}  // namespace

std::optional<HttpResponse> ControlPlane::kubeNextObject(Request& r, const kube::KubeTarget& t,
                                                         const json& current, json& managed,
                                                         json& next) {
  const bool put = r.http.method == "PUT";
  std::optional<kube::PatchType> type = kube::PatchType::kMerge;
  if (!put) {
    type = kube::patchTypeOf(r.http.header("content-type"));
    if (!type) {
      return kube::statusResponse(
          415,
          "the body of the request was in an unknown format - accepted media types "
          "include: application/json-patch+json, application/merge-patch+json, "
          "application/apply-patch+yaml, application/strategic-merge-patch+json");
    }
  }
  const std::string manager = fieldManager(r.scope.query, *type, put);
  if (put) {
    // A replace: the whole object, at the version it was read at (if it says).
    const std::string rv =
        kube::textOr(r.body.value("metadata", json::object()), "resourceVersion");
    if (!rv.empty() && rv != current["metadata"].value("resourceVersion", "")) {
      return kube::statusResponse(
          409,
          "Operation cannot be fulfilled on " + t.resource + " \"" + t.name +
              "\": the object has been modified; please apply your changes to the latest "
              "version and try again",
          {{"name", t.name}, {"kind", t.resource}}, "Conflict");
    }
    next = r.body;
  } else if (*type == kube::PatchType::kApply) {
    if (manager.empty()) {
      return kube::statusResponse(422,
                                  "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                                  "Required value: is required for apply patch");
    }
    const bool force = kube::queryBool(kube::queryParam(r.scope.query, "force"), false);
    auto applied = kube::serverSideApply(current, r.body, manager, force, managed);
    if (!applied.isOk()) {
      if (applied.status().code() == core::StatusCode::kFailedPrecondition) {
        json causes = json::array();
        std::string rest = applied.status().message();
        rest = rest.substr(rest.find(": ") + 2);
        for (size_t at = 0; at <= rest.size();) {
          const size_t nl = rest.find('\n', at);
          const std::string line = rest.substr(at, nl == std::string::npos ? nl : nl - at);
          const size_t colon = line.rfind(": ");
          causes.push_back({{"type", "FieldManagerConflict"},
                            {"message", line.substr(0, colon)},
                            {"field", line.substr(colon + 2)}});
          if (nl == std::string::npos) {
            break;
          }
          at = nl + 1;
        }
        return kube::statusResponse(409, applied.status().message(),
                                    {{"name", t.name}, {"kind", t.resource}, {"causes", causes}},
                                    "Conflict");
      }
      return kube::statusResponse(400, applied.status().message());
    }
    next = std::move(applied).value();
    return std::nullopt;
  } else {
    auto patched = kube::applyPatch(current, r.body, *type);
    if (!patched.isOk()) {
      return kube::statusResponse(*type == kube::PatchType::kJson ? 422 : 400,
                                  patched.status().message());
    }
    next = std::move(patched).value();
  }
  // An update's manager owns what it changed.
  if (!managed.is_object()) {
    managed = json::object();
  }
  std::set<std::string> changed;
  for (const std::string& p : kube::fieldPaths(next)) {
    if (kube::fieldValue(next, p) != kube::fieldValue(current, p)) {
      changed.insert(p);
    }
  }
  if (!changed.empty()) {
    json& owned = managed[manager];
    std::set<std::string> all =
        owned.is_array() ? owned.get<std::set<std::string>>() : std::set<std::string>{};
    all.insert(changed.begin(), changed.end());
    owned = json(all);
  }
  return std::nullopt;
}

HttpResponse ControlPlane::kubeChangeWorkload(Request& r, const kube::KubeTarget& t,
                                              const WorkloadRecord& w) {
  const bool job = kube::isJob(w);
  const std::string kind = job ? "Job" : "Pod";
  const json current = job ? kube::jobObject(*r.scope.tenant, w, w.status)
                           : kube::podObject(*r.scope.tenant, w, w.status);
  json managed = w.kube.is_object() ? w.kube.value("managedFields", json::object()) : json();
  json next;
  if (auto refused = kubeNextObject(r, t, current, managed, next)) {
    return *refused;
  }
  if (!next.is_object()) {
    return kube::statusResponse(422, kind + " \"" + t.name + "\" is invalid: expected an object");
  }
  const json& m = next.value("metadata", json::object());
  if (kube::textOr(m, "name", t.name) != t.name || kube::textOr(m, "namespace", t.ns) != t.ns) {
    return kube::statusResponse(400, "the name and namespace of an object cannot change");
  }
  // Only labels and annotations change, and a Job's `suspend`; its spec is what was submitted.
  json next_spec = next.value("spec", json::object());
  json current_spec = current["spec"];
  std::optional<bool> suspend;
  if (job && next_spec.is_object()) {
    const json wanted = next_spec.value("suspend", json(false));
    if (!wanted.is_boolean() && !wanted.is_null()) {
      return kube::statusResponse(
          422, kind + " \"" + t.name + "\" is invalid: spec.suspend: expected true or false");
    }
    if (wanted.is_boolean() && wanted != current_spec.value("suspend", json(false))) {
      suspend = wanted.get<bool>();
    }
    next_spec.erase("suspend");
    current_spec.erase("suspend");
  }
  if (next_spec != current_spec) {
    const std::string m2 = "spec: Forbidden: " + std::string(job ? "job" : "pod") +
                           " updates may not change fields other than " +
                           (job ? "`metadata.labels`, `metadata.annotations` and `spec.suspend`"
                                : "`metadata.labels` and `metadata.annotations`") +
                           ": Tessera runs a workload as it was submitted (delete it and create "
                           "it anew)";
    return kube::statusResponse(
        422, kind + " \"" + t.name + "\" is invalid: " + m2,
        {{"name", t.name},
         {"kind", kind},
         {"causes",
          {{{"reason", "FieldValueForbidden"}, {"message", m2.substr(6)}, {"field", "spec"}}}}});
  }
  json labels = m.value("labels", json::object());
  json annotations = m.value("annotations", json::object());
  for (const auto& [field, map] : {std::pair{"labels", &labels}, {"annotations", &annotations}}) {
    if (map->is_null()) {
      *map = json::object();
    }
    bool ok = map->is_object();
    for (const auto& [k, v] : ok ? map->items() : json::object().items()) {
      ok = ok && v.is_string() && model::validateLabel(k, "").isOk();
    }
    if (!ok) {
      return kube::statusResponse(422, kind + " \"" + t.name + "\" is invalid: metadata." + field +
                                           ": Invalid value: a map of label keys to "
                                           "strings");
    }
  }
  // Labels and annotations into the record's Kubernetes part.
  auto relabel = [&](WorkloadRecord& updated) {
    if (!updated.kube.is_object()) {
      updated.kube = json::object();
    }
    for (const auto& [field, map] : {std::pair{"labels", &labels}, {"annotations", &annotations}}) {
      if (map->empty()) {
        updated.kube.erase(field);
      } else {
        updated.kube[field] = *map;
      }
    }
    updated.kube["managedFields"] = managed;
  };
  if (suspend) {
    // Suspended (its pods stop, none is made) or resumed, as `kubectl patch job --type=merge -p
    // '{"spec":{"suspend":true}}'` asks; the labels in the same write.
    auto done = setSuspended(*r.scope.tenant, w.name, *suspend, relabel);
    if (!done.isOk()) {
      HttpResponse resp = api::fromStatus(done.status());
      kube::asStatus(resp);
      return resp;
    }
    return api::reply(200, kube::jobObject(*r.scope.tenant, **done, (*done)->status));
  }
  std::lock_guard write_lock(status_write_mu_);
  const WorkloadPtr latest = registry_.get(*r.scope.tenant, w.name);
  if (latest == nullptr) {
    return kube::statusResponse(404, t.resource + " \"" + t.name + "\" not found");
  }
  WorkloadRecord updated = *latest;
  const json old_kube = updated.kube;
  relabel(updated);
  if (updated.kube != old_kube) {
    auto put = store_.put(api::workloadKey(*r.scope.tenant, w.name), encodeWorkload(updated));
    if (!put.isOk()) {
      return api::fromStatus(put.status());
    }
    waitForOwnWrite(*put);
  }
  const WorkloadPtr now = registry_.get(*r.scope.tenant, w.name);
  const WorkloadRecord& shown = now != nullptr ? *now : updated;
  return api::reply(200, job ? kube::jobObject(*r.scope.tenant, shown, shown.status)
                             : kube::podObject(*r.scope.tenant, shown, shown.status));
}

}  // namespace tessera::server
