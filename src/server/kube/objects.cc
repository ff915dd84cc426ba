#include "server/kube/objects.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "audit/crypto.h"
#include "core/rfc3339.h"

namespace tessera::server::kube {

using nlohmann::json;

namespace {

struct Subresource {
  std::string_view name;
  std::string_view kind;
  std::vector<std::string_view> verbs;
};

// What Tessera serves, and only that: kubectl reads the verbs (`get all`, `auth can-i`).
struct Resource {
  std::string_view group;  // "" : the core group.
  std::string_view version;
  std::string_view name;
  std::string_view singular;
  std::string_view kind;
  bool namespaced;
  std::vector<std::string_view> short_names;
  std::vector<std::string_view> categories;
  std::vector<std::string_view> verbs;
  std::vector<Subresource> subresources;
};

const std::vector<Resource>& resources() {
  static const std::vector<Resource> kResources = {
      {"",
       "v1",
       "pods",
       "pod",
       "Pod",
       true,
       {"po"},
       {"all"},
       {"create", "delete", "get", "list", "watch"},
       {{"log", "Pod", {"get"}}, {"status", "Pod", {"get"}}}},
      {"authorization.k8s.io",
       "v1",
       "selfsubjectaccessreviews",
       "",
       "SelfSubjectAccessReview",
       false,
       {},
       {},
       {"create"},
       {}},
      {"batch",
       "v1",
       "jobs",
       "job",
       "Job",
       true,
       {},
       {"all"},
       {"create", "delete", "get", "list", "watch"},
       {{"status", "Job", {"get"}}}},
      {"",
       "v1",
       "namespaces",
       "namespace",
       "Namespace",
       false,
       {"ns"},
       {},
       {"create", "delete", "get", "list"},
       {}},
      {"", "v1", "events", "event", "Event", true, {"ev"}, {}, {"get", "list", "watch"}, {}},
      {"", "v1", "nodes", "node", "Node", false, {"no"}, {}, {"get", "list", "watch"}, {}},
      {"",
       "v1",
       "secrets",
       "secret",
       "Secret",
       true,
       {},
       {},
       {"create", "delete", "get", "list", "watch"},
       {}},
      {"",
       "v1",
       "configmaps",
       "configmap",
       "ConfigMap",
       true,
       {"cm"},
       {},
       {"create", "delete", "get", "list", "watch"},
       {}},
  };
  return kResources;
}

json groupVersionKind(const Resource& r, std::string_view kind) {
  return {{"group", r.group}, {"version", r.version}, {"kind", kind}};
}

}  // namespace

json versionInfo() {
  return {{"major", "1"},
          {"minor", "32"},
          {"gitVersion", kGitVersion},
          {"gitCommit", "tessera"},
          {"gitTreeState", "clean"},
          {"buildDate", "2026-12-01T00:00:00Z"},
          {"goVersion", "none (C++20)"},
          {"compiler", "tessera"},
          {"platform", "linux/amd64"}};
}

bool acceptsAggregatedDiscovery(std::string_view accept) {
  return accept.find("as=APIGroupDiscoveryList") != std::string_view::npos &&
         accept.find("v=v2") != std::string_view::npos;
}

json aggregatedDiscovery(bool core_group) {
  // One item per group, each with its one version and its resources.
  std::map<std::string, json> groups;
  for (const Resource& r : resources()) {
    if (r.group.empty() != core_group) {
      continue;
    }
    json res = {{"resource", r.name},
                {"responseKind", groupVersionKind(r, r.kind)},
                {"scope", r.namespaced ? "Namespaced" : "Cluster"},
                {"singularResource", r.singular},
                {"verbs", r.verbs}};
    if (!r.short_names.empty()) {
      res["shortNames"] = r.short_names;
    }
    if (!r.categories.empty()) {
      res["categories"] = r.categories;
    }
    json subs = json::array();
    for (const Subresource& s : r.subresources) {
      subs.push_back({{"subresource", s.name},
                      {"responseKind", groupVersionKind(r, s.kind)},
                      {"verbs", s.verbs}});
    }
    if (!subs.empty()) {
      res["subresources"] = std::move(subs);
    }
    json& g = groups[std::string(r.group)];
    if (g.is_null()) {
      g = {{"metadata", {{"name", r.group}}},
           {"versions",
            {{{"version", r.version}, {"freshness", "Current"}, {"resources", json::array()}}}}};
    }
    g["versions"][0]["resources"].push_back(std::move(res));
  }
  json items = json::array();
  for (auto& [name, g] : groups) {
    items.push_back(std::move(g));
  }
  return {{"kind", "APIGroupDiscoveryList"},
          {"apiVersion", "apidiscovery.k8s.io/v2"},
          {"metadata", json::object()},
          {"items", std::move(items)}};
}

json legacyApiVersions() {
  return {
      {"kind", "APIVersions"}, {"versions", {"v1"}}, {"serverAddressByClientCIDRs", json::array()}};
}

json legacyApiGroups() {
  std::set<std::pair<std::string, std::string>> seen;
  json groups = json::array();
  for (const Resource& r : resources()) {
    if (r.group.empty() || !seen.emplace(r.group, r.version).second) {
      continue;
    }
    const std::string gv = std::string(r.group) + "/" + std::string(r.version);
    const json version = {{"groupVersion", gv}, {"version", r.version}};
    groups.push_back({{"name", r.group}, {"versions", {version}}, {"preferredVersion", version}});
  }
  return {{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", std::move(groups)}};
}

std::optional<json> apiResourceList(std::string_view group, std::string_view version) {
  json list = json::array();
  for (const Resource& r : resources()) {
    if (r.group != group || r.version != version) {
      continue;
    }
    json res = {{"name", r.name},
                {"singularName", r.singular},
                {"namespaced", r.namespaced},
                {"kind", r.kind},
                {"verbs", r.verbs}};
    if (!r.short_names.empty()) {
      res["shortNames"] = r.short_names;
    }
    if (!r.categories.empty()) {
      res["categories"] = r.categories;
    }
    list.push_back(std::move(res));
    for (const Subresource& s : r.subresources) {
      list.push_back({{"name", std::string(r.name) + "/" + std::string(s.name)},
                      {"singularName", ""},
                      {"namespaced", r.namespaced},
                      {"kind", s.kind},
                      {"verbs", s.verbs}});
    }
  }
  if (list.empty()) {
    return std::nullopt;
  }
  const std::string gv =
      group.empty() ? std::string(version) : std::string(group) + "/" + std::string(version);
  return json{{"kind", "APIResourceList"},
              {"apiVersion", "v1"},
              {"groupVersion", gv},
              {"resources", std::move(list)}};
}

namespace {

struct OpenApiDocument {
  json document;
  std::string hash;
};

// Every group-version's OpenAPI document ("api/v1" -> ...), with its hash: built once, since
// what is served does not change while the server runs (kubectl asks on every create -f).
const std::map<std::string, OpenApiDocument>& openApiDocuments() {
  static const std::map<std::string, OpenApiDocument> kDocuments = [] {
    std::map<std::string, json> paths;  // By group-version.
    for (const Resource& r : resources()) {
      if (std::find(r.verbs.begin(), r.verbs.end(), "create") == r.verbs.end()) {
        continue;
      }
      const std::string gv = r.group.empty()
                                 ? "api/" + std::string(r.version)
                                 : "apis/" + std::string(r.group) + "/" + std::string(r.version);
      const std::string item = "/" + gv + (r.namespaced ? "/namespaces/{namespace}/" : "/") +
                               std::string(r.name) + "/{name}";
      const json patch_body = {{"content",
                                {{"application/json-patch+json", {{"schema", json::object()}}},
                                 {"application/merge-patch+json", {{"schema", json::object()}}},
                                 {"application/apply-patch+yaml", {{"schema", json::object()}}}}}};
      paths[gv][item] = {
          {"patch",
           {{"operationId", "patch" + std::string(r.kind)},
            {"x-kubernetes-group-version-kind",
             {{"group", r.group}, {"version", r.version}, {"kind", r.kind}}},
            {"parameters",
             {{{"name", "fieldValidation"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
              {{"name", "fieldManager"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
              {{"name", "dryRun"}, {"in", "query"}, {"schema", {{"type", "string"}}}},
              {{"name", "force"}, {"in", "query"}, {"schema", {{"type", "boolean"}}}}}},
            {"requestBody", patch_body},
            {"responses", {{"200", {{"description", "OK"}}}}}}}};
    }
    std::map<std::string, OpenApiDocument> out;
    for (auto& [gv, items] : paths) {
      json doc = {{"openapi", "3.0.0"},
                  {"info", {{"title", "Tessera's Kubernetes API"}, {"version", kGitVersion}}},
                  {"paths", std::move(items)},
                  {"components", {{"schemas", json::object()}}}};
      const std::string hash = audit::sha256Hex(doc.dump()).substr(0, 32);
      out[gv] = {std::move(doc), hash};
    }
    return out;
  }();
  return kDocuments;
}

}  // namespace

std::optional<json> openApiDocument(std::string_view group_version) {
  const auto& docs = openApiDocuments();
  auto it = docs.find(std::string(group_version));
  return it == docs.end() ? std::nullopt : std::optional<json>(it->second.document);
}

std::string openApiHash(std::string_view group_version) {
  const auto& docs = openApiDocuments();
  auto it = docs.find(std::string(group_version));
  return it == docs.end() ? "" : it->second.hash;
}

json openApiIndex() {
  json paths = json::object();
  for (const auto& [gv, doc] : openApiDocuments()) {
    paths[gv] = {{"serverRelativeURL", "/openapi/v3/" + gv + "?hash=" + doc.hash}};
  }
  return {{"paths", std::move(paths)}};
}

std::string reasonFor(unsigned code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Expired";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return code >= 500 ? "InternalError" : "BadRequest";
  }
}

json status(unsigned code, const std::string& message, json details, std::string reason) {
  json s = {{"kind", "Status"},           {"apiVersion", "v1"},
            {"metadata", json::object()}, {"status", code < 400 ? "Success" : "Failure"},
            {"message", message},         {"code", code}};
  if (code >= 400 || !reason.empty()) {
    s["reason"] = reason.empty() ? reasonFor(code) : std::move(reason);
  }
  if (!details.empty()) {
    s["details"] = std::move(details);
  }
  return s;
}

HttpResponse statusResponse(unsigned code, const std::string& message, json details,
                            std::string reason) {
  HttpResponse r;
  r.status = code;
  r.body = status(code, message, std::move(details), std::move(reason))
               .dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

HttpResponse invalidObject(std::string_view kind, std::string_view version, const std::string& name,
                           const std::string& message) {
  const std::string k(kind);
  if (message.starts_with("the namespace of the provided object")) {
    return statusResponse(400, message);
  }
  if (message.ends_with(": unknown field")) {  // fieldValidation=Strict, in upstream's words.
    return statusResponse(400, k + " in version \"" + std::string(version) +
                                   "\" cannot be handled as a " + k +
                                   ": strict decoding error: unknown field \"" +
                                   message.substr(0, message.size() - 15) + "\"");
  }
  // Kubernetes' shape: the message names the field, and so does each cause, whose own message
  // is what follows it (kubectl prints "field: message" from the causes).
  const size_t colon = message.find(": ");
  return statusResponse(
      422, k + " \"" + name + "\" is invalid: " + message,
      {{"name", name},
       {"kind", k},
       {"causes",
        {{{"reason", "FieldValueInvalid"},
          {"message", colon == std::string::npos ? message : message.substr(colon + 2)},
          {"field", message.substr(0, colon)}}}}});
}

void asStatus(HttpResponse& resp) {
  if (resp.status < 400 || resp.content_type != "application/json") {
    return;
  }
  const json body = json::parse(resp.body, nullptr, false);
  if (body.is_object() && body.value("kind", "") == "Status") {
    return;
  }
  std::string message = reasonFor(resp.status);
  if (body.is_object() && body.contains("errors") && body["errors"].is_array() &&
      !body["errors"].empty() && body["errors"][0].is_string()) {
    message = body["errors"][0];
  }
  if (resp.status == 403 && message.starts_with("permission denied: missing, invalid")) {
    resp.status = 401;  // Tessera's 403 for a bad token; Kubernetes says 401.
    message = "Unauthorized";
  }
  if (resp.status == 404 && (message == "not found" || message.starts_with("unsupported path"))) {
    message = "the server could not find the requested resource";
  }
  json details = json::object();
  if (resp.status == 429) {
    details["retryAfterSeconds"] = 1;
  }
  resp.body = status(resp.status, message, std::move(details))
                  .dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string humanDuration(std::chrono::seconds d) {
  // apimachinery's duration.HumanDuration.
  const int64_t s = std::max<int64_t>(0, d.count());
  if (s < 120) {
    return std::to_string(s) + "s";
  }
  const int64_t m = s / 60;
  if (m < 10) {
    return s % 60 == 0 ? fmt::format("{}m", m) : fmt::format("{}m{}s", m, s % 60);
  }
  if (m < 180) {
    return fmt::format("{}m", m);
  }
  const int64_t h = m / 60;
  if (h < 8) {
    return m % 60 == 0 ? fmt::format("{}h", h) : fmt::format("{}h{}m", h, m % 60);
  }
  if (h < 48) {
    return fmt::format("{}h", h);
  }
  if (h < 192) {
    return h % 24 == 0 ? fmt::format("{}d", h / 24) : fmt::format("{}d{}h", h / 24, h % 24);
  }
  const int64_t days = h / 24;
  if (days < 365 * 2) {
    return fmt::format("{}d", days);
  }
  const int64_t years = days / 365;
  if (years < 8) {
    return days % 365 == 0 ? fmt::format("{}y", years) : fmt::format("{}y{}d", years, days % 365);
  }
  return fmt::format("{}y", years);
}

std::string namespaceOf(const WorkloadRecord& r) {
  return r.kube.is_object() ? r.kube.value("namespace", "default") : "default";
}

std::string textOr(const json& o, std::string_view key, std::string fallback) {
  if (!o.is_object()) {
    return fallback;
  }
  auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

std::string uuidOf(const std::string& seed) {
  const std::string h = audit::sha256Hex(seed);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-a" + h.substr(17, 3) +
         "-" + h.substr(20, 12);
}

std::string uidOf(const std::string& tenant, const WorkloadRecord& r) {
  return uuidOf(tenant + "/" + r.name + "@" + std::to_string(r.create_revision));
}

bool isJob(const WorkloadRecord& r) {
  return (r.kube.is_object() && r.kube.value("kind", "") == "Job") ||
         (r.spec.contains("tasks") && r.spec["tasks"].is_number_integer() && r.spec["tasks"] != 1);
}

int taskCount(const WorkloadRecord& r) {
  return r.spec.contains("tasks") && r.spec["tasks"].is_number_integer()
             ? std::max(1, r.spec["tasks"].get<int>())
             : 1;
}

std::string taskPodName(const std::string& tenant, const WorkloadRecord& r, int index) {
  // Five characters of [a-z0-9] from the Job's uid and the index: stable for the object, as
  // a Job's pod names are unique (its controller's random suffix).
  const std::string h = audit::sha256Hex(uidOf(tenant, r) + "#" + std::to_string(index));
  static constexpr std::string_view kAlphabet = "bcdfghjklmnpqrstvwxz2456789";
  std::string suffix;
  for (size_t i = 0; i < 5; ++i) {
    suffix += kAlphabet[static_cast<size_t>(std::stoi(h.substr(i * 2, 2), nullptr, 16)) %
                        kAlphabet.size()];
  }
  return r.name + "-" + std::to_string(index) + "-" + suffix;
}

std::optional<TaskPodName> parseTaskPodName(std::string_view name) {
  // <workload>-<index>-<5 characters>
  if (name.size() < 9 || name[name.size() - 6] != '-') {
    return std::nullopt;
  }
  const std::string_view rest = name.substr(0, name.size() - 6);
  const size_t dash = rest.rfind('-');
  if (dash == std::string_view::npos || dash == 0 || dash + 1 == rest.size() ||
      rest.size() - dash > 6) {
    return std::nullopt;
  }
  int index = 0;
  for (char c : rest.substr(dash + 1)) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    index = index * 10 + (c - '0');
  }
  return TaskPodName{std::string(rest.substr(0, dash)), index};
}

json jobLabels(const std::string& tenant, const WorkloadRecord& r) {
  const std::string uid = uidOf(tenant, r);
  return {{"batch.kubernetes.io/controller-uid", uid},
          {"batch.kubernetes.io/job-name", r.name},
          {"controller-uid", uid},
          {"job-name", r.name}};
}

namespace {

std::string podPhase(WorkloadPhase p) {
  switch (p) {
    case WorkloadPhase::kPending:
      return "Pending";
    case WorkloadPhase::kRunning:
      return "Running";
    case WorkloadPhase::kSucceeded:
      return "Succeeded";
    case WorkloadPhase::kFailed:
    case WorkloadPhase::kCancelled:
      return "Failed";
  }
  return "Unknown";
}

// One task of a workload of several, as a pod: done when the task is (its exit code says
// how; one its node could not start failed; a simulated task that ended, or any task of a
// workload that succeeded, succeeded), failed when the workload failed and it had not ended,
// else running or waiting as the task is.
std::string taskPhase(const TaskStatus& t, WorkloadPhase workload) {
  if (workload == WorkloadPhase::kSucceeded) {
    return "Succeeded";
  }
  if (t.state == "finished") {
    if (t.exit_code > 0 || t.signal > 0 || t.start_failed) {
      return "Failed";
    }
    return t.exit_code == 0 || workload == WorkloadPhase::kRunning ||
                   workload == WorkloadPhase::kPending
               ? "Succeeded"
               : "Failed";
  }
  if (isFinished(workload)) {
    return "Failed";
  }
  return t.state == "running" ? "Running" : "Pending";
}

json condition(const std::string& type, bool ok, const std::string& reason = "",
               const std::string& message = "") {
  json c = {{"type", type}, {"status", ok ? "True" : "False"}};
  if (!reason.empty()) {
    c["reason"] = reason;
  }
  if (!message.empty()) {
    c["message"] = message;
  }
  return c;
}

const json& firstContainer(const json& spec) {
  static const json kNone = json::object();
  return spec.contains("containers") && spec["containers"].is_array() &&
                 !spec["containers"].empty() && spec["containers"][0].is_object()
             ? spec["containers"][0]
             : kNone;
}

// A pod's metadata, spec and status, however it came to be: `phase` is the pod's, `task` its
// task's, `reason` why it waits or how it ended.
json podOf(json metadata, json spec, const std::string& phase, const TaskStatus& task,
           const std::string& reason, int restarts) {
  if (!task.node.empty()) {
    spec["nodeName"] = task.node;
  }
  const json& c = firstContainer(spec);
  const std::string container = c.value("name", "main");
  const std::string image = c.value("image", "");
  const bool running = phase == "Running";
  const bool finished = phase == "Succeeded" || phase == "Failed";
  json state;
  if (running) {
    state = {{"running", {{"startedAt", core::formatRfc3339(task.started_at)}}}};
  } else if (finished) {
    // A container its node could not start: the runtime's StartError, exit code 128.
    const bool start_error = task.start_failed && phase == "Failed";
    json t = {{"exitCode", task.exit_code >= 0    ? task.exit_code
                           : start_error          ? 128
                           : phase == "Succeeded" ? 0
                                                  : 1},
              {"reason", phase == "Succeeded"           ? "Completed"
                         : start_error                  ? "StartError"
                         : reason.starts_with("cancel") ? "Cancelled"
                                                        : "Error"}};
    if (task.signal > 0) {
      t["signal"] = task.signal;
    }
    if (task.started_at != core::WallTime{}) {
      t["startedAt"] = core::formatRfc3339(task.started_at);
    }
    if (task.finished_at != core::WallTime{}) {
      t["finishedAt"] = core::formatRfc3339(task.finished_at);
    }
    if (!reason.empty()) {
      t["message"] = reason;
    }
    state = {{"terminated", std::move(t)}};
  } else {
    const bool placed = task.state == "starting";
    // Its node backing off a pull that failed for a cause that may pass: the kubelet's words.
    const bool backoff = placed && task.progress.starts_with("ImagePullBackOff");
    json w = {{"reason", backoff ? "ImagePullBackOff" : placed ? "ContainerCreating" : "Pending"}};
    if (!task.progress.empty()) {
      w["message"] = task.progress;
    }
    state = {{"waiting", std::move(w)}};
  }
  json conditions = json::array();
  const bool scheduled = !task.node.empty();
  if (scheduled) {
    conditions.push_back(condition("PodScheduled", true));
  } else if (phase == "Pending") {
    conditions.push_back(condition("PodScheduled", false, "Unschedulable", reason));
  }
  conditions.push_back(condition("Initialized", scheduled));
  conditions.push_back(condition("ContainersReady", running, finished ? "PodCompleted" : ""));
  conditions.push_back(condition("Ready", running, finished ? "PodCompleted" : ""));
  json st = {{"phase", phase},
             {"conditions", std::move(conditions)},
             {"qosClass", "BestEffort"},
             {"containerStatuses",
              {{{"name", container},
                {"image", image},
                {"imageID", ""},
                {"ready", running},
                {"started", running},
                {"restartCount", restarts},
                {"state", std::move(state)},
                {"lastState", json::object()}}}}};
  if (task.started_at != core::WallTime{}) {
    st["startTime"] = core::formatRfc3339(task.started_at);
  }
  if (phase == "Pending" && !reason.empty()) {
    st["message"] = reason;
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", std::move(metadata)},
          {"spec", std::move(spec)},
          {"status", std::move(st)}};
}

int restartsOf(const WorkloadStatus& status, int index) {
  int restarts = 0;
  for (size_t i = 0; i < status.tasks.size(); ++i) {
    if (index < 0 || static_cast<int>(i) == index) {
      restarts = std::max(restarts, static_cast<int>(status.tasks[i].starts) - 1);
    }
  }
  return restarts + std::max(0, status.attempt - 1);
}

}  // namespace

json podSpecOf(const WorkloadRecord& r) {
  const json& s = r.spec;
  json container = {{"name", "main"}, {"image", s.value("image", "")}};
  if (s.contains("command") && s["command"].is_array()) {
    container["command"] = s["command"];
  }
  json limits = json::object();
  if (s.contains("gpu")) {
    const json& g = s["gpu"];
    const int64_t count = g.is_number_integer()                  ? g.get<int64_t>()
                          : g.is_object() && g.contains("count") ? g.value("count", int64_t{0})
                                                                 : 0;
    if (count > 0) {
      limits["nvidia.com/gpu"] = std::to_string(count);
    }
  }
  if (!limits.empty()) {
    container["resources"] = {{"limits", limits}, {"requests", limits}};
  }
  json spec = {
      {"containers", {container}}, {"restartPolicy", "Never"}, {"schedulerName", "tessera"}};
  if (s.contains("nodeSelector")) {
    spec["nodeSelector"] = s["nodeSelector"];
  }
  return spec;
}

json podObject(const std::string& tenant, const WorkloadRecord& r, const WorkloadStatus& status) {
  json metadata = {{"name", r.name},
                   {"namespace", namespaceOf(r)},
                   {"uid", uidOf(tenant, r)},
                   {"resourceVersion", std::to_string(r.mod_revision)},
                   {"creationTimestamp", r.submitted}};
  json spec;
  if (r.kube.is_object()) {
    for (const char* field : {"labels", "annotations"}) {
      if (r.kube.contains(field) && r.kube[field].is_object() && !r.kube[field].empty()) {
        metadata[field] = r.kube[field];
      }
    }
  }
  // Tessera's own workloads keep no pod spec (their kube holds labels given since, if any).
  spec = r.kube.is_object() && r.kube.contains("spec") ? r.kube["spec"] : podSpecOf(r);
  if (r.kube.is_object() && r.kube.contains("deletionTimestamp")) {
    metadata["deletionTimestamp"] = r.kube["deletionTimestamp"];
  }
  const TaskStatus task = status.tasks.empty() ? TaskStatus{} : status.tasks[0];
  std::string phase = podPhase(status.phase);
  if (phase == "Running" && task.state != "running") {
    phase = "Pending";  // Placed, not started yet (ContainerCreating).
  }
  return podOf(
      std::move(metadata), std::move(spec), phase, task,
      isFinished(status.phase) || status.phase == WorkloadPhase::kPending ? status.reason : "",
      restartsOf(status, -1));
}

json taskPodObject(const std::string& tenant, const WorkloadRecord& r, const WorkloadStatus& status,
                   int index) {
  const std::string name = taskPodName(tenant, r, index);
  const bool job = r.kube.is_object() && r.kube.value("kind", "") == "Job";
  const json job_spec = job ? r.kube.value("spec", json::object()) : json::object();
  const json tmpl = job_spec.value("template", json::object());
  const json tmeta = tmpl.value("metadata", json::object());
  const bool indexed = !job || job_spec.value("completionMode", "NonIndexed") == "Indexed";
  const std::string uid = uidOf(tenant, r);
  json labels = tmeta.value("labels", json::object());
  labels.update(jobLabels(tenant, r));
  json annotations = tmeta.value("annotations", json::object());
  if (indexed) {
    labels["batch.kubernetes.io/job-completion-index"] = std::to_string(index);
    annotations["batch.kubernetes.io/job-completion-index"] = std::to_string(index);
  }
  json metadata = {{"name", name},
                   {"generateName", r.name + "-" + std::to_string(index) + "-"},
                   {"namespace", namespaceOf(r)},
                   {"uid", uuidOf(uid + "#" + std::to_string(index))},
                   {"resourceVersion", std::to_string(r.mod_revision)},
                   {"creationTimestamp", r.submitted},
                   {"labels", std::move(labels)},
                   {"ownerReferences",
                    {{{"apiVersion", "batch/v1"},
                      {"kind", "Job"},
                      {"name", r.name},
                      {"uid", uid},
                      {"controller", true},
                      {"blockOwnerDeletion", true}}}}};
  if (!annotations.empty()) {
    metadata["annotations"] = std::move(annotations);
  }
  if (r.kube.is_object() && r.kube.contains("deletionTimestamp")) {
    metadata["deletionTimestamp"] = r.kube["deletionTimestamp"];
  }
  json spec = job ? tmpl.value("spec", json::object()) : podSpecOf(r);
  if (indexed) {
    spec["hostname"] = r.name + "-" + std::to_string(index);
  }
  const TaskStatus task =
      static_cast<size_t>(index) < status.tasks.size() ? status.tasks[index] : TaskStatus{};
  const std::string phase = taskPhase(task, status.phase);
  const std::string reason =
      phase == "Pending" || phase == "Failed" || isFinished(status.phase) ? status.reason : "";
  return podOf(std::move(metadata), std::move(spec), phase, task, reason,
               restartsOf(status, index));
}

std::vector<json> podsOf(const std::string& tenant, const WorkloadRecord& r,
                         const WorkloadStatus& status) {
  std::vector<json> pods;
  if (!isJob(r)) {
    pods.push_back(podObject(tenant, r, status));
    return pods;
  }
  const int n = taskCount(r);
  // A Job that runs fewer pods at once than its completions has a pod for each task placed so
  // far, and for as many of the others, in index order, as it may run now (the Job controller
  // creates the next one as one succeeds).
  const int parallelism =
      r.spec.contains("parallelism") && r.spec["parallelism"].is_number_integer()
          ? std::clamp(r.spec["parallelism"].get<int>(), 1, n)
          : n;
  auto unplaced = [&](int i) {
    const auto at = static_cast<size_t>(i);
    return at >= status.tasks.size() ||
           (status.tasks[at].state == "pending" && status.tasks[at].starts == 0);
  };
  // A suspended Job has no pod waiting: those it runs stop, and none is made until it resumes.
  auto held = [&](int i) {
    const auto at = static_cast<size_t>(i);
    return r.suspended && (at >= status.tasks.size() || status.tasks[at].state == "pending");
  };
  int room = parallelism;
  if (parallelism < n) {
    for (int i = 0; i < n; ++i) {
      const auto at = static_cast<size_t>(i);
      if (!unplaced(i) && status.tasks[at].state != "finished") {
        --room;
      }
    }
  }
  pods.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    if (held(i) || (parallelism < n && unplaced(i) && room-- <= 0)) {
      continue;
    }
    pods.push_back(taskPodObject(tenant, r, status, i));
  }
  return pods;
}

IncludeObject includeObject(const std::string* value) {
  if (value == nullptr || *value == "Metadata") {
    return IncludeObject::kMetadata;
  }
  return *value == "Object" ? IncludeObject::kObject
         : *value == "None" ? IncludeObject::kNone
                            : IncludeObject::kMetadata;
}

bool wantsTable(std::string_view accept) {
  return accept.find("as=Table") != std::string_view::npos;
}

json column(const std::string& name, const std::string& description, int priority,
            const std::string& format) {
  return {{"name", name},
          {"type", "string"},
          {"format", format},
          {"description", description},
          {"priority", priority}};
}

json rowObject(const json& object, IncludeObject include) {
  if (include == IncludeObject::kObject) {
    return object;
  }
  return {{"kind", "PartialObjectMetadata"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", object.value("metadata", json::object())}};
}

json tableRow(json cells, const json& object, IncludeObject include) {
  json row = {{"cells", std::move(cells)}};
  if (include != IncludeObject::kNone) {
    row["object"] = rowObject(object, include);
  }
  return row;
}

json makeTable(json columns, json rows, const std::string& rv) {
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", rv}}},
          {"columnDefinitions", std::move(columns)},
          {"rows", std::move(rows)}};
}

std::string ageCell(const json& metadata, core::WallTime now) {
  const auto created = core::parseRfc3339(metadata.value("creationTimestamp", ""));
  if (!created) {
    return "<unknown>";
  }
  return humanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *created));
}

namespace {

// The STATUS column: the pod's reason, else its phase, else the last container's waiting or
// terminated reason (upstream printPod, the parts Tessera's pods have).
std::string podStatusCell(const json& pod) {
  const json& st = pod["status"];
  std::string reason = st.value("reason", st.value("phase", "Unknown"));
  for (const json& c : st.value("containerStatuses", json::array())) {
    const json& s = c["state"];
    if (s.contains("waiting") && !s["waiting"].value("reason", "").empty()) {
      reason = s["waiting"]["reason"];
    } else if (s.contains("terminated")) {
      const json& t = s["terminated"];
      if (!t.value("reason", "").empty()) {
        reason = t["reason"];
      } else if (t.value("signal", 0) != 0) {
        reason = "Signal:" + std::to_string(t.value("signal", 0));
      } else {
        reason = "ExitCode:" + std::to_string(t.value("exitCode", 0));
      }
    }
  }
  if (reason == "Pending" && st.value("phase", "") == "Pending") {
    return "Pending";
  }
  if (pod["metadata"].contains("deletionTimestamp") && st.value("phase", "") != "Succeeded" &&
      st.value("phase", "") != "Failed") {
    return "Terminating";
  }
  return reason;
}

}  // namespace

json podTable(const std::vector<json>& pods, const std::string& rv, IncludeObject include,
              core::WallTime now) {
  json columns = {
      column("Name", "Name must be unique within a namespace.", 0, "name"),
      column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
      column("Status", "The aggregate status of the containers in this pod."),
      column("Restarts", "The number of times the containers in this pod have been restarted."),
      column("Age", "CreationTimestamp is a timestamp of when this object was created."),
      column("IP", "The IP address the pod is reachable on.", 1),
      column("Node", "The node the pod runs on.", 1),
      column("Nominated Node", "The node the pod is nominated to run on.", 1),
      column("Readiness Gates", "The pod's readiness gates.", 1)};
  json rows = json::array();
  for (const json& pod : pods) {
    const json& st = pod["status"];
    int ready = 0;
    int total = 0;
    int restarts = 0;
    for (const json& c : st.value("containerStatuses", json::array())) {
      ++total;
      ready += c.value("ready", false) ? 1 : 0;
      restarts += c.value("restartCount", 0);
    }
    json cells = {pod["metadata"]["name"],
                  std::to_string(ready) + "/" + std::to_string(std::max(total, 1)),
                  podStatusCell(pod),
                  std::to_string(restarts),
                  ageCell(pod["metadata"], now),
                  st.value("podIP", "<none>"),
                  pod["spec"].value("nodeName", "<none>"),
                  "<none>",
                  "<none>"};
    rows.push_back(tableRow(std::move(cells), pod, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

json namespaceObject(const std::string& name, const std::string& created) {
  return {{"apiVersion", "v1"},
          {"kind", "Namespace"},
          {"metadata",
           {{"name", name},
            {"uid", uuidOf("namespace/" + name)},
            {"creationTimestamp", created},
            {"labels", {{"kubernetes.io/metadata.name", name}}}}},
          {"spec", {{"finalizers", {"kubernetes"}}}},
          {"status", {{"phase", "Active"}}}};
}

json namespaceTable(const std::vector<json>& namespaces, const std::string& rv,
                    IncludeObject include, core::WallTime now) {
  json columns = {
      column("Name", "Name must be unique within a namespace.", 0, "name"),
      column("Status", "The status of the namespace"),
      column("Age", "CreationTimestamp is a timestamp of when this object was created.")};
  json rows = json::array();
  for (const json& ns : namespaces) {
    rows.push_back(tableRow({ns["metadata"]["name"], ns["status"].value("phase", "Active"),
                             ageCell(ns["metadata"], now)},
                            ns, include));
  }
  return makeTable(std::move(columns), std::move(rows), rv);
}

json list(std::string_view kind, std::string_view api_version, std::vector<json> items,
          const std::string& rv) {
  return {{"kind", kind},
          {"apiVersion", api_version},
          {"metadata", {{"resourceVersion", rv}}},
          {"items", std::move(items)}};
}

}  // namespace tessera::server::kube
