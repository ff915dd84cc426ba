// The Kubernetes API's handlers (docs/kubernetes.md): discovery, namespaces, pods and their
// logs, over the one workload registry. Authorization is the pipeline's (Access::kKube,
// server/kube/access.h); errors leave as Status objects (kube::asStatus).
#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/access.h"
#include "server/kube/objects.h"
#include "server/kube/patch.h"
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
    return kubeNamespaces(r, t, table);
  }
  if (t.group == "authorization.k8s.io" && t.resource == "selfsubjectaccessreviews" &&
      t.verb == "create") {
    return jsonAnswer(201, kube::accessReview(r.body, [&](const std::string& p, Capability c) {
                        return authorizedOn(r, p, c);
                      }));
  }
  if (t.group.empty() && (t.resource == "events" || t.resource == "nodes")) {
    return kubeClusterObjects(r, t, table);
  }
  if (t.group.empty() && (t.resource == "secrets" || t.resource == "configmaps")) {
    return kubeKvObjects(r, t, table);
  }
  if (r.http.method == "POST" && r.match.route != nullptr &&
      r.match.route->pattern.ends_with("{name}")) {
    return kube::statusResponse(405,
                                "the server does not allow this method on the requested "
                                "resource (create in the collection; PUT replaces)");
  }
  const bool jobs = t.group == "batch" && t.version == "v1" && t.resource == "jobs";
  if (!(t.group.empty() && t.resource == "pods") && !jobs) {
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  const std::string plural = jobs ? "jobs.batch" : "pods";
  if (t.verb == "list" || t.verb == "watch") {
    const std::string* ls = kube::queryParam(r.scope.query, "labelSelector");
    const std::string* fs = kube::queryParam(r.scope.query, "fieldSelector");
    auto filter = kube::PodFilter::parse(t.ns, ls == nullptr ? "" : *ls, fs == nullptr ? "" : *fs);
    if (!filter.isOk()) {
      return kube::statusResponse(400, filter.status().message());
    }
    if (t.verb == "watch") {
      return kubeWatch(r, std::move(filter).value(), table,
                       jobs ? KubeWatchKind::kJobs : KubeWatchKind::kPods);
    }
    auto [records, at] = registry_.snapshot(tenant);
    std::vector<json> items;
    for (const WorkloadPtr& w : records) {
      if (jobs) {
        if (kube::isJob(*w)) {
          json job = kube::jobObject(tenant, *w, w->status);
          if (filter->matches(job)) {
            items.push_back(std::move(job));
          }
        }
        continue;
      }
      for (json& pod : kube::podsOf(tenant, *w, w->status)) {
        if (filter->matches(pod)) {
          items.push_back(std::move(pod));
        }
      }
    }
    const std::string list_rv = std::to_string(at);
    if (table) {
      return jsonAnswer(200, jobs ? kube::jobTable(items, list_rv, include, now)
                                  : kube::podTable(items, list_rv, include, now));
    }
    return jsonAnswer(200, kube::list(jobs ? "JobList" : "PodList", jobs ? "batch/v1" : "v1",
                                      std::move(items), list_rv));
  }
  if (t.verb == "create") {
    const std::string* validation = kube::queryParam(r.scope.query, "fieldValidation");
    const bool strict = validation != nullptr && *validation == "Strict";
    return kubeCreate(r, tenant, t,
                      jobs ? kube::workloadFromJob(r.body, t.ns, strict)
                           : kube::workloadFromPod(r.body, t.ns, strict));
  }
  auto notFound = [&] {
    return kube::statusResponse(
        404, plural + " \"" + t.name + "\" not found",
        {{"name", t.name}, {"group", jobs ? "batch" : ""}, {"kind", jobs ? "jobs" : "pods"}});
  };
  // One object by name: a workload, or (a pod) one task of a Job.
  WorkloadPtr w = registry_.get(tenant, t.name);
  int index = -1;
  if (jobs) {
    if (w == nullptr || !kube::isJob(*w)) {
      return notFound();
    }
  } else if (w == nullptr || !kube::isPod(*w)) {
    w = nullptr;
    if (auto task = kube::parseTaskPodName(t.name)) {
      WorkloadPtr job = registry_.get(tenant, task->workload);
      if (job != nullptr && kube::isJob(*job) && task->index < kube::taskCount(*job) &&
          kube::taskPodName(tenant, *job, task->index) == t.name &&
          authorizedOn(r, "workloads/" + job->name, Capability::kRead)) {
        w = job;
        index = task->index;
      }
    }
  }
  const bool apply = t.verb == "patch" &&
                     kube::patchTypeOf(r.http.header("content-type")) == kube::PatchType::kApply;
  if (w == nullptr && index < 0 && apply) {
    // Server-side apply of an object that is not there creates it (201).
    if (kube::textOr(r.body.value("metadata", json::object()), "name") != t.name) {
      return kube::statusResponse(400,
                                  "the name of the object (metadata.name) must be the "
                                  "name in the path, \"" +
                                      t.name + "\"");
    }
    return kubeCreate(r, tenant, t,
                      jobs ? kube::workloadFromJob(r.body, t.ns, true)
                           : kube::workloadFromPod(r.body, t.ns, true));
  }
  if (w == nullptr || kube::namespaceOf(*w) != t.ns) {
    return notFound();
  }
  if (t.subresource == "log" && !jobs) {
    return kubeLogs(r, tenant, *w, std::max(0, index), t.name);
  }
  // status: the object itself, as Kubernetes reads it (its status is all of it a client wants).
  if (!t.subresource.empty() && t.subresource != "status") {
    return kube::statusResponse(404, "the server could not find the requested resource");
  }
  if (t.verb == "get") {
    if (jobs) {
      json job = kube::jobObject(tenant, *w, w->status);
      return jsonAnswer(200, table ? kube::jobTable({job}, rv, include, now) : job);
    }
    json pod = index < 0 ? kube::podObject(tenant, *w, w->status)
                         : kube::taskPodObject(tenant, *w, w->status, index);
    return jsonAnswer(200, table ? kube::podTable({pod}, rv, include, now) : pod);
  }
  if (t.verb == "patch" || t.verb == "update") {
    if (index >= 0) {
      return kube::statusResponse(
          405, "pod \"" + t.name + "\" is a pod of job \"" + w->name + "\": change the job");
    }
    return kubeChangeWorkload(r, t, *w);
  }
  if (t.verb == "delete") {
    if (index >= 0) {
      return kube::statusResponse(
          405, "pod \"" + t.name + "\" is a pod of job \"" + w->name +
                   "\", whose pods Tessera runs as one workload: delete the job instead");
    }
    return kubeDelete(tenant, *w);
  }
  return kube::statusResponse(405,
                              "the server does not allow this method on the requested resource");
}

HttpResponse ControlPlane::kubeCreate(Request& r, const std::string& tenant,
                                      const kube::KubeTarget& t,
                                      core::Result<kube::PodSubmission> submission) {
  const bool job = t.resource == "jobs";
  const std::string kind = job ? "Job" : "Pod";
  const std::string plural = job ? "jobs.batch" : "pods";
  const json details_kind = {{"group", job ? "batch" : ""}, {"kind", job ? "jobs" : "pods"}};
  if (!submission.isOk()) {
    return kube::invalidObject(kind, job ? "batch/v1" : "v1", t.name,
                               submission.status().message());
  }
  kube::PodSubmission& sub = *submission;
  // Who set which fields (server-side apply's conflicts): its creator, all it sent.
  const std::string* manager = kube::queryParam(r.scope.query, "fieldManager");
  sub.kube["managedFields"] = {
      {manager != nullptr ? *manager : "kubectl-create", json(kube::fieldPaths(r.body))}};
  json details = details_kind;
  details["name"] = sub.name;
  if (!validName(sub.name)) {
    const std::string m =
        "metadata.name: Invalid value: \"" + sub.name +
        "\": a lowercase RFC 1123 label of at most 63 characters (Tessera's workload names)";
    return kube::statusResponse(422, kind + " \"" + sub.name + "\" is invalid: " + m, details);
  }
  if (registry_.get(tenant, sub.name) != nullptr) {
    return kube::statusResponse(409, plural + " \"" + sub.name + "\" already exists", details,
                                "AlreadyExists");
  }
  std::set<std::string> seal;
  if (auto refused = kubeResolveEnv(r, tenant, t.ns, sub, seal)) {
    return *refused;
  }
  HttpResponse submitted = submitWorkload(r, tenant, sub.name, sub.spec, std::move(sub.kube), seal);
  if (submitted.status != 202) {
    // The same admission as Tessera's own API, its words kept: a request the pool can never
    // hold, over a cap or limit.
    const json body = json::parse(submitted.body, nullptr, false);
    const std::string m = body.is_object() && body.contains("errors")
                              ? body["errors"][0].get<std::string>()
                              : "refused";
    if (submitted.status == 400) {
      return kube::statusResponse(422, kind + " \"" + sub.name + "\" is invalid: " + m, details);
    }
    if (submitted.status == 409) {
      return kube::statusResponse(409, plural + " \"" + sub.name + "\" already exists", details,
                                  "AlreadyExists");
    }
    return submitted;
  }
  const WorkloadPtr created = registry_.get(tenant, sub.name);
  if (created == nullptr) {
    return kube::statusResponse(500, "created, but not yet readable; try a get");
  }
  HttpResponse answer = jsonAnswer(201, job ? kube::jobObject(tenant, *created, created->status)
                                            : kube::podObject(tenant, *created, created->status));
  for (const std::string& w : sub.warnings) {
    answer.headers.emplace_back("Warning", "299 - \"" + w + "\"");
  }
  return answer;
}

HttpResponse ControlPlane::kubeDelete(const std::string& tenant, const WorkloadRecord& w) {
  const core::WallTime now = clock_.wallNow();
  auto shown = [&](const WorkloadRecord& rec) {
    return kube::isJob(rec) ? kube::jobObject(tenant, rec, rec.status)
                            : kube::podObject(tenant, rec, rec.status);
  };
  std::unique_lock write_lock(status_write_mu_);
  const WorkloadPtr current = registry_.get(tenant, w.name);
  if (current == nullptr) {
    const bool job = kube::isJob(w);
    return kube::statusResponse(
        404, (job ? "jobs.batch \"" : "pods \"") + w.name + "\" not found",
        {{"name", w.name}, {"group", job ? "batch" : ""}, {"kind", job ? "jobs" : "pods"}});
  }
  if (isFinished(current->status.phase)) {
    // Done with: gone at once, as a deleted pod is.
    auto deleted = store_.deleteRange(api::workloadKey(tenant, w.name));
    if (!deleted.isOk()) {
      return api::fromStatus(deleted.status());
    }
    waitForOwnWrite(deleted->revision);
    // Not under status_write_mu_, which a pass waits for while it holds the driver's lock.
    write_lock.unlock();
    driver_.forgetWorkload(tenant, w.name);
    json object = shown(*current);
    object["metadata"]["deletionTimestamp"] = core::formatRfc3339(now);
    return jsonAnswer(200, object);
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
  json object = shown(updated);
  object["metadata"]["deletionGracePeriodSeconds"] = updated.spec.value("gracePeriod", 30);
  return jsonAnswer(200, object);
}

HttpResponse ControlPlane::kubeLogs(Request& r, const std::string& tenant, const WorkloadRecord& w,
                                    int index, const std::string& pod) {
  const std::optional<WorkloadStatus> status = driver_.status(tenant, w.name);
  const auto at = static_cast<size_t>(index);
  if (!status || status->tasks.size() <= at || status->tasks[at].node.empty()) {
    return kube::statusResponse(
        400, "container \"main\" in pod \"" + pod + "\" is waiting to start: ContainerCreating");
  }
  const TaskStatus& task = status->tasks[at];
  if (!driver_.isAgentNode(task.node)) {
    return kube::statusResponse(
        400, "pod \"" + pod + "\" runs on simulated node '" + task.node + "', which keeps no logs");
  }
  if (task.state == "starting") {
    return kube::statusResponse(
        400, "container \"main\" in pod \"" + pod + "\" is waiting to start: ContainerCreating");
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
  const std::string id = tenant + "." + w.name + "." + std::to_string(index);
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
    if (!followKubeLog(tenant, w.name, index, task.node, id, next, resp.stream)) {
      return kube::statusResponse(429, "too many logs followed at once; try again shortly",
                                  {{"retryAfterSeconds", 1}});
    }
  }
  return resp;
}

bool ControlPlane::followKubeLog(const std::string& tenant, const std::string& name, int index,
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
  std::thread t([this, tenant, name, index, node, task_id, offset, stream, done]() mutable {
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
      const auto at = static_cast<size_t>(index);
      const bool over = !status || isFinished(status->phase) || status->tasks.size() <= at ||
                        status->tasks[at].node != node || status->tasks[at].state == "finished";
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
