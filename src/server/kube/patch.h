// Changing an object (docs/kubernetes.md, "Changing objects"): the patch types kubectl sends
// (JSON merge patch, JSON patch, strategic merge patch) and server-side apply with field
// managers and conflicts, as pure functions on the object's JSON. What may change afterwards is
// the handler's to say (a pod's labels, a Secret's data, ...).
//
//   auto type = kube::patchTypeOf(content_type);       // nullopt: 415
//   auto next = kube::applyPatch(current, body, *type);  // errors: 422 (or 400) with the words
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::server::kube {

enum class PatchType { kMerge, kJson, kStrategic, kApply };

std::optional<PatchType> patchTypeOf(std::string_view content_type);

// `current` with `patch` applied: RFC 7386 merge patch; RFC 6902 JSON patch (a failed `test`
// or a path that is not there is an error); strategic merge patch as kubectl sends it (lists of
// objects with a `name` merged by name, `$patch: delete|replace`, `$setElementOrder/...` and
// `$retainKeys` read as order hints, `$deleteFromPrimitiveList/<field>`). Not for kApply.
core::Result<nlohmann::json> applyPatch(const nlohmann::json& current, const nlohmann::json& patch,
                                        PatchType type);

// The fields an object's configuration sets, as dotted paths (".metadata.labels.app",
// ".spec.containers[name=main].image"), leaves only; metadata other than labels and
// annotations, status, and apiVersion/kind are not fields anyone manages.
std::set<std::string> fieldPaths(const nlohmann::json& object);
// The value at such a path (null when it is not there).
nlohmann::json fieldValue(const nlohmann::json& object, const std::string& path);

// Server-side apply of `applied` by `manager` onto `current`, whose fields are owned as
// `managed` says ({"manager": [paths]}, updated in place): a field `applied` sets to a value
// other than the current one, owned by another manager, is a conflict (unless `force`: then
// `manager` takes it). Returns the merged object; a conflict is an error (ABORTED) whose message
// is Kubernetes' ("Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\"
// using v1: .metadata.labels.app").
core::Result<nlohmann::json> serverSideApply(const nlohmann::json& current,
                                             const nlohmann::json& applied,
                                             const std::string& manager, bool force,
                                             nlohmann::json& managed);

}  // namespace tessera::server::kube
