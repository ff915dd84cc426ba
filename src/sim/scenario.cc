#include "sim/scenario.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/json_node.h"
#include "model/codec.h"
#include "model/node_profiles.h"

namespace tessera::sim {
namespace {

using nlohmann::json;

using Node = core::JsonNode;

core::Result<sched::Amounts> parseAmounts(const Node& n, const sched::ResourceSpace& space,
                                          const model::GpuCatalogue& catalogue,
                                          sched::Amounts base) {
  TESSERA_RETURN_IF_ERROR(
      n.checkKeys({"gpu", "cpu", "cpuMilli", "memoryMiB", "memoryGiB"}, "gpu:"));
  for (const auto& [key, value] : n.value().items()) {
    Node v = n.child(key.c_str());
    if (key == "gpu") {
      TESSERA_ASSIGN_OR_RETURN(base[sched::kGpuDim], v.scaled(1000));
    } else if (key == "cpu") {
      TESSERA_ASSIGN_OR_RETURN(base[sched::kCpuDim], v.scaled(1000));
    } else if (key == "cpuMilli") {
      TESSERA_ASSIGN_OR_RETURN(base[sched::kCpuDim], v.scaled(1));
    } else if (key == "memoryMiB") {
      TESSERA_ASSIGN_OR_RETURN(base[sched::kMemoryDim], v.scaled(1));
    } else if (key == "memoryGiB") {
      TESSERA_ASSIGN_OR_RETURN(base[sched::kMemoryDim], v.scaled(1024));
    } else {
      auto model = catalogue.find(key.substr(4));
      if (!model || space.modelDim(*model) == SIZE_MAX) {
        return v.error("unknown GPU model '" + key.substr(4) + "'");
      }
      TESSERA_ASSIGN_OR_RETURN(base[space.modelDim(*model)], v.scaled(1000));
    }
  }
  return base;
}

// First pass over the queues: the models named in "gpu:<model>" amounts.
core::Status collectModels(const Node& q, const model::GpuCatalogue& catalogue,
                           std::set<uint16_t>& models) {
  for (const char* field : {"quota", "limit"}) {
    if (q.has(field) && q.value().at(field).is_object()) {
      for (const auto& [key, v] : q.value().at(field).items()) {
        if (key.rfind("gpu:", 0) == 0) {
          auto m = catalogue.find(key.substr(4));
          if (!m) {
            return q.child(field).error("unknown GPU model '" + key.substr(4) + "'");
          }
          models.insert(m->value());
        }
      }
    }
  }
  if (q.has("children")) {
    Node c = q.child("children");
    if (!c.value().is_array()) {
      return c.error("expected an array");
    }
    for (size_t i = 0; i < c.value().size(); ++i) {
      TESSERA_RETURN_IF_ERROR(collectModels(c.at(i), catalogue, models));
    }
  }
  return core::Status::ok();
}

core::Status parseQueue(const Node& q, const std::string& parent, Scenario& s) {
  TESSERA_RETURN_IF_ERROR(q.checkKeys(
      {"name", "quota", "limit", "overQuotaWeight", "priority", "maxUnsavedGpuTime", "children"}));
  if (!q.has("name")) {
    return q.error("missing field 'name'");
  }
  sched::QueueSpec spec;
  TESSERA_ASSIGN_OR_RETURN(spec.name, q.child("name").str());
  spec.parent = parent;
  spec.quota = s.space.zeros();
  spec.limit = s.space.unlimited();
  if (q.has("quota")) {
    TESSERA_ASSIGN_OR_RETURN(spec.quota,
                             parseAmounts(q.child("quota"), s.space, s.catalogue, spec.quota));
  }
  if (q.has("limit")) {
    TESSERA_ASSIGN_OR_RETURN(spec.limit,
                             parseAmounts(q.child("limit"), s.space, s.catalogue, spec.limit));
  }
  if (q.has("overQuotaWeight")) {
    TESSERA_ASSIGN_OR_RETURN(spec.over_quota_weight,
                             q.child("overQuotaWeight").integer(0, 1000000));
  }
  if (q.has("priority")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t p, q.child("priority").integer(-1000000, 1000000));
    spec.priority = static_cast<int32_t>(p);
  }
  if (q.has("maxUnsavedGpuTime")) {
    TESSERA_ASSIGN_OR_RETURN(core::Duration d, q.child("maxUnsavedGpuTime").seconds());
    spec.max_unsaved_gpu_s = std::chrono::duration_cast<std::chrono::seconds>(d).count();
  }
  s.queues.push_back(spec);
  if (q.has("children")) {
    Node c = q.child("children");
    for (size_t i = 0; i < c.value().size(); ++i) {
      TESSERA_RETURN_IF_ERROR(parseQueue(c.at(i), spec.name, s));
    }
  }
  return core::Status::ok();
}

// A name as the server takes it (server/route.h validName): 1..63 lowercase letters, digits and
// '-', starting with a letter or digit.
core::Status checkName(const Node& n, const std::string& name) {
  const bool ok = !name.empty() && name.size() <= 63 && name[0] != '-' &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
                  });
  return ok ? core::Status::ok()
            : n.error("'" + name +
                      "' is not a name the server takes (lowercase letters, digits "
                      "and '-', at most 63)");
}

// A trust group as the API takes it: a string of at most 128 bytes, "" for none.
core::Result<std::string> trustGroup(const Node& n) {
  if (!n.value().is_string() || n.value().get<std::string>().size() > 128) {
    return n.error("expected a string of at most 128 bytes (\"\": no group)");
  }
  return n.value().get<std::string>();
}

// A tenant's or a team's numbers, with the API's fields and defaults.
core::Result<sched::GpuQueueNumbers> parseGpuNumbers(const Node& n) {
  sched::GpuQueueNumbers out;
  for (const char* field : {"quota", "limit"}) {
    if (!n.has(field)) {
      continue;
    }
    Node f = n.child(field);
    TESSERA_RETURN_IF_ERROR(f.checkKeys({"gpu"}));
    const bool quota = std::string_view(field) == "quota";
    if (f.has("gpu")) {
      // As the server takes it: a limit of -1 is none, 0 is zero.
      if (!quota && f.child("gpu").value() == -1) {
        out.limit_milli_gpu = sched::kNoGpuLimit;
        continue;
      }
      TESSERA_ASSIGN_OR_RETURN(int64_t milli, f.child("gpu").scaled(1000));
      (quota ? out.quota_milli_gpu : out.limit_milli_gpu) = milli;
    } else if (!quota) {
      out.limit_milli_gpu = sched::kNoGpuLimit;  // "limit": {} is none.
    }
  }
  if (out.limit_milli_gpu >= 0 && out.limit_milli_gpu < out.quota_milli_gpu) {
    return n.error("limit.gpu is below quota.gpu");
  }
  if (n.has("weight")) {
    TESSERA_ASSIGN_OR_RETURN(out.weight, n.child("weight").integer(0, 1000000));
  }
  if (n.has("priority")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t p, n.child("priority").integer(0, 1000000));
    out.priority = static_cast<int32_t>(p);
  }
  if (n.has("max_unsaved_gpu_seconds")) {
    TESSERA_ASSIGN_OR_RETURN(out.max_unsaved_gpu_s,
                             n.child("max_unsaved_gpu_seconds").integer(-1, 1000000000));
  }
  return out;
}

// "tenants": the server's tree for them (sched/tenant_queues.h), in creation order.
core::Status parseTenants(const Node& list, Scenario& s) {
  if (!list.value().is_array() || list.value().empty()) {
    return list.error("expected a non-empty array of tenants");
  }
  s.space = sched::ResourceSpace::withModels(s.catalogue, {});  // As the server's.
  s.queues.push_back(sched::rootQueueSpec());
  std::set<std::string> names;
  for (size_t i = 0; i < list.value().size(); ++i) {
    const Node t = list.at(i);
    TESSERA_RETURN_IF_ERROR(
        t.checkKeys({"name", "quota", "limit", "weight", "priority", "max_unsaved_gpu_seconds",
                     "trust_group", "queues", "pools"}));
    if (!t.has("name")) {
      return t.error("missing field 'name'");
    }
    ScenarioTenant tenant;
    TESSERA_ASSIGN_OR_RETURN(tenant.name, t.child("name").str());
    TESSERA_RETURN_IF_ERROR(checkName(t.child("name"), tenant.name));
    if (!names.insert(tenant.name).second) {
      return t.child("name").error("tenant '" + tenant.name + "' is declared twice");
    }
    TESSERA_ASSIGN_OR_RETURN(tenant.numbers, parseGpuNumbers(t));
    if (t.has("trust_group")) {
      TESSERA_ASSIGN_OR_RETURN(tenant.trust_group, trustGroup(t.child("trust_group")));
    }
    if (t.has("pools")) {
      const Node pools = t.child("pools");
      if (!pools.value().is_array()) {
        return pools.error("expected a list of pool names");
      }
      for (size_t p = 0; p < pools.value().size(); ++p) {
        TESSERA_ASSIGN_OR_RETURN(std::string pool, pools.at(p).str());
        if (core::Status st = model::validateLabel(std::string(model::kPoolLabel), pool);
            !st.isOk()) {
          return pools.at(p).error(st.message());
        }
        tenant.pools.push_back(std::move(pool));
      }
    }
    tenant.body = t.value();
    tenant.body.erase("name");
    tenant.body.erase("queues");
    tenant.body.erase("pools");
    s.queues.push_back(sched::tenantQueueSpec(s.space, tenant.name, tenant.numbers));
    s.queues.push_back(sched::tenantDefaultQueueSpec(s.space, tenant.name, tenant.numbers));
    if (t.has("queues")) {
      const Node qs = t.child("queues");
      if (!qs.value().is_array()) {
        return qs.error("expected an array of team queues");
      }
      std::set<std::string> teams = {"default"};
      for (size_t k = 0; k < qs.value().size(); ++k) {
        const Node q = qs.at(k);
        TESSERA_RETURN_IF_ERROR(q.checkKeys(
            {"name", "quota", "limit", "weight", "priority", "max_unsaved_gpu_seconds"}));
        if (!q.has("name")) {
          return q.error("missing field 'name'");
        }
        TESSERA_ASSIGN_OR_RETURN(std::string team, q.child("name").str());
        TESSERA_RETURN_IF_ERROR(checkName(q.child("name"), team));
        if (!teams.insert(team).second) {
          return q.child("name").error("queue '" + team +
                                       "' is declared twice (or is the "
                                       "tenant's own 'default')");
        }
        TESSERA_ASSIGN_OR_RETURN(const sched::GpuQueueNumbers n, parseGpuNumbers(q));
        s.queues.push_back(sched::teamQueueSpec(s.space, tenant.name, team, n));
        json body = q.value();
        body.erase("name");
        tenant.queues.emplace_back(team, std::move(body));
      }
    }
    s.tenants.push_back(std::move(tenant));
  }
  return core::Status::ok();
}

core::Status parseTenantUpdates(const Node& list, Scenario& s) {
  if (!list.value().is_array()) {
    return list.error("expected an array");
  }
  // Each tenant's numbers as the updates leave them, in time order.
  std::vector<sched::GpuQueueNumbers> current;
  std::vector<std::string> groups;
  for (const ScenarioTenant& t : s.tenants) {
    current.push_back(t.numbers);
    groups.push_back(t.trust_group);
  }
  std::vector<size_t> order(list.value().size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::vector<core::Duration> times(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Node u = list.at(i);
    TESSERA_RETURN_IF_ERROR(u.checkKeys({"at", "tenant", "quota", "limit", "weight", "priority",
                                         "max_unsaved_gpu_seconds", "trust_group"}));
    for (const char* f : {"at", "tenant"}) {
      if (!u.has(f)) {
        return u.error(std::string("missing field '") + f + "'");
      }
    }
    TESSERA_ASSIGN_OR_RETURN(times[i], u.child("at").seconds());
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return times[a] < times[b]; });
  for (size_t i : order) {
    const Node u = list.at(i);
    ScenarioTenantUpdate up;
    up.at = times[i];
    TESSERA_ASSIGN_OR_RETURN(std::string name, u.child("tenant").str());
    const auto t = std::find_if(s.tenants.begin(), s.tenants.end(),
                                [&](const ScenarioTenant& x) { return x.name == name; });
    if (t == s.tenants.end()) {
      return u.child("tenant").error("unknown tenant '" + name + "'");
    }
    up.tenant = static_cast<size_t>(t - s.tenants.begin());
    sched::GpuQueueNumbers& n = current[up.tenant];
    TESSERA_ASSIGN_OR_RETURN(const sched::GpuQueueNumbers given, parseGpuNumbers(u));
    const json& v = u.value();
    if (v.contains("quota")) {
      n.quota_milli_gpu = given.quota_milli_gpu;
    }
    if (v.contains("limit")) {
      n.limit_milli_gpu = given.limit_milli_gpu;
    }
    if (v.contains("weight")) {
      n.weight = given.weight;
    }
    if (v.contains("priority")) {
      n.priority = given.priority;
    }
    if (v.contains("max_unsaved_gpu_seconds")) {
      n.max_unsaved_gpu_s = given.max_unsaved_gpu_s;
    }
    if (n.limit_milli_gpu >= 0 && n.limit_milli_gpu < n.quota_milli_gpu) {
      return u.error("limit.gpu would be below quota.gpu");
    }
    up.numbers = n;
    if (u.has("trust_group")) {
      TESSERA_ASSIGN_OR_RETURN(groups[up.tenant], trustGroup(u.child("trust_group")));
    }
    up.trust_group = groups[up.tenant];
    up.body = v;
    up.body.erase("at");
    up.body.erase("tenant");
    s.tenant_updates.push_back(std::move(up));
  }
  return core::Status::ok();
}

core::Status parseNodes(const Node& cluster, Scenario& s) {
  TESSERA_RETURN_IF_ERROR(cluster.checkKeys({"nodes"}));
  if (!cluster.has("nodes") || !cluster.value().at("nodes").is_array()) {
    return cluster.error("expected 'nodes': an array");
  }
  Node nodes = cluster.child("nodes");
  int domain = 0;
  for (size_t i = 0; i < nodes.value().size(); ++i) {
    Node n = nodes.at(i);
    TESSERA_RETURN_IF_ERROR(n.checkKeys(
        {"profile", "count", "name", "cpuMilli", "memoryMiB", "gpus", "model", "labels"}));
    std::map<std::string, std::string> labels;
    if (n.has("labels")) {
      const Node l = n.child("labels");
      if (!l.value().is_object()) {
        return l.error("expected an object of labels");
      }
      for (const auto& [key, value] : l.value().items()) {
        if (!value.is_string()) {
          return l.error("label '" + key + "': expected a string");
        }
        if (core::Status st = model::validateLabel(key, value.get<std::string>()); !st.isOk()) {
          return l.error(st.message());
        }
        labels[key] = value.get<std::string>();
      }
    }
    const size_t group_begin = s.nodes.size();
    int64_t count = 1;
    if (n.has("count")) {
      TESSERA_ASSIGN_OR_RETURN(count, n.child("count").integer(0, 100000));
    }
    std::string base = "node";
    if (n.has("name")) {
      TESSERA_ASSIGN_OR_RETURN(base, n.child("name").str());
    }
    for (int64_t k = 0; k < count; ++k) {
      const std::string name =
          count == 1 && n.has("name") ? base : base + "-" + std::to_string(s.nodes.size());
      if (n.has("profile")) {
        TESSERA_ASSIGN_OR_RETURN(std::string profile, n.child("profile").str());
        auto node = model::makeProfileNode(profile, name, s.catalogue, domain++);
        if (!node.isOk()) {
          return n.child("profile").error(node.status().message());
        }
        s.nodes.push_back(std::move(node).value());
        continue;
      }
      for (const char* f : {"cpuMilli", "memoryMiB", "gpus"}) {
        if (!n.has(f)) {
          return n.error(std::string("missing field '") + f + "' (or give a 'profile')");
        }
      }
      TESSERA_ASSIGN_OR_RETURN(int64_t cpu, n.child("cpuMilli").integer(0, INT64_MAX / 4));
      TESSERA_ASSIGN_OR_RETURN(int64_t mem, n.child("memoryMiB").integer(0, INT64_MAX / 4));
      TESSERA_ASSIGN_OR_RETURN(int64_t gpus, n.child("gpus").integer(0, model::kMaxGpusPerNode));
      model::Node node{name, core::MilliCpu{cpu}, core::MiB{mem}, {}, domain++};
      if (gpus > 0) {
        if (!n.has("model")) {
          return n.error("missing field 'model' for a node with GPUs");
        }
        TESSERA_ASSIGN_OR_RETURN(std::string model_name, n.child("model").str());
        auto model = s.catalogue.intern(model_name);
        if (!model.isOk()) {
          return n.child("model").error(model.status().message());
        }
        node = model::makeNode(name, core::MilliCpu{cpu}, core::MiB{mem}, s.catalogue,
                               model.value(), static_cast<int>(gpus));
        node.nvlink_domain = domain - 1;
      }
      s.nodes.push_back(std::move(node));
    }
    for (size_t k = group_begin; k < s.nodes.size(); ++k) {
      s.nodes[k].labels = labels;
    }
  }
  if (s.nodes.empty()) {
    return nodes.error("the cluster has no nodes");
  }
  return core::Status::ok();
}

core::Status parseWorkload(const Node& w, const Scenario& s, const sched::QueueTree& tree,
                           std::vector<ScenarioWorkload>& out) {
  const bool tenants = !s.tenants.empty();
  TESSERA_RETURN_IF_ERROR(
      w.checkKeys({"name", "queue", "at", "tasks", "minAvailable", "gpu", "cpuMilli", "memoryMiB",
                   "duration", "priority", "preemptible", "checkpointEvery", "maxRuntime",
                   "gracePeriod", "repeat", "tenant", "nodeSelector"}));
  for (const char* f : {"name", tenants ? "tenant" : "queue", "duration"}) {
    if (!w.has(f)) {
      return w.error(std::string("missing field '") + f + "'");
    }
  }
  if (!tenants && w.has("tenant")) {
    return w.child("tenant").error("a scenario without \"tenants\" names queues, not tenants");
  }
  ScenarioWorkload sw;
  TESSERA_ASSIGN_OR_RETURN(sw.spec.name, w.child("name").str());
  std::string queue = "default";
  if (w.has("queue")) {
    TESSERA_ASSIGN_OR_RETURN(queue, w.child("queue").str());
  }
  if (tenants) {
    TESSERA_ASSIGN_OR_RETURN(sw.tenant, w.child("tenant").str());
    const auto t = std::find_if(s.tenants.begin(), s.tenants.end(),
                                [&](const ScenarioTenant& x) { return x.name == sw.tenant; });
    if (t == s.tenants.end()) {
      return w.child("tenant").error("unknown tenant '" + sw.tenant + "'");
    }
    TESSERA_RETURN_IF_ERROR(checkName(w.child("name"), sw.spec.name));
    sw.spec.request.tenant = model::TenantId{static_cast<uint32_t>(t - s.tenants.begin() + 1)};
    sw.name = sw.spec.name;
    sw.spec.name = sw.tenant + "/" + sw.name;
    queue = sw.tenant + "/" + queue;
  }
  auto q = tree.find(queue);
  if (!q) {
    return w.child("queue").error("unknown queue '" + queue + "'");
  }
  if (!tree.queue(*q).isLeaf()) {
    return w.child("queue").error("queue '" + queue + "' has child queues; use a leaf queue");
  }
  sw.spec.queue = *q;
  if (w.has("at")) {
    TESSERA_ASSIGN_OR_RETURN(sw.at, w.child("at").seconds());
  }
  TESSERA_ASSIGN_OR_RETURN(sw.duration, w.child("duration").seconds());
  int64_t tasks = 1;
  if (w.has("tasks")) {
    TESSERA_ASSIGN_OR_RETURN(tasks, w.child("tasks").integer(1, 100000));
  }
  sw.spec.tasks = static_cast<int>(tasks);
  sw.spec.min_available = sw.spec.tasks;
  if (w.has("minAvailable")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t m, w.child("minAvailable").integer(1, tasks));
    sw.spec.min_available = static_cast<int>(m);
  }
  TESSERA_RETURN_IF_ERROR(model::parseTaskRequest(
      w, s.catalogue,
      [&](model::GpuModelId m) {
        return std::any_of(s.nodes.begin(), s.nodes.end(), [&](const model::Node& node) {
          return !node.gpus.empty() && node.gpus[0].model == m;
        });
      },
      sw.spec.request));
  if (w.has("priority")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t p, w.child("priority").integer(-1000000, 1000000));
    sw.spec.priority = static_cast<int32_t>(p);
  }
  if (w.has("preemptible")) {
    TESSERA_ASSIGN_OR_RETURN(sw.spec.preemptible, w.child("preemptible").boolean());
  }
  if (w.has("checkpointEvery")) {
    TESSERA_ASSIGN_OR_RETURN(sw.spec.checkpoint_every, w.child("checkpointEvery").seconds());
  }
  if (w.has("maxRuntime")) {
    TESSERA_ASSIGN_OR_RETURN(sw.spec.max_runtime, w.child("maxRuntime").seconds());
  }
  sw.grace_period = s.default_grace_period;
  if (w.has("gracePeriod")) {
    TESSERA_ASSIGN_OR_RETURN(sw.grace_period, w.child("gracePeriod").seconds());
  }
  if (tenants) {
    sw.body = w.value();
    for (const char* f : {"name", "at", "tenant", "repeat"}) {
      sw.body.erase(f);
    }
    sw.body["gracePeriod"] =
        std::chrono::duration_cast<std::chrono::seconds>(sw.grace_period).count();
  }
  if (!w.has("repeat")) {
    out.push_back(std::move(sw));
    return core::Status::ok();
  }
  Node rep = w.child("repeat");
  TESSERA_RETURN_IF_ERROR(rep.checkKeys({"count", "every"}));
  if (!rep.has("count") || !rep.has("every")) {
    return rep.error("expected 'count' and 'every'");
  }
  TESSERA_ASSIGN_OR_RETURN(int64_t count, rep.child("count").integer(1, 1000000));
  TESSERA_ASSIGN_OR_RETURN(core::Duration every, rep.child("every").seconds());
  for (int64_t k = 0; k < count; ++k) {
    ScenarioWorkload copy = sw;
    copy.spec.name = sw.spec.name + "-" + std::to_string(k);
    if (tenants) {
      copy.name = sw.name + "-" + std::to_string(k);
    }
    copy.at = sw.at + every * k;
    out.push_back(std::move(copy));
  }
  return core::Status::ok();
}

core::Status parseOptions(const Node& o, Scenario& s) {
  TESSERA_RETURN_IF_ERROR(o.checkKeys({"policy", "fairShare", "minRuntime", "maxEvictionsPerPass",
                                       "gracePeriod", "usageHalfLife", "usageK", "reclaimTo",
                                       "maxUnsavedGpuTime", "reclaimPatience"}));
  if (o.has("reclaimTo")) {
    TESSERA_ASSIGN_OR_RETURN(std::string to, o.child("reclaimTo").str());
    if (to == "fairShare") {
      s.options.reclaim_to = sched::ReclaimTo::kFairShare;
    } else if (to == "quota") {
      s.options.reclaim_to = sched::ReclaimTo::kQuota;
    } else {
      return core::invalidArgument(o.child("reclaimTo").path() +
                                   ": expected \"fairShare\" or \"quota\", got \"" + to + "\"");
    }
  }
  if (o.has("policy")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.policy, o.child("policy").str());
  }
  if (o.has("fairShare")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.fair_share, o.child("fairShare").boolean());
  }
  if (o.has("minRuntime")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.min_runtime, o.child("minRuntime").seconds());
  }
  if (o.has("usageHalfLife")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.usage_half_life, o.child("usageHalfLife").seconds());
  }
  if (o.has("usageK")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t k, o.child("usageK").scaled(1000));
    s.options.usage_k = static_cast<double>(k) / 1000.0;
  }
  if (o.has("gracePeriod")) {
    TESSERA_ASSIGN_OR_RETURN(s.default_grace_period, o.child("gracePeriod").seconds());
  }
  if (o.has("maxUnsavedGpuTime")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.max_unsaved_gpu_time,
                             o.child("maxUnsavedGpuTime").seconds());
  }
  if (o.has("reclaimPatience")) {
    TESSERA_ASSIGN_OR_RETURN(s.options.reclaim_patience, o.child("reclaimPatience").seconds());
  }
  if (o.has("maxEvictionsPerPass")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t m, o.child("maxEvictionsPerPass").integer(0, 1000000));
    s.options.max_evictions_per_pass = static_cast<int>(m);
  }
  return core::Status::ok();
}

}  // namespace

core::Result<Scenario> parseScenario(std::string_view json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return core::invalidArgument(source + ": not valid JSON at byte " + std::to_string(e.byte) +
                                 ": " + e.what());
  }
  Scenario s;
  s.catalogue = model::GpuCatalogue::builtin();
  Node top(doc, "", source);
  TESSERA_RETURN_IF_ERROR(
      top.checkKeys({"cluster", "queues", "tenants", "tenantUpdates", "workloads", "options"}));
  for (const char* f : {"cluster", "workloads"}) {
    if (!top.has(f)) {
      return top.error(std::string("missing field '") + f + "'");
    }
  }
  if (top.has("queues") == top.has("tenants")) {
    return top.error(
        "expected either \"queues\" (a queue tree) or \"tenants\" (the server's "
        "tree for them)");
  }
  TESSERA_RETURN_IF_ERROR(parseNodes(top.child("cluster"), s));
  Node queues = top.child(top.has("queues") ? "queues" : "tenants");
  if (top.has("tenantUpdates") && !top.has("tenants")) {
    return top.child("tenantUpdates").error("tenant updates need \"tenants\"");
  }
  if (top.has("tenants")) {
    TESSERA_RETURN_IF_ERROR(parseTenants(queues, s));
    if (top.has("tenantUpdates")) {
      TESSERA_RETURN_IF_ERROR(parseTenantUpdates(top.child("tenantUpdates"), s));
    }
  } else {
    if (!queues.value().is_array() || queues.value().empty()) {
      return queues.error("expected a non-empty array of queues");
    }
    std::set<uint16_t> models;
    for (size_t i = 0; i < queues.value().size(); ++i) {
      TESSERA_RETURN_IF_ERROR(collectModels(queues.at(i), s.catalogue, models));
    }
    std::vector<model::GpuModelId> model_ids;
    model_ids.reserve(models.size());
    for (uint16_t m : models) {
      model_ids.emplace_back(m);
    }
    s.space = sched::ResourceSpace::withModels(s.catalogue, model_ids);
    for (size_t i = 0; i < queues.value().size(); ++i) {
      TESSERA_RETURN_IF_ERROR(parseQueue(queues.at(i), "", s));
    }
  }
  auto tree = sched::QueueTree::create(s.space, s.queues);
  if (!tree.isOk()) {
    return queues.error(tree.status().message());
  }
  if (top.has("options")) {
    TESSERA_RETURN_IF_ERROR(parseOptions(top.child("options"), s));
  }
  Node workloads = top.child("workloads");
  if (!workloads.value().is_array()) {
    return workloads.error("expected an array");
  }
  std::set<std::string> names;
  for (size_t i = 0; i < workloads.value().size(); ++i) {
    const size_t before = s.workloads.size();
    TESSERA_RETURN_IF_ERROR(parseWorkload(workloads.at(i), s, tree.value(), s.workloads));
    for (size_t k = before; k < s.workloads.size(); ++k) {
      if (!names.insert(s.workloads[k].spec.name).second) {
        return workloads.at(i).error("workload name '" + s.workloads[k].spec.name +
                                     "' is used twice");
      }
    }
  }
  std::stable_sort(
      s.workloads.begin(), s.workloads.end(),
      [](const ScenarioWorkload& a, const ScenarioWorkload& b) { return a.at < b.at; });
  return s;
}

core::Result<Scenario> readScenario(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return core::notFound(path + ": cannot open file");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return parseScenario(buffer.str(), path);
}

}  // namespace tessera::sim
