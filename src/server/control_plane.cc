// The request pipeline (scope, route, authenticate, tenant boundary, audit, authorize, handler,
// audit) and housekeeping. The handlers are in api/*.cc; authorization in api/authorize.cc; the
// workload registry's feeds in workload_feed.cc.
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
#include "server/kube/objects.h"
#include "server/request.h"
#include "server/route_table.h"
#include "store/etcd_store.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

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
  TESSERA_ASSIGN_OR_RETURN(const store::WatchId feed,
                           store.watch("/tenants/", store::prefixEnd("/tenants/"),
                                       cp->loaded_revision_ + 1, cp->feedCallback()));
  {
    std::lock_guard lock(cp->feed_mu_);
    cp->watch_ = feed;
    cp->watching_ = true;
  }
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
  feed_again_.stop();  // Then no new watch is made.
  store::WatchId feed{};
  bool watching = false;
  {
    std::lock_guard lock(feed_mu_);
    feed = watch_;
    watching = std::exchange(watching_, false);
  }
  if (watching) {
    store_.cancelWatch(feed);  // Not under feed_mu_: it waits for a running callback.
  }
  stopWatches();
  driver_.setNodeListener(nullptr);
}

void ControlPlane::stopWatches() {
  watchers_->stop();
  workload_watchers_->stop();
  stopKubeWatches();
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
  std::vector<std::pair<std::string, json>> teams;  // ("tenant/queue", config)
  TESSERA_RETURN_IF_ERROR(registry_.load(all, got.revision));
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
  for (const auto& [tenant, record] : registry_.all()) {
    if (isFinished(record->status.phase)) {
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(SubmitCommand cmd, commandFromRecord(tenant, *record));
    cmd.replayed = true;  // Counted in the workload profile when it was submitted.
    if (record->cancel_requested) {
      (void)driver_.submit(cmd);  // It was running; the next pass stops it.
      driver_.cancel(tenant, cmd.name);
      continue;
    }
    (void)driver_.submit(std::move(cmd));  // Refused ones keep their stored status.
  }
  loaded_revision_ = got.revision;
  return loadProfile();
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
    // A Kubernetes client gets its errors as Status objects, whoever answered.
    const bool kube = isKubeTarget(http, listeners);
    marked = [reply = std::move(reply), kube](HttpResponse resp) mutable {
      markUnavailable(resp);
      if (kube) {
        kube::asStatus(resp);
      }
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

bool ControlPlane::isKubeTarget(const HttpRequest& http,
                                const std::vector<ListenerConfig>& listeners) {
  const std::string_view target = http.target;
  const bool chrooted =
      http.listener < listeners.size() && !listeners[http.listener].chroot_tenant.empty();
  if (chrooted && (isKubeRoot(target) || target.starts_with("/v1/k8s/"))) {
    return true;
  }
  constexpr std::string_view kTenants = "/v1/tenants/";
  if (!target.starts_with(kTenants)) {
    return false;
  }
  const size_t slash = target.find('/', kTenants.size());
  return slash != std::string_view::npos && target.substr(slash).starts_with("/k8s/");
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
      resp = route(r);  // Authorized: routineNodeCall asked authorize().
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
  if (r.match.route != nullptr && r.match.route->api == Api::kKube) {
    // Which kubectl command (and invocation) sent it: what an operator reading the log asks.
    for (const char* header : {"kubectl-command", "kubectl-session", "user-agent"}) {
      if (std::string v = http.header(header); !v.empty()) {
        ev.request.client[header] = v.substr(0, 256);
      }
    }
  }
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
  // What the route table says: a POST that only reads (leases/lookup) is audited as a read.
  const bool read_only = r.match.route != nullptr ? !changesState(*r.match.route, r.method)
                                                  : r.method == "GET" || r.method == "LIST";
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
    // Authorized first: a refusal for room or a replayed answer tells nothing to a token
    // that may not make the request.
    std::optional<HttpResponse> refused = authorize(r);
    if (!refused && !read_only) {
      refused = storageRefusal(r, tenant);
    }
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
  Finish f{std::move(ev),
           std::move(appended),
           read_only,
           std::move(r.grant),
           r.token.tenant,
           r.token.accessor,
           r.method,
           std::move(r.route),
           tenant,
           t0,
           r.match.route != nullptr && r.match.route->reveals_secrets};
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
  const bool durable_answer = f.grant || options_.durable_every_answer || f.reveals_secrets ||
                              audit::responseIsSensitive(ev);
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
    r.routine = r.method == "GET" && !authorize(r);
    return r.routine;
  }
  if (r.match.route->api != Api::kNodeHeartbeat || !r.body.is_object() || authorize(r)) {
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
      return metrics();
    case Api::kTenantMetrics:
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
    case Api::kScheduler:
      return schedulerApi(r);
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
    case Api::kKube:
      return kubeApi(r);
    case Api::kHealth:
    case Api::kOpenApi:
    case Api::kSealUnauthenticated:
    case Api::kWellKnown:
    case Api::kConsole:
      break;  // Answered before authentication.
  }
  return error(404, "unsupported path");
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
  storeProfile(false);
  dropDurableAuditNotes();
}

}  // namespace tessera::server
