// The Kubernetes API's documents, as pure functions (docs/kubernetes.md): version, discovery,
// Status errors, and Tessera's workloads seen as Pods and Tables, and Pods read back as
// workload specs. No state and no I/O: the handlers (server/kube/kube_api.cc) feed them.
//
//   json pod = kube::podObject(tenant, record, live_status, now);
//   json table = kube::podTable({pod}, "1042", kube::IncludeObject::kMetadata, now);
//   auto spec = kube::workloadFromPod(body, "default");   // 422 with the field on bad input
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "server/http_server.h"
#include "server/kube/access.h"
#include "server/workload_record.h"

namespace tessera::server::kube {

// What /version reports: a 1.32 server, so kubectl 1.31-1.33 print no skew warning.
inline constexpr std::string_view kGitVersion = "v1.32.0-tessera";
nlohmann::json versionInfo();

// Discovery. The aggregated form is answered when the client accepts it (kubectl does), with
// this content type; client-go reads the format from the content type alone.
inline constexpr std::string_view kAggregatedDiscoveryType =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
bool acceptsAggregatedDiscovery(std::string_view accept);
nlohmann::json aggregatedDiscovery(bool core_group);  // /api (core) or /apis
nlohmann::json legacyApiVersions();                   // /api
nlohmann::json legacyApiGroups();                     // /apis
// /api/v1 or /apis/<group>/<version>; nullopt for a group-version Tessera does not serve.
std::optional<nlohmann::json> apiResourceList(std::string_view group, std::string_view version);

// OpenAPI v3, the least kubectl needs to send fieldValidation=Strict and validate nothing on
// its side (docs/kubernetes.md): the index (its group-versions with hashed URLs, relative to the
// API's root), and a group-version's document (nullopt: none), with a path item per creatable
// kind whose patch operation names its kind, the fieldValidation parameter and the patch types
// the server takes.
nlohmann::json openApiIndex();
std::optional<nlohmann::json> openApiDocument(std::string_view group_version);
// The hash its index gives `group_version`'s document (it changes when the document does).
std::string openApiHash(std::string_view group_version);

// A Status object (errors, and some successes), with kubectl's reason for `code`.
nlohmann::json status(unsigned code, const std::string& message,
                      nlohmann::json details = nlohmann::json::object(), std::string reason = "");
std::string reasonFor(unsigned code);
// The same, as an answer.
HttpResponse statusResponse(unsigned code, const std::string& message,
                            nlohmann::json details = nlohmann::json::object(),
                            std::string reason = "");
// An error the pipeline or a shared handler answered in Tessera's shape ({"errors": [...]}),
// reshaped as a Status for a Kubernetes client: a failed authentication is 401 Unauthorized, as
// kubectl expects; anything already a Status, or not an error, is left as it is.
void asStatus(HttpResponse& resp);

// How long ago, as kubectl's AGE column says it (apimachinery's HumanDuration).
std::string humanDuration(std::chrono::seconds d);

// Whether a workload is shown as a Pod: one of one task (a Job's pods come with Jobs).
inline bool isPod(const WorkloadRecord& r) {
  return !r.spec.contains("tasks") || r.spec["tasks"] == 1;
}

// The namespace a workload is in ("default" for one submitted through Tessera's own API).
std::string namespaceOf(const WorkloadRecord& r);

// A workload as a Pod (one whose spec asks for one task), with `status` (the record's own, so
// that the object is as it was at its resourceVersion). `uid` is stable for the record (from its
// create revision).
nlohmann::json podObject(const std::string& tenant, const WorkloadRecord& r,
                         const WorkloadStatus& status);
// Where a Table's rows carry their objects (`includeObject`).
enum class IncludeObject { kNone, kMetadata, kObject };
IncludeObject includeObject(const std::string* value);
// Pods as a Table with kubectl's columns (NAME READY STATUS RESTARTS AGE; IP NODE NOMINATED
// NODE READINESS GATES in -o wide).
nlohmann::json podTable(const std::vector<nlohmann::json>& pods, const std::string& rv,
                        IncludeObject include, core::WallTime now);
nlohmann::json namespaceObject(const std::string& name, const std::string& created);
nlohmann::json namespaceTable(const std::vector<nlohmann::json>& namespaces, const std::string& rv,
                              IncludeObject include, core::WallTime now);
// A list of `kind` (PodList ...) at `rv`.
nlohmann::json list(std::string_view kind, std::string_view api_version,
                    std::vector<nlohmann::json> items, const std::string& rv);

// Whether an Accept header asks for a Table (kubectl get's human output).
bool wantsTable(std::string_view accept);

// A Pod to create, read as Tessera reads a workload: its spec for the workload API, what is
// kept of the Pod itself (metadata, spec) for reading it back, and warnings for what was
// accepted but means nothing here.
struct PodSubmission {
  std::string name;
  nlohmann::json spec;  // Tessera's workload spec.
  nlohmann::json kube;  // WorkloadRecord::kube.
  std::vector<std::string> warnings;
};
// An error is an invalid Pod (422) whose message names the field; `strict`: unknown fields
// are errors (fieldValidation=Strict) rather than warnings.
core::Result<PodSubmission> workloadFromPod(const nlohmann::json& pod, const std::string& ns,
                                            bool strict);

// A Kubernetes quantity ("500m", "2", "4Gi", "1.5") scaled: CPU in milli-cores, memory in MiB
// (rounded up). Errors name the text.
core::Result<int64_t> cpuMilli(const nlohmann::json& quantity);
core::Result<int64_t> memoryMiB(const nlohmann::json& quantity);

}  // namespace tessera::server::kube
