// The Kubernetes API's handlers (docs/kubernetes.md): discovery, namespaces, pods and their
// logs, over the one workload registry. Authorization is the pipeline's (Access::kKube,
// server/kube/access.h); errors leave as Status objects (kube::asStatus).
#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"
#include "server/kube/selector.h"

namespace tessera::server {

using nlohmann::json;

namespace {

HttpResponse jsonAnswer(unsigned code, const json& body, std::string content_type = "") {
  HttpResponse r = api::reply(code, body);
  if (!content_type.empty()) {
    r.content_type = std::move(content_type);
  }
  return r;
}

}  // namespace

HttpResponse ControlPlane::kubeApi(Request& r) {
  const std::string tenant = *r.scope.tenant;
  const std::string& path = r.scope.path;
  const std::string accept = r.http.header("accept");
  const core::WallTime now = clock_.wallNow();
  {
    std::shared_lock lock(mu_);
    if (!tenants_.contains(tenant)) {
      return kube::statusResponse(404, "the server could not find the requested resource");
    }
  }
  // Discovery and version: the same for every tenant.
  if (path == "k8s/version") {
    return jsonAnswer(200, kube::versionInfo());
  }
  if (path == "k8s/api" || path == "k8s/apis") {
    const bool core_group = path == "k8s/api";
    if (kube::acceptsAggregatedDiscovery(accept)) {
      return jsonAnswer(200, kube::aggregatedDiscovery(core_group),
                        std::string(kube::kAggregatedDiscoveryType));
    }
    return jsonAnswer(200, core_group ? kube::legacyApiVersions() : kube::legacyApiGroups());
  }
  if (path == "k8s/openapi/v3") {
    return jsonAnswer(200, kube::openApiIndex());
  }
  if (path.starts_with("k8s/openapi/v3/")) {
    const std::string gv = path.substr(std::string_view("k8s/openapi/v3/").size());
    if (auto doc = kube::openApiDocument(gv)) {
      HttpResponse answer = jsonAnswer(200, *doc);
      // The index names it by its hash: a client may keep it until the hash changes.
      answer.headers.emplace_back("ETag", "\"" + kube::openApiHash(gv) + "\"");
      answer.headers.emplace_back("Cache-Control", "public, immutable");
      return answer;
    }
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  const kube::KubeTarget t = kube::kubeTarget(path, r.http.method, r.scope.query, r.body);
  if (t.resource.empty()) {
    if (!t.version.empty()) {
      if (auto list = kube::apiResourceList(t.group, t.version)) {
        return jsonAnswer(200, *list);
      }
    }
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  const std::string rv = std::to_string(registry_.revision());
  const auto include = kube::includeObject(kube::queryParam(r.scope.query, "includeObject"));
  const bool table = kube::wantsTable(accept);
  if (t.group.empty() && t.resource == "namespaces") {
    // The tenant's namespaces: default, and every one a workload is in.
    std::map<std::string, std::string> names = {{"default", ""}};
    for (const WorkloadPtr& w : registry_.list(tenant)) {
      std::string& created = names[kube::namespaceOf(*w)];
      if (created.empty() || w->submitted < created) {
        created = w->submitted;
      }
    }
    std::vector<json> items;
    for (const auto& [name, created] : names) {
      if (t.name.empty() || t.name == name) {
        items.push_back(
            kube::namespaceObject(name, created.empty() ? core::formatRfc3339(now) : created));
      }
    }
    if (!t.name.empty() && items.empty()) {
      return kube::statusResponse(404, "namespaces \"" + t.name + "\" not found",
                                  {{"name", t.name}, {"kind", "namespaces"}});
    }
    if (t.verb != "get" && t.verb != "list") {
      return kube::statusResponse(405,
                                  "the server does not allow this method on the requested "
                                  "resource");
    }
    if (table) {
      return jsonAnswer(200, kube::namespaceTable(items, rv, include, now));
    }
    if (!t.name.empty()) {
      return jsonAnswer(200, items[0]);
    }
    return jsonAnswer(200, kube::list("NamespaceList", "v1", std::move(items), rv));
  }
  if (!(t.group.empty() && t.resource == "pods")) {
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  // A pod as the registry has it, at its record's revision (a watch from that revision sees
  // every change after it).
  auto podOf = [&](const WorkloadRecord& w) { return kube::podObject(tenant, w, w.status); };
  auto notFound = [&](const std::string& name) {
    return kube::statusResponse(404, "pods \"" + name + "\" not found",
                                {{"name", name}, {"kind", "pods"}});
  };
  if (t.verb == "list" || t.verb == "watch") {
    const std::string* ls = kube::queryParam(r.scope.query, "labelSelector");
    const std::string* fs = kube::queryParam(r.scope.query, "fieldSelector");
    auto filter = kube::PodFilter::parse(t.ns, ls == nullptr ? "" : *ls, fs == nullptr ? "" : *fs);
    if (!filter.isOk()) {
      return kube::statusResponse(400, filter.status().message());
    }
    if (t.verb == "watch") {
      return kubeWatch(r, std::move(filter).value(), table);
    }
    auto [records, at] = registry_.snapshot(tenant);
    std::vector<json> pods;
    for (const WorkloadPtr& w : records) {
      if (!kube::isPod(*w)) {
        continue;
      }
      json pod = podOf(*w);
      if (filter->matches(pod)) {
        pods.push_back(std::move(pod));
      }
    }
    const std::string list_rv = std::to_string(at);
    if (table) {
      return jsonAnswer(200, kube::podTable(pods, list_rv, include, now));
    }
    return jsonAnswer(200, kube::list("PodList", "v1", std::move(pods), list_rv));
  }
  if (t.verb == "create") {
    if (r.http.header("content-type").starts_with("application/vnd.kubernetes.protobuf")) {
      return kube::statusResponse(415,
                                  "the body of the request was in an unknown format - accepted "
                                  "media types include: application/json");
    }
    const std::string* validation = kube::queryParam(r.scope.query, "fieldValidation");
    const bool strict = validation != nullptr && *validation == "Strict";
    auto pod = kube::workloadFromPod(r.body, t.ns, strict);
    if (!pod.isOk()) {
      const std::string& m = pod.status().message();
      if (m.starts_with("the namespace of the provided object")) {
        return kube::statusResponse(400, m);
      }
      if (m.ends_with(": unknown field")) {  // fieldValidation=Strict, in upstream's words.
        return kube::statusResponse(
            400,
            "Pod in version \"v1\" cannot be handled as a Pod: strict decoding error: "
            "unknown field \"" +
                m.substr(0, m.size() - 15) + "\"");
      }
      // Kubernetes' shape: the message names the field, and so does each cause, whose own
      // message is what follows it (kubectl prints "field: message" from the causes).
      const size_t colon = m.find(": ");
      const std::string field = m.substr(0, colon);
      const std::string said = colon == std::string::npos ? m : m.substr(colon + 2);
      return kube::statusResponse(
          422, "Pod \"" + t.name + "\" is invalid: " + m,
          {{"name", t.name},
           {"kind", "Pod"},
           {"causes", {{{"reason", "FieldValueInvalid"}, {"message", said}, {"field", field}}}}});
    }
    if (!validName(pod->name)) {
      const std::string m =
          "metadata.name: Invalid value: \"" + pod->name +
          "\": a lowercase RFC 1123 label of at most 63 characters (Tessera's workload names)";
      return kube::statusResponse(422, "Pod \"" + pod->name + "\" is invalid: " + m,
                                  {{"name", pod->name}, {"kind", "Pod"}});
    }
    if (registry_.get(tenant, pod->name) != nullptr) {
      return kube::statusResponse(409, "pods \"" + pod->name + "\" already exists",
                                  {{"name", pod->name}, {"kind", "pods"}}, "AlreadyExists");
    }
    HttpResponse submitted = submitWorkload(r, tenant, pod->name, pod->spec, std::move(pod->kube));
    if (submitted.status != 202) {
      // The same admission as Tessera's own API, its words kept: a request the pool can never
      // hold, over a cap or limit.
      const json body = json::parse(submitted.body, nullptr, false);
      const std::string m = body.is_object() && body.contains("errors")
                                ? body["errors"][0].get<std::string>()
                                : "refused";
      if (submitted.status == 400) {
        return kube::statusResponse(422, "Pod \"" + pod->name + "\" is invalid: " + m,
                                    {{"name", pod->name}, {"kind", "Pod"}});
      }
      if (submitted.status == 409) {
        return kube::statusResponse(409, "pods \"" + pod->name + "\" already exists",
                                    {{"name", pod->name}, {"kind", "pods"}}, "AlreadyExists");
      }
      return submitted;
    }
    const WorkloadPtr created = registry_.get(tenant, pod->name);
    if (created == nullptr) {
      return kube::statusResponse(500, "created, but not yet readable; try a get");
    }
    HttpResponse answer = jsonAnswer(201, podOf(*created));
    for (const std::string& w : pod->warnings) {
      answer.headers.emplace_back("Warning", "299 - \"" + w + "\"");
    }
    return answer;
  }
  // One pod by name.
  const WorkloadPtr w = registry_.get(tenant, t.name);
  if (w == nullptr || !kube::isPod(*w) || kube::namespaceOf(*w) != t.ns) {
    return notFound(t.name);
  }
  if (t.subresource == "log") {
    return kubeLogs(r, tenant, *w);
  }
  if (!t.subresource.empty()) {
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  if (t.verb == "get") {
    json pod = podOf(*w);
    if (table) {
      return jsonAnswer(200, kube::podTable({pod}, rv, include, now));
    }
    return jsonAnswer(200, pod);
  }
  if (t.verb == "delete") {
    return kubeDeletePod(tenant, *w);
  }
  return kube::statusResponse(405,
                              "the server does not allow this method on the requested resource");
}

HttpResponse ControlPlane::kubeDeletePod(const std::string& tenant, const WorkloadRecord& w) {
  const core::WallTime now = clock_.wallNow();
  std::lock_guard write_lock(status_write_mu_);
  const WorkloadPtr current = registry_.get(tenant, w.name);
  if (current == nullptr) {
    return kube::statusResponse(404, "pods \"" + w.name + "\" not found",
                                {{"name", w.name}, {"kind", "pods"}});
  }
  if (isFinished(current->status.phase)) {
    // Done with: gone at once, as a deleted pod is.
    auto deleted = store_.deleteRange(api::workloadKey(tenant, w.name));
    if (!deleted.isOk()) {
      return api::fromStatus(deleted.status());
    }
    waitForOwnWrite(deleted->revision);
    driver_.forgetWorkload(tenant, w.name);
    json pod = kube::podObject(tenant, *current, current->status);
    pod["metadata"]["deletionTimestamp"] = core::formatRfc3339(now);
    return jsonAnswer(200, pod);
  }
  // Running or waiting: stopped (its grace period), then collected (collectFinishedWorkloads).
  WorkloadRecord updated = *current;
  updated.cancel_requested = true;
  if (!updated.kube.is_object()) {
    updated.kube = json::object();
  }
  updated.kube["deletionTimestamp"] = core::formatRfc3339(now);
  updated.addEvent(core::formatRfc3339(now), "cancel requested", "deleted through Kubernetes");
  auto put = store_.put(api::workloadKey(tenant, w.name), encodeWorkload(updated));
  if (!put.isOk()) {
    return api::fromStatus(put.status());
  }
  waitForOwnWrite(*put);
  json pod = kube::podObject(tenant, updated, updated.status);
  pod["metadata"]["deletionTimestamp"] = updated.kube["deletionTimestamp"];
  pod["metadata"]["deletionGracePeriodSeconds"] = updated.spec.value("gracePeriod", 30);
  return jsonAnswer(200, pod);
}

HttpResponse ControlPlane::kubeLogs(Request& r, const std::string& tenant,
                                    const WorkloadRecord& w) {
  const std::optional<WorkloadStatus> status = driver_.status(tenant, w.name);
  if (!status || status->tasks.empty() || status->tasks[0].node.empty()) {
    return kube::statusResponse(
        400, "container \"main\" in pod \"" + w.name + "\" is waiting to start: ContainerCreating");
  }
  const TaskStatus& task = status->tasks[0];
  if (!driver_.isAgentNode(task.node)) {
    return kube::statusResponse(400, "pod \"" + w.name + "\" runs on simulated node '" + task.node +
                                         "', which keeps no logs");
  }
  if (task.state == "starting") {
    return kube::statusResponse(
        400, "container \"main\" in pod \"" + w.name + "\" is waiting to start: ContainerCreating");
  }
  int64_t tail = -1;
  int64_t limit_bytes = -1;
  try {
    if (const std::string* v = kube::queryParam(r.scope.query, "tailLines")) {
      tail = std::stoll(*v);
    }
    if (const std::string* v = kube::queryParam(r.scope.query, "limitBytes")) {
      limit_bytes = std::stoll(*v);
    }
  } catch (const std::exception&) {
    return kube::statusResponse(400, "tailLines and limitBytes must be numbers");
  }
  // The last 256 KiB at most: its size first, then the piece that ends there.
  constexpr int64_t kWindow = int64_t{256} * 1024;
  const std::string id = tenant + "." + w.name + ".0";
  LogRequest probe{.id = "", .task = id, .stream = "stdout", .offset = 0, .limit = 1};
  auto first = mailbox_.fetchLog(task.node, std::move(probe), std::chrono::seconds(5));
  if (!first.isOk()) {
    return api::fromStatus(first.status());
  }
  const int64_t size = first->size;
  const int64_t from = std::max<int64_t>(0, size - kWindow);
  std::string text;
  int64_t next = 0;  // Where what comes after this answer starts (logs -f).
  if (size > 0) {
    LogRequest req{.id = "", .task = id, .stream = "stdout", .offset = from, .limit = kWindow};
    auto piece = mailbox_.fetchLog(task.node, std::move(req), std::chrono::seconds(5));
    if (!piece.isOk()) {
      return api::fromStatus(piece.status());
    }
    next = from + static_cast<int64_t>(piece->data.size());
    text = std::move(piece->data);
  }
  if (tail >= 0) {
    size_t cut = text.size();
    int64_t lines = 0;
    // A last line without its newline counts as a line, as in Kubernetes.
    size_t end = !text.empty() && text.back() == '\n' ? text.size() - 1 : text.size();
    while (lines < tail) {
      const size_t nl = end == 0 ? std::string::npos : text.rfind('\n', end - 1);
      ++lines;
      if (nl == std::string::npos) {
        cut = 0;
        break;
      }
      cut = nl + 1;
      end = nl;
    }
    text = tail == 0 ? std::string() : text.substr(cut);
  }
  if (limit_bytes >= 0 && static_cast<int64_t>(text.size()) > limit_bytes) {
    text.resize(static_cast<size_t>(limit_bytes));
  }
  HttpResponse resp;
  resp.status = 200;
  resp.content_type = "text/plain";
  resp.body = std::move(text);
  if (kube::queryBool(kube::queryParam(r.scope.query, "follow"), false) && limit_bytes < 0) {
    // `logs -f`: what comes next, as it comes, until the container ends.
    resp.stream = std::make_shared<ResponseStream>();
    if (!followKubeLog(tenant, w.name, task.node, id, next, resp.stream)) {
      return kube::statusResponse(429, "too many logs followed at once; try again shortly",
                                  {{"retryAfterSeconds", 1}});
    }
  }
  return resp;
}

bool ControlPlane::followKubeLog(const std::string& tenant, const std::string& name,
                                 const std::string& node, const std::string& task_id,
                                 int64_t offset, std::shared_ptr<ResponseStream> stream) {
  constexpr size_t kMaxFollowers = 256;
  std::lock_guard lock(kube_watch_mu_);
  if (kube_watch_stop_) {
    return false;
  }
  // Those that have ended are joined here, so the list holds the live ones.
  std::erase_if(kube_followers_, [](KubeFollower& f) {
    if (f.done->load() && f.thread.joinable()) {
      f.thread.join();
    }
    return !f.thread.joinable();
  });
  if (kube_followers_.size() >= kMaxFollowers) {
    return false;
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([this, tenant, name, node, task_id, offset, stream, done]() mutable {
    constexpr int64_t kPiece = int64_t{256} * 1024;
    while (stream->open()) {
      {
        std::unique_lock wait(kube_watch_mu_);
        if (kube_watch_cv_.wait_for(wait, std::chrono::milliseconds(500),
                                    [&] { return kube_watch_stop_; })) {
          break;
        }
      }
      // Read whether it is done before the log: a last line written just before it ended is
      // then read below, not missed.
      const auto status = driver_.status(tenant, name);
      const bool over = !status || isFinished(status->phase) || status->tasks.empty() ||
                        status->tasks[0].node != node || status->tasks[0].state == "finished";
      LogRequest req{
          .id = "", .task = task_id, .stream = "stdout", .offset = offset, .limit = kPiece};
      auto piece = mailbox_.fetchLog(node, std::move(req), std::chrono::seconds(5));
      if (piece.isOk() && !piece->data.empty()) {
        offset += static_cast<int64_t>(piece->data.size());
        if (!stream->write(std::move(piece->data))) {
          break;
        }
        continue;  // There may be more at once.
      }
      if (over) {
        break;
      }
    }
    stream->end();
    done->store(true);
  });
  kube_followers_.push_back({std::move(t), done});
  return true;
}

}  // namespace tessera::server
