// Queues: the fair-share view, and a tenant's team queues.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/units.h"
#include "model/codec.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

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
  json queues = json::array();
  std::set<std::string> listed;
  for (const QueueStatus& q : driver_.queues(r.scope.tenant.value_or(""))) {
    listed.insert(q.name);
    queues.push_back({{"name", q.name},
                      {"allocated_milli_gpu", q.allocated_milli_gpu},
                      {"fair_share_milli_gpu", q.fair_share_milli_gpu},
                      {"quota_milli_gpu", q.quota_milli_gpu},
                      {"pending_milli_gpu", q.pending_milli_gpu}});
  }
  // A team queue created since the scheduler's last pass is listed at once, from the store,
  // with nothing allocated yet (its fair share comes with the next pass).
  if (r.scope.tenant) {
    auto teams = teamQuotas(*r.scope.tenant);
    if (!teams.isOk()) {
      return fromStatus(teams.status());
    }
    for (const auto& [queue, quota] : *teams) {
      const std::string name = *r.scope.tenant + "/" + queue;
      if (!listed.contains(name)) {
        queues.push_back({{"name", name},
                          {"allocated_milli_gpu", 0},
                          {"fair_share_milli_gpu", 0},
                          {"quota_milli_gpu", quota},
                          {"pending_milli_gpu", 0}});
      }
    }
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
    return deleteTeamQueue(tenant, name, key);
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
  core::Status st =
      n.checkKeys({"quota", "limit", "weight", "priority", "max_unsaved_gpu_seconds"});
  if (!st.isOk()) {
    return fromStatus(st);
  }
  auto q = queueNumbers(n, base, "queue '" + name + "'");
  if (!q.isOk()) {
    return fromStatus(q.status());
  }
  // A team's quota is part of its tenant's guarantee: the teams together are never promised
  // more than the tenant has. (A change that does not raise this queue's quota is taken even if
  // the tenant's quota was lowered under the teams' since: the operator's own choice.)
  if (q->quota > base.value("quota_milli_gpu", int64_t{0})) {
    auto teams = teamQuotas(tenant);
    if (!teams.isOk()) {
      return fromStatus(teams.status());
    }
    int64_t others = 0;
    std::string listed;
    for (const auto& [queue, quota] : *teams) {
      if (queue != name && quota > 0) {
        others += quota;
        listed += (listed.empty() ? "" : ", ") + queue + " " + core::gpuText(quota);
      }
    }
    int64_t tenant_quota = 0;
    {
      std::shared_lock lock(mu_);
      tenant_quota = tenants_.at(tenant).value("quota_milli_gpu", int64_t{0});
    }
    if (q->quota + others > tenant_quota) {
      return error(400, "queue '" + name + "': quota.gpu " + core::gpuText(q->quota) +
                            (listed.empty() ? "" : " and the other team queues' (" + listed + ")") +
                            " add up to " + core::gpuText(q->quota + others) +
                            ", more than tenant '" + tenant + "''s quota of " +
                            core::gpuText(tenant_quota) +
                            ": teams share their tenant's guarantee (raise the tenant's quota or "
                            "lower a team's)");
    }
  }
  json config = {{"name", name},
                 {"quota_milli_gpu", q->quota},
                 {"limit_milli_gpu", q->limit},
                 {"weight", q->weight},
                 {"priority", q->priority}};
  if (q->max_unsaved_gpu_s >= 0) {
    config["max_unsaved_gpu_seconds"] = q->max_unsaved_gpu_s;
  }
  auto put = store_.put(key, config.dump());
  if (!put.isOk()) {
    return fromStatus(put.status());
  }
  core::Status applied =
      driver_.putTeamQueue(tenant, name, q->quota, q->limit, q->weight,
                           static_cast<int32_t>(q->priority), q->max_unsaved_gpu_s);
  if (!applied.isOk()) {
    return fromStatus(applied);
  }
  return noContent();
}

core::Result<std::map<std::string, int64_t>> ControlPlane::teamQuotas(const std::string& tenant) {
  const std::string prefix = "/tenants/" + tenant + "/queues/";
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult all, store_.range(prefix, store::prefixEnd(prefix)));
  std::map<std::string, int64_t> out;
  for (const store::KeyValue& kv : all.kvs) {
    const json c = json::parse(kv.value, nullptr, false);
    out[kv.key.substr(prefix.size())] =
        c.is_object() ? c.value("quota_milli_gpu", int64_t{0}) : int64_t{0};
  }
  return out;
}

HttpResponse ControlPlane::deleteTeamQueue(const std::string& tenant, const std::string& name,
                                           const std::string& key) {
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

}  // namespace tessera::server

namespace tessera::server {

namespace {
constexpr std::string_view kProfileKey = "/scheduler/profile";

// A task shape as the API shows it and the store keeps it (models by name).
json shapeJson(const sched::PodShape& shape, const model::GpuCatalogue& catalogue) {
  json models = json::array();
  for (model::GpuModelId m : shape.models) {
    models.push_back(catalogue.model(m).name);
  }
  return {{"cpu_milli", shape.cpu_milli},
          {"gpus", shape.gpu_count},
          {"milli_per_gpu", shape.milli},
          {"models", std::move(models)}};
}
}  // namespace

HttpResponse ControlPlane::schedulerApi(Request& r) {
  if (r.method != "GET") {
    return error(405, "method not allowed: the scheduler's profile is read with GET");
  }
  const ProfileStatus p = driver_.profileStatus();
  json typical = json::array();
  for (const sched::TypicalPod& t : p.typical) {
    json shape = shapeJson(t.shape, catalogue_);
    shape["frequency"] = t.freq;
    typical.push_back(std::move(shape));
  }
  json terms = json::object();
  for (const auto& [name, why] : p.terms) {
    terms[name] = why;
  }
  json data = {{"policy", p.policy},
               {"profile",
                {{"source", p.learned ? "learned" : "configured"},
                 {"tasks_counted", p.tasks_seen},
                 {"tasks_needed", p.min_tasks},
                 {"shapes_kept", p.shapes},
                 {"active", p.active},
                 {"updates", p.rebuilds},
                 {"typical", std::move(typical)}}},
               {"terms", std::move(terms)}};
  return reply(200, {{"request_id", r.request_id}, {"data", std::move(data)}});
}

void ControlPlane::storeProfile(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - profile_stored_ < std::chrono::minutes(1)) {
    return;
  }
  const uint64_t version = driver_.profileVersion();
  if (version == profile_stored_version_) {
    return;
  }
  profile_stored_ = now;
  json shapes = json::array();
  for (const sched::ShapeProfile::Entry& e : driver_.profileEntries()) {
    json shape = shapeJson(e.shape, catalogue_);
    shape["weight"] = e.weight;
    shapes.push_back(std::move(shape));
  }
  const json value = {{"version", 1}, {"shapes", std::move(shapes)}};
  if (auto put = store_.put(kProfileKey, value.dump()); !put.isOk()) {
    core::logWarn("scheduler profile: not stored: {}", put.status().message());
    return;  // Tried again at the next housekeeping after a minute.
  }
  profile_stored_version_ = version;
}

core::Status ControlPlane::loadProfile() {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult got, store_.range(kProfileKey));
  if (got.kvs.empty()) {
    return core::Status::ok();
  }
  // A profile that does not read is only a loss of what was learned: the server starts, and says
  // so.
  std::vector<sched::ShapeProfile::Entry> entries;
  try {
    const json value = json::parse(got.kvs[0].value);
    for (const json& s : value.at("shapes")) {
      sched::ShapeProfile::Entry e;
      e.shape.cpu_milli = s.at("cpu_milli").get<int64_t>();
      e.shape.gpu_count = s.at("gpus").get<int>();
      e.shape.milli = s.at("milli_per_gpu").get<int32_t>();
      bool known = true;
      for (const json& m : s.at("models")) {
        std::optional<model::GpuModelId> id = catalogue_.find(m.get<std::string>());
        known = known && id.has_value();
        if (id) {
          e.shape.models.push_back(*id);
        }
      }
      e.weight = s.at("weight").get<double>();
      if (known && e.shape.cpu_milli >= 0 && e.shape.gpu_count >= 0 && e.shape.milli >= 0 &&
          e.shape.milli <= 1000) {
        entries.push_back(std::move(e));
      }
    }
  } catch (const json::exception& e) {
    core::logWarn("scheduler profile at {} does not read ({}): learning it anew", kProfileKey,
                  e.what());
    return core::Status::ok();
  }
  driver_.restoreProfile(entries);
  profile_stored_version_ = driver_.profileVersion();
  return core::Status::ok();
}

}  // namespace tessera::server
