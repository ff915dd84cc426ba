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
// An object's body refused (`message` from a decoder: "field: what"): 400 for another
// namespace's object or an unknown field (fieldValidation=Strict, in upstream's words), else
// 422 Invalid with the field in its causes.
HttpResponse invalidObject(std::string_view kind, std::string_view version, const std::string& name,
                           const std::string& message);
// An error the pipeline or a shared handler answered in Tessera's shape ({"errors": [...]}),
// reshaped as a Status for a Kubernetes client: a failed authentication is 401 Unauthorized, as
// kubectl expects; anything already a Status, or not an error, is left as it is.
void asStatus(HttpResponse& resp);

// How long ago, as kubectl's AGE column says it (apimachinery's HumanDuration).
std::string humanDuration(std::chrono::seconds d);

// `o[key]` when `o` is an object holding a string there, else `fallback`: a body's or a stored
// object's text that may be anything (nlohmann's value() throws on a type it did not expect).
std::string textOr(const nlohmann::json& o, std::string_view key, std::string fallback = "");

// A stable UUID for `seed` (the same seed, the same UUID), and an object's: its tenant, name and
// create revision, hashed (a name used again after a deletion is another object, as in
// Kubernetes).
std::string uuidOf(const std::string& seed);
std::string uidOf(const std::string& tenant, const WorkloadRecord& r);

// Whether a workload is shown as a Job (one made through batch/v1, or one of several tasks,
// whose tasks are its pods) rather than as one Pod.
bool isJob(const WorkloadRecord& r);
inline bool isPod(const WorkloadRecord& r) { return !isJob(r); }
int taskCount(const WorkloadRecord& r);

// The namespace a workload is in ("default" for one submitted through Tessera's own API).
std::string namespaceOf(const WorkloadRecord& r);

// A Job's pods are its tasks, named `<job>-<index>-<5 characters>` (stable for the object), and
// labelled as Kubernetes' Job controller labels them (controller-uid, job-name).
std::string taskPodName(const std::string& tenant, const WorkloadRecord& r, int index);
struct TaskPodName {
  std::string workload;
  int index = 0;
};
// Which workload and index a name of that shape names (nullopt: not of that shape); the caller
// checks it against taskPodName.
std::optional<TaskPodName> parseTaskPodName(std::string_view name);
nlohmann::json jobLabels(const std::string& tenant, const WorkloadRecord& r);

// A workload as a Pod (one whose spec asks for one task), with `status` (the record's own, so
// that the object is as it was at its resourceVersion).
nlohmann::json podObject(const std::string& tenant, const WorkloadRecord& r,
                         const WorkloadStatus& status);
// Task `index` of a Job as its pod.
nlohmann::json taskPodObject(const std::string& tenant, const WorkloadRecord& r,
                             const WorkloadStatus& status, int index);
// Every pod a workload is shown as: itself, or each of its tasks.
std::vector<nlohmann::json> podsOf(const std::string& tenant, const WorkloadRecord& r,
                                   const WorkloadStatus& status);
// A workload submitted through Tessera's own API, as the pod spec it would have.
nlohmann::json podSpecOf(const WorkloadRecord& r);
// Where a Table's rows carry their objects (`includeObject`).
enum class IncludeObject { kNone, kMetadata, kObject };
IncludeObject includeObject(const std::string* value);
// Building Tables: a column, a row's object as `include` asks, a row (its cells and object),
// the Table, an AGE cell.
nlohmann::json column(const std::string& name, const std::string& description, int priority = 0,
                      const std::string& format = "");
nlohmann::json rowObject(const nlohmann::json& object, IncludeObject include);
nlohmann::json tableRow(nlohmann::json cells, const nlohmann::json& object, IncludeObject include);
nlohmann::json makeTable(nlohmann::json columns, nlohmann::json rows, const std::string& rv);
std::string ageCell(const nlohmann::json& metadata, core::WallTime now);
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
// A pod's environment read from a Secret or ConfigMap of its namespace: one key
// (valueFrom.secretKeyRef, configMapKeyRef) into `env`, or every key (envFrom, with `prefix`).
// A volume's (secret, configMap) is checked the same way at creation (`volume`, with the item
// `keys` it names) and read when each task starts (docs/kubernetes.md "Volumes").
struct EnvRef {
  std::string env;       // The variable ("" : envFrom or a volume).
  std::string prefix;    // envFrom's.
  std::string resource;  // "secrets" or "configmaps".
  std::string name;
  std::string key;  // "" : envFrom.
  bool optional = false;
  std::string field;  // Where the pod asks for it (errors name it).
  bool volume = false;
  std::vector<std::string> keys;  // A volume's items.
};
struct PodSubmission {
  std::string name;
  nlohmann::json spec;  // Tessera's workload spec.
  nlohmann::json kube;  // WorkloadRecord::kube.
  std::vector<std::string> warnings;
  // Read by the server, which may read them as the submitter: envFrom first, then valueFrom
  // over the spec's values (Kubernetes' order).
  std::vector<EnvRef> env_refs;
};
// An object's body checked as every create checks it: an object of `kind` in `api_version`,
// named, of the request's namespace `ns` (if it says), its labels and annotations maps of
// strings. Returns its metadata; errors name the field.
core::Result<nlohmann::json> objectMetadata(const nlohmann::json& body, std::string_view kind,
                                            std::string_view api_version, const std::string& ns);
// An error is an invalid Pod (422) whose message names the field; `strict`: unknown fields
// are errors (fieldValidation=Strict) rather than warnings.
core::Result<PodSubmission> workloadFromPod(const nlohmann::json& pod, const std::string& ns,
                                            bool strict);

// A batch/v1 Job to create: a workload of `completions` tasks, all at once (docs/kubernetes.md,
// "Jobs"); errors as workloadFromPod's, naming the Job's field (spec.template.spec...).
core::Result<PodSubmission> workloadFromJob(const nlohmann::json& job, const std::string& ns,
                                            bool strict);
// A workload shown as a Job (isJob), at its record's revision.
nlohmann::json jobObject(const std::string& tenant, const WorkloadRecord& r,
                         const WorkloadStatus& status);
// Jobs as a Table (NAME STATUS COMPLETIONS DURATION AGE; CONTAINERS IMAGES SELECTOR in -o wide).
nlohmann::json jobTable(const std::vector<nlohmann::json>& jobs, const std::string& rv,
                        IncludeObject include, core::WallTime now);

// Secrets and ConfigMaps are the tenant's sealed KV (docs/kubernetes.md): `kube/<ns>/secrets/<n>`
// and `kube/<ns>/configmaps/<n>`, each key's value as text, and under this key (which no
// Kubernetes data key can be) what Kubernetes says of the object besides: type, labels,
// annotations, immutable, creationTimestamp.
inline constexpr std::string_view kKubeObjectKey = "kubernetes.io/object";
std::string kvPathOf(std::string_view resource, const std::string& ns, const std::string& name);
struct KvSubmission {
  std::string name;
  nlohmann::json data;  // The KV data to write.
  std::vector<std::string> warnings;
};
// A Secret's (base64 data, stringData, type) or ConfigMap's (data) body, as `kind` says; errors
// name the field (binary values and binaryData are refused: Tessera keeps text).
core::Result<KvSubmission> kvFromObject(const nlohmann::json& body, std::string_view kind,
                                        const std::string& ns, bool strict, core::WallTime now);
// A KV key's data (version `version`) as the Secret or ConfigMap it is.
nlohmann::json objectFromKv(std::string_view kind, const std::string& tenant, const std::string& ns,
                            const std::string& name, const nlohmann::json& data, int64_t version);
// NAME TYPE DATA AGE (Secrets), NAME DATA AGE (ConfigMaps).
nlohmann::json kvTable(std::string_view kind, const std::vector<nlohmann::json>& objects,
                       const std::string& rv, IncludeObject include, core::WallTime now);

// Events of a workload: what happened to it (its record's events, in Kubernetes' reasons and
// Tessera's words: Scheduled, Started, SuccessfulCreate, Completed, Failed,
// BackoffLimitExceeded, Preempted or Evicted, BackOff, Killing) and, while it waits, why
// (FailedScheduling with the scheduler's reason, about each waiting pod).
std::vector<nlohmann::json> eventsOf(const std::string& tenant, const WorkloadRecord& r,
                                     const WorkloadStatus& status);
// LAST SEEN TYPE REASON OBJECT MESSAGE (SUBOBJECT SOURCE FIRST SEEN COUNT NAME in -o wide).
nlohmann::json eventTable(const std::vector<nlohmann::json>& events, const std::string& rv,
                          IncludeObject include, core::WallTime now);
// A node as a tenant sees it: capacity (cpu, memory, nvidia.com/gpu), its labels with
// nvidia.com/gpu.product and .count, Ready from its agent, unschedulable when cordoned; no
// addresses but its name.
nlohmann::json nodeObject(const NodeState& s, const std::string& gpu_product);
// NAME STATUS ROLES AGE VERSION (and the -o wide columns).
nlohmann::json nodeTable(const std::vector<nlohmann::json>& nodes, const std::string& rv,
                         IncludeObject include, core::WallTime now);

// A Kubernetes quantity ("500m", "2", "4Gi", "1.5") scaled: CPU in milli-cores, memory in MiB
// (rounded up). Errors name the text.
core::Result<int64_t> cpuMilli(const nlohmann::json& quantity);
core::Result<int64_t> memoryMiB(const nlohmann::json& quantity);

}  // namespace tessera::server::kube
