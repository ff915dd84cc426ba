// Tenants (admin scope): create, update, read, delete; docs/server.md "API".
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "core/strings.h"
#include "core/units.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

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
    config["created_time"] = core::formatRfc3339Millis(clock_.wallNow());
  } else if (base.contains("created_time")) {
    config["created_time"] = base["created_time"];
  }
  const std::string source = "tenant '" + name + "'";
  core::JsonNode n(body, "", source);
  TESSERA_RETURN_IF_ERROR(
      n.checkKeys({"quota", "limit", "weight", "priority", "max_unsaved_gpu_seconds", "trust_group",
                   "max_workloads", "max_pending", "max_queues", "max_tokens", "max_policies",
                   "max_secrets", "max_bytes", "request_rate", "request_burst",
                   "request_concurrency", "workload_retention_seconds"}));
  TESSERA_ASSIGN_OR_RETURN(const QueueNumbers q, queueNumbers(n, base, source));
  if (!create && q.quota < base.value("quota_milli_gpu", int64_t{0})) {
    // Its teams' quotas are part of its own: lowered under their sum, it would promise them
    // what it no longer has.
    TESSERA_ASSIGN_OR_RETURN(const auto teams, teamQuotas(name));
    int64_t sum = 0;
    for (const auto& [queue, quota] : teams) {
      sum += std::max<int64_t>(quota, 0);
    }
    if (q.quota < sum) {
      return core::invalidArgument(source + ": quota.gpu " + core::gpuText(q.quota) +
                                   " is less than its team queues' " + core::gpuText(sum) +
                                   " together: lower the teams' quotas first (queues/<team>)");
    }
  }
  config["quota_milli_gpu"] = q.quota;
  config["limit_milli_gpu"] = q.limit;
  config["weight"] = q.weight;
  config["priority"] = q.priority;
  if (q.max_unsaved_gpu_s >= 0) {
    config["max_unsaved_gpu_seconds"] = q.max_unsaved_gpu_s;
  }
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
                         Cap{"max_secrets", 0, 10000000, options_.default_max_secrets},
                         Cap{"max_bytes", 1024, int64_t{1} << 40, options_.default_max_bytes},
                         Cap{"workload_retention_seconds", 0, int64_t{10} * 365 * 86400,
                             options_.default_workload_retention_s}}) {
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
  if (create) {
    // Grants given to this name while no tenant had it are void (a granter is never told
    // whether a name is a tenant): the new tenant starts with none. Any grant given from here on
    // is to this tenant.
    TESSERA_RETURN_IF_ERROR(grants_->forgetTenant(name).withContext(
        "tenant '" + name + "': grants to its name from before cannot be dropped"));
  }
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
    // Again for a grant given between the first drop and the creation; it is the rare one, and
    // the tenant exists now, so a failure is logged rather than answered.
    if (core::Status st = grants_->forgetTenant(name); !st.isOk()) {
      core::logError("tenant '{}' is created, but grants to its name from before it may remain: {}",
                     name, st.message());
    }
    TESSERA_RETURN_IF_ERROR(driver_.addTenantQueue(
        name, q.quota, q.limit, q.weight, static_cast<int32_t>(q.priority), q.max_unsaved_gpu_s));
  } else {
    TESSERA_RETURN_IF_ERROR(driver_.updateTenantQueue(
        name, q.quota, q.limit, q.weight, static_cast<int32_t>(q.priority), q.max_unsaved_gpu_s));
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
    std::lock_guard lock(mu_);
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      return error(404, "no tenant '" + name + "'");
    }
    return reply(200, {{"request_id", r.request_id}, {"data", it->second}});
  }
  if (r.method == "POST") {
    core::Status st = putTenant(name, r.body, !exists);
    return st.isOk() ? noContent() : fromStatus(st);
  }
  if (r.method == "DELETE") {
    // No change of the tenant's that read it before (its settings, a queue, a policy, a KV key)
    // lands after its keys are gone.
    std::lock_guard tenant_lock(tenantLock(name));
    // Out of the caches first, in one step: from here on every request finds no such tenant,
    // so the slow part below (store writes, each a disk flush) holds no lock that other
    // tenants' requests take. Put back if it cannot be done.
    struct Held {
      json config;
      std::map<std::string, Policy> policies;
    } held;
    {
      std::lock_guard lock(mu_);
      auto t = tenants_.find(name);
      if (t == tenants_.end()) {  // Again: another DELETE may have been first.
        return error(404, "no tenant '" + name + "'");
      }
      for (const WorkloadPtr& w : registry_.list(name)) {
        if (!isFinished(w->status.phase)) {
          return error(
              409, "tenant '" + name + "' still has workload '" + w->name + "'; cancel it first");
        }
      }
      held.config = std::move(t->second);
      held.policies = std::move(policies_[name]);
      tenants_.erase(t);
      policies_.erase(name);
      passed_over_.erase(name);
    }
    auto failed = [&](const core::Status& st) {
      // Put back as it was. Workloads stored meanwhile (submissions checked before the deletion
      // began) were passed over by the store's watch: they go to the scheduler from here,
      // later ones from the watch as usual.
      std::set<std::string> passed_over;
      {
        std::lock_guard lock(mu_);
        tenants_[name] = std::move(held.config);
        policies_[name] = std::move(held.policies);
        passed_over = std::move(passed_over_[name]);
        passed_over_.erase(name);
      }
      for (const std::string& workload : passed_over) {
        if (const WorkloadPtr record = registry_.get(name, workload)) {
          handOver(name, *record);
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
    request_metrics_.forgetTenant(name);  // A tenant created later under the name starts at 0.
    return noContent();
  }
  return error(405, "method not allowed");
}

}  // namespace tessera::server
