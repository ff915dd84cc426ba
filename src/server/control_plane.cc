#include "server/control_plane.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <future>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/verify.h"
#include "core/json_node.h"
#include "core/strings.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/request.h"

namespace tessera::server {

using api::error;
using api::fromStatus;
using api::keysReply;
using api::noContent;
using api::reply;
using api::requestId;
using api::split;
using nlohmann::json;

namespace {

constexpr std::string_view kVersion = "0.1.0";

// A workload's tasks, at most; and what its record may grow by for each task's status (a
// running task on 8 GPUs of a long-named node) and for its events (at most 100 kept).
constexpr int64_t kMaxWorkloadTasks = 10000;
constexpr size_t kTaskStatusBytes = 128;
constexpr size_t kEventsBytes = 100 * 400;

// Requests of a tenant that may wait for a worker: kQueuedPerRunning per request it may have
// running, and at least kMinQueued.
constexpr size_t kQueuedPerRunning = 8;
constexpr size_t kMinQueued = 64;

FairLimits fairLimits(int max_in_flight) {
  return {max_in_flight, std::max(kMinQueued, kQueuedPerRunning *
                                                  static_cast<size_t>(std::max(1, max_in_flight)))};
}

core::Result<core::Duration> parseDuration(const json& j, const std::string& field) {
  TESSERA_ASSIGN_OR_RETURN(int64_t seconds, parseDurationSeconds(j, field));
  return std::chrono::duration_cast<core::Duration>(std::chrono::seconds(seconds));
}

// The body's integer `field`, in [lo, hi]; left out, its value in `base` (the stored settings
// being changed; empty when creating), else `def`.
core::Result<int64_t> intOr(const core::JsonNode& n, const json& base, const char* field,
                            int64_t lo, int64_t hi, int64_t def) {
  if (!n.has(field)) {
    return base.value(field, def);
  }
  return n.child(field).integer(lo, hi);
}

// A queue's settings, a tenant's or a team's, from a request body; what it leaves out keeps its
// value in `base`, as intOr.
struct QueueNumbers {
  int64_t quota = 0;  // Milli-GPU.
  int64_t limit = 0;  // Milli-GPU; 0: none.
  int64_t weight = 1;
  int64_t priority = 100;
};

core::Result<QueueNumbers> queueNumbers(const core::JsonNode& n, const json& base,
                                        const std::string& source) {
  auto gpus = [&](const char* field, const char* stored) -> core::Result<int64_t> {
    if (!n.has(field)) {
      return base.value(stored, int64_t{0});
    }
    core::JsonNode f = n.child(field);
    TESSERA_RETURN_IF_ERROR(f.checkKeys({"gpu"}));
    return f.has("gpu") ? f.child("gpu").scaled(1000) : core::Result<int64_t>(int64_t{0});
  };
  QueueNumbers q;
  TESSERA_ASSIGN_OR_RETURN(q.quota, gpus("quota", "quota_milli_gpu"));
  TESSERA_ASSIGN_OR_RETURN(q.limit, gpus("limit", "limit_milli_gpu"));
  if (q.limit > 0 && q.limit < q.quota) {
    return core::invalidArgument(source + ": limit.gpu is below quota.gpu");
  }
  TESSERA_ASSIGN_OR_RETURN(q.weight, intOr(n, base, "weight", 0, 1000000, 1));
  TESSERA_ASSIGN_OR_RETURN(q.priority, intOr(n, base, "priority", 0, 1000000, 100));
  return q;
}

json statusJson(const WorkloadStatus& s) {
  json tasks = json::array();
  for (const TaskStatus& t : s.tasks) {
    json tj = {{"state", t.state}};
    if (!t.node.empty()) {
      tj["node"] = t.node;
      tj["gpus"] = t.gpus;
      if (t.milli_per_gpu > 0 && t.milli_per_gpu < 1000) {
        tj["milli_per_gpu"] = t.milli_per_gpu;
      }
    }
    tasks.push_back(std::move(tj));
  }
  json j = {{"phase", s.phase}, {"tasks", tasks}};
  if (!s.reason.empty()) {
    j["reason"] = s.reason;
  }
  return j;
}

std::string wallText(core::WallTime t) {
  const std::time_t secs =
      std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string tenantKey(const std::string& t) { return "/tenants/" + t; }
std::string policyKey(const std::string& scope, const std::string& name) {
  return scope.empty() ? "/policies/" + name : "/tenants/" + scope + "/policies/" + name;
}
std::string workloadKey(const std::string& t, const std::string& name) {
  return "/tenants/" + t + "/workloads/" + name;
}

// The default policy of a tenant: everything inside the tenant except creating more policies
// is the tenant admin's call.
json tenantAdminPolicy() {
  return {{"path", {{"*", {{"capabilities", {"create", "read", "update", "delete", "list"}}}}}}};
}

}  // namespace

core::Result<std::unique_ptr<ControlPlane>> ControlPlane::open(
    store::Store& store, audit::Auditor& auditor, SchedulerDriver& driver,
    const model::GpuCatalogue& catalogue, const core::Clock& clock, ControlPlaneOptions options,
    secrets::Secrets* secrets) {
  std::unique_ptr<ControlPlane> cp(
      new ControlPlane(store, auditor, driver, catalogue, clock, std::move(options), secrets));
  TESSERA_RETURN_IF_ERROR(cp->recoverAuditNotes());
  TESSERA_ASSIGN_OR_RETURN(cp->tokens_, TokenManager::open(store, clock, cp->options_.tokens));
  TESSERA_ASSIGN_OR_RETURN(cp->grants_, GrantTable::open(store));
  if (secrets != nullptr) {
    cp->task_secrets_ = std::make_unique<TaskSecrets>(*secrets, store, auditor, clock);
    TESSERA_RETURN_IF_ERROR(cp->task_secrets_->load());
  }
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
      std::fprintf(stderr,
                   "warning: %s had lost %zu record(s) after seq %llu (a crash of the machine "
                   "before the log's flush); written again from the store's copies, each marked "
                   "\"recovered\" with its old seq\n",
                   audit_sinks_[i].c_str(), recovered, static_cast<unsigned long long>(durable));
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
}

core::Status ControlPlane::load() {
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
      TESSERA_ASSIGN_OR_RETURN(Policy p, Policy::fromJson(parts[3], value));
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
    TESSERA_RETURN_IF_ERROR(
        driver_.addTenantQueue(name, config.value("quota_milli_gpu", int64_t{0}),
                               config.value("limit_milli_gpu", int64_t{0}),
                               config.value("weight", int64_t{1}), config.value("priority", 100)));
    driver_.setTrustGroup(name, config.value("trust_group", std::string()));
  }
  for (const auto& [key, config] : teams) {
    const size_t slash = key.find('/');
    TESSERA_RETURN_IF_ERROR(driver_.putTeamQueue(
        key.substr(0, slash), key.substr(slash + 1), config.value("quota_milli_gpu", int64_t{0}),
        config.value("limit_milli_gpu", int64_t{0}), config.value("weight", int64_t{1}),
        config.value("priority", 100)));
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

namespace {

// A workload's "command" (argv) and "env" (variables), as an agent will run them.
core::Status parseCommandAndEnv(const core::JsonNode& n, SubmitCommand& cmd) {
  if (n.has("command")) {
    const core::JsonNode c = n.child("command");
    if (!c.value().is_array() || c.value().empty() || c.value().size() > 1024) {
      return c.error("expected a list of 1 to 1024 strings (argv)");
    }
    size_t bytes = 0;
    for (size_t i = 0; i < c.value().size(); ++i) {
      if (!c.value()[i].is_string()) {
        return c.at(i).error("expected a string");
      }
      std::string arg = c.value()[i].get<std::string>();
      if (arg.find('\0') != std::string::npos || (i == 0 && arg.empty())) {
        return c.at(i).error(i == 0 ? "the program may not be empty"
                                    : "may not contain a NUL byte");
      }
      bytes += arg.size();
      cmd.command.push_back(std::move(arg));
    }
    if (bytes > size_t{128} * 1024) {
      return c.error("longer than 128 KiB in all");
    }
  }
  if (n.has("env")) {
    const core::JsonNode e = n.child("env");
    if (!e.value().is_object() || e.value().size() > 256) {
      return e.error("expected an object of at most 256 NAME: \"value\" pairs");
    }
    for (const auto& [key, value] : e.value().items()) {
      const bool valid_name =
          !key.empty() && key.size() <= 256 && (std::isalpha(key[0]) != 0 || key[0] == '_') &&
          std::all_of(key.begin(), key.end(), [](char ch) {
            return std::isalnum(static_cast<unsigned char>(ch)) != 0 || ch == '_';
          });
      if (!valid_name) {
        return e.error("'" + key.substr(0, 64) +
                       "' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)");
      }
      if (!value.is_string() || value.get<std::string>().size() > 32768 ||
          value.get<std::string>().find('\0') != std::string::npos) {
        return e.child(key.c_str()).error("expected a string of at most 32 KiB without NUL bytes");
      }
      cmd.env[key] = value.get<std::string>();
    }
  }
  if (n.has("identity")) {
    // {"audiences": ["sts.amazonaws.com"]}: who the task's identity token is for.
    const core::JsonNode id = n.child("identity");
    TESSERA_RETURN_IF_ERROR(id.checkKeys({"audiences"}));
    if (id.has("audiences")) {
      const core::JsonNode a = id.child("audiences");
      if (!a.value().is_array() || a.value().size() > 8) {
        return a.error("expected a list of at most 8 audiences");
      }
      for (size_t i = 0; i < a.value().size(); ++i) {
        const json& v = a.value()[i];
        if (!v.is_string() || v.get<std::string>().empty() || v.get<std::string>().size() > 256) {
          return a.at(i).error("expected a non-empty string of at most 256 bytes");
        }
        cmd.identity_audiences.push_back(v.get<std::string>());
      }
    }
  }
  if (n.has("secrets")) {
    // {"kv": ["app/config"], "db": ["readonly"]}: delivered to each task (docs/secrets.md).
    const core::JsonNode sec = n.child("secrets");
    TESSERA_RETURN_IF_ERROR(sec.checkKeys({"kv", "db"}));
    auto names = [&](const char* field, size_t most, std::vector<std::string>& out,
                     const std::function<core::Status(const std::string&)>& check) {
      if (!sec.has(field)) {
        return core::Status::ok();
      }
      const core::JsonNode list = sec.child(field);
      if (!list.value().is_array() || list.value().size() > most) {
        return list.error("expected a list of at most " + std::to_string(most) + " names");
      }
      for (size_t i = 0; i < list.value().size(); ++i) {
        const json& v = list.value()[i];
        if (!v.is_string()) {
          return list.at(i).error("expected a string");
        }
        if (core::Status st = check(v.get<std::string>()); !st.isOk()) {
          return list.at(i).error(st.message());
        }
        if (std::find(out.begin(), out.end(), v.get<std::string>()) != out.end()) {
          return list.at(i).error("named twice");
        }
        out.push_back(v.get<std::string>());
      }
      return core::Status::ok();
    };
    TESSERA_RETURN_IF_ERROR(names("kv", 32, cmd.secrets.kv, secrets::KvEngine::checkPath));
    TESSERA_RETURN_IF_ERROR(names("db", 8, cmd.secrets.db, [](const std::string& role) {
      return secrets::DatabaseEngine::checkName("role", role);
    }));
  }
  return core::Status::ok();
}

}  // namespace

core::Result<SubmitCommand> ControlPlane::commandFromRecord(const std::string& tenant,
                                                            const json& record) const {
  const json& spec = record.at("spec");
  static const std::string kSource = "stored workload";
  core::JsonNode node(spec, "", kSource);
  SubmitCommand cmd;
  cmd.tenant = tenant;
  cmd.name = record.at("name").get<std::string>();
  TESSERA_RETURN_IF_ERROR(model::parseTaskRequest(node, catalogue_, {}, cmd.spec.request));
  cmd.spec.tasks = spec.value("tasks", 1);
  cmd.spec.min_available = spec.value("minAvailable", cmd.spec.tasks);
  cmd.spec.priority = spec.value("priority", 0);
  cmd.spec.preemptible = spec.value("preemptible", true);
  cmd.queue = spec.value("queue", "default");
  cmd.duration = std::chrono::seconds(spec.value("duration", int64_t{0}));
  cmd.grace = std::chrono::seconds(spec.value("gracePeriod", int64_t{30}));
  TESSERA_RETURN_IF_ERROR(parseCommandAndEnv(node, cmd));
  if (const auto sealed = record.find("sealed_env"); sealed != record.end()) {
    for (const auto& [var, hex] : sealed->items()) {
      cmd.env.erase(var);
      cmd.sealed_env[var] = hex.get<std::string>();
    }
  }
  return cmd;
}

namespace {

std::string envKey(const std::string& workload, const std::string& var) {
  return "workloads/" + workload + "/env/" + var;
}

}  // namespace

core::Status ControlPlane::sealEnv(const std::string& tenant, const std::string& name,
                                   SubmitCommand& cmd, json& spec, json& sealed) {
  for (auto it = cmd.env.begin(); it != cmd.env.end();) {
    if (!audit::looksSecret(it->first)) {
      ++it;
      continue;
    }
    const std::string where = "workload '" + name + "': env." + it->first;
    if (secrets_ == nullptr) {
      return core::invalidArgument(where +
                                   ": its name looks secret, and this server has no secrets "
                                   "engine to seal it with; rename it, or enable secrets");
    }
    TESSERA_RETURN_IF_ERROR(secrets_->keys().addTenant(tenant).withContext(where));
    auto blob = secrets_->keys().encrypt(tenant, envKey(name, it->first), it->second);
    if (!blob.isOk()) {
      return blob.status().withContext(where + ": cannot seal it");
    }
    sealed[it->first] =
        core::hexEncode(reinterpret_cast<const unsigned char*>(blob->data()), blob->size());
    spec["env"][it->first] = "(sealed)";
    cmd.sealed_env[it->first] = sealed[it->first].get<std::string>();
    it = cmd.env.erase(it);
  }
  return core::Status::ok();
}

core::Result<std::string> ControlPlane::openEnv(const NodeTask& t, const std::string& var,
                                                const std::string& hex) const {
  if (secrets_ == nullptr) {
    return core::failedPrecondition("no secrets engine");
  }
  std::string blob;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    const int hi = core::hexDigitValue(hex[i]);
    const int lo = core::hexDigitValue(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      return core::internalError("env." + var + ": the stored sealed value is not hex");
    }
    blob.push_back(static_cast<char>(hi * 16 + lo));
  }
  return secrets_->keys().decrypt(t.tenant, envKey(t.workload, var), blob);
}

void ControlPlane::onStoreEvents(const store::WatchResponse& w) {
  if (!w.error.isOk()) {
    std::fprintf(stderr, "error: the scheduler's store watch ended: %s\n",
                 w.error.message().c_str());
    return;
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
        onDriverChanges(
            {{tenant + "/" + parts[3], WorkloadStatus{"failed", st.message(), {}, {}}}});
      }
      continue;
    }
    const json before = json::parse(e.prev_kv->value, nullptr, false);
    if (record.value("cancel_requested", false) &&
        !(before.is_object() && before.value("cancel_requested", false))) {
      driver_.cancel(tenant, parts[3]);
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
    return p != owner->second.end() && resolve({&p->second}, scoped_path).allows(needed);
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
  return resolve(policies, path).allows(needed);
}

void ControlPlane::recordMetric(const std::string& route, const std::string& tenant,
                                unsigned status, double seconds) {
  std::lock_guard lock(metrics_mu_);
  Metric& m = metrics_[route + "|" + tenant + "|" + std::to_string(status)];
  ++m.count;
  m.seconds += seconds;
}

void ControlPlane::handle(const HttpRequest& http, const std::vector<ListenerConfig>& listeners,
                          Reply reply) {
  if (std::optional<HttpResponse> now = serve(http, listeners, reply)) {
    reply(std::move(*now));
  }
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
                                                Reply& later) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string chroot =
      http.listener < listeners.size() ? listeners[http.listener].chroot_tenant : "";
  if (auto answer = wellKnownApi(http)) {
    return *answer;
  }
  auto parsed = parseApiRequest(http, chroot);
  if (!parsed.isOk()) {
    return error(parsed.status().code() == core::StatusCode::kNotFound ? 404 : 400,
                 parsed.status().message());
  }
  Request r{http, std::move(parsed->scope), parsed->method, requestId(), {},
            "",   std::move(parsed->body),  std::nullopt};
  // The route table decides what the path is (404 if nothing), which methods it takes (405
  // otherwise) and the label its metrics get: the pattern, never the caller's names.
  r.match =
      matchRoute(r.scope.tenant ? RouteScope::kTenant : RouteScope::kAdmin, r.scope.path, r.method);
  r.route = r.match.label;
  if (r.match.route != nullptr && !r.match.route->authenticated) {
    if (!r.match.allowed) {
      return methodNotAllowed(r);
    }
    switch (r.match.route->api) {
      case Api::kHealth:
        return health();
      case Api::kOpenApi:
        return reply(200, openApiDocument(kVersion));
      default:
        break;
    }
  }
  if (auto answer = unauthenticatedSecretsApi(http, r.scope, r.body)) {
    return *answer;
  }
  const std::string& secret = parsed->token;
  auto token = secret.empty() ? core::Result<TokenInfo>(core::notFound("no token"))
                              : tokens_->lookup(secret);
  if (!token.isOk()) {
    return error(403, "permission denied: missing, invalid, revoked or expired token");
  }
  r.token = std::move(token).value();
  // The tenant boundary: a tenant token sees its own tenant and nothing else, not even that
  // something else exists. One exception: any token may look itself up from the admin scope,
  // which answers nothing but the token's own data (naming its tenant). That is how a client
  // holding only a token learns which scope to use.
  const bool self_lookup = !r.scope.tenant && r.scope.path == "auth/token/lookup-self";
  // The one way in from another tenant: a live grant of the scope's tenant to the token's that
  // covers the path (server/grants.h). Anything else stays invisible.
  if (!r.token.tenant.empty() && r.scope.tenant && r.scope.tenant != r.token.tenant) {
    r.grant = grants_->find(*r.scope.tenant, r.token.tenant, r.scope.path, clock_.wallNow());
  }
  if (!r.token.tenant.empty() && r.scope.tenant != r.token.tenant && !self_lookup && !r.grant) {
    // Recorded as the caller's own (a probe of another tenant is worth an operator's look); the
    // record tells the caller nothing it did not send.
    audit::AuditEvent probe;
    probe.type = audit::AuditType::kResponse;
    probe.request_id = r.request_id;
    probe.tenant = r.token.tenant;
    probe.auth.accessor = r.token.accessor;
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
  const std::string tenant = r.scope.tenant.value_or(self_lookup ? r.token.tenant : "");
  audit::AuditEvent ev;
  ev.type = audit::AuditType::kRequest;
  ev.request_id = r.request_id;
  ev.tenant = tenant;
  ev.auth.accessor = r.token.accessor;
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
    resp = route(r);
  } catch (const json::type_error& e) {
    resp = error(400, std::string("request body: a field has the wrong type: ") +
                          (std::strchr(e.what(), ']') != nullptr ? std::strchr(e.what(), ']') + 2
                                                                 : e.what()));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s %s: %s\n", r.method.c_str(), ev.request.path.c_str(), e.what());
    resp = error(500, "internal error (request " + r.request_id + ")");
  }
  ev.type = audit::AuditType::kResponse;
  ev.response.status = static_cast<int>(resp.status);
  try {
    ev.response.body = resp.body.empty() ? json::object() : json::parse(resp.body);
  } catch (const json::exception&) {
    ev.response.body = json::object();
  }
  const bool durable_answer =
      r.grant || options_.durable_every_answer || audit::responseIsSensitive(ev);
  if (!durable_answer) {
    // Nothing secret in the answer: it goes once the response record is appended (a read's
    // request record with it), and the log flushes them soon after: a crash of the machine in
    // between could lose them, one of the server could not. A change's request record is on
    // stable storage already.
    if (read_only && !auditor_.recordAppendedAfter(ev, appended).isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    } else if (!read_only && !auditor_.append(ev).isOk() && resp.status < 300) {
      resp = appliedButUnrecorded(resp.status);
    }
  } else if (read_only && !r.grant) {
    // Answered once both records are durable, from the flusher; this worker goes on meanwhile.
    auditor_.recordAfterAsync(
        ev, appended,
        [this, resp = std::move(resp), later = std::move(later), metric = std::move(r.route),
         tenant, t0](const core::Status& recorded) mutable {
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
    if (!auditor_.recordAfter(ev, appended).isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    }
  } else if (!auditor_.record(ev).isOk() && resp.status < 300) {
    // The change is made but unrecorded; say so rather than pretend nothing happened.
    resp = appliedButUnrecorded(resp.status);
  }
  if (r.grant) {
    // The grantee's stream records its use of the grant too (the owner's has the request).
    if (!auditGrant(r.token.tenant, *r.grant, "grant used", r.method, ev.request.path,
                    static_cast<int>(resp.status), r.token.accessor)
             .isOk()) {
      resp = error(503, "the audit log cannot record this request, so it is refused");
    }
  }
  recordMetric(r.route, tenant, resp.status,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return resp;
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
                     {"server_time_utc", wallText(clock_.wallNow())},
                     {"audit_sinks", sinks},
                     {"scheduler_passes", driver_.passes()}});
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
    case Api::kNodes:
      return nodesApi(r);
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
      break;  // Answered before authentication.
  }
  return error(404, "unsupported path");
}

core::Status ControlPlane::putTenant(const std::string& name, const json& body, bool create) {
  // An update reads the current config and writes it back: one change of this tenant at a time
  // (and none while it is deleted).
  std::lock_guard tenant_lock(tenantLock(name));
  json base = json::object();  // What a field left out keeps: the current value on update.
  if (!create) {
    std::shared_lock lock(mu_);
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      return core::notFound("no tenant '" + name + "'");
    }
    base = it->second;
  }
  json config = {{"name", name}};
  // When this tenant began: its audit view starts there, so that a tenant created under the name
  // of a deleted one does not read that one's records (auditApi).
  if (create) {
    config["created_time"] = audit::formatRfc3339Millis(clock_.wallNow());
  } else if (base.contains("created_time")) {
    config["created_time"] = base["created_time"];
  }
  const std::string source = "tenant '" + name + "'";
  core::JsonNode n(body, "", source);
  TESSERA_RETURN_IF_ERROR(
      n.checkKeys({"quota", "limit", "weight", "priority", "trust_group", "max_workloads",
                   "max_pending", "max_queues", "max_tokens", "max_policies", "max_secrets",
                   "request_rate", "request_burst", "request_concurrency"}));
  TESSERA_ASSIGN_OR_RETURN(const QueueNumbers q, queueNumbers(n, base, source));
  config["quota_milli_gpu"] = q.quota;
  config["limit_milli_gpu"] = q.limit;
  config["weight"] = q.weight;
  config["priority"] = q.priority;
  auto integer = [&](const char* field, int64_t lo, int64_t hi, int64_t def) {
    return intOr(n, base, field, lo, hi, def);
  };
  if (n.has("trust_group")) {
    // "" leaves the group: the tenant's fractional tasks then share a GPU with no other tenant.
    const json& g = n.child("trust_group").value();
    if (!g.is_string() || g.get<std::string>().size() > 128) {
      return n.child("trust_group").error("expected a string of at most 128 bytes");
    }
    if (!g.get<std::string>().empty()) {
      config["trust_group"] = g;
    }
  } else if (base.contains("trust_group")) {
    config["trust_group"] = base["trust_group"];
  }
  // Caps on what the tenant keeps: each within its range, the server's default if never set.
  struct Cap {
    const char* field;
    int64_t lo, hi, default_value;
  };
  for (const Cap& cap : {Cap{"max_workloads", 1, 10000000, options_.default_max_workloads},
                         Cap{"max_pending", 1, 10000000, options_.default_max_pending},
                         Cap{"max_queues", 0, 10000, options_.default_max_queues},
                         Cap{"max_tokens", 1, 10000000, options_.default_max_tokens},
                         Cap{"max_policies", 1, 100000, options_.default_max_policies},
                         Cap{"max_secrets", 0, 10000000, options_.default_max_secrets}}) {
    TESSERA_ASSIGN_OR_RETURN(config[cap.field],
                             integer(cap.field, cap.lo, cap.hi, cap.default_value));
  }
  // API admission: requests per second (sustained and burst) and requests handled at once.
  TESSERA_ASSIGN_OR_RETURN(
      config["request_rate"],
      integer("request_rate", 1, 10000000, static_cast<int64_t>(options_.tenant_rate_per_s)));
  TESSERA_ASSIGN_OR_RETURN(
      config["request_burst"],
      integer("request_burst", 1, 10000000, static_cast<int64_t>(options_.tenant_burst)));
  TESSERA_ASSIGN_OR_RETURN(config["request_concurrency"],
                           integer("request_concurrency", 1, 4096, options_.tenant_max_in_flight));
  store::Txn txn;
  if (create) {
    // The tenant and its default policy in one transaction.
    txn.compares.push_back(store::Compare::version(tenantKey(name), store::Compare::kEqual, 0));
    txn.success.push_back(store::Op::put(tenantKey(name), config.dump()));
    txn.success.push_back(
        store::Op::put(policyKey(name, "tenant-admin"), tenantAdminPolicy().dump()));
  } else {
    txn.compares.push_back(store::Compare::version(tenantKey(name), store::Compare::kGreater, 0));
    txn.success.push_back(store::Op::put(tenantKey(name), config.dump()));
  }
  TESSERA_ASSIGN_OR_RETURN(store::TxnResult res, store_.txn(std::move(txn)));
  if (!res.succeeded) {
    return create ? core::Status(core::StatusCode::kAlreadyExists, "tenant '" + name + "' exists")
                  : core::notFound("no tenant '" + name + "'");
  }
  if (create) {
    // Grants given to this name before the tenant existed are void (a granter is never told
    // whether a name is a tenant). Any grant given from here on is to this tenant.
    TESSERA_RETURN_IF_ERROR(grants_->forgetTenant(name).withContext(
        "tenant '" + name + "' is created, but grants to its name from before are not dropped"));
    TESSERA_RETURN_IF_ERROR(
        driver_.addTenantQueue(name, q.quota, q.limit, q.weight, static_cast<int32_t>(q.priority)));
  } else {
    TESSERA_RETURN_IF_ERROR(driver_.updateTenantQueue(name, q.quota, q.limit, q.weight,
                                                      static_cast<int32_t>(q.priority)));
  }
  driver_.setTrustGroup(name, config.value("trust_group", std::string()));
  std::lock_guard lock(mu_);
  tenants_[name] = config;
  {
    std::lock_guard buckets_lock(buckets_mu_);
    applyLimitsLocked(name);
  }
  if (create) {
    policies_[name]["tenant-admin"] = *Policy::fromJson("tenant-admin", tenantAdminPolicy());
  }
  return core::Status::ok();
}

core::Result<CreatedToken> ControlPlane::createTenantWithToken(const std::string& tenant,
                                                               const json& config,
                                                               const TokenInfo& parent) {
  if (!validName(tenant)) {
    return core::invalidArgument("'" + tenant + "' is not a valid tenant name");
  }
  TESSERA_RETURN_IF_ERROR(putTenant(tenant, config, true));
  TokenRequest req;
  req.tenant = tenant;
  req.policies = {"tenant-admin"};
  req.display_name = tenant + "-admin";
  req.ttl = std::chrono::hours(24);
  return tokens_->create(parent, req);
}

HttpResponse ControlPlane::tenantsApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);
  if (parts.size() == 1) {
    if (r.method != "LIST" && r.method != "GET") {
      return error(405, "use LIST (or GET ?list=true) on tenants");
    }
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    return keysReply(r.request_id, tenants_);
  }
  if (parts.size() != 2) {
    return error(404, "unsupported path");
  }
  const std::string& name = parts[1];
  if (!validName(name)) {
    return error(400, "'" + name + "' is not a valid tenant name (lowercase letters, digits, '-')");
  }
  bool exists = false;
  {
    std::lock_guard lock(mu_);
    exists = tenants_.contains(name);
  }
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      return error(404, "no tenant '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id}, {"data", it->second}});
  }
  if (r.method == "POST") {
    if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
      return error(403, "permission denied");
    }
    core::Status st = putTenant(name, r.body, !exists);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    // No change of the tenant's that read it before (its settings, a queue, a policy, a KV key)
    // lands after its keys are gone.
    std::lock_guard tenant_lock(tenantLock(name));
    // Out of the caches first, in one step: from here on every request finds no such tenant,
    // so the slow part below (store writes, each a disk flush) holds no lock that other
    // tenants' requests take. Put back if it cannot be done.
    struct Held {
      json config;
      std::map<std::string, Policy> policies;
      std::map<std::string, json> workloads;
      int64_t pending = 0;
    } held;
    {
      std::lock_guard lock(mu_);
      auto t = tenants_.find(name);
      if (t == tenants_.end()) {  // Again: another DELETE may have been first.
        return error(404, "no tenant '" + name + "'");
      }
      for (const auto& [w, record] : workloads_[name]) {
        const std::string phase = record["status"].value("phase", "");
        if (phase == "pending" || phase == "running") {
          return error(409,
                       "tenant '" + name + "' still has workload '" + w + "'; cancel it first");
        }
      }
      held.config = std::move(t->second);
      held.policies = std::move(policies_[name]);
      held.workloads = std::move(workloads_[name]);
      held.pending = pending_[name];
      tenants_.erase(t);
      policies_.erase(name);
      workloads_.erase(name);
      pending_.erase(name);
    }
    auto failed = [&](const core::Status& st) {
      // Put back as it was, with the workloads stored meanwhile: submissions checked before the
      // deletion began. The store's watch passed over those it saw while the tenant was out of
      // the caches; they go to the scheduler from here, later ones from the watch as usual.
      const std::string prefix = "/tenants/" + name + "/workloads/";
      std::vector<store::KeyValue> stored;
      if (auto got = store_.range(prefix, store::prefixEnd(prefix)); got.isOk()) {
        stored = std::move(got->kvs);
      } else {  // Then they are back after a restart (load()), not before.
        std::fprintf(stderr,
                     "error: tenant '%s' was not deleted, and its workloads cannot be read: %s\n",
                     name.c_str(), got.status().message().c_str());
      }
      std::vector<std::pair<std::string, json>> passed_over;
      {
        std::lock_guard lock(mu_);
        tenants_[name] = std::move(held.config);
        policies_[name] = std::move(held.policies);
        workloads_[name] = std::move(held.workloads);
        pending_[name] = held.pending;
        for (const store::KeyValue& kv : stored) {
          json record = json::parse(kv.value, nullptr, false);
          const std::string workload = kv.key.substr(prefix.size());
          if (!record.is_object() || !workloads_[name].try_emplace(workload, record).second) {
            continue;
          }
          if (record["status"].value("phase", "") == "pending") {
            ++pending_[name];
          }
          if (kv.create_revision <= watched_revision_) {
            passed_over.emplace_back(workload, std::move(record));
          }
        }
      }
      for (const auto& [workload, record] : passed_over) {
        auto cmd = commandFromRecord(name, record);
        core::Status submitted = cmd.isOk() ? driver_.submit(std::move(cmd).value()) : cmd.status();
        if (!submitted.isOk()) {
          onDriverChanges(
              {{name + "/" + workload, WorkloadStatus{"failed", submitted.message(), {}, {}}}});
        }
      }
      return fromStatus(st.withContext("deleting tenant '" + name + "'"));
    };
    // Its secrets go first: leases revoked, records removed, keys shredded. If that cannot be
    // done (sealed, a lease that will not revoke), the tenant stays, whole.
    if (secrets_ != nullptr) {
      if (core::Status st = secrets_->deleteTenant(name); !st.isOk()) {
        return failed(st);
      }
    }
    if (core::Status st = grants_->forgetTenant(name); !st.isOk()) {
      return failed(st);
    }
    if (task_secrets_ != nullptr) {
      if (core::Status st = task_secrets_->forgetTenant(name); !st.isOk()) {
        return failed(st);
      }
    }
    // Its tokens too: a tenant created later under this name must not be reachable with them.
    if (auto revoked = tokens_->revokeTenant(name); !revoked.isOk()) {
      return failed(revoked.status());
    }
    // Its keys and the tenant's own in one txn: a submission checked before the deletion began
    // (which compares the tenant's key) is stored before it, and goes with the rest, or not at
    // all.
    store::Txn del{.compares = {},
                   .success = {store::Op::del("/tenants/" + name + "/",
                                              store::prefixEnd("/tenants/" + name + "/")),
                               store::Op::del(tenantKey(name))},
                   .failure = {}};
    if (auto deleted = store_.txn(std::move(del)); !deleted.isOk()) {
      return failed(deleted.status());
    }
    // Without mu_: a pass holds the driver's lock while it takes mu_.
    driver_.forgetTenant(name);
    return noContent();
  }
  return error(405, "method not allowed");
}

HttpResponse ControlPlane::policiesApi(Request& r) {
  std::vector<std::string> parts = split(r.scope.path);
  if (parts[0] == "sys") {
    parts.erase(parts.begin());
  }
  const std::string scope = r.scope.tenant.value_or("");
  if (parts.size() == 1) {
    if (r.method != "GET" && r.method != "LIST") {
      return error(405, "method not allowed: the policy list is read with GET or LIST");
    }
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    return keysReply(r.request_id, policies_[scope]);
  }
  if (parts.size() != 2 || !validName(parts[1])) {
    return error(400, "policy names are lowercase letters, digits and '-'");
  }
  const std::string& name = parts[1];
  bool exists = false;
  {
    std::lock_guard lock(mu_);
    exists = policies_[scope].contains(name);
  }
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    std::lock_guard lock(mu_);
    if (!exists) {
      return error(404, "no policy '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id},
                       {"data", {{"name", name}, {"policy", policies_[scope][name].toJson()}}}});
  }
  if (r.method == "POST") {
    if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
      return error(403, "permission denied");
    }
    const json& doc = r.body.contains("policy") ? r.body["policy"] : r.body;
    auto p = Policy::fromJson(name, doc);
    if (!p.isOk()) {
      return fromStatus(p.status());
    }
    // A tenant holds a bounded number of policies (each lives in the server's memory).
    std::unique_lock<std::mutex> creating;
    if (!scope.empty()) {
      creating = std::unique_lock(tenantLock(scope));
      const int64_t max_policies =
          tenantSetting(scope, "max_policies", options_.default_max_policies);
      std::lock_guard lock(mu_);
      const auto& held = policies_[scope];
      if (!held.contains(name) && static_cast<int64_t>(held.size()) >= max_policies) {
        return error(429, "tenant '" + scope + "' holds its limit of " +
                              std::to_string(max_policies) + " policies (max_policies)");
      }
    }
    auto put = store_.put(policyKey(scope, name), p->toJson().dump());
    if (!put.isOk()) {
      return fromStatus(put.status());
    }
    std::lock_guard lock(mu_);
    policies_[scope][name] = std::move(p).value();
    return noContent();
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    if (!exists) {
      return error(404, "no policy '" + name + "'");
    }
    auto del = store_.deleteRange(policyKey(scope, name));
    if (!del.isOk()) {
      return fromStatus(del.status());
    }
    std::lock_guard lock(mu_);
    policies_[scope].erase(name);
    return noContent();
  }
  return error(405, "method not allowed");
}

HttpResponse ControlPlane::tokensApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);
  if (parts.size() != 3) {
    return error(404, "unsupported path");
  }
  const std::string& op = parts[2];
  const core::WallTime now = clock_.wallNow();
  // The token itself may always look itself up, renew and revoke itself.
  if (op == "lookup-self") {
    if (r.method != "GET" && r.method != "POST") {
      return error(405, "use GET or POST");
    }
    return reply(200, {{"request_id", r.request_id}, {"data", r.token.toJson(now)}});
  }
  if (op == "renew-self" || op == "revoke-self") {
    if (r.method != "POST" && r.method != "PUT") {  // A read must never renew or revoke.
      return error(405, "use POST");
    }
    if (op == "revoke-self") {
      auto n = tokens_->revoke(r.token.accessor);
      return n.isOk() ? noContent() : fromStatus(n.status());
    }
    core::Duration inc{0};
    if (r.body.contains("increment")) {
      auto d = parseDuration(r.body["increment"], "increment");
      if (!d.isOk()) {
        return fromStatus(d.status());
      }
      inc = *d;
    }
    auto t = tokens_->renew(r.token.accessor, inc);
    return t.isOk() ? reply(200, {{"request_id", r.request_id}, {"data", t->toJson(now)}})
                    : fromStatus(t.status());
  }
  if (r.method != "POST" && !(op == "lookup" && r.method == "GET")) {
    return error(405, "use POST");
  }
  if (!authorized(r, Capability::kUpdate) && !authorized(r, Capability::kCreate)) {
    return error(403, "permission denied");
  }
  const std::string scope = r.scope.tenant.value_or("");
  if (op == "create") {
    TokenRequest req;
    req.tenant = scope;
    const std::string source = "token request";
    core::JsonNode n(r.body, "", source);
    core::Status st =
        n.checkKeys({"policies", "ttl", "explicit_max_ttl", "renewable", "display_name", "tenant"});
    if (!st.isOk()) {
      return fromStatus(st);
    }
    if (r.body.contains("tenant")) {
      if (!scope.empty() || !r.body["tenant"].is_string() ||
          !validName(r.body["tenant"].get<std::string>())) {
        return error(400, "tenant: name a tenant only when creating from the admin scope");
      }
      req.tenant = r.body["tenant"].get<std::string>();
      std::lock_guard lock(mu_);
      if (!tenants_.contains(req.tenant)) {
        return error(404, "no tenant '" + req.tenant + "'");
      }
    }
    if (r.body.contains("policies")) {
      if (!r.body["policies"].is_array()) {
        return error(400, "policies: expected a list of names");
      }
      for (const json& p : r.body["policies"]) {
        if (!p.is_string()) {
          return error(400, "policies: expected a list of names");
        }
        req.policies.push_back(p.get<std::string>());
      }
    }
    for (const char* f : {"ttl", "explicit_max_ttl"}) {
      if (r.body.contains(f)) {
        auto d = parseDuration(r.body[f], f);
        if (!d.isOk()) {
          return fromStatus(d.status());
        }
        (std::string(f) == "ttl" ? req.ttl : req.explicit_max_ttl) = *d;
      }
    }
    if (n.has("renewable")) {
      auto renewable = n.child("renewable").boolean();
      if (!renewable.isOk()) {
        return fromStatus(renewable.status());
      }
      req.renewable = *renewable;
    }
    if (n.has("display_name")) {
      const json& name = n.child("display_name").value();
      if (!name.is_string() || name.get<std::string>().size() > 256) {
        return fromStatus(n.child("display_name").error("expected a string of at most 256 bytes"));
      }
      req.display_name = name.get<std::string>();
    }
    // Every token lives in the server's memory until it expires: a tenant holds a bounded number.
    const int64_t max_tokens =
        req.tenant.empty() ? 0
                           : tenantSetting(req.tenant, "max_tokens", options_.default_max_tokens);
    auto created = tokens_->create(r.token, req, static_cast<size_t>(max_tokens));
    if (!created.isOk()) {
      return fromStatus(created.status());
    }
    return reply(200, {{"request_id", r.request_id},
                       {"auth",
                        {{"client_token", created->secret},
                         {"accessor", created->info.accessor},
                         {"policies", created->info.policies},
                         {"tenant", created->info.tenant},
                         {"lease_duration", created->info.ttlSeconds(now)},
                         {"renewable", created->info.renewable}}}});
  }
  // lookup, renew, revoke by accessor: only tokens of this scope.
  if (r.body.contains("accessor") && !r.body["accessor"].is_string()) {
    return error(400, "token request: accessor: expected a string");
  }
  const std::string accessor = r.body.value(
      "accessor", r.scope.query.count("accessor") != 0 ? r.scope.query.at("accessor") : "");
  auto target = tokens_->lookupAccessor(accessor);
  if (!target.isOk() || target->tenant != scope) {
    return error(404, "no such token");
  }
  if (op == "lookup") {
    return reply(200, {{"request_id", r.request_id}, {"data", target->toJson(now)}});
  }
  if (op == "renew") {
    core::Duration inc{0};
    if (r.body.contains("increment")) {
      auto d = parseDuration(r.body["increment"], "increment");
      if (!d.isOk()) {
        return fromStatus(d.status());
      }
      inc = *d;
    }
    auto t = tokens_->renew(accessor, inc);
    return t.isOk() ? reply(200, {{"request_id", r.request_id}, {"data", t->toJson(now)}})
                    : fromStatus(t.status());
  }
  if (op == "revoke") {
    auto n = tokens_->revoke(accessor);
    return n.isOk() ? noContent() : fromStatus(n.status());
  }
  return error(404, "unsupported path");
}

HttpResponse ControlPlane::workloadsApi(Request& r) {
  const std::string tenant = *r.scope.tenant;
  const std::vector<std::string> parts = split(r.scope.path);
  {
    std::shared_lock lock(mu_);
    if (!tenants_.contains(tenant)) {
      return error(404, "not found");
    }
  }
  if (parts.size() == 1) {
    if (r.method != "LIST") {
      return error(405, "use LIST (or GET ?list=true) on workloads");
    }
    if (!authorized(r, Capability::kList)) {
      return error(403, "permission denied");
    }
    std::shared_lock lock(mu_);
    auto it = workloads_.find(tenant);
    return keysReply(r.request_id,
                     it == workloads_.end() ? std::map<std::string, json>{} : it->second);
  }
  const std::string& name = parts[1];
  if (!validName(name)) {
    return error(400, "workload names are lowercase letters, digits and '-' (at most 63)");
  }
  json record;
  {
    std::shared_lock lock(mu_);
    auto t = workloads_.find(tenant);
    if (t != workloads_.end()) {
      auto it = t->second.find(name);
      if (it != t->second.end()) {
        record = it->second;
      }
    }
  }
  const bool exists = !record.is_null();
  if (parts.size() == 3 && parts[2] == "logs") {
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    return workloadLogs(r, tenant, name);
  }
  if (parts.size() == 3 && parts[2] == "events" && r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id},
                       {"data", {{"events", record.value("events", json::array())}}}});
  }
  if (parts.size() != 2) {
    return error(404, "unsupported path");
  }
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    json data = {{"name", name},
                 {"tenant", tenant},
                 {"spec", record["spec"]},
                 {"submitted", record["submitted"]}};
    auto live = driver_.status(tenant, name);
    data["status"] = live ? statusJson(*live) : record["status"];
    return reply(200, {{"request_id", r.request_id}, {"data", data}});
  }
  if (r.method == "DELETE") {
    if (!authorized(r, Capability::kDelete)) {
      return error(403, "permission denied");
    }
    if (!exists) {
      return error(404, "no workload '" + name + "'");
    }
    // The request is stored (durable, so it survives a restart); the scheduler stops the
    // workload when the store's watch brings it (onStoreEvents).
    std::lock_guard write_lock(status_write_mu_);
    json updated;
    {
      std::lock_guard lock(mu_);
      auto t = workloads_.find(tenant);
      if (t == workloads_.end() || !t->second.contains(name)) {
        return error(404, "no workload '" + name + "'");
      }
      json& rec = t->second[name];
      const std::string phase = rec["status"].value("phase", "");
      if (rec.value("cancel_requested", false) || phase == "succeeded" || phase == "failed" ||
          phase == "cancelled") {
        return noContent();  // Nothing left to stop.
      }
      rec["cancel_requested"] = true;
      rec["events"].push_back(
          {{"time", wallText(clock_.wallNow())}, {"event", "cancel requested"}});
      updated = rec;
    }
    auto put = store_.put(workloadKey(tenant, name), updated.dump());
    if (!put.isOk()) {
      return fromStatus(put.status());
    }
    return noContent();
  }
  if (r.method != "POST") {
    return error(405, "method not allowed");
  }
  if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
    return error(403, "permission denied");
  }
  if (exists) {
    return error(409, "workload '" + name + "' exists; workloads cannot be changed");
  }
  // Admission: the body against the catalogue, the pool and the tenant's caps.
  const std::string source = "workload '" + name + "'";
  core::JsonNode n(r.body, "", source);
  core::Status st = n.checkKeys({"tasks", "minAvailable", "priority", "preemptible", "maxRuntime",
                                 "duration", "gracePeriod", "command", "env", "identity", "secrets",
                                 "cpuMilli", "memoryMiB", "gpu", "queue"});
  SubmitCommand cmd;
  cmd.tenant = tenant;
  cmd.name = name;
  if (st.isOk()) {
    st = model::parseTaskRequest(n, catalogue_, {}, cmd.spec.request);
  }
  if (st.isOk()) {
    st = parseCommandAndEnv(n, cmd);
  }
  json spec = r.body;
  json sealed_env = json::object();
  if (st.isOk()) {
    st = sealEnv(tenant, name, cmd, spec, sealed_env);
  }
  if (st.isOk() && !cmd.secrets.empty()) {
    if (core::Status allowed = checkWorkloadSecrets(r, cmd.secrets); !allowed.isOk()) {
      return fromStatus(allowed.withContext(source));
    }
  }
  if (st.isOk() && n.has("queue")) {
    auto q = n.child("queue").str();
    st = q.status();
    if (q.isOk()) {
      cmd.queue = *q;
      if (!driver_.hasQueue(tenant, cmd.queue)) {
        st = core::invalidArgument(source + ": queue: tenant '" + tenant + "' has no queue '" +
                                   cmd.queue + "'");
      }
    }
  }
  auto field = [&](const char* f, int64_t lo, int64_t hi, int64_t def) -> core::Result<int64_t> {
    return n.has(f) ? n.child(f).integer(lo, hi) : core::Result<int64_t>(def);
  };
  auto tasks = field("tasks", 1, kMaxWorkloadTasks, 1);
  auto min = tasks.isOk() ? field("minAvailable", 1, *tasks, *tasks) : tasks;
  auto prio = field("priority", -1000000, 1000000, 0);
  auto duration = field("duration", 0, 365LL * 86400, 0);
  auto grace = field("gracePeriod", 0, 3600, 30);
  for (const core::Status& s :
       {st, tasks.status(), min.status(), prio.status(), duration.status(), grace.status()}) {
    if (!s.isOk()) {
      return fromStatus(s);
    }
  }
  cmd.spec.tasks = static_cast<int>(*tasks);
  cmd.spec.min_available = static_cast<int>(*min);
  cmd.spec.priority = static_cast<int32_t>(*prio);
  if (n.has("preemptible")) {
    auto preemptible = n.child("preemptible").boolean();
    if (!preemptible.isOk()) {
      return fromStatus(preemptible.status());
    }
    cmd.spec.preemptible = *preemptible;
  }
  cmd.duration = std::chrono::seconds(*duration);
  cmd.grace = std::chrono::seconds(*grace);
  {
    std::lock_guard lock(mu_);
    auto t = tenants_.find(tenant);
    if (t == tenants_.end()) {
      return error(404, "not found");  // Deleted since the request was routed.
    }
    const json& config = t->second;
    const int64_t pending = pending_[tenant];
    if (static_cast<int64_t>(workloads_[tenant].size()) >=
        config.value("max_workloads", options_.default_max_workloads)) {
      return error(429, "tenant '" + tenant + "' is at its limit of stored workloads");
    }
    if (pending >= config.value("max_pending", options_.default_max_pending)) {
      return error(429, "tenant '" + tenant + "' is at its limit of pending workloads");
    }
  }
  json stored = {{"name", name},
                 {"spec", std::move(spec)},
                 {"submitted", wallText(clock_.wallNow())},
                 {"status", {{"phase", "pending"}, {"tasks", json::array()}}},
                 {"events", {{{"time", wallText(clock_.wallNow())}, {"event", "submitted"}}}}};
  if (!sealed_env.empty()) {
    stored["sealed_env"] = std::move(sealed_env);
  }
  // The record grows with its tasks' status and its events, and must stay within what the store
  // takes, or it could never be updated again (nor cancelled).
  const size_t largest = stored.dump(-1, ' ', false, json::error_handler_t::replace).size() +
                         static_cast<size_t>(*tasks) * kTaskStatusBytes + kEventsBytes;
  if (largest > store::kMaxValueBytes) {
    return error(400, source + ": its record could grow to " + std::to_string(largest) +
                          " bytes with the status of its " + std::to_string(*tasks) +
                          " tasks, over the store's limit of " +
                          std::to_string(store::kMaxValueBytes) +
                          "; submit fewer tasks or a shorter command and env");
  }
  // Refused now if it could never run; then stored (durable) and acknowledged. The scheduler
  // gets it from the store's watch (onStoreEvents), and after a restart from load().
  if (core::Status ok = driver_.check(cmd); !ok.isOk()) {
    return error(400, source + ": " + ok.message());
  }
  // Stored only while the tenant is: a tenant deleted since the checks above (its deletion does
  // not wait for submissions) must not be left with a workload.
  store::Txn txn;
  txn.notes = std::move(r.audit_notes);
  txn.compares.push_back(
      store::Compare::version(workloadKey(tenant, name), store::Compare::kEqual, 0));
  txn.compares.push_back(store::Compare::version(tenantKey(tenant), store::Compare::kGreater, 0));
  txn.success.push_back(store::Op::put(workloadKey(tenant, name), stored.dump()));
  auto res = store_.txn(std::move(txn));
  if (!res.isOk()) {
    return fromStatus(res.status());
  }
  bool deleting = false;
  if (res->succeeded) {
    std::shared_lock lock(mu_);
    deleting = !tenants_.contains(tenant);
  }
  if (deleting) {
    // Stored, while the tenant is out of the caches: its deletion began after the checks above
    // and is under way. It holds the tenant's lock until it is done, and either removes the
    // workload with the rest or, if it fails, puts the tenant back with the workload.
    std::lock_guard wait(tenantLock(tenant));
  }
  std::lock_guard lock(mu_);
  if (!tenants_.contains(tenant) || (deleting && !workloads_[tenant].contains(name))) {
    return error(404, "not found");  // Deleted meanwhile: the workload is not in the store.
  }
  if (!res->succeeded) {
    return error(409, "workload '" + name + "' exists");
  }
  if (workloads_[tenant].try_emplace(name, stored).second) {  // Unless the watch was first.
    ++pending_[tenant];
  }
  return reply(202, {{"request_id", r.request_id},
                     {"data", {{"name", name}, {"tenant", tenant}, {"phase", "pending"}}}});
}

void ControlPlane::onDriverChanges(const std::map<std::string, WorkloadStatus>& changed) {
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
      for (const std::string& text : status.events) {
        events.push_back(
            {{"time", wallText(clock_.wallNow())}, {"event", "evicted"}, {"reason", text}});
      }
      if (before != status.phase) {
        events.push_back({{"time", wallText(clock_.wallNow())}, {"event", status.phase}});
      }
      while (events.size() > 100) {
        events.erase(events.begin());
      }
      record = rec;
    }
    writes.emplace_back(workloadKey(tenant, name), record.dump());
  }
  for (size_t i = 0; i < writes.size(); i += store::kMaxTxnOps) {
    store::Txn txn;
    for (size_t k = i; k < std::min(writes.size(), i + store::kMaxTxnOps); ++k) {
      txn.success.push_back(store::Op::put(writes[k].first, std::move(writes[k].second)));
    }
    (void)store_.txn(std::move(txn));
  }
}

HttpResponse ControlPlane::nodesApi(Request& r) {
  if (r.method != "GET" && r.method != "LIST") {
    return error(405, "method not allowed: nodes are read with GET or LIST");
  }
  if (!authorized(r, Capability::kRead) && !authorized(r, Capability::kList)) {
    return error(403, "permission denied");
  }
  // Capacity only: which tenant runs what on a node is not the caller's business.
  json nodes = json::array();
  const std::vector<NodeState> states = driver_.nodeStates();
  for (size_t i = 0; i < driver_.nodes().size(); ++i) {
    const model::Node& n = driver_.nodes()[i];
    json gpus = json::object();
    for (const model::GpuDevice& g : n.gpus) {
      gpus[catalogue_.model(g.model).name] = gpus.value(catalogue_.model(g.model).name, 0) + 1;
    }
    json node = {{"name", n.name},
                 {"cpu_milli", n.cpu.value()},
                 {"memory_mib", n.memory.value()},
                 {"gpus", gpus},
                 {"state", states[i].state}};
    if (!r.scope.tenant) {  // Operators also see how its agent is doing.
      node["agent"] = states[i].agent;
      node["seconds_since_heartbeat"] = states[i].seconds_since_heartbeat;
      node["tasks"] = states[i].tasks;
    }
    nodes.push_back(std::move(node));
  }
  return reply(200, {{"request_id", r.request_id}, {"data", {{"nodes", nodes}}}});
}

namespace {

// An agent's report of one task (docs/agent.md, "The node protocol").
core::Result<NodeTaskReport> reportFromJson(const core::JsonNode& n) {
  TESSERA_RETURN_IF_ERROR(n.checkKeys({"task", "generation", "state", "exit_code", "signal",
                                       "oom_killed", "stopped", "run_time_ms", "error"}));
  for (const char* required : {"task", "generation", "state"}) {
    if (!n.has(required)) {
      return n.error(std::string("missing '") + required + "'");
    }
  }
  NodeTaskReport r;
  TESSERA_ASSIGN_OR_RETURN(r.task, n.child("task").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t generation, n.child("generation").integer(0, UINT32_MAX));
  r.generation = static_cast<uint32_t>(generation);
  TESSERA_ASSIGN_OR_RETURN(const std::string state, n.child("state").str());
  if (state == "running") {
    r.state = NodeTaskReport::State::kRunning;
  } else if (state == "exited") {
    r.state = NodeTaskReport::State::kExited;
  } else if (state == "failed_to_start") {
    r.state = NodeTaskReport::State::kFailedToStart;
  } else {
    return n.child("state").error("expected running, exited or failed_to_start");
  }
  auto integer = [&](const char* f, int64_t lo, int64_t hi, int64_t def) -> core::Result<int64_t> {
    return n.has(f) ? n.child(f).integer(lo, hi) : core::Result<int64_t>(def);
  };
  auto boolean = [&](const char* f) -> core::Result<bool> {
    if (!n.has(f)) {
      return false;
    }
    if (!n.child(f).value().is_boolean()) {
      return n.child(f).error("expected true or false");
    }
    return n.child(f).value().get<bool>();
  };
  TESSERA_ASSIGN_OR_RETURN(const int64_t code, integer("exit_code", -1, 255, -1));
  TESSERA_ASSIGN_OR_RETURN(const int64_t sig, integer("signal", 0, 128, 0));
  TESSERA_ASSIGN_OR_RETURN(r.run_time_ms, integer("run_time_ms", 0, INT64_MAX, 0));
  TESSERA_ASSIGN_OR_RETURN(r.oom_killed, boolean("oom_killed"));
  TESSERA_ASSIGN_OR_RETURN(r.stopped, boolean("stopped"));
  r.exit_code = static_cast<int>(code);
  r.signal = static_cast<int>(sig);
  if (n.has("error")) {
    TESSERA_ASSIGN_OR_RETURN(r.error, n.child("error").str());
    r.error = r.error.substr(0, 1024);
  }
  return r;
}

json nodeTaskJson(const NodeTask& t) {
  json out = {{"task", t.id},
              {"generation", t.generation},
              {"tenant", t.tenant},
              {"workload", t.workload},
              {"index", t.index},
              {"command", t.command},
              {"env", t.env},
              {"gpus", t.gpus},
              {"milli_per_gpu", t.milli_per_gpu},
              {"isolation", t.isolation},
              {"gpu_memory_mib", t.gpu_memory_mib},
              {"cpu_milli", t.cpu_milli},
              {"memory_mib", t.memory_mib},
              {"duration_s", t.duration_s},
              {"grace_ms", t.grace_ms}};
  if (t.mig_profile >= 0) {
    out["mig_profile"] = t.mig_profile;
  }
  return out;
}

}  // namespace

HttpResponse ControlPlane::heartbeatApi(Request& r, const std::string& node) {
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "method not allowed");
  }
  if (!authorized(r, Capability::kUpdate)) {
    return error(403, "permission denied");
  }
  const std::string source = "heartbeat of node '" + node + "'";
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"node", "reports"}); !st.isOk()) {
    return fromStatus(st);
  }
  // The GPUs its agent found, in index order, by catalogue model.
  std::vector<std::string> models;
  if (body.has("node")) {
    const json& found = r.body["node"];
    if (!found.is_object() || !found.contains("gpus") || !found["gpus"].is_array()) {
      return error(400, source + ": node: expected the agent's discovery ({\"gpus\": [...]})");
    }
    for (const json& g : found["gpus"]) {
      if (!g.is_object() || !g.contains("model") || !g["model"].is_string()) {
        return error(400, source + ": node.gpus: each GPU needs its \"model\"");
      }
      models.push_back(g["model"].get<std::string>());
    }
  } else {
    return error(400, source + ": node: missing (the agent's discovery)");
  }
  std::vector<NodeTaskReport> reports;
  if (body.has("reports")) {
    const json& list = r.body["reports"];
    if (!list.is_array() || list.size() > 10000) {
      return error(400, source + ": reports: expected a list (at most 10000)");
    }
    for (size_t i = 0; i < list.size(); ++i) {
      core::JsonNode item(list[i], "reports[" + std::to_string(i) + "]", source);
      auto rep = reportFromJson(item);
      if (!rep.isOk()) {
        return fromStatus(rep.status());
      }
      reports.push_back(std::move(rep).value());
    }
  }
  // The answer comes at once: agents wait for news on GET sys/nodes/<node>/tasks instead, so
  // that their reports are never held behind a waiting call.
  auto answer = driver_.heartbeat(node, models, std::move(reports));
  if (!answer.isOk()) {
    return fromStatus(answer.status());
  }
  json tasks = json::array();
  for (const NodeTask& t : answer->tasks) {
    json tj = nodeTaskJson(t);
    // Files the agent keeps in the task's credentials folder (docs/secrets.md). The key is one
    // the audit log always HMACs.
    for (const auto& [var, hex] : t.sealed_env) {
      auto plain = openEnv(t, var, hex);
      if (plain.isOk()) {
        tj["env"][var] = std::move(plain).value();
      } else {
        tj["credentials_error"] = "its env." + var + ": " + plain.status().message();
      }
    }
    json files = json::object();
    if (std::string token = identityToken(t, node); !token.empty()) {
      files["identity-token"] = std::move(token);
    }
    if (!t.secrets.empty()) {
      auto file = task_secrets_ != nullptr
                      ? task_secrets_->resolve(t)
                      : core::Result<std::string>(core::failedPrecondition("no secrets engine"));
      if (file.isOk()) {
        files["secrets.json"] = std::move(file).value();
      } else {
        // The agent does not start the task, and reports why.
        tj["credentials_error"] = "its secrets: " + file.status().message();
      }
    }
    tj["credentials"] = std::move(files);
    tasks.push_back(std::move(tj));
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"version", answer->version},
                       {"lease_ttl_ms", options_.node_lease_ttl.count()},
                       {"tasks", tasks}}}});
}

HttpResponse ControlPlane::watchNodeApi(Request& r, const std::string& node) {
  if (r.method != "GET") {
    return error(405, "method not allowed");
  }
  if (!authorized(r, Capability::kRead)) {
    return error(403, "permission denied");
  }
  const std::string source = "tasks of node '" + node + "'";
  uint64_t known = UINT64_MAX;
  int64_t wait_ms = 0;
  try {
    if (auto it = r.scope.query.find("index"); it != r.scope.query.end()) {
      known = std::stoull(it->second);
    }
    if (auto it = r.scope.query.find("wait_ms"); it != r.scope.query.end()) {
      wait_ms = std::clamp<int64_t>(std::stoll(it->second), 0, 10000);
    }
  } catch (const std::exception&) {
    return error(400, source + ": index and wait_ms must be numbers");
  }
  // Waiting holds a worker: only so many wait at once, the rest answer at once.
  const bool may_wait = wait_ms > 0 && node_waits_.fetch_add(1) < options_.max_waiting_watches;
  if (wait_ms > 0 && !may_wait) {
    node_waits_.fetch_sub(1);
  }
  // The task list's changes wake the driver's wait at once; requests for the agent are looked
  // for between slices of it.
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(may_wait ? wait_ms : 0);
  core::Result<uint64_t> version = driver_.watchNode(node, known, std::chrono::milliseconds(0));
  while (version.isOk() && *version == known && !mailbox_.hasWaiting(node) &&
         std::chrono::steady_clock::now() < until) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    version = driver_.watchNode(node, known, std::min(left, std::chrono::milliseconds(100)));
  }
  if (may_wait) {
    node_waits_.fetch_sub(1);
  }
  if (!version.isOk()) {
    return fromStatus(version.status());
  }
  json requests = json::array();
  for (const LogRequest& l : mailbox_.take(node)) {
    requests.push_back({{"id", l.id},
                        {"task", l.task},
                        {"stream", l.stream},
                        {"offset", l.offset},
                        {"limit", l.limit}});
  }
  return reply(
      200, {{"request_id", r.request_id},
            {"data", {{"version", *version}, {"waited", may_wait}, {"log_requests", requests}}}});
}

HttpResponse ControlPlane::logAnswerApi(Request& r, const std::string& node,
                                        const std::string& id) {
  if (r.method != "PUT" && r.method != "POST") {
    return error(405, "method not allowed");
  }
  if (!authorized(r, Capability::kUpdate)) {
    return error(403, "permission denied");
  }
  const std::string source = "log answer of node '" + node + "'";
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"data_hex", "size", "error"}); !st.isOk()) {
    return fromStatus(st);
  }
  LogPiece piece;
  if (body.has("error")) {
    auto e = body.child("error").str();
    if (!e.isOk()) {
      return fromStatus(e.status());
    }
    piece.error = e->substr(0, 1024);
  } else {
    const json hex = r.body.value("data_hex", json(""));
    if (!hex.is_string() || hex.get<std::string>().size() % 2 != 0) {
      return error(400, source + ": data_hex: expected hex digits");
    }
    const std::string& h = hex.get_ref<const std::string&>();
    piece.data.reserve(h.size() / 2);
    for (size_t i = 0; i < h.size(); i += 2) {
      const int hi = core::hexDigitValue(h[i]);
      const int lo = core::hexDigitValue(h[i + 1]);
      if (hi < 0 || lo < 0) {
        return error(400, source + ": data_hex: expected hex digits");
      }
      piece.data.push_back(static_cast<char>(hi * 16 + lo));
    }
    auto size = body.has("size") ? body.child("size").integer(0, INT64_MAX)
                                 : core::Result<int64_t>(int64_t{0});
    if (!size.isOk()) {
      return fromStatus(size.status());
    }
    piece.size = *size;
  }
  if (core::Status st = mailbox_.answer(node, id, std::move(piece)); !st.isOk()) {
    return fromStatus(st);
  }
  return noContent();
}

HttpResponse ControlPlane::workloadLogs(Request& r, const std::string& tenant,
                                        const std::string& name) {
  if (r.method != "GET") {
    return error(405, "method not allowed");
  }
  if (!authorized(r, Capability::kRead)) {
    return error(403, "permission denied");
  }
  int64_t task = 0;
  LogRequest req;
  req.stream = "stdout";
  try {
    if (auto it = r.scope.query.find("task"); it != r.scope.query.end()) {
      task = std::stoll(it->second);
    }
    if (auto it = r.scope.query.find("offset"); it != r.scope.query.end()) {
      req.offset = std::stoll(it->second);
    }
    if (auto it = r.scope.query.find("limit"); it != r.scope.query.end()) {
      req.limit = std::stoll(it->second);
    }
  } catch (const std::exception&) {
    return error(400, "logs: task, offset and limit must be numbers");
  }
  if (auto it = r.scope.query.find("stream"); it != r.scope.query.end()) {
    req.stream = it->second;
  }
  if (req.stream != "stdout" && req.stream != "stderr") {
    return error(400, "logs: stream: expected stdout or stderr");
  }
  if (req.offset < 0 || req.limit < 1 || req.limit > int64_t{256} * 1024) {
    return error(400, "logs: offset must be >= 0 and limit 1..262144 bytes");
  }
  const std::optional<WorkloadStatus> status = driver_.status(tenant, name);
  if (!status) {
    return error(404, "no workload '" + name + "'");
  }
  if (task < 0 || task >= static_cast<int64_t>(status->tasks.size())) {
    return error(404, "workload '" + name + "' has no task " + std::to_string(task));
  }
  const std::string& node = status->tasks[static_cast<size_t>(task)].node;
  if (node.empty()) {
    return error(404, "task " + std::to_string(task) + " of '" + name +
                          "' has not run on an agent's node (no logs yet)");
  }
  if (!driver_.isAgentNode(node)) {
    return error(404, "task " + std::to_string(task) + " runs on simulated node '" + node +
                          "', which keeps no logs");
  }
  req.task = tenant + "." + name + "." + std::to_string(task);
  const int64_t offset = req.offset;
  const std::string stream = req.stream;
  auto piece = mailbox_.fetchLog(node, std::move(req), std::chrono::seconds(5));
  if (!piece.isOk()) {
    return fromStatus(piece.status());
  }
  // Logs are bytes; JSON wants UTF-8: invalid sequences become U+FFFD.
  const std::string text =
      json::parse(json(piece->data).dump(-1, ' ', false, json::error_handler_t::replace))
          .get<std::string>();
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"task", task},
                       {"node", node},
                       {"stream", stream},
                       {"offset", offset},
                       {"next_offset", offset + static_cast<int64_t>(piece->data.size())},
                       {"size", piece->size},
                       {"phase", status->phase},
                       {"text", text}}}});
}

HttpResponse ControlPlane::queuesApi(Request& r) {
  const std::vector<std::string> parts = split(r.scope.path);
  if (parts.size() == 2 && r.scope.tenant) {
    return teamQueueApi(r, parts[1]);
  }
  if (parts.size() != 1) {
    return error(404, "unsupported path");
  }
  if (r.method != "GET" && r.method != "LIST") {
    return error(405, "method not allowed: the queue list is read with GET or LIST");
  }
  if (!authorized(r, Capability::kRead) && !authorized(r, Capability::kList)) {
    return error(403, "permission denied");
  }
  json queues = json::array();
  for (const QueueStatus& q : driver_.queues(r.scope.tenant.value_or(""))) {
    queues.push_back({{"name", q.name},
                      {"allocated_milli_gpu", q.allocated_milli_gpu},
                      {"fair_share_milli_gpu", q.fair_share_milli_gpu},
                      {"quota_milli_gpu", q.quota_milli_gpu},
                      {"pending_milli_gpu", q.pending_milli_gpu}});
  }
  return reply(200, {{"request_id", r.request_id}, {"data", {{"queues", queues}}}});
}

HttpResponse ControlPlane::teamQueueApi(Request& r, const std::string& name) {
  const std::string tenant = *r.scope.tenant;
  if (!validName(name)) {
    return error(400, "queue names are lowercase letters, digits and '-' (at most 63)");
  }
  const std::string key = "/tenants/" + tenant + "/queues/" + name;
  if (r.method == "GET") {
    if (!authorized(r, Capability::kRead)) {
      return error(403, "permission denied");
    }
    auto got = store_.get(key);
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    if (!got->has_value()) {
      return error(404, "no queue '" + name + "' in tenant '" + tenant + "'");
    }
    return reply(
        200, {{"request_id", r.request_id}, {"data", json::parse((*got)->value, nullptr, false)}});
  }
  if (r.method != "POST" && r.method != "DELETE") {
    return error(405, "use GET, POST to create or change a queue, or DELETE");
  }
  if (name == "default") {
    return error(400, r.method == "DELETE"
                          ? "the default queue lives as long as its tenant"
                          : "the default queue follows the tenant's own quota and limit; change "
                            "the tenant instead");
  }
  if (r.method == "DELETE") {
    return deleteTeamQueue(r, tenant, name, key);
  }
  // Create or update, like tenants: what the body leaves out keeps its value. The tenant's lock
  // keeps the read, the cap's check and the write together, and the tenant from being deleted
  // in between (its deletion would leave the queue behind).
  std::lock_guard tenant_lock(tenantLock(tenant));
  auto got = store_.get(key);
  if (!got.isOk()) {
    return fromStatus(got.status());
  }
  const bool exists = got->has_value();
  if (!authorized(r, exists ? Capability::kUpdate : Capability::kCreate)) {
    return error(403, "permission denied");
  }
  {
    std::shared_lock lock(mu_);
    if (!tenants_.contains(tenant)) {
      return error(404, "not found");
    }
  }
  if (!exists) {
    // A cap on queues, since every queue is a node of the scheduler's tree that each pass walks,
    // for every tenant. A deleted queue's node is taken by the tenant's next new queue
    // (SchedulerDriver::putTeamQueue), so the queues in service are what counts.
    const int64_t max_queues = tenantSetting(tenant, "max_queues", options_.default_max_queues);
    if (static_cast<int64_t>(driver_.teamQueues(tenant).size()) >= max_queues) {
      return error(429, "tenant '" + tenant + "' is at its limit of " + std::to_string(max_queues) +
                            " queues (max_queues)");
    }
  }
  const json base = exists ? json::parse((*got)->value, nullptr, false) : json::object();
  const std::string source = "queue '" + name + "'";
  core::JsonNode n(r.body, "", source);
  core::Status st = n.checkKeys({"quota", "limit", "weight", "priority"});
  if (!st.isOk()) {
    return fromStatus(st);
  }
  auto q = queueNumbers(n, base, "queue '" + name + "'");
  if (!q.isOk()) {
    return fromStatus(q.status());
  }
  const json config = {{"name", name},
                       {"quota_milli_gpu", q->quota},
                       {"limit_milli_gpu", q->limit},
                       {"weight", q->weight},
                       {"priority", q->priority}};
  auto put = store_.put(key, config.dump());
  if (!put.isOk()) {
    return fromStatus(put.status());
  }
  core::Status applied = driver_.putTeamQueue(tenant, name, q->quota, q->limit, q->weight,
                                              static_cast<int32_t>(q->priority));
  if (!applied.isOk()) {
    return fromStatus(applied);
  }
  return noContent();
}

HttpResponse ControlPlane::deleteTeamQueue(Request& r, const std::string& tenant,
                                           const std::string& name, const std::string& key) {
  if (!authorized(r, Capability::kDelete)) {
    return error(403, "permission denied");
  }
  std::lock_guard tenant_lock(tenantLock(tenant));
  auto got = store_.get(key);
  if (!got.isOk()) {
    return fromStatus(got.status());
  }
  if (!got->has_value()) {
    return error(404, "no queue '" + name + "' in tenant '" + tenant + "'");
  }
  // Out of service first (refused while it has work), then gone from the store: a failed
  // delete leaves it retired until the DELETE is retried or the server restarts.
  if (core::Status st = driver_.retireTeamQueue(tenant, name); !st.isOk()) {
    return error(409, st.message());
  }
  auto del = store_.deleteRange(key);
  if (!del.isOk()) {
    return fromStatus(del.status());
  }
  return noContent();
}

HttpResponse ControlPlane::metrics() {
  std::string out;
  out += "# HELP tessera_http_requests_total Requests handled, by route, tenant and status.\n";
  out += "# TYPE tessera_http_requests_total counter\n";
  std::string durations;
  durations += "# HELP tessera_http_request_seconds_sum Time spent handling requests.\n";
  durations += "# TYPE tessera_http_request_seconds_sum counter\n";
  {
    std::lock_guard lock(metrics_mu_);
    for (const auto& [key, m] : metrics_) {
      const size_t a = key.find('|');
      const size_t b = key.find('|', a + 1);
      const std::string labels = "route=\"" + key.substr(0, a) + "\",tenant=\"" +
                                 key.substr(a + 1, b - a - 1) + "\",code=\"" + key.substr(b + 1) +
                                 "\"";
      out += "tessera_http_requests_total{" + labels + "} " + std::to_string(m.count) + "\n";
      durations +=
          "tessera_http_request_seconds_sum{" + labels + "} " + std::to_string(m.seconds) + "\n";
    }
  }
  out += durations;
  out += "# HELP tessera_scheduler_pass_milliseconds Duration of the last scheduling pass.\n";
  out += "# TYPE tessera_scheduler_pass_milliseconds gauge\n";
  out += "tessera_scheduler_pass_milliseconds " + std::to_string(driver_.lastPassMs()) + "\n";
  out += "# TYPE tessera_scheduler_passes_total counter\n";
  out += "tessera_scheduler_passes_total " + std::to_string(driver_.passes()) + "\n";
  out += "# TYPE tessera_queue_pending_milli_gpu gauge\n";
  for (const QueueStatus& q : driver_.queues("")) {
    out += "tessera_queue_pending_milli_gpu{queue=\"" + q.name + "\"} " +
           std::to_string(q.pending_milli_gpu) + "\n";
    out += "tessera_queue_allocated_milli_gpu{queue=\"" + q.name + "\"} " +
           std::to_string(q.allocated_milli_gpu) + "\n";
  }
  HttpResponse r;
  r.body = std::move(out);
  r.content_type = "text/plain; version=0.0.4";
  return r;
}

HttpResponse ControlPlane::auditApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "use GET");
  }
  if (!authorized(r, Capability::kRead)) {
    return error(403, "permission denied");
  }
  if (options_.audit_file.empty()) {
    return error(404, "this server has no audit file to read a view from");
  }
  auto number = [&](const char* name, int64_t lo, int64_t hi,
                    int64_t def) -> std::optional<int64_t> {
    auto it = r.scope.query.find(name);
    if (it == r.scope.query.end()) {
      return def;
    }
    int64_t v = 0;
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) {
      return std::nullopt;
    }
    return v;
  };
  const std::optional<int64_t> limit = number("limit", 1, 10000, 100);
  if (!limit) {
    return error(400, "limit: expected a whole number from 1 to 10000");
  }
  const std::optional<int64_t> after = number("after", 0, std::numeric_limits<int64_t>::max(), -1);
  if (!after) {
    return error(400, "after: expected a record's seq (a whole number, 0 or more)");
  }
  // The tenant's records only, byte for byte, each with its hash and prev_hash (docs/server.md
  // says what a tenant can verify from them): the last `limit`, or with `after` the first
  // `limit` whose seq is greater (to follow the log).
  auto view = audit::tenantViewOfFile(options_.audit_file, *r.scope.tenant);
  if (!view.isOk()) {
    return fromStatus(view.status());
  }
  // Records from before the tenant was created belong to a deleted tenant of the same name: the
  // view starts at the first record since (records are in time order).
  std::string created;
  {
    std::shared_lock lock(mu_);
    if (auto t = tenants_.find(*r.scope.tenant); t != tenants_.end()) {
      created = t->second.value("created_time", "");
    }
  }
  auto time_of = [](const std::string& line) {
    const json rec = json::parse(line, nullptr, false);
    return rec.is_object() ? rec.value("time", std::string()) : std::string();
  };
  size_t first = 0;
  while (!created.empty() && first < view->size() && time_of((*view)[first]) < created) {
    ++first;
  }
  view->erase(view->begin(), view->begin() + static_cast<std::ptrdiff_t>(first));
  json records = json::array();
  const auto n = static_cast<size_t>(*limit);
  if (*after >= 0) {
    for (const std::string& line : *view) {
      json rec = json::parse(line, nullptr, false);
      if (rec.is_object() && rec.value("seq", int64_t{0}) > *after) {
        records.push_back(std::move(rec));
        if (records.size() == n) {
          break;
        }
      }
    }
  } else {
    for (size_t i = view->size() > n ? view->size() - n : 0; i < view->size(); ++i) {
      records.push_back(json::parse((*view)[i], nullptr, false));
    }
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data", {{"records", records}, {"total", view->size()}}}});
}

void ControlPlane::housekeeping() {
  (void)tokens_->expire();
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
  dropDurableAuditNotes();
}

}  // namespace tessera::server
