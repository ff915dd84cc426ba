// The request pipeline (scope, route, authenticate, tenant boundary, audit, handler, audit), the
// store's feed to the scheduler and housekeeping. The handlers are in api/*.cc.
#include "server/control_plane.h"

#include <sys/statvfs.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <future>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/console.h"
#include "server/fenced_store.h"
#include "server/request.h"
#include "server/route_table.h"
#include "store/etcd_store.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

namespace {

// Requests of a tenant that may wait for a worker: kQueuedPerRunning per request it may have
// running, and at least kMinQueued.
constexpr size_t kQueuedPerRunning = 8;
constexpr size_t kMinQueued = 64;

FairLimits fairLimits(int max_in_flight) {
  return {max_in_flight, std::max(kMinQueued, kQueuedPerRunning *
                                                  static_cast<size_t>(std::max(1, max_in_flight)))};
}

}  // namespace

core::Result<std::unique_ptr<ControlPlane>> ControlPlane::open(
    store::Store& store, audit::Auditor& auditor, SchedulerDriver& driver,
    const model::GpuCatalogue& catalogue, const core::Clock& clock, ControlPlaneOptions options,
    secrets::Secrets* secrets) {
  std::unique_ptr<ControlPlane> cp(
      new ControlPlane(store, auditor, driver, catalogue, clock, std::move(options), secrets));
  TESSERA_RETURN_IF_ERROR(cp->recoverAuditNotes());
  TESSERA_ASSIGN_OR_RETURN(
      cp->tokens_, TokenManager::open(store, clock, cp->options_.tokens, cp->powerSource()));
  TESSERA_ASSIGN_OR_RETURN(cp->grants_, GrantTable::open(store));
  cp->idempotency_ = std::make_unique<Idempotency>(store, clock);
  if (secrets != nullptr) {
    cp->task_secrets_ = std::make_unique<TaskSecrets>(*secrets, store, auditor, clock);
    TESSERA_RETURN_IF_ERROR(cp->task_secrets_->load());
  }
  // An agent's waiting watch is answered when its node's list changes or a request for its
  // agent is posted.
  driver.setNodeListener(
      [self = cp.get()](const std::string& node) { self->watchers_->notify(node); });
  cp->mailbox_.setPosted(
      [self = cp.get()](const std::string& node) { self->watchers_->notify(node); });
  TESSERA_ASSIGN_OR_RETURN(cp->usage_, TenantUsage::open(store));
  TESSERA_RETURN_IF_ERROR(cp->loadNodeState());  // Before the workloads: their pools.
  TESSERA_RETURN_IF_ERROR(cp->load());
  // From here on the scheduler is fed by the store: every workload written after what load()
  // read reaches it through this watch, in revision order.
  ControlPlane* self = cp.get();
  TESSERA_ASSIGN_OR_RETURN(
      cp->watch_, store.watch("/tenants/", store::prefixEnd("/tenants/"), cp->loaded_revision_ + 1,
                              [self](const store::WatchResponse& w) { self->onStoreEvents(w); }));
  cp->watching_ = true;
  return cp;
}

core::Status ControlPlane::recoverAuditNotes() {
  for (size_t i = 0; i < audit_sinks_.size(); ++i) {
    const std::string topic = auditNoteTopic(i);
    TESSERA_ASSIGN_OR_RETURN(std::vector<store::Note> notes, store_.notes(topic));
    if (notes.empty()) {
      continue;
    }
    const uint64_t durable = auditor_.durableSeq(i);
    size_t recovered = 0;
    for (const store::Note& note : notes) {
      if (note.id <= durable) {
        continue;  // The sink has it.
      }
      if (core::Status s = auditor_.writeRecovered(i, note.body); !s.isOk()) {
        return s.withContext("recovering audit record " + std::to_string(note.id) + " of " +
                             audit_sinks_[i] + " from the store");
      }
      ++recovered;
    }
    if (recovered > 0) {
      core::logWarn(
          "{} had lost {} record(s) after seq {} (a crash of the machine before the log's "
          "flush); written again from the store's copies, each marked \"recovered\" with its "
          "old seq",
          audit_sinks_[i], recovered, durable);
    }
    TESSERA_RETURN_IF_ERROR(store_.dropNotes(topic, notes.back().id));
  }
  return core::Status::ok();
}

void ControlPlane::dropDurableAuditNotes() {
  for (size_t i = 0; i < audit_sinks_.size(); ++i) {
    // A failure leaves the copies for the next drop (or the next start) to take.
    (void)store_.dropNotes(auditNoteTopic(i), auditor_.durableSeq(i));
  }
}

ControlPlane::~ControlPlane() {
  if (watching_) {
    store_.cancelWatch(watch_);
  }
  stopWatches();
  driver_.setNodeListener(nullptr);
}

void ControlPlane::stopWatches() {
  watchers_->stop();
  workload_watchers_->stop();
}

core::Status ControlPlane::migrateGpuLimits() {
  static constexpr std::string_view kDone = "/migrations/gpu-limit-zero-is-zero";
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult done, store_.range(std::string(kDone)));
  if (!done.kvs.empty()) {
    return core::Status::ok();
  }
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult all,
                           store_.range("/tenants/", store::prefixEnd("/tenants/")));
  int rewritten = 0;
  for (const store::KeyValue& kv : all.kvs) {
    const std::vector<std::string> parts = split(kv.key.substr(1));
    const bool settings =
        parts.size() == 2 || (parts.size() == 4 && parts[2] == "queues");  // A tenant's, a team's.
    if (!settings) {
      continue;
    }
    json value = json::parse(kv.value, nullptr, false);
    if (!value.is_object() || value.value("limit_milli_gpu", int64_t{0}) != 0) {
      continue;  // Corrupt ones are load()'s to report; a set limit means what it says.
    }
    value["limit_milli_gpu"] = kNoGpuLimit;
    TESSERA_RETURN_IF_ERROR(store_.put(kv.key, value.dump()).status());
    ++rewritten;
  }
  if (rewritten > 0) {
    core::logInfo(
        "{} tenant and queue records stored with a GPU limit of 0 (none, before) now "
        "say -1 (none); 0 means no GPU at all from now on",
        rewritten);
  }
  return store_.put(std::string(kDone), "{}").status();
}

core::Status ControlPlane::load() {
  TESSERA_RETURN_IF_ERROR(migrateGpuLimits());
  // Tenants (and their queues), policies, then workloads: unfinished ones go back to the
  // scheduler (their simulated tasks restart).
  // Policies and tenants, read at one revision (secrets and leases are the secrets engine's).
  store::Txn read{.compares = {},
                  .success = {store::Op::get("/policies/", store::prefixEnd("/policies/")),
                              store::Op::get("/tenants/", store::prefixEnd("/tenants/"))},
                  .failure = {}};
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult got, store_.txn(std::move(read)));
  std::vector<store::KeyValue> all = std::move(got.results[0].range.kvs);
  for (store::KeyValue& kv : got.results[1].range.kvs) {
    all.push_back(std::move(kv));
  }
  std::vector<std::pair<std::string, json>> workloads;
  std::vector<std::pair<std::string, json>> teams;  // ("tenant/queue", config)
  for (const store::KeyValue& kv : all) {
    const std::vector<std::string> parts = split(kv.key.substr(1));
    json value;
    try {
      value = json::parse(kv.value);
    } catch (const json::exception& e) {
      if (parts[0] == "tokens") {
        continue;  // The token manager reads its own.
      }
      return core::internalError("stored value at " + kv.key + " is corrupt: " + e.what());
    }
    if (parts[0] == "tenants" && parts.size() == 2) {
      tenants_[parts[1]] = value;
    } else if (parts[0] == "policies" && parts.size() == 2) {
      TESSERA_ASSIGN_OR_RETURN(Policy p, Policy::fromJson(parts[1], value));
      policies_[""][parts[1]] = std::move(p);
    } else if (parts[0] == "tenants" && parts.size() == 4 && parts[2] == "policies") {
      TESSERA_ASSIGN_OR_RETURN(Policy p,
                               Policy::fromJson(parts[3], upgradedTenantPolicy(parts[3], value)));
      policies_[parts[1]][parts[3]] = std::move(p);
    } else if (parts[0] == "tenants" && parts.size() == 4 && parts[2] == "queues") {
      teams.emplace_back(parts[1] + "/" + parts[3], value);
    } else if (parts[0] == "tenants" && parts.size() == 4 && parts[2] == "workloads") {
      workloads_[parts[1]][parts[3]] = value;
      if (value["status"].value("phase", "") == "pending") {
        ++pending_[parts[1]];
      }
      workloads.emplace_back(parts[1], value);
    }
  }
  for (const auto& [name, config] : tenants_) {
    TESSERA_RETURN_IF_ERROR(driver_.addTenantQueue(
        name, config.value("quota_milli_gpu", int64_t{0}),
        config.value("limit_milli_gpu", kNoGpuLimit), config.value("weight", int64_t{1}),
        config.value("priority", 100), config.value("max_unsaved_gpu_seconds", int64_t{-1})));
    driver_.setTrustGroup(name, config.value("trust_group", std::string()));
  }
  for (const auto& [key, config] : teams) {
    const size_t slash = key.find('/');
    TESSERA_RETURN_IF_ERROR(driver_.putTeamQueue(
        key.substr(0, slash), key.substr(slash + 1), config.value("quota_milli_gpu", int64_t{0}),
        config.value("limit_milli_gpu", kNoGpuLimit), config.value("weight", int64_t{1}),
        config.value("priority", 100), config.value("max_unsaved_gpu_seconds", int64_t{-1})));
  }
  for (const auto& [tenant, record] : workloads) {
    const std::string phase = record.at("status").at("phase").get<std::string>();
    if (phase == "succeeded" || phase == "cancelled" || phase == "failed") {
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(SubmitCommand cmd, commandFromRecord(tenant, record));
    if (record.value("cancel_requested", false)) {
      (void)driver_.submit(cmd);  // It was running; the next pass stops it.
      driver_.cancel(tenant, cmd.name);
      continue;
    }
    (void)driver_.submit(std::move(cmd));  // Refused ones keep their stored status.
  }
  loaded_revision_ = got.revision;
  return core::Status::ok();
}

void ControlPlane::onStoreEvents(const store::WatchResponse& w) {
  if (!w.error.isOk()) {
    core::logError("the scheduler's store watch ended: {}", w.error.message());
    return;
  }
  // Every change to a tenant's workloads moves its index and answers its long polls.
  std::map<std::string, int64_t> changed;
  for (const store::Event& e : w.events) {
    const std::vector<std::string> parts = split(e.kv.key.substr(1));
    if (parts.size() == 4 && parts[0] == "tenants" && parts[2] == "workloads") {
      int64_t& rev = changed[parts[1]];
      rev = std::max({rev, e.kv.mod_revision, w.revision});
    }
  }
  for (const store::Event& e : w.events) {
    const std::vector<std::string> parts = split(e.kv.key.substr(1));
    if (e.type != store::EventType::kPut || parts.size() != 4 || parts[0] != "tenants" ||
        parts[2] != "workloads") {
      continue;  // Tenants and queues reach the scheduler when they are written.
    }
    // Most writes are the scheduler's own status changes: only a new record or one that
    // carries a cancel request is worth parsing.
    if (e.prev_kv && e.kv.value.find("\"cancel_requested\"") == std::string::npos) {
      continue;
    }
    const json record = json::parse(e.kv.value, nullptr, false);
    if (!record.is_object()) {
      continue;
    }
    const std::string& tenant = parts[1];
    if (!e.prev_kv) {
      // A new workload: into the cache (if the handler has not put it there yet, so that the
      // scheduler's first status change finds it), then to the scheduler. Not if its tenant
      // was deleted since: that deletion removed it from the store.
      {
        std::lock_guard lock(mu_);
        watched_revision_ = e.kv.mod_revision;
        if (!tenants_.contains(tenant)) {
          continue;  // If that deletion fails, it hands this one to the scheduler.
        }
        if (workloads_[tenant].try_emplace(parts[3], record).second) {
          ++pending_[tenant];
        }
      }
      auto cmd = commandFromRecord(tenant, record);
      core::Status st = cmd.isOk() ? driver_.submit(std::move(cmd).value()) : cmd.status();
      if (!st.isOk()) {
        (void)onDriverChanges(
            {{tenant + "/" + parts[3], WorkloadStatus{.phase = "failed", .reason = st.message()}}});
      }
      continue;
    }
    const json before = json::parse(e.prev_kv->value, nullptr, false);
    if (record.value("cancel_requested", false) &&
        !(before.is_object() && before.value("cancel_requested", false))) {
      driver_.cancel(tenant, parts[3]);
    }
  }
  // Last, once the cache holds the new records: a long poll woken here answers with them.
  if (!changed.empty()) {
    {
      std::lock_guard lock(mu_);
      for (const auto& [tenant, rev] : changed) {
        int64_t& index = workload_index_[tenant];
        index = std::max(index + 1, rev);
      }
    }
    for (const auto& [tenant, rev] : changed) {
      workload_watchers_->notify(tenant);
    }
  }
}

ControlPlane::Bucket& ControlPlane::bucketLocked(const std::string& key) {
  std::unique_ptr<Bucket>& slot = buckets_[key];
  if (slot == nullptr) {
    slot = std::make_unique<Bucket>();
    applyLimitsLocked(key);
  }
  return *slot;
}

void ControlPlane::applyLimitsLocked(const std::string& key) {
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    return;  // Created with the current limits on first use.
  }
  Bucket& b = *it->second;
  auto t = tenants_.find(key);
  const json config = t == tenants_.end() ? json::object() : t->second;
  b.rate = config.value("request_rate", options_.tenant_rate_per_s);
  b.burst = config.value("request_burst", options_.tenant_burst);
  b.max_in_flight = config.value("request_concurrency", options_.tenant_max_in_flight);
  b.tokens = std::min(b.tokens, b.burst);
}

Admission ControlPlane::admit(const HttpRequest& http,
                              const std::vector<ListenerConfig>& listeners) {
  Admission a;
  a.reject_delay = options_.reject_delay;
  const std::string secret = requestToken(http);
  auto token = secret.empty() ? core::Result<TokenInfo>(core::notFound("no token"))
                              : tokens_->lookup(secret);
  if (!token.isOk()) {
    // Health checks and requests that will be refused (403): one key of their own, so they
    // can neither starve a tenant nor be starved.
    a.key = "/unauthenticated";
    a.limits = fairLimits(options_.tenant_max_in_flight);
    return a;
  }
  a.key = token->tenant.empty() ? "/admin" : token->tenant;
  if (token->tenant.empty()) {
    // An agent's heartbeat (it may wait for news): its node's own key, so agents neither wait
    // behind operators nor hold their turns. Only declared agent nodes get one (a bounded set).
    constexpr std::string_view kPrefix = "/v1/sys/nodes/";
    const std::string_view target =
        std::string_view(http.target)
            .substr(0, std::min(http.target.size(), http.target.find('?')));
    const std::string_view rest =
        target.starts_with(kPrefix) ? target.substr(kPrefix.size()) : std::string_view();
    const size_t slash = rest.find('/');
    if (slash != std::string_view::npos &&
        (rest.substr(slash) == "/heartbeat" || rest.substr(slash) == "/tasks" ||
         rest.substr(slash).starts_with("/logs/"))) {
      const std::string node(rest.substr(0, slash));
      if (driver_.isAgentNode(node)) {
        a.key = "/node/" + node;
        a.limits = fairLimits(2);
        return a;
      }
    }
  }
  std::shared_lock tenants_lock(mu_);  // A new bucket reads the tenant's limits.
  std::lock_guard lock(buckets_mu_);
  Bucket& b = bucketLocked(a.key);
  const core::TimePoint now = clock_.now();
  if (b.last == core::TimePoint{}) {
    b.tokens = b.burst;
  } else {
    const double dt = std::chrono::duration<double>(now - b.last).count();
    b.tokens = std::min(b.burst, b.tokens + dt * b.rate);
  }
  b.last = now;
  if (b.tokens < 1) {
    HttpResponse resp = error(429, "too many requests for this tenant; slow down");
    resp.headers.emplace_back("Retry-After", "1");
    resp.delay = options_.reject_delay;
    a.response = std::move(resp);
    recordRefusal(http, *a.response, listeners);
    return a;
  }
  b.tokens -= 1;
  a.limits = fairLimits(b.max_in_flight);
  a.run_now = isOwnStatusRead(http, listeners, *token);
  return a;
}

bool ControlPlane::isOwnStatusRead(const HttpRequest& http,
                                   const std::vector<ListenerConfig>& listeners,
                                   const TokenInfo& token) {
  if (http.method != "GET") {
    return false;
  }
  const std::string chroot =
      http.listener < listeners.size() ? listeners[http.listener].chroot_tenant : "";
  auto parsed = parseApiRequest(http, chroot);
  if (!parsed.isOk() || parsed->method != "GET" || !parsed->scope.tenant) {
    return false;
  }
  // Its own tenant's, or an operator's: never one that could come in on a grant, whose answer
  // waits for the audit log's flush on the thread that handles it.
  if (!token.tenant.empty() && token.tenant != *parsed->scope.tenant) {
    return false;
  }
  const std::vector<std::string> parts = split(parsed->scope.path);
  return parts.size() == 2 && parts[0] == "workloads";
}

bool ControlPlane::authorized(const Request& r, Capability needed) const {
  return authorizedOn(r, r.scope.path, needed);
}

bool ControlPlane::authorizedOn(const Request& r, const std::string& scoped_path,
                                Capability needed) const {
  if (r.grant) {
    // In on a grant: the grant's capabilities on its paths, whatever the token's policies say.
    if (!r.grant->covers(scoped_path)) {
      return false;
    }
    if (!r.grant->ownerPolicy()) {
      return r.grant->capabilities.allows(needed);
    }
    // An owner's policy, as it is now (gone: nothing), on the owner's path.
    std::shared_lock lock(mu_);
    auto owner = policies_.find(r.grant->owner);
    if (owner == policies_.end()) {
      return false;
    }
    auto p = owner->second.find(r.grant->policy);
    return p != owner->second.end() &&
           allowsRequest(resolvePermissions({&p->second}, scoped_path), needed,
                         requestParameters(needed, r.body, r.scope.query));
  }
  if (r.token.isRoot()) {
    return true;
  }
  std::shared_lock lock(mu_);
  // A tenant token's policies live in its tenant and see paths inside it; an admin token's
  // policies see absolute paths.
  const std::string& scope = r.token.tenant;
  const std::string path = scope.empty() && r.scope.tenant
                               ? "tenants/" + *r.scope.tenant + "/" + scoped_path
                               : scoped_path;
  std::vector<const Policy*> policies;
  auto it = policies_.find(scope);
  for (const std::string& name : r.token.policies) {
    if (it != policies_.end()) {
      auto p = it->second.find(name);
      if (p != it->second.end()) {
        policies.push_back(&p->second);
      }
    }
  }
  // Vault's parameter and wrapping constraints too (acl.h allowsRequest).
  return allowsRequest(resolvePermissions(policies, path), needed,
                       requestParameters(needed, r.body, r.scope.query));
}

void ControlPlane::recordMetric(const std::string& route, const std::string& tenant,
                                unsigned status, double seconds) {
  request_metrics_.observe(route, tenant, status, seconds);
}

void ControlPlane::handle(const HttpRequest& http, const std::vector<ListenerConfig>& listeners,
                          Reply reply) {
  // Whatever throws on the way, the request is answered and its answer recorded (paired with
  // its request record, if one was written).
  std::string recorded;
  std::optional<HttpResponse> now;
  // Every answer, now or later, says what a client may do after a 5xx.
  Reply marked;
  if (reply) {
    marked = [reply = std::move(reply)](HttpResponse resp) mutable {
      markUnavailable(resp);
      reply(std::move(resp));
    };
  }
  try {
    now = serve(http, listeners, marked, recorded);
  } catch (const std::exception& e) {
    now = failed(http, listeners, recorded, e);
  }
  if (now && marked) {
    marked(std::move(*now));
  }
}

void ControlPlane::markUnavailable(HttpResponse& resp) {
  if (resp.status < 500) {
    return;
  }
  if (resp.body.find(store::kOutcomeUnknown) != std::string::npos) {
    // The one way a client learns it (docs/server.md): sent again with its Idempotency-Key,
    // the change is applied once.
    resp.headers.emplace_back("X-Tessera-Applied", "unknown");
  } else if (resp.status == 503 && resp.body.find(kNotLeading) != std::string::npos) {
    resp.headers.emplace_back("X-Tessera-Standby", "true");  // Deposed: not applied.
    resp.headers.emplace_back("Retry-After", "1");
  } else if (resp.status == 503 && resp.body.find(store::kNoEtcdQuorum) != std::string::npos) {
    // Nothing was written, and no replica can write: agents keep their tasks (docs/agent.md).
    resp.headers.emplace_back("X-Tessera-Leader", "none");
    resp.headers.emplace_back("Retry-After", "1");
  }
}

namespace {

constexpr size_t kMaxRecordedTarget = 1024;  // A refused request's target, as recorded.

// What a JSON type error says about the body, without nlohmann's prefix.
std::string jsonTypeError(const json::exception& e) {
  const char* rest = std::strchr(e.what(), ']');
  return std::string("request body: a field has the wrong type: ") +
         (rest != nullptr && rest[1] == ' ' ? rest + 2 : e.what());
}

}  // namespace

audit::AuditEvent ControlPlane::refusalEvent(const HttpRequest& http, const HttpResponse& resp,
                                             const std::vector<ListenerConfig>& listeners,
                                             std::string& source) {
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kResponse;
  ev.request_id = requestId();
  ev.request.method = http.method.substr(0, 32);
  ev.request.remote_address = http.remote;
  const std::string chroot =
      http.listener < listeners.size() ? listeners[http.listener].chroot_tenant : "";
  auto scope = requestScope(http, chroot);
  if (scope.isOk()) {
    ev.request.path = scope->tenant ? "tenants/" + *scope->tenant + "/" + scope->path : scope->path;
  } else {
    // A path that does not parse (or names nothing on this listener): as it came, bounded.
    ev.request.path = http.target.substr(0, kMaxRecordedTarget);
  }
  const std::string secret = requestToken(http);
  auto token = secret.empty() ? core::Result<TokenInfo>(core::notFound("no token"))
                              : tokens_->lookup(secret);
  if (token.isOk()) {
    ev.tenant = token->tenant;
    ev.auth.accessor = token->accessor;
    ev.auth.display_name = token->display_name;
    ev.auth.policies = token->policies;
    source = RefusalLog::sourceOf(http.remote, &token->tenant);
  } else {
    ev.auth.token = secret;  // HMAC'd by the sink, never written as it is.
    source = RefusalLog::sourceOf(http.remote, nullptr);
  }
  ev.response.status = static_cast<int>(resp.status);
  const json body = json::parse(resp.body, nullptr, false);
  ev.response.body = body.is_object() ? body : json::object();
  if (body.is_object() && body.contains("errors") && body["errors"].is_array() &&
      !body["errors"].empty() && body["errors"][0].is_string()) {
    ev.error = body["errors"][0].get<std::string>();
  }
  return ev;
}

void ControlPlane::recordRefusal(const HttpRequest& http, const HttpResponse& resp,
                                 const std::vector<ListenerConfig>& listeners,
                                 const std::string& credential) {
  std::string source;
  audit::AuditEvent ev = refusalEvent(http, resp, listeners, source);
  if (!credential.empty()) {
    ev.auth.token = credential;
  }
  refusals_->record(source, ev);
}

HttpResponse ControlPlane::failed(const HttpRequest& http,
                                  const std::vector<ListenerConfig>& listeners,
                                  const std::string& recorded, const std::exception& e) {
  HttpResponse resp;
  if (const auto* bad = dynamic_cast<const json::type_error*>(&e)) {
    resp = error(400, jsonTypeError(*bad));
  } else {
    core::logError("{} {}: {}", http.method, http.target.substr(0, kMaxRecordedTarget), e.what());
    resp =
        error(500, "internal error (request " + (recorded.empty() ? "unrecorded" : recorded) + ")");
  }
  std::string source;
  audit::AuditEvent ev = refusalEvent(http, resp, listeners, source);
  if (recorded.empty()) {
    refusals_->record(source, ev);
  } else {
    // The request record is in the log: its response record is too, whatever the budget.
    ev.request_id = recorded;
    (void)auditor_.record(ev);
  }
  return resp;
}

HttpResponse ControlPlane::handle(const HttpRequest& http,
                                  const std::vector<ListenerConfig>& listeners) {
  std::promise<HttpResponse> answer;
  std::future<HttpResponse> answered = answer.get_future();
  handle(http, listeners, [&answer](HttpResponse r) { answer.set_value(std::move(r)); });
  return answered.get();
}

std::optional<HttpResponse> ControlPlane::serve(const HttpRequest& http,
                                                const std::vector<ListenerConfig>& listeners,
                                                Reply& later, std::string& recorded) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string chroot =
      http.listener < listeners.size() ? listeners[http.listener].chroot_tenant : "";
  // The web console's static files: public, answered before anything about tokens or tenants.
  if (auto answer = consoleResponse(http, catalogue_)) {
    return *answer;
  }
  if (auto answer = wellKnownApi(http)) {
    return *answer;
  }
  // Refusals before the request record is written are recorded each in a record of its own,
  // within a budget (recordRefusal; failed authentication too).
  auto refuse = [&](HttpResponse resp) {
    recordRefusal(http, resp, listeners);
    return resp;
  };
  auto parsed = parseApiRequest(http, chroot);
  if (!parsed.isOk()) {
    return refuse(error(parsed.status().code() == core::StatusCode::kNotFound ? 404 : 400,
                        parsed.status().message()));
  }
  Request r{http, std::move(parsed->scope), parsed->method, requestId(), {},
            "",   std::move(parsed->body),  std::nullopt};
  // The route table decides what the path is (404 if nothing), which methods it takes (405
  // otherwise) and the label its metrics get: the pattern, never the caller's names.
  r.match = std::move(parsed->match);
  r.route = r.match.label;
  // A join is authenticated by the join token in its body, not by a token: one that does not
  // authenticate is a refusal, as a bad token is; one that does is recorded and handled below.
  bool join = false;
  if (r.match.route != nullptr && !r.match.route->authenticated) {
    if (!r.match.allowed) {
      return refuse(methodNotAllowed(r));
    }
    switch (r.match.route->api) {
      case Api::kHealth:
        return health();
      case Api::kOpenApi:
        return reply(200, openApiDocument(kVersion));
      case Api::kNodeJoin:
        if (auto joined = joinTokenOf(r); !joined.isOk()) {
          HttpResponse resp = fromStatus(joined.status());
          const json presented = r.body.value("join_token", json());
          recordRefusal(http, resp, listeners,
                        presented.is_string() ? presented.get<std::string>() : "");
          return resp;
        }
        join = true;
        break;
      default:
        break;
    }
  }
  if (!join) {
    if (auto answer = unauthenticatedSecretsApi(http, r.scope, r.body)) {
      return *answer;
    }
    const std::string& secret = parsed->token;
    auto token = secret.empty() ? core::Result<TokenInfo>(core::notFound("no token"))
                                : tokens_->lookup(secret);
    if (!token.isOk()) {
      // Its record tells a missing token from a presented one (auth.token, HMAC'd).
      return refuse(error(403, "permission denied: missing, invalid, revoked or expired token"));
    }
    r.token = std::move(token).value();
  }
  // The tenant boundary: a tenant token sees its own tenant and nothing else, not even that
  // something else exists. One exception: any token may look itself up, renew itself and
  // revoke itself from the admin scope, which touches nothing but the token itself (the lookup
  // names its tenant). That is how a client holding only a token learns which scope to use, and
  // how Vault's clients (which know only these paths) keep their token alive.
  const bool self_op = !r.scope.tenant && (r.scope.path == "auth/token/lookup-self" ||
                                           r.scope.path == "auth/token/renew-self" ||
                                           r.scope.path == "auth/token/revoke-self");
  // The one way in from another tenant: a live grant of the scope's tenant to the token's that
  // covers the path (server/grants.h). Anything else stays invisible.
  if (!r.token.tenant.empty() && r.scope.tenant && r.scope.tenant != r.token.tenant) {
    r.grant = grants_->find(*r.scope.tenant, r.token.tenant, r.scope.path, clock_.wallNow());
  }
  if (!r.token.tenant.empty() && r.scope.tenant != r.token.tenant && !self_op && !r.grant) {
    // Recorded as the caller's own (a probe of another tenant is worth an operator's look); the
    // record tells the caller nothing it did not send.
    audit::AuditEvent probe;
    probe.type = audit::AuditType::kResponse;
    probe.request_id = r.request_id;
    probe.tenant = r.token.tenant;
    probe.auth.accessor = r.token.accessor;
    probe.auth.display_name = r.token.display_name;
    probe.auth.policies = r.token.policies;
    probe.request.method = r.method;
    probe.request.path =
        r.scope.tenant ? "tenants/" + *r.scope.tenant + "/" + r.scope.path : r.scope.path;
    probe.request.remote_address = http.remote;
    probe.response.status = 404;
    probe.error = "outside the token's tenant";
    if (!auditor_.record(probe).isOk()) {
      return error(503, "the audit log cannot record this request, so it is refused");
    }
    return error(404, "not found");
  }
  // A self lookup is recorded (and counted) as the token's tenant's.
  const std::string tenant = r.scope.tenant.value_or(self_op ? r.token.tenant : "");
  if (routineNodeCall(r)) {
    HttpResponse resp;
    try {
      resp = route(r);
    } catch (const std::exception& e) {
      core::logError("{} {} (request {}): {}", r.method, r.scope.path, r.request_id, e.what());
      resp = error(500, "internal error (request " + r.request_id + ")");
    }
    if (r.defer) {  // A watch that waits for news answers later, unrecorded too.
      r.defer(
          [later = std::move(later)](HttpResponse answer) mutable { later(std::move(answer)); });
      return std::nullopt;
    }
    recordMetric(r.route, tenant, resp.status,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return resp;
  }
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kRequest;
  ev.request_id = r.request_id;
  ev.tenant = tenant;
  ev.auth.accessor = r.token.accessor;
  ev.auth.display_name = r.token.display_name;
  ev.auth.policies = r.token.policies;
  ev.request.method = r.method;
  ev.request.path = r.scope.tenant ? "tenants/" + tenant + "/" + r.scope.path : r.scope.path;
  ev.request.remote_address = http.remote;
  ev.request.body = r.body;
  ev.sensitive = sensitivePointers(r.scope);
  // A request that changes something is on stable storage in the log before it is acted on. A
  // read changes nothing, so its request record only needs to precede its response record in
  // the log: one disk flush for both, which the answer waits for if it reveals secrets
  // (audit_durable_answers). A submission too is only appended before it is routed: its one
  // change is a store txn, which stores a copy of the record with it (Request::audit_notes), so
  // the record is on stable storage no later than the workload, with no disk flush of the log's
  // own in the way; the log flushes it within its flush delay, and a record the log lost in a
  // crash of the machine is written again from the copy at the next start
  // (recoverAuditNotes).
  const bool read_only = r.method == "GET" || r.method == "LIST";
  const bool prepared = !read_only && preparedWhileRecorded(r);
  audit::Auditor::Appended appended;
  if (read_only || prepared) {
    auto a = auditor_.append(ev);
    if (!a.isOk()) {
      return error(503, "the audit log cannot record this request, so it is refused");
    }
    appended = std::move(a).value();
  } else if (!auditor_.record(ev).isOk()) {
    return error(503, "the audit log cannot record this request, so it is refused");
  }
  recorded = r.request_id;
  if (prepared) {
    for (size_t i = 0; i < appended.sinks.size(); ++i) {
      if (appended.sinks[i]) {
        r.audit_notes.push_back(
            {auditNoteTopic(i), appended.records[i].seq, std::move(appended.records[i].line)});
      }
    }
  }
  // Whatever happens in a handler, the request recorded above gets its response record: an
  // exception is an answer too. A JSON type error is the body's (a field of the wrong type that
  // a handler read without checking), the caller's to fix; anything else is ours.
  HttpResponse resp;
  try {
    std::optional<HttpResponse> refused = read_only ? std::nullopt : storageRefusal(r, tenant);
    const std::string key = read_only ? "" : http.header("idempotency-key");
    if (refused) {
      resp = std::move(*refused);
    } else if (key.empty()) {
      resp = route(r);
    } else {
      resp = routeOnce(r, http, key, ev.sensitive);
    }
  } catch (const json::type_error& e) {
    resp = error(400, jsonTypeError(e));
  } catch (const std::exception& e) {
    core::logError("{} {} (request {}): {}", r.method, ev.request.path, r.request_id, e.what());
    resp = error(500, "internal error (request " + r.request_id + ")");
  }
  Finish f{std::move(ev),  std::move(appended),
           read_only,      std::move(r.grant),
           r.token.tenant, r.token.accessor,
           r.method,       std::move(r.route),
           tenant,         t0};
  if (r.defer) {
    // The handler answers later (a node's watch, when there is news): its response record and
    // the rest of this pipeline wait for that answer, and this worker goes on meanwhile.
    auto finish_later = std::make_shared<std::pair<Finish, Reply>>(std::move(f), std::move(later));
    r.defer([this, finish_later](HttpResponse answer) {
      auto& [fin, reply_later] = *finish_later;
      if (std::optional<HttpResponse> now = finish(fin, std::move(answer), reply_later)) {
        reply_later(std::move(*now));
      }
    });
    return std::nullopt;
  }
  return finish(f, std::move(resp), later);
}

std::optional<HttpResponse> ControlPlane::finish(Finish& f, HttpResponse resp, Reply& later) {
  audit::AuditEvent& ev = f.ev;
  ev.type = audit::AuditType::kResponse;
  ev.response.status = static_cast<int>(resp.status);
  try {
    ev.response.body = resp.body.empty() ? json::object() : json::parse(resp.body);
  } catch (const json::exception&) {
    ev.response.body = json::object();
  }
  const bool read_only = f.read_only;
  const bool durable_answer =
      f.grant || options_.durable_every_answer || audit::responseIsSensitive(ev);
  if (!durable_answer) {
    // Nothing secret in the answer: it goes once the response record is appended (a read's
    // request record with it), and the log flushes them soon after: a crash of the machine in
    // between could lose them, one of the server could not. A change's request record is on
    // stable storage already.
    if (read_only && !auditor_.recordAppendedAfter(ev, f.appended).isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    } else if (!read_only && !auditor_.append(ev).isOk() && resp.status < 300) {
      resp = appliedButUnrecorded(resp.status);
    }
  } else if (read_only && !f.grant) {
    // Answered once both records are durable, from the flusher; this worker goes on meanwhile.
    auditor_.recordAfterAsync(
        ev, f.appended,
        [this, resp = std::move(resp), later = std::move(later), metric = f.route,
         tenant = f.tenant, t0 = f.t0](const core::Status& recorded) mutable {
          if (!recorded.isOk()) {
            resp = error(503, "the audit log cannot record this request, so it is refused");
          }
          recordMetric(
              metric, tenant, resp.status,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          later(std::move(resp));
        });
    return std::nullopt;
  } else if (read_only) {
    if (!auditor_.recordAfter(ev, f.appended).isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    }
  } else if (!auditor_.record(ev).isOk() && resp.status < 300) {
    // The change is made but unrecorded; say so rather than pretend nothing happened.
    resp = appliedButUnrecorded(resp.status);
  }
  if (f.grant) {
    // The grantee's stream records its use of the grant too (the owner's has the request).
    if (!auditGrant(f.token_tenant, *f.grant, "grant used", f.method, ev.request.path,
                    static_cast<int>(resp.status), f.accessor)
             .isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    }
  }
  recordMetric(f.route, f.tenant, resp.status,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - f.t0).count());
  return resp;
}

HttpResponse ControlPlane::routeOnce(Request& r, const HttpRequest& http, const std::string& key,
                                     const std::vector<std::string>& sensitive) {
  if (core::Status ok = Idempotency::checkKey(key); !ok.isOk()) {
    return error(400, ok.message());
  }
  Idempotency::Ticket ticket;
  if (core::Status ready =
          idempotency_->begin(key, r.token.accessor, r.method, http.target, http.body, ticket);
      !ready.isOk()) {
    return fromStatus(ready);
  }
  HttpResponse resp;
  {
    Idempotency::Scope scope(&ticket);
    resp = route(r);
  }
  audit::AuditEvent answer;
  answer.sensitive = sensitive;
  answer.response.body = json::parse(resp.body, nullptr, false);
  if (answer.response.body.is_discarded()) {
    answer.response.body = json::object();
  }
  const bool secret = audit::responseIsSensitive(answer);
  return idempotency_->end(ticket, std::move(resp), secret);
}

HttpResponse ControlPlane::appliedButUnrecorded(unsigned status) {
  // Not the refusal a client may retry blindly ("... so it is refused": nothing changed): the
  // change is made. The header says so to a program; the status it would have had comes along.
  HttpResponse resp = error(503,
                            "the change was made, but the audit log cannot record the response "
                            "(it would have answered " +
                                std::to_string(status) + "); do not repeat it, check its result");
  resp.headers.emplace_back("X-Tessera-Applied", "true");
  return resp;
}

bool ControlPlane::routineNodeCall(Request& r) {
  if (r.match.route == nullptr || !r.match.allowed || r.scope.tenant) {
    return false;
  }
  if (r.match.route->api == Api::kNodeTasks) {
    r.routine = r.method == "GET" && authorized(r, Capability::kRead);
    return r.routine;
  }
  if (r.match.route->api != Api::kNodeHeartbeat || !r.body.is_object() ||
      !authorized(r, Capability::kUpdate)) {
    return false;
  }
  const auto reports = r.body.find("reports");
  if (reports != r.body.end() && !(reports->is_array() && reports->empty())) {
    return false;  // What happened to tasks: audited.
  }
  const auto node = r.body.find("node");
  if (node == r.body.end()) {
    return false;  // Malformed: audited with its refusal.
  }
  r.beat_digest = audit::sha256Hex(node->dump());
  std::lock_guard lock(beats_mu_);
  auto it = beats_.find(r.match.params.at("node"));
  r.routine = it != beats_.end() && it->second.first == r.beat_digest &&
              clock_.now() - it->second.second < std::chrono::hours(1);
  return r.routine;
}

void ControlPlane::noteBeat(const std::string& node, const Request& r) {
  const std::string digest =
      r.beat_digest.empty() ? audit::sha256Hex(r.body["node"].dump()) : r.beat_digest;
  const bool audited = !r.routine;
  std::lock_guard lock(beats_mu_);
  auto [it, added] = beats_.try_emplace(node, digest, clock_.now());
  it->second.first = digest;
  if (audited) {
    it->second.second = clock_.now();
  }
}

bool ControlPlane::preparedWhileRecorded(const Request& r) {
  // workloadsApi's submission: nothing but its store txn (which takes r.audit_notes) changes
  // anything, and that comes last.
  if (r.method != "POST" || !r.scope.tenant || r.grant) {
    return false;
  }
  const std::vector<std::string> parts = split(r.scope.path);
  return parts.size() == 2 && parts[0] == "workloads";
}

std::mutex& ControlPlane::tenantLock(const std::string& tenant) {
  std::lock_guard lock(tenant_locks_mu_);
  std::unique_ptr<std::mutex>& m = tenant_locks_[tenant];
  if (!m) {
    m = std::make_unique<std::mutex>();
  }
  return *m;
}

int64_t ControlPlane::tenantSetting(const std::string& tenant, const char* field,
                                    int64_t fallback) const {
  std::shared_lock lock(mu_);
  auto t = tenants_.find(tenant);
  return t == tenants_.end() ? fallback : t->second.value(field, fallback);
}

HttpResponse ControlPlane::methodNotAllowed(const Request& r) {
  const std::string allow = allowHeader(*r.match.route);
  HttpResponse resp = error(405, "method " + r.method + " not allowed on " +
                                     std::string(r.match.route->pattern) + "; use " + allow);
  resp.headers.emplace_back("Allow", allow);
  return resp;
}

HttpResponse ControlPlane::health() {
  json sinks = json::array();
  for (const audit::SinkHealth& h : auditor_.health()) {
    sinks.push_back({{"name", h.name}, {"error", h.last_error}});
  }
  const secrets::SealStatus seal =
      secrets_ != nullptr ? secrets_->keys().status() : secrets::SealStatus{};
  return reply(200, {{"initialized", seal.initialized},
                     {"sealed", seal.sealed},
                     {"version", kVersion},
                     {"server_time_utc", core::formatRfc3339(clock_.wallNow())},
                     {"audit_sinks", sinks},
                     {"scheduler_passes", driver_.passes()}});
}

std::pair<int64_t, std::string> ControlPlane::freeDisk() {
  std::lock_guard lock(disk_mu_);
  const auto now = std::chrono::steady_clock::now();
  if (now - disk_checked_ >= std::chrono::milliseconds(500)) {
    disk_checked_ = now;
    disk_free_ = {INT64_MAX, ""};
    for (const std::string& path : options_.disk_paths) {
      struct statvfs fs {};
      if (::statvfs(path.c_str(), &fs) == 0) {
        const auto free = static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
        if (free < disk_free_.first) {
          disk_free_ = {free, path};
        }
      }
    }
  }
  return disk_free_;
}

std::optional<HttpResponse> ControlPlane::storageRefusal(const Request& r,
                                                         const std::string& tenant) {
  if (r.method == "DELETE" || r.match.route == nullptr) {
    return std::nullopt;  // Deletes make room.
  }
  // Agents' calls always go on: a refused heartbeat would make its agent fence its tasks.
  const Api api = r.match.route->api;
  if (api == Api::kNodeHeartbeat || api == Api::kNodeTasks || api == Api::kNodeLogs) {
    return std::nullopt;
  }
  if (options_.min_free_disk_bytes > 0) {
    const auto [free, path] = freeDisk();
    if (free < options_.min_free_disk_bytes) {
      return error(507, fmt::format("the server's disk is nearly full ({} MiB free at {}, under "
                                    "limits.min_free_disk_mb = {}): only reads and deletes are "
                                    "served until an operator makes room",
                                    free >> 20, path, options_.min_free_disk_bytes >> 20));
    }
  }
  // What a tenant stores: its workloads, secrets, queues, policies and grants.
  if (!r.scope.tenant || (api != Api::kWorkloads && api != Api::kSecrets && api != Api::kQueues &&
                          api != Api::kPolicies && api != Api::kGrants)) {
    return std::nullopt;
  }
  const int64_t max_bytes = tenantSetting(tenant, "max_bytes", options_.default_max_bytes);
  const int64_t used = usage_->bytes(tenant);
  if (used + static_cast<int64_t>(r.http.body.size()) > max_bytes) {
    return error(429, fmt::format("tenant '{}' stores {} bytes; this write would take it past its "
                                  "quota of {} (max_bytes): delete finished workloads or destroy "
                                  "secrets to make room",
                                  tenant, used, max_bytes));
  }
  return std::nullopt;
}

HttpResponse ControlPlane::route(Request& r) {
  if (r.match.route == nullptr) {
    return error(404, "unsupported path");
  }
  if (!r.match.allowed) {
    return methodNotAllowed(r);
  }
  const std::map<std::string, std::string>& p = r.match.params;
  switch (r.match.route->api) {
    case Api::kTenants:
      return tenantsApi(r);
    case Api::kTokens:
      return tokensApi(r);
    case Api::kPolicies:
      return policiesApi(r);
    case Api::kNodeHeartbeat:
      return heartbeatApi(r, p.at("node"));
    case Api::kNodeTasks:
      return watchNodeApi(r, p.at("node"));
    case Api::kNodeLogs:
      return logAnswerApi(r, p.at("node"), p.at("id"));
    case Api::kMetrics:
      if (!authorized(r, Capability::kRead)) {
        return error(403, "permission denied");
      }
      return metrics();
    case Api::kTenantMetrics:
      if (!authorized(r, Capability::kRead)) {
        return error(403, "permission denied");
      }
      return metrics(r.scope.tenant);
    case Api::kNodes:
      return nodesApi(r);
    case Api::kJoinTokens:
      return joinTokensApi(r);
    case Api::kNodeCredential:
      return nodeCredentialApi(r, p.at("node"));
    case Api::kNodeAdmin:
      return nodeAdminApi(r, p.at("node"), p.contains("op") ? p.at("op") : "");
    case Api::kPools:
      return poolsApi(r);
    case Api::kNodeJoin:  // Authenticated by its join token (serve).
      return nodeJoinApi(r);
    case Api::kQueues:
      return queuesApi(r);
    case Api::kSeal:
      return sealApi(r);
    case Api::kAdminLeases:
      return adminLeasesApi(r);
    case Api::kDoctor:
      return doctorApi(r);
    case Api::kSecrets:
      return secretsApi(r);
    case Api::kLeases:
      return leasesApi(r);
    case Api::kGrants:
      return grantsApi(r);
    case Api::kWorkloads:
      return workloadsApi(r);
    case Api::kAudit:
      return auditApi(r);
    case Api::kHealth:
    case Api::kOpenApi:
    case Api::kSealUnauthenticated:
    case Api::kWellKnown:
    case Api::kConsole:
      break;  // Answered before authentication.
  }
  return error(404, "unsupported path");
}

core::Status ControlPlane::onDriverChanges(const std::map<std::string, WorkloadStatus>& changed) {
  // A record is read from the cache and written back whole: one writer at a time, so a status
  // change never overwrites a cancel request (or the reverse).
  std::lock_guard write_lock(status_write_mu_);
  // One store transaction per batch of changes, not one write each: a pass that starts many
  // workloads must not fall behind on fsyncs.
  std::vector<std::pair<std::string, std::string>> writes;
  for (const auto& [key, status] : changed) {
    const size_t slash = key.find('/');
    const std::string tenant = key.substr(0, slash);
    const std::string name = key.substr(slash + 1);
    json record;
    {
      std::lock_guard lock(mu_);
      auto t = workloads_.find(tenant);
      if (t == workloads_.end() || !t->second.contains(name)) {
        continue;
      }
      json& rec = t->second[name];
      const std::string before = rec["status"].value("phase", "");
      rec["status"] = statusJson(status);
      if ((before == "pending") != (status.phase == "pending")) {
        pending_[tenant] += status.phase == "pending" ? 1 : -1;
      }
      json& events = rec["events"];
      for (const std::string& text : status.restarts) {
        events.push_back({{"time", core::formatRfc3339(clock_.wallNow())},
                          {"event", "restarting"},
                          {"reason", text}});
      }
      for (const std::string& text : status.events) {
        request_metrics_.countEviction(tenant, evictionReason(text));
        events.push_back({{"time", core::formatRfc3339(clock_.wallNow())},
                          {"event", "evicted"},
                          {"reason", text}});
      }
      if (before == "pending" && status.phase == "running" && !rec.contains("started")) {
        // Its first start: how long it waited since its submission (the queue SLO).
        const auto submitted = core::parseRfc3339(rec.value("submitted", ""));
        rec["started"] = core::formatRfc3339Millis(clock_.wallNow());
        if (submitted) {
          const json spec = rec.value("spec", json::object());
          request_metrics_.observeStartDelay(
              tenant, spec.is_object() ? spec.value("queue", "default") : "default",
              std::chrono::duration<double>(clock_.wallNow() - *submitted).count());
        }
      }
      if (before != status.phase) {
        events.push_back(
            {{"time", core::formatRfc3339(clock_.wallNow())}, {"event", status.phase}});
        if (isFinished(status.phase) && !rec.contains("finished")) {
          rec["finished"] = core::formatRfc3339Millis(clock_.wallNow());  // Retention counts.
        }
      }
      while (events.size() > 100) {
        events.erase(events.begin());
      }
      record = rec;
    }
    writes.emplace_back(workloadKey(tenant, name), record.dump());
  }
  const auto base = options_.status_write_deadline;
  for (size_t i = 0; i < writes.size(); i += store::kMaxTxnOps) {
    store::Txn txn;
    for (size_t k = i; k < std::min(writes.size(), i + store::kMaxTxnOps); ++k) {
      txn.success.push_back(store::Op::put(writes[k].first, std::move(writes[k].second)));
    }
    // Whole records written as they are now, under status_write_mu_: writing them twice is
    // writing them once, so an etcd leader change costs the pass a retry, not a timeout.
    txn.idempotent = true;
    txn.deadline = base * (1 << std::min(status_failures_, 4));
    if (auto r = store_.txn(std::move(txn)); !r.isOk()) {
      ++status_failures_;
      return r.status();
    }
  }
  status_failures_ = 0;
  return core::Status::ok();
}

void ControlPlane::housekeeping() {
  (void)tokens_->expire();
  refusals_->flushSummaries();
  if (const auto now = std::chrono::steady_clock::now();
      now - join_tokens_swept_ > std::chrono::minutes(1)) {
    join_tokens_swept_ = now;
    sweepJoinTokens();
  }
  // Credentials of tasks that ended are revoked; those of running tasks renewed.
  if (task_secrets_ != nullptr) {
    (void)task_secrets_->sweep([this] { return driver_.liveTasks(); });
  }
  // Expired grants: already refused at use; here their expiry reaches both audit streams.
  for (const Grant& g : grants_->expireDue(clock_.wallNow())) {
    const std::string path = "tenants/" + g.owner + "/grants/" + g.id;
    (void)auditGrant(g.owner, g, "grant expired", "EXPIRE", path, 200, "");
    (void)auditGrant(g.grantee, g, "grant expired", "EXPIRE", path, 200, "");
  }
  if (const auto now = std::chrono::steady_clock::now();
      now - workloads_collected_ > std::chrono::seconds(2)) {
    workloads_collected_ = now;
    collectFinishedWorkloads();
  }
  dropDurableAuditNotes();
}

void ControlPlane::collectFinishedWorkloads() {
  const core::WallTime now = clock_.wallNow();
  std::vector<std::pair<std::string, std::string>> due;  // (tenant, name)
  {
    std::shared_lock lock(mu_);
    for (const auto& [tenant, list] : workloads_) {
      const auto config = tenants_.find(tenant);
      const int64_t keep_s = config == tenants_.end()
                                 ? options_.default_workload_retention_s
                                 : config->second.value("workload_retention_seconds",
                                                        options_.default_workload_retention_s);
      if (keep_s <= 0) {
        continue;  // Kept until deleted with the tenant.
      }
      for (const auto& [name, rec] : list) {
        const auto finished = core::parseRfc3339(rec.value("finished", ""));
        if (finished && isFinished(rec["status"].value("phase", "")) &&
            *finished + std::chrono::seconds(keep_s) <= now) {
          due.emplace_back(tenant, name);
        }
      }
    }
  }
  for (const auto& [tenant, name] : due) {
    std::lock_guard write_lock(status_write_mu_);  // No status write puts it back meanwhile.
    if (!store_.deleteRange(workloadKey(tenant, name)).isOk()) {
      continue;  // Tried again at the next sweep.
    }
    {
      std::lock_guard lock(mu_);
      if (auto t = workloads_.find(tenant); t != workloads_.end()) {
        t->second.erase(name);
      }
    }
    driver_.forgetWorkload(tenant, name);  // Its name may be used again.
    audit::AuditEvent ev;
    ev.type = audit::AuditType::kResponse;
    ev.request_id = api::requestId();
    ev.tenant = tenant;
    ev.request.method = "COLLECT";
    ev.request.path = "tenants/" + tenant + "/workloads/" + name;
    ev.request.body = {{"event", "finished workload collected after its retention"}};
    ev.response.status = 200;
    (void)auditor_.record(ev);
  }
}

}  // namespace tessera::server
