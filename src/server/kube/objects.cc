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
       {"create", "delete", "get", "list"},
       {{"log", "Pod", {"get"}}}},
      {"", "v1", "namespaces", "namespace", "Namespace", false, {"ns"}, {}, {"get", "list"}, {}},
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
                  {"paths", std::move(items)}};
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
  json s = {{"kind", "Status"},
            {"apiVersion", "v1"},
            {"metadata", json::object()},
            {"status", code < 400 ? "Success" : "Failure"},
            {"message", message},
            {"reason", reason.empty() ? reasonFor(code) : std::move(reason)},
            {"code", code}};
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

namespace {

// A UUID (version 4's shape) made from a hash of `seed`: the same seed, the same UUID.
std::string uuidOf(const std::string& seed) {
  const std::string h = audit::sha256Hex(seed);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-4" + h.substr(13, 3) + "-a" + h.substr(17, 3) +
         "-" + h.substr(20, 12);
}

// A stable UUID for a record: its tenant, name and create revision, hashed (a name used again
// after a deletion is another object, as in Kubernetes).
std::string uidOf(const std::string& tenant, const WorkloadRecord& r) {
  return uuidOf(tenant + "/" + r.name + "@" + std::to_string(r.create_revision));
}

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

// A Tessera workload submitted through its own API, shown as the Pod it would be.
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

}  // namespace

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
    spec = r.kube.value("spec", json::object());
  } else {
    spec = podSpecOf(r);
  }
  const TaskStatus task = status.tasks.empty() ? TaskStatus{} : status.tasks[0];
  if (!task.node.empty()) {
    spec["nodeName"] = task.node;
  }
  const std::string container =
      spec.contains("containers") && spec["containers"].is_array() && !spec["containers"].empty()
          ? spec["containers"][0].value("name", "main")
          : "main";
  const std::string image =
      spec.contains("containers") && spec["containers"].is_array() && !spec["containers"].empty()
          ? spec["containers"][0].value("image", "")
          : "";
  const bool running = status.phase == WorkloadPhase::kRunning && task.state == "running";
  json state;
  if (running) {
    state = {{"running", {{"startedAt", core::formatRfc3339(task.started_at)}}}};
  } else if (isFinished(status.phase)) {
    json t = {
        {"exitCode", task.exit_code >= 0 ? task.exit_code
                                         : (status.phase == WorkloadPhase::kSucceeded ? 0 : 1)},
        {"reason", status.phase == WorkloadPhase::kSucceeded   ? "Completed"
                   : status.phase == WorkloadPhase::kCancelled ? "Cancelled"
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
    if (!status.reason.empty()) {
      t["message"] = status.reason;
    }
    state = {{"terminated", std::move(t)}};
  } else {
    const bool placed = task.state == "starting";
    json w = {{"reason", placed ? "ContainerCreating" : "Pending"}};
    if (!task.progress.empty()) {
      w["message"] = task.progress;
    }
    state = {{"waiting", std::move(w)}};
  }
  int restarts = 0;
  for (const TaskStatus& t : status.tasks) {
    restarts = std::max(restarts, static_cast<int>(t.starts) - 1);
  }
  restarts += std::max(0, status.attempt - 1);
  json conditions = json::array();
  const bool scheduled = !task.node.empty();
  if (scheduled) {
    conditions.push_back(condition("PodScheduled", true));
  } else if (status.phase == WorkloadPhase::kPending) {
    conditions.push_back(condition("PodScheduled", false, "Unschedulable", status.reason));
  }
  const bool finished = isFinished(status.phase);
  conditions.push_back(condition("Initialized", scheduled));
  conditions.push_back(condition("ContainersReady", running, finished ? "PodCompleted" : ""));
  conditions.push_back(condition("Ready", running, finished ? "PodCompleted" : ""));
  json st = {{"phase", podPhase(status.phase)},
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
  if (status.phase == WorkloadPhase::kPending && !status.reason.empty()) {
    st["message"] = status.reason;
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", std::move(metadata)},
          {"spec", std::move(spec)},
          {"status", std::move(st)}};
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

namespace {

json column(const std::string& name, const std::string& description, int priority = 0,
            const std::string& format = "") {
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

json table(json columns, json rows, const std::string& rv) {
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", rv}}},
          {"columnDefinitions", std::move(columns)},
          {"rows", std::move(rows)}};
}

std::string age(const json& metadata, core::WallTime now) {
  const auto created = core::parseRfc3339(metadata.value("creationTimestamp", ""));
  if (!created) {
    return "<unknown>";
  }
  return humanDuration(std::chrono::duration_cast<std::chrono::seconds>(now - *created));
}

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
                  age(pod["metadata"], now),
                  st.value("podIP", "<none>"),
                  pod["spec"].value("nodeName", "<none>"),
                  "<none>",
                  "<none>"};
    rows.push_back({{"cells", std::move(cells)}, {"object", rowObject(pod, include)}});
    if (include == IncludeObject::kNone) {
      rows.back().erase("object");
    }
  }
  return table(std::move(columns), std::move(rows), rv);
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
    rows.push_back({{"cells",
                     {ns["metadata"]["name"], ns["status"].value("phase", "Active"),
                      age(ns["metadata"], now)}},
                    {"object", rowObject(ns, include)}});
  }
  return table(std::move(columns), std::move(rows), rv);
}

json list(std::string_view kind, std::string_view api_version, std::vector<json> items,
          const std::string& rv) {
  return {{"kind", kind},
          {"apiVersion", api_version},
          {"metadata", {{"resourceVersion", rv}}},
          {"items", std::move(items)}};
}

namespace {

// Parses a quantity's number and suffix: the value times `scale` of the unit asked for.
core::Result<double> quantity(const json& q, const std::string& field) {
  std::string text;
  if (q.is_number()) {
    return q.get<double>();
  }
  if (!q.is_string() || (text = q.get<std::string>()).empty()) {
    return core::invalidArgument(field +
                                 ": expected a quantity such as \"2\", \"500m\" or \"4Gi\"");
  }
  static const std::vector<std::pair<std::string, double>> kSuffixes = {
      {"Ki", 1024.0},
      {"Mi", 1024.0 * 1024},
      {"Gi", 1024.0 * 1024 * 1024},
      {"Ti", 1024.0 * 1024 * 1024 * 1024},
      {"k", 1e3},
      {"M", 1e6},
      {"G", 1e9},
      {"T", 1e12},
      {"m", 1e-3}};
  double mult = 1;
  std::string number = text;
  for (const auto& [suffix, m] : kSuffixes) {
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      number = text.substr(0, text.size() - suffix.size());
      mult = m;
      break;
    }
  }
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || !std::isfinite(v) || v < 0) {
    return core::invalidArgument(field + ": '" + text +
                                 "' is not a quantity (expected e.g. \"2\", \"500m\", \"4Gi\")");
  }
  return v * mult;
}

}  // namespace

core::Result<int64_t> cpuMilli(const json& q) {
  TESSERA_ASSIGN_OR_RETURN(double cores, quantity(q, "cpu"));
  return static_cast<int64_t>(std::ceil(cores * 1000 - 1e-9));
}

core::Result<int64_t> memoryMiB(const json& q) {
  TESSERA_ASSIGN_OR_RETURN(double bytes, quantity(q, "memory"));
  return static_cast<int64_t>(std::ceil(bytes / (1024.0 * 1024) - 1e-9));
}

namespace {

core::Status invalid(const std::string& field, const std::string& message) {
  return core::invalidArgument(field + ": " + message);
}

}  // namespace

core::Result<PodSubmission> workloadFromPod(const json& pod, const std::string& ns, bool strict) {
  PodSubmission out;
  if (!pod.is_object()) {
    return invalid("body", "expected a Pod object");
  }
  if (pod.value("kind", "Pod") != "Pod" || pod.value("apiVersion", "v1") != "v1") {
    return invalid("kind", "expected apiVersion v1, kind Pod");
  }
  const json metadata = pod.value("metadata", json::object());
  if (!metadata.is_object()) {
    return invalid("metadata", "expected an object");
  }
  out.name = metadata.value("name", "");
  if (out.name.empty()) {
    return invalid("metadata.name", "Required value: name or generateName is required");
  }
  if (metadata.contains("namespace") && metadata["namespace"] != ns) {
    return core::invalidArgument(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
  const json spec = pod.value("spec", json::object());
  if (!spec.is_object()) {
    return invalid("spec", "expected an object");
  }
  // What Tessera does not do is refused, naming the field; what it may safely ignore is
  // accepted with a warning.
  static const std::set<std::string> kKnownSpec = {"containers",
                                                   "restartPolicy",
                                                   "schedulerName",
                                                   "nodeSelector",
                                                   "tolerations",
                                                   "priorityClassName",
                                                   "terminationGracePeriodSeconds",
                                                   "activeDeadlineSeconds",
                                                   "imagePullSecrets",
                                                   "serviceAccountName",
                                                   "dnsPolicy",
                                                   "securityContext",
                                                   "affinity",
                                                   "enableServiceLinks",
                                                   "automountServiceAccountToken"};
  static const std::set<std::string> kRefusedSpec = {
      "hostNetwork",         "hostPID", "hostIPC", "volumes", "initContainers",
      "ephemeralContainers", "nodeName"};
  for (const auto& [key, value] : spec.items()) {
    if (kRefusedSpec.contains(key)) {
      return invalid("spec." + key, "Forbidden: Tessera does not support this field");
    }
    if (!kKnownSpec.contains(key)) {
      if (strict) {
        return invalid("spec." + key, "unknown field");
      }
      out.warnings.push_back("spec." + key + " is not supported by Tessera and is ignored");
    }
  }
  for (const char* ignored : {"affinity", "tolerations", "priorityClassName"}) {
    if (spec.contains(ignored)) {
      out.warnings.push_back(std::string("spec.") + ignored +
                             " is ignored: Tessera places by its own pools, labels and queues");
    }
  }
  const json containers = spec.value("containers", json::array());
  if (!containers.is_array() || containers.empty()) {
    return invalid("spec.containers", "Required value");
  }
  if (containers.size() > 1) {
    return invalid("spec.containers",
                   "Forbidden: Tessera runs one container per pod (a task); got " +
                       std::to_string(containers.size()));
  }
  const json& c = containers[0];
  if (!c.is_object() || c.value("name", "").empty()) {
    return invalid("spec.containers[0].name", "Required value");
  }
  static const std::set<std::string> kKnownContainer = {"name",
                                                        "image",
                                                        "command",
                                                        "args",
                                                        "env",
                                                        "resources",
                                                        "imagePullPolicy",
                                                        "workingDir",
                                                        "terminationMessagePath",
                                                        "terminationMessagePolicy",
                                                        "ports",
                                                        "securityContext"};
  for (const auto& [key, value] : c.items()) {
    if (!kKnownContainer.contains(key)) {
      if (strict) {
        return invalid("spec.containers[0]." + key, "unknown field");
      }
      out.warnings.push_back("spec.containers[0]." + key + " is not supported and is ignored");
    }
  }
  if (c.contains("securityContext") && c["securityContext"].is_object() &&
      c["securityContext"].value("privileged", false)) {
    return invalid("spec.containers[0].securityContext.privileged",
                   "Forbidden: Tessera runs no privileged containers");
  }
  json& w = out.spec = json::object();
  if (c.contains("image")) {
    if (!c["image"].is_string()) {
      return invalid("spec.containers[0].image", "expected a string");
    }
    w["image"] = c["image"];
  }
  json argv = json::array();
  for (const char* field : {"command", "args"}) {
    if (!c.contains(field)) {
      continue;
    }
    if (!c[field].is_array()) {
      return invalid(std::string("spec.containers[0].") + field, "expected a list of strings");
    }
    for (const json& a : c[field]) {
      if (!a.is_string()) {
        return invalid(std::string("spec.containers[0].") + field, "expected a list of strings");
      }
      argv.push_back(a);
    }
  }
  if (!argv.empty()) {
    w["command"] = argv;
  } else if (!w.contains("image")) {
    return invalid("spec.containers[0].command",
                   "Required value: a pod without an image needs a command");
  }
  if (c.contains("env")) {
    if (!c["env"].is_array()) {
      return invalid("spec.containers[0].env", "expected a list");
    }
    json env = json::object();
    for (size_t i = 0; i < c["env"].size(); ++i) {
      const json& e = c["env"][i];
      const std::string where = "spec.containers[0].env[" + std::to_string(i) + "]";
      if (!e.is_object() || e.value("name", "").empty()) {
        return invalid(where + ".name", "Required value");
      }
      if (e.contains("valueFrom")) {
        return invalid(where + ".valueFrom",
                       "Forbidden: not supported yet; use a value, or Tessera's secrets");
      }
      env[e["name"].get<std::string>()] = e.value("value", "");
    }
    if (!env.empty()) {
      w["env"] = env;
    }
  }
  // Resources: GPUs from limits (requests alone are invalid, as in Kubernetes), CPU and memory
  // from requests (else limits).
  const json resources = c.value("resources", json::object());
  const json limits = resources.value("limits", json::object());
  const json requests = resources.value("requests", json::object());
  const std::string rwhere = "spec.containers[0].resources";
  if (requests.contains("nvidia.com/gpu") && !limits.contains("nvidia.com/gpu")) {
    return invalid(rwhere + ".limits[nvidia.com/gpu]",
                   "Required value: GPUs are asked for in limits (requests alone are invalid)");
  }
  const json annotations = metadata.value("annotations", json::object());
  const json labels = metadata.value("labels", json::object());
  if (limits.contains("nvidia.com/gpu")) {
    const json& g = limits["nvidia.com/gpu"];
    TESSERA_ASSIGN_OR_RETURN(double n, quantity(g, rwhere + ".limits[nvidia.com/gpu]"));
    if (n != std::floor(n) || n < 0) {
      return invalid(rwhere + ".limits[nvidia.com/gpu]",
                     "Invalid value: must be a whole number of GPUs");
    }
    if (requests.contains("nvidia.com/gpu") && requests["nvidia.com/gpu"] != g) {
      TESSERA_ASSIGN_OR_RETURN(double r, quantity(requests["nvidia.com/gpu"], rwhere));
      if (r != n) {
        return invalid(rwhere + ".requests[nvidia.com/gpu]", "Invalid value: must equal the limit");
      }
    }
    if (n > 0) {
      w["gpu"] = {{"count", static_cast<int64_t>(n)}};
    }
  }
  // KAI's and Run:ai's fractions: gpu-fraction (of one GPU), or gpu-memory (MiB).
  if (annotations.is_object() && annotations.contains("gpu-fraction")) {
    if (w.contains("gpu")) {
      return invalid("metadata.annotations[gpu-fraction]",
                     "Forbidden: a fraction and a whole-GPU limit together");
    }
    const json& f = annotations["gpu-fraction"];
    double v = -1;
    try {
      v = f.is_string() ? std::stod(f.get<std::string>()) : -1;
    } catch (const std::exception&) {
    }
    if (!(v > 0 && v <= 1)) {
      return invalid("metadata.annotations[gpu-fraction]",
                     "Invalid value: expected a fraction in (0, 1], e.g. \"0.5\"");
    }
    w["gpu"] = {{"milli", static_cast<int64_t>(std::llround(v * 1000))}};
  } else if (annotations.is_object() && annotations.contains("gpu-memory")) {
    if (w.contains("gpu")) {
      return invalid("metadata.annotations[gpu-memory]",
                     "Forbidden: a GPU memory share and a whole-GPU limit together");
    }
    int64_t mib = 0;
    try {
      mib = annotations["gpu-memory"].is_string()
                ? std::stoll(annotations["gpu-memory"].get<std::string>())
                : 0;
    } catch (const std::exception&) {
    }
    if (mib <= 0) {
      return invalid("metadata.annotations[gpu-memory]",
                     "Invalid value: expected MiB of GPU memory, e.g. \"2000\"");
    }
    w["gpu"] = {{"memoryMiB", mib}};
  }
  for (const auto& [source, name] : {std::pair{&requests, "requests"}, {&limits, "limits"}}) {
    if (source->contains("cpu") && !w.contains("cpuMilli")) {
      auto v = cpuMilli((*source)["cpu"]);
      if (!v.isOk()) {
        return invalid(rwhere + "." + name + "[cpu]", v.status().message());
      }
      w["cpuMilli"] = *v;
    }
    if (source->contains("memory") && !w.contains("memoryMiB")) {
      auto v = memoryMiB((*source)["memory"]);
      if (!v.isOk()) {
        return invalid(rwhere + "." + name + "[memory]", v.status().message());
      }
      w["memoryMiB"] = *v;
    }
  }
  // The queue: KAI's label, then Run:ai's; else the tenant's default.
  for (const char* label : {"kai.scheduler/queue", "runai/queue"}) {
    if (labels.is_object() && labels.contains(label) && labels[label].is_string()) {
      w["queue"] = labels[label];
      break;
    }
  }
  if (spec.contains("nodeSelector")) {
    if (!spec["nodeSelector"].is_object()) {
      return invalid("spec.nodeSelector", "expected a map of labels");
    }
    w["nodeSelector"] = spec["nodeSelector"];
  }
  const std::string scheduler = spec.value("schedulerName", "default-scheduler");
  static const std::set<std::string> kSchedulers = {"default-scheduler", "kai-scheduler",
                                                    "runai-scheduler", "tessera"};
  if (!kSchedulers.contains(scheduler)) {
    out.warnings.push_back("spec.schedulerName '" + scheduler +
                           "' is not a scheduler here; Tessera schedules this pod");
  }
  const std::string restart = spec.value("restartPolicy", "Always");
  if (restart == "OnFailure") {
    w["restart"] = {{"attempts", 6}, {"mode", "delay"}};
  } else if (restart == "Always") {
    out.warnings.push_back(
        "spec.restartPolicy Always: Tessera restarts a pod that fails, not one that exits 0 "
        "(a task that ends is done)");
    w["restart"] = {{"attempts", 6}, {"mode", "delay"}};
  } else if (restart != "Never") {
    return invalid("spec.restartPolicy", "Unsupported value: \"" + restart +
                                             "\": supported values: \"Always\", "
                                             "\"OnFailure\", \"Never\"");
  }
  if (spec.contains("terminationGracePeriodSeconds") &&
      spec["terminationGracePeriodSeconds"].is_number_integer()) {
    w["gracePeriod"] = std::clamp<int64_t>(spec["terminationGracePeriodSeconds"], 0, 3600);
  }
  if (spec.contains("activeDeadlineSeconds") && spec["activeDeadlineSeconds"].is_number_integer()) {
    w["maxRuntime"] = std::max<int64_t>(0, spec["activeDeadlineSeconds"]);
  }
  // What is kept of the Pod, to show it back: the spec with Kubernetes' defaults.
  json kept = spec;
  kept["restartPolicy"] = restart;
  kept["schedulerName"] = scheduler;
  if (!kept.contains("terminationGracePeriodSeconds")) {
    kept["terminationGracePeriodSeconds"] = 30;
  }
  out.kube = {{"kind", "Pod"}, {"namespace", ns}, {"spec", std::move(kept)}};
  for (const char* field : {"labels", "annotations"}) {
    if (metadata.contains(field)) {
      if (!metadata[field].is_object()) {
        return invalid(std::string("metadata.") + field, "expected a map of strings");
      }
      for (const auto& [k, v] : metadata[field].items()) {
        if (!v.is_string()) {
          return invalid(std::string("metadata.") + field + "[" + k + "]", "expected a string");
        }
      }
      out.kube[field] = metadata[field];
    }
  }
  return out;
}

}  // namespace tessera::server::kube
