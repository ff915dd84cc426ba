// Kubernetes watches (docs/kubernetes.md, "Watch"): each a chunked stream of one JSON event per
// line, fed from the workload registry's change stream in revision order. A watch from a
// resourceVersion gets every change after it (410 Expired, as an ERROR event, past the
// registry's window); one without (or from "0") first gets an ADDED for every object it selects.
// Events are filtered by namespace, labels and fields against the object's new state, so an
// object that stops matching leaves as DELETED and one that starts arrives as ADDED. Nodes,
// Secrets and ConfigMaps are not workloads: their watches look each second and send what
// changed; a Secrets or ConfigMaps watch shows only the objects its token may read, and ends when
// its token (or grant) no longer holds.
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/log.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/kube/objects.h"
#include "server/kube/selector.h"

namespace tessera::server {

using nlohmann::json;

namespace {

// A tenant may hold this many watches at once (1,000 is the benchmark's load); more are 429.
constexpr size_t kMaxWatchesPerTenant = 4096;
constexpr std::chrono::seconds kBookmarkEvery{15};

}  // namespace

struct ControlPlane::KubeWatch {
  std::string tenant;
  kube::PodFilter filter;
  bool table = false;
  KubeWatchKind kind = KubeWatchKind::kPods;
  bool bookmarks = false;
  // What it selects and how it shows it: watches with the same key get the same events for a
  // change, encoded once (KubeEventCache).
  std::string key;
  std::map<std::string, json> shown;  // A polled watch: what it has shown, by name.
  // A Secrets or ConfigMaps watch: who asks, to authorize each object as it is shown (its
  // token's policies, as a list does).
  HttpRequest http;
  ScopedPath scope;
  TokenInfo token;
  std::optional<Grant> grant;
  std::shared_ptr<ResponseStream> stream;
  std::mutex mu;   // Held while its events are computed and written: one writer at a time.
  int64_t rv = 0;  // Every change up to here has been sent (or passed over).
  std::chrono::steady_clock::time_point deadline;
  std::chrono::steady_clock::time_point next_bookmark;
};

namespace {

bool polled(KubeWatchKind kind) {
  return kind == KubeWatchKind::kNodes || kind == KubeWatchKind::kSecrets ||
         kind == KubeWatchKind::kConfigMaps;
}

const char* kvKind(KubeWatchKind kind) {
  return kind == KubeWatchKind::kSecrets ? "Secret" : "ConfigMap";
}

// The objects a watch sees of a workload that match, named, in the order they were made: its
// Job, its pods by index, or its events as they happened (a watch sends new ones in that order).
using Watched = std::vector<std::pair<std::string, json>>;

Watched watchedObjects(const std::string& tenant, const WorkloadRecord* r, KubeWatchKind kind,
                       const kube::PodFilter& filter) {
  Watched out;
  if (r == nullptr || polled(kind)) {
    return out;
  }
  if (kind == KubeWatchKind::kJobs) {
    if (kube::isJob(*r)) {
      json job = kube::jobObject(tenant, *r, r->status);
      if (filter.matches(job)) {
        out.emplace_back(r->name, std::move(job));
      }
    }
    return out;
  }
  std::unordered_set<std::string> names;
  for (json& object : kind == KubeWatchKind::kEvents ? kube::eventsOf(tenant, *r, r->status)
                                                     : kube::podsOf(tenant, *r, r->status)) {
    std::string name = object["metadata"]["name"];
    if (filter.matches(object) && names.insert(name).second) {
      out.emplace_back(std::move(name), std::move(object));
    }
  }
  return out;
}

}  // namespace

std::string ControlPlane::kubeEvent(const KubeWatch& w, const char* type, json object) const {
  if (w.table) {
    const std::string rv = object["metadata"].value("resourceVersion", "");
    const auto include = kube::IncludeObject::kMetadata;
    const core::WallTime now = clock_.wallNow();
    object = w.kind == KubeWatchKind::kJobs     ? kube::jobTable({object}, rv, include, now)
             : w.kind == KubeWatchKind::kEvents ? kube::eventTable({object}, rv, include, now)
             : w.kind == KubeWatchKind::kNodes  ? kube::nodeTable({object}, rv, include, now)
             : polled(w.kind) ? kube::kvTable(kvKind(w.kind), {object}, rv, include, now)
                              : kube::podTable({object}, rv, include, now);
  }
  return json{{"type", type}, {"object", std::move(object)}}.dump(-1, ' ', false,
                                                                  json::error_handler_t::replace) +
         "\n";
}

std::string ControlPlane::kubeChangeEvents(const KubeWatch& w, const WorkloadChange& c) const {
  // What it showed of the workload before the change and after, compared object by object (a
  // Job's change may leave most of its pods as they were).
  std::string out;
  const std::string rv = std::to_string(c.revision);
  const bool deleted = c.type == WorkloadChange::Type::kDeleted;
  Watched before =
      watchedObjects(w.tenant, deleted ? c.record.get() : c.before.get(), w.kind, w.filter);
  Watched after = watchedObjects(w.tenant, deleted ? nullptr : c.record.get(), w.kind, w.filter);
  std::unordered_map<std::string, json*> was_by_name;
  for (auto& [name, object] : before) {
    was_by_name.emplace(name, &object);
  }
  for (auto& [name, object] : after) {
    object["metadata"]["resourceVersion"] = rv;
    auto was = was_by_name.find(name);
    const bool existed = was != was_by_name.end();
    if (existed) {
      json& old = *was->second;
      old["metadata"]["resourceVersion"] = rv;
      const bool unchanged = old == object;
      was_by_name.erase(was);
      if (unchanged) {
        continue;
      }
    }
    out += kubeEvent(w, existed ? "MODIFIED" : "ADDED", std::move(object));
  }
  for (auto& [name, object] : before) {
    if (was_by_name.contains(name)) {
      // Gone, or no longer selected: as it was last, at this revision.
      object["metadata"]["resourceVersion"] = rv;
      out += kubeEvent(w, "DELETED", std::move(object));
    }
  }
  return out;
}

void ControlPlane::kubeWatchDeliver(KubeWatch& w, KubeEventCache* cache) {
  if (polled(w.kind)) {
    return;  // Not fed by the workloads' changes: kubePolledDeliver.
  }
  std::lock_guard lock(w.mu);
  if (!w.stream->open()) {
    return;
  }
  int64_t through = w.rv;
  auto changes = registry_.changesSince(w.tenant, w.rv, &through);
  if (!changes.isOk()) {
    // Its place in history is gone: the client lists again (kubectl get -w ends, reflectors
    // re-list).
    const json status = kube::status(410, changes.status().message(), json::object(), "Expired");
    (void)w.stream->write(json{{"type", "ERROR"}, {"object", status}}.dump() + "\n");
    w.stream->end();
    return;
  }
  std::string out;
  for (const WorkloadChange& c : *changes) {
    if (cache == nullptr) {
      out += kubeChangeEvents(w, c);
      continue;
    }
    // One notification's watches mostly share their filters (a thousand `get pods -w` of one
    // namespace): each change is encoded once per kind of watch, not once per watch.
    auto [it, fresh] = cache->try_emplace({c.revision, w.key});
    if (fresh) {
      it->second = kubeChangeEvents(w, c);
    }
    out += it->second;
  }
  w.rv = std::max(w.rv, through);
  if (!out.empty()) {
    (void)w.stream->write(std::move(out));
  }
}

HttpResponse ControlPlane::kubeWatch(Request& r, kube::PodFilter filter, bool table,
                                     KubeWatchKind kind) {
  const std::string tenant = *r.scope.tenant;
  auto w = std::make_shared<KubeWatch>();
  w->tenant = tenant;
  w->filter = std::move(filter);
  w->table = table;
  w->kind = kind;
  w->bookmarks = kube::queryBool(kube::queryParam(r.scope.query, "allowWatchBookmarks"), false);
  {
    const std::string* ls = kube::queryParam(r.scope.query, "labelSelector");
    const std::string* fs = kube::queryParam(r.scope.query, "fieldSelector");
    static constexpr const char* kKinds[] = {"pods",  "jobs",    "events",
                                             "nodes", "secrets", "configmaps"};
    w->key = tenant + '\0' + kKinds[static_cast<int>(kind)] + (table ? ",table" : ",json") + '\0' +
             w->filter.ns + '\0' + (ls == nullptr ? "" : *ls) + '\0' + (fs == nullptr ? "" : *fs);
  }
  w->stream = std::make_shared<ResponseStream>();
  const auto start = std::chrono::steady_clock::now();
  int64_t timeout_s = 0;
  if (const std::string* t = kube::queryParam(r.scope.query, "timeoutSeconds")) {
    try {
      timeout_s = std::stoll(*t);
    } catch (const std::exception&) {
      return kube::statusResponse(400, "timeoutSeconds: expected a number of seconds");
    }
  }
  if (timeout_s <= 0) {
    // Without one, as kube-apiserver: between 30 and 60 minutes, so that the clients of one
    // restart do not all come back at once.
    std::random_device rd;
    timeout_s = 1800 + std::uniform_int_distribution<int64_t>(0, 1800)(rd);
  }
  w->deadline = start + std::chrono::seconds(std::min<int64_t>(timeout_s, 3600));
  w->next_bookmark = start + kBookmarkEvery;
  const std::string* rv_text = kube::queryParam(r.scope.query, "resourceVersion");
  std::string initial;
  if (polled(kind)) {
    if (kind != KubeWatchKind::kNodes) {
      // Not its headers or body: the bearer token is not kept for the watch's life.
      w->http.method = r.http.method;
      w->http.target = r.http.target;
      w->http.listener = r.http.listener;
      w->scope = r.scope;
      w->token = r.token;
      w->grant = r.grant;
    }
    // What it selects now: shown as ADDED without a resourceVersion (or from "0"), taken as
    // already seen from a list's (kubectl get -w lists first).
    const bool show = rv_text == nullptr || rv_text->empty() || *rv_text == "0";
    auto selected = kubePolledObjects(*w);
    if (!selected.isOk()) {
      HttpResponse resp = api::fromStatus(selected.status());
      kube::asStatus(resp);
      return resp;
    }
    w->shown = std::move(selected).value();
    if (show) {
      for (const auto& [name, object] : w->shown) {
        initial += kubeEvent(*w, "ADDED", object);
      }
    }
    w->rv = registry_.revision();
  } else if (rv_text == nullptr || rv_text->empty() || *rv_text == "0") {
    // Every object it selects now, as ADDED, then what comes after.
    auto [records, at] = registry_.snapshot(tenant);
    for (const WorkloadPtr& rec : records) {
      for (auto& [name, object] : watchedObjects(tenant, rec.get(), kind, w->filter)) {
        initial += kubeEvent(*w, "ADDED", std::move(object));
      }
    }
    w->rv = at;
  } else {
    try {
      size_t used = 0;
      w->rv = std::stoll(*rv_text, &used);
      if (used != rv_text->size() || w->rv < 0) {
        throw std::invalid_argument("resourceVersion");
      }
    } catch (const std::exception&) {
      return kube::statusResponse(
          400, "resourceVersion: '" + rv_text->substr(0, 32) + "' is not a resource version");
    }
  }
  {
    std::lock_guard lock(kube_watch_mu_);
    if (kube_watch_stop_) {
      return kube::statusResponse(503, "the server is stopping");
    }
    auto& list = kube_watches_[tenant];
    std::erase_if(list, [](const auto& x) { return !x->stream->open(); });
    if (list.size() >= kMaxWatchesPerTenant) {
      HttpResponse busy =
          kube::statusResponse(429,
                               "tenant '" + tenant + "' holds " + std::to_string(list.size()) +
                                   " watches, its limit; close some",
                               {{"retryAfterSeconds", 1}});
      busy.headers.emplace_back("Retry-After", "1");
      return busy;
    }
    list.push_back(w);
    if (!kube_watch_thread_.joinable()) {
      kube_watch_thread_ = std::thread([this] { kubeWatchTimer(); });
    }
  }
  std::weak_ptr<KubeWatch> weak = w;
  w->stream->onEnd([this, weak, tenant] {
    std::lock_guard lock(kube_watch_mu_);
    auto it = kube_watches_.find(tenant);
    if (it != kube_watches_.end()) {
      std::erase_if(it->second, [&](const auto& x) { return x == weak.lock() || !x; });
      if (it->second.empty()) {
        kube_watches_.erase(it);
      }
    }
  });
  if (!initial.empty()) {
    (void)w->stream->write(std::move(initial));
  }
  kubeWatchDeliver(*w);  // What changed since its revision, and since the snapshot.
  HttpResponse resp;
  resp.status = 200;
  resp.content_type = "application/json";
  resp.stream = w->stream;
  return resp;
}

void ControlPlane::kubeWatchNotify(const std::set<std::string>& tenants) {
  std::vector<std::shared_ptr<KubeWatch>> due;
  {
    std::lock_guard lock(kube_watch_mu_);
    for (const std::string& t : tenants) {
      if (auto it = kube_watches_.find(t); it != kube_watches_.end()) {
        due.insert(due.end(), it->second.begin(), it->second.end());
      }
    }
  }
  KubeEventCache cache;
  for (const auto& w : due) {
    kubeWatchDeliver(*w, &cache);
  }
}

core::Result<std::map<std::string, json>> ControlPlane::kubePolledObjects(
    const KubeWatch& w) const {
  std::map<std::string, json> out;
  if (w.kind == KubeWatchKind::kNodes) {
    const std::string at = std::to_string(registry_.revision());
    for (auto& [name, node] : kubeNodes(w.tenant)) {
      if (w.filter.matches(node)) {
        node["metadata"]["resourceVersion"] = at;
        out.emplace(name, std::move(node));
      }
    }
    return out;
  }
  if (secrets_ == nullptr) {
    return out;
  }
  const Request probe{w.http, w.scope, "GET", "", w.token, "", json::object(), w.grant};
  return kubeKvSelected(probe, w.tenant,
                        w.kind == KubeWatchKind::kSecrets ? "secrets" : "configmaps", w.filter);
}

void ControlPlane::kubePolledDeliver(KubeWatch& w) {
  std::lock_guard lock(w.mu);
  if (!w.stream->open()) {
    return;
  }
  if (w.kind != KubeWatchKind::kNodes) {
    // Its objects' values go to whoever holds the token: only while it (and its grant) holds.
    const bool grant_over = w.grant && w.grant->expires <= clock_.wallNow();
    if (grant_over || !tokens_->lookupAccessor(w.token.accessor).isOk()) {
      const json status = kube::status(
          401, "the watch's token is no longer valid (expired or revoked)", json::object());
      (void)w.stream->write(json{{"type", "ERROR"}, {"object", status}}.dump() + "\n");
      w.stream->end();
      return;
    }
  }
  auto looked = kubePolledObjects(w);
  if (!looked.isOk()) {
    return;  // The store did not answer: the next look compares again.
  }
  std::map<std::string, json>& now = *looked;
  std::string out;
  const std::string at = std::to_string(registry_.revision());
  for (auto& [name, object] : now) {
    auto was = w.shown.find(name);
    if (was != w.shown.end()) {
      if (w.kind == KubeWatchKind::kNodes) {
        object["metadata"]["resourceVersion"] = was->second["metadata"]["resourceVersion"];
      }
      if (object == was->second) {
        continue;
      }
      if (w.kind == KubeWatchKind::kNodes) {
        object["metadata"]["resourceVersion"] = at;
      }
    }
    out += kubeEvent(w, was == w.shown.end() ? "ADDED" : "MODIFIED", object);
  }
  for (auto& [name, object] : w.shown) {
    if (!now.contains(name)) {
      if (w.kind == KubeWatchKind::kNodes) {
        object["metadata"]["resourceVersion"] = at;
      }
      out += kubeEvent(w, "DELETED", object);  // Removed, or no longer selected.
    }
  }
  w.shown = std::move(now);
  if (!out.empty()) {
    (void)w.stream->write(std::move(out));
  }
}

void ControlPlane::kubeWatchTimer() {
  std::unique_lock lock(kube_watch_mu_);
  while (!kube_watch_stop_) {
    kube_watch_cv_.wait_for(lock, std::chrono::seconds(1));
    if (kube_watch_stop_) {
      break;
    }
    std::vector<std::shared_ptr<KubeWatch>> all;
    for (const auto& [tenant, list] : kube_watches_) {
      all.insert(all.end(), list.begin(), list.end());
    }
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& w : all) {
      if (now >= w->deadline) {
        w->stream->end();  // timeoutSeconds: ended cleanly; reflectors watch again.
        continue;
      }
      if (polled(w->kind)) {
        kubePolledDeliver(*w);
      }
      if (w->bookmarks && now >= w->next_bookmark) {
        std::lock_guard wl(w->mu);
        w->next_bookmark = now + kBookmarkEvery;
        const bool job = w->kind == KubeWatchKind::kJobs;
        const char* kind = job                                 ? "Job"
                           : w->kind == KubeWatchKind::kEvents ? "Event"
                           : w->kind == KubeWatchKind::kNodes  ? "Node"
                           : polled(w->kind)                   ? kvKind(w->kind)
                                                               : "Pod";
        const json mark = {{"kind", kind},
                           {"apiVersion", job ? "batch/v1" : "v1"},
                           {"metadata", {{"resourceVersion", std::to_string(w->rv)}}}};
        (void)w->stream->write(json{{"type", "BOOKMARK"}, {"object", mark}}.dump() + "\n");
      }
    }
    lock.lock();
  }
}

void ControlPlane::stopKubeWatches() {
  std::map<std::string, std::vector<std::shared_ptr<KubeWatch>>> watches;
  {
    std::lock_guard lock(kube_watch_mu_);
    kube_watch_stop_ = true;
    watches = kube_watches_;
  }
  kube_watch_cv_.notify_all();
  if (kube_watch_thread_.joinable()) {
    kube_watch_thread_.join();
  }
  std::vector<KubeFollower> followers;
  {
    std::lock_guard lock(kube_watch_mu_);
    followers = std::move(kube_followers_);
  }
  for (KubeFollower& f : followers) {
    if (f.thread.joinable()) {
      f.thread.join();  // Each sees kube_watch_stop_ within half a second (or its fetch's 5 s).
    }
  }
  for (const auto& [tenant, list] : watches) {
    for (const auto& w : list) {
      w->stream->end();
    }
  }
}

}  // namespace tessera::server
