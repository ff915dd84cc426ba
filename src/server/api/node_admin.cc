// Nodes while the server runs (docs/server.md, "Nodes join"): join tokens, an agent's join and
// its node credential, an operator's cordon, drain, uncordon and remove, and pools dedicated to
// one tenant.
#include <fmt/format.h>

#include <algorithm>

#include "audit/record.h"
#include "core/json_node.h"
#include "core/log.h"
#include "core/rfc3339.h"
#include "server/api_util.h"
#include "server/control_plane.h"
#include "server/node_records.h"
#include "server/request.h"

namespace tessera::server {

using namespace api;  // NOLINT(google-build-using-namespace): the handlers' shared vocabulary.
using nlohmann::json;

namespace {

constexpr std::string_view kJoinSecretPrefix = "tjn.";
constexpr int64_t kMaxJoinTtlS = 24 * 3600;  // As kubeadm's bootstrap tokens: a day at most.

std::string joinTokenKey(const std::string& secret) {
  return std::string(kJoinTokensPrefix) + TokenManager::hashSecret(secret);
}

std::string nodeKey(const std::string& node) { return std::string(kNodesPrefix) + node; }

std::string nodePolicyName(const std::string& node) { return "node-" + node; }

// The policy of a node's credential: its own agent calls, nothing else.
json nodePolicyJson(const std::string& node) {
  return {{"path", {{"sys/nodes/" + node + "/*", {{"capabilities", {"read", "update"}}}}}}};
}

// Labels from a request body's `field` (an object of strings); errors name the field.
core::Result<std::map<std::string, std::string>> labelsFrom(const core::JsonNode& n,
                                                            const char* field) {
  std::map<std::string, std::string> out;
  if (!n.has(field)) {
    return out;
  }
  const json& v = n.value()[field];
  if (!v.is_object() || v.size() > 64) {
    return n.child(field).error("expected an object of labels (at most 64)");
  }
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) {
      return n.child(field).error("label '" + key + "': expected a string");
    }
    TESSERA_RETURN_IF_ERROR(
        model::validateLabel(key, value.get<std::string>()).withContext(n.child(field).path()));
    out[key] = value.get<std::string>();
  }
  return out;
}

}  // namespace

core::Result<CreatedToken> ControlPlane::issueNodeToken(const std::string& node) {
  // The parent is the server itself: a node's credential hangs off no operator's token, so
  // revoking the operator who made the join token does not cut the node off.
  TokenInfo parent;
  parent.policies = {nodePolicyName(node)};
  parent.max_expiry = core::WallTime::max();
  TokenRequest req;
  req.policies = {nodePolicyName(node)};
  req.display_name = "node-" + node;
  // Periodic: its agent renews it at half its period for as long as the node runs, with no
  // maximum that would cut a node off after max_ttl; one period after its agent stops, it
  // is gone.
  req.period = options_.node_token_ttl;
  req.renewable = true;
  return tokens_->create(parent, req);
}

core::Status ControlPlane::putNodePolicy(const std::string& node) {
  TESSERA_ASSIGN_OR_RETURN(Policy policy,
                           Policy::fromJson(nodePolicyName(node), nodePolicyJson(node)));
  TESSERA_RETURN_IF_ERROR(
      store_.put(policyKey("", nodePolicyName(node)), nodePolicyJson(node).dump()).status());
  std::lock_guard lock(mu_);
  policies_[""][nodePolicyName(node)] = std::move(policy);
  return core::Status::ok();
}

core::Result<CreatedToken> ControlPlane::createNodeCredential(const std::string& node) {
  TESSERA_RETURN_IF_ERROR(putNodePolicy(node));
  return issueNodeToken(node);
}

core::Status ControlPlane::putNodeRecord(const NodeRecord& rec) {
  return store_.put(nodeKey(rec.node.name), rec.toJson(catalogue_).dump()).status();
}

core::Result<std::optional<NodeRecord>> ControlPlane::nodeRecord(const std::string& node) {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult got, store_.range(nodeKey(node)));
  if (got.kvs.empty()) {
    return std::optional<NodeRecord>();
  }
  json j;
  try {
    j = json::parse(got.kvs[0].value);
  } catch (const json::exception& e) {
    return core::internalError("stored node at " + got.kvs[0].key + " is corrupt: " + e.what());
  }
  TESSERA_ASSIGN_OR_RETURN(NodeRecord r, NodeRecord::fromJson(j, catalogue_, got.kvs[0].key));
  return std::optional<NodeRecord>(std::move(r));
}

HttpResponse ControlPlane::joinTokensApi(Request& r) {
  const std::string source = "join token";
  if (r.method == "GET" || r.method == "LIST") {
    const std::string prefix(kJoinTokensPrefix);
    auto got = store_.range(prefix, store::prefixEnd(prefix));
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    const int64_t now_ms = core::unixMillis(clock_.wallNow());
    json list = json::array();
    for (const store::KeyValue& kv : got->kvs) {
      json t = json::parse(kv.value, nullptr, false);
      if (t.is_discarded() || t.value("expires_ms", int64_t{0}) <= now_ms) {
        continue;  // Expired: housekeeping deletes it.
      }
      list.push_back({{"accessor", t.value("accessor", "")},
                      {"expires_at", t.value("expires_at", "")},
                      {"labels", t.value("labels", json::object())}});
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"join_tokens", list}}}});
  }
  if (r.method == "DELETE") {
    const std::string accessor =
        r.match.params.contains("accessor") ? r.match.params.at("accessor") : "";
    const std::string prefix(kJoinTokensPrefix);
    auto got = store_.range(prefix, store::prefixEnd(prefix));
    if (!got.isOk()) {
      return fromStatus(got.status());
    }
    for (const store::KeyValue& kv : got->kvs) {
      json t = json::parse(kv.value, nullptr, false);
      if (!t.is_discarded() && t.value("accessor", "") == accessor) {
        if (auto del = store_.deleteRange(kv.key); !del.isOk()) {
          return fromStatus(del.status());
        }
        return noContent();
      }
    }
    return error(404, "no join token with accessor '" + accessor + "'");
  }
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"ttl", "labels"}); !st.isOk()) {
    return fromStatus(st);
  }
  int64_t ttl_s = 3600;
  if (body.has("ttl")) {
    auto t = parseDurationSeconds(r.body["ttl"], "ttl");
    if (!t.isOk()) {
      return fromStatus(t.status());
    }
    ttl_s = *t;
  }
  if (ttl_s < 1 || ttl_s > kMaxJoinTtlS) {
    return error(
        400, "ttl: a join token lives from 1 s to 24 h (" + std::to_string(ttl_s) + " s asked)");
  }
  auto labels = labelsFrom(body, "labels");
  if (!labels.isOk()) {
    return fromStatus(labels.status());
  }
  const std::string secret = std::string(kJoinSecretPrefix) + randomBase62(24);
  const std::string accessor = "jt-" + randomBase62(10);
  const core::WallTime expires = clock_.wallNow() + std::chrono::seconds(ttl_s);
  const json rec = {{"accessor", accessor},
                    {"expires_ms", core::unixMillis(expires)},
                    {"expires_at", core::formatRfc3339(expires)},
                    {"labels", *labels},
                    {"created_by", r.token.accessor}};
  if (auto put = store_.put(joinTokenKey(secret), rec.dump()); !put.isOk()) {
    return fromStatus(put.status());
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"token", secret},
                       {"accessor", accessor},
                       {"expires_at", rec["expires_at"]},
                       {"ttl", ttl_s},
                       {"labels", *labels}}}});
}

core::Result<json> ControlPlane::joinTokenOf(const Request& r) {
  const std::string source = "join";
  core::JsonNode body(r.body, "", source);
  TESSERA_RETURN_IF_ERROR(
      body.checkKeys({"join_token", "node", "discovery", "cpu_milli", "memory_mib", "labels"}));
  if (!body.has("join_token")) {
    return core::invalidArgument("join_token: missing (tessera node join-token create makes one)");
  }
  const json& given = r.body["join_token"];
  if (!given.is_string() || given.get_ref<const std::string&>().empty()) {
    return core::invalidArgument(
        "join_token: expected a non-empty string (the tjn.... token that `tessera node "
        "join-token create` printed), not " +
        (given.is_string() ? std::string("an empty one") : "a " + std::string(given.type_name())));
  }
  const std::string& secret = given.get_ref<const std::string&>();
  auto got = store_.range(joinTokenKey(secret));
  if (!got.isOk()) {
    return got.status();
  }
  if (got->kvs.empty()) {
    return core::permissionDenied("permission denied: invalid join token");
  }
  const json token = json::parse(got->kvs[0].value, nullptr, false);
  if (token.is_discarded() ||
      token.value("expires_ms", int64_t{0}) <= core::unixMillis(clock_.wallNow())) {
    return core::permissionDenied(
        "permission denied: the join token expired at " +
        (token.is_discarded() ? std::string("?") : token.value("expires_at", std::string("?"))) +
        "; ask an operator for a new one");
  }
  return token;
}

HttpResponse ControlPlane::nodeJoinApi(Request& r) {
  // No token: the join token in the body is the credential. The pipeline checked it before it
  // recorded the request (ControlPlane::serve: one that does not authenticate is a refusal);
  // checked again under the lock, since it may have been revoked or expired since.
  auto fail = [&](unsigned status, const std::string& message) { return error(status, message); };
  const std::string source = "join";
  core::JsonNode body(r.body, "", source);
  std::lock_guard admin(node_admin_mu_);
  auto joined = joinTokenOf(r);
  if (!joined.isOk()) {
    return fromStatus(joined.status());
  }
  const json& token = *joined;
  // The node: its name, its GPUs as its agent found them, its CPU and memory, its labels.
  const json node_field = r.body.value("node", json());
  if (!node_field.is_string() && !node_field.is_null()) {
    return fail(400, "node: expected a string (the node's name), not " +
                         std::string(node_field.type_name()));
  }
  const std::string name = node_field.is_string() ? node_field.get<std::string>() : "";
  if (core::Status st = validateNodeName(name); !st.isOk()) {
    return fail(400, "node: " + st.message());
  }
  NodeRecord rec;
  rec.joined = true;
  rec.node.name = name;
  auto cpu = body.has("cpu_milli")
                 ? body.child("cpu_milli").integer(1, INT64_MAX / 4)
                 : core::Result<int64_t>(core::invalidArgument("cpu_milli: missing"));
  auto mem = body.has("memory_mib")
                 ? body.child("memory_mib").integer(1, INT64_MAX / 4)
                 : core::Result<int64_t>(core::invalidArgument("memory_mib: missing"));
  if (!cpu.isOk() || !mem.isOk()) {
    return fail(400, (!cpu.isOk() ? cpu.status() : mem.status()).message());
  }
  rec.node.cpu = core::MilliCpu{*cpu};
  rec.node.memory = core::MiB{*mem};
  const json& found = r.body.contains("discovery") ? r.body["discovery"] : json();
  if (!found.is_object() || !found.contains("gpus") || !found["gpus"].is_array() ||
      found["gpus"].size() > static_cast<size_t>(model::kMaxGpusPerNode)) {
    return fail(400, "discovery: expected the agent's discovery ({\"gpus\": [...]}, at most 64)");
  }
  for (size_t i = 0; i < found["gpus"].size(); ++i) {
    const json& g = found["gpus"][i];
    auto text = [&g](const char* field) {
      return g.is_object() && g.contains(field) && g[field].is_string()
                 ? g[field].get<std::string>()
                 : std::string();
    };
    const std::string model = text("model");
    auto id = catalogue_.find(model);
    if (!id) {
      return fail(400, fmt::format("discovery.gpus[{}]: GPU '{}' is not a model Tessera knows "
                                   "(tessera agent discover shows what the agent found)",
                                   i, text("name").empty() ? model : text("name")));
    }
    int64_t mib = catalogue_.model(*id).memory.value();
    if (g.contains("memory_mib") && g["memory_mib"].is_number_integer() &&
        g["memory_mib"].get<int64_t>() > 0) {
      mib = g["memory_mib"].get<int64_t>();
    }
    rec.node.gpus.push_back({*id, core::MiB{mib}, model::MigMode::kOff});
  }
  // Labels: the join token's, which the operator chose, and the agent's own for keys the token
  // leaves unset; the pool only ever from the token (a pool may be dedicated to a tenant: a
  // machine must not put itself in one).
  auto own = labelsFrom(body, "labels");
  if (!own.isOk()) {
    return fail(400, own.status().message());
  }
  if (own->contains(std::string(model::kPoolLabel))) {
    return fail(400,
                "labels: the pool label comes from the join token (tessera node join-token "
                "create --label pool=...), not from the agent");
  }
  const json token_labels = token.value("labels", json::object());
  for (const auto& [key, value] : token_labels.items()) {
    if (value.is_string()) {
      rec.node.labels[key] = value.get<std::string>();
    }
  }
  for (const auto& [key, value] : *own) {
    rec.node.labels.try_emplace(key, value);
  }
  if (core::Status st = model::validateNode(rec.node); !st.isOk()) {
    return fail(400, st.message());
  }
  if (std::find(options_.declared_nodes.begin(), options_.declared_nodes.end(), name) !=
      options_.declared_nodes.end()) {
    return fail(409, "node '" + name +
                         "' is declared in the server's config: its agent runs "
                         "with a token for it, not a join token");
  }
  auto existing = nodeRecord(name);
  if (!existing.isOk()) {
    return fail(503, existing.status().message());
  }
  if (*existing && (*existing)->joined) {
    return fail(409, "node '" + name +
                         "' has joined already; if this is a new machine, remove "
                         "the old one first (tessera node remove " +
                         name + ")");
  }
  // Its credential: a policy for its own calls and a token with it.
  if (core::Status st = putNodePolicy(name); !st.isOk()) {
    return fail(503, st.message());
  }
  auto credential = issueNodeToken(name);
  if (!credential.isOk()) {
    return fail(503, credential.status().message());
  }
  rec.token_accessor = credential->info.accessor;
  rec.joined_at = clock_.wallNow();
  rec.cordoned = *existing && (*existing)->cordoned;
  if (core::Status st = putNodeRecord(rec); !st.isOk()) {
    (void)tokens_->revoke(credential->info.accessor);
    return fail(503, st.message());
  }
  if (core::Status st = driver_.addAgentNode(rec.node); !st.isOk()) {
    (void)tokens_->revoke(credential->info.accessor);
    (void)store_.deleteRange(nodeKey(name));
    return fail(st.code() == core::StatusCode::kAlreadyExists ? 409 : 400, st.message());
  }
  if (rec.cordoned) {
    (void)driver_.setCordoned(name, true);
  }
  core::logInfo("node {} joined: {} GPUs, labels {}", name, rec.node.gpus.size(),
                json(rec.node.labels).dump());
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"node", name},
                       {"token", credential->secret},
                       {"accessor", credential->info.accessor},
                       {"ttl", credential->info.ttlSeconds(clock_.wallNow())},
                       {"labels", rec.node.labels}}}});
}

HttpResponse ControlPlane::nodeCredentialApi(Request& r, const std::string& node) {
  if (r.method != "POST" && r.method != "PUT") {
    return methodNotAllowed(r);
  }
  std::lock_guard admin(node_admin_mu_);
  auto rec = nodeRecord(node);
  if (!rec.isOk()) {
    return fromStatus(rec.status());
  }
  if (!*rec || !(*rec)->joined) {
    return error(404, "node '" + node +
                          "' did not join with a join token: its credential is "
                          "the operator's to renew");
  }
  auto fresh = issueNodeToken(node);
  if (!fresh.isOk()) {
    return fromStatus(fresh.status());
  }
  const std::string old = (*rec)->token_accessor;
  (*rec)->token_accessor = fresh->info.accessor;
  if (core::Status st = putNodeRecord(**rec); !st.isOk()) {
    (void)tokens_->revoke(fresh->info.accessor);
    return fromStatus(st);
  }
  // The old credential goes at once: a node holds one live credential at a time.
  if (!old.empty() && old != fresh->info.accessor) {
    (void)tokens_->revoke(old);
  }
  return reply(200, {{"request_id", r.request_id},
                     {"data",
                      {{"node", node},
                       {"token", fresh->secret},
                       {"accessor", fresh->info.accessor},
                       {"ttl", fresh->info.ttlSeconds(clock_.wallNow())}}}});
}

HttpResponse ControlPlane::nodeAdminApi(Request& r, const std::string& node,
                                        const std::string& op) {
  const bool read = r.method == "GET" || r.method == "LIST";
  if (read) {
    for (const NodeState& s : driver_.nodeStates()) {
      if (s.name == node) {
        return reply(200, {{"request_id", r.request_id}, {"data", nodeJson(s, std::nullopt)}});
      }
    }
    return error(404, "no node '" + node + "'");
  }
  std::lock_guard admin(node_admin_mu_);
  auto rec = nodeRecord(node);
  if (!rec.isOk()) {
    return fromStatus(rec.status());
  }
  if (r.method == "DELETE") {
    if (std::find(options_.declared_nodes.begin(), options_.declared_nodes.end(), node) !=
        options_.declared_nodes.end()) {
      return error(409, "node '" + node +
                            "' is declared in the server's config (nodes { agents "
                            "}): take it out there; drain it first");
    }
    if (core::Status st = driver_.removeNode(node); !st.isOk()) {
      return fromStatus(st);
    }
    if (*rec) {
      if (!(*rec)->token_accessor.empty()) {
        (void)tokens_->revoke((*rec)->token_accessor);
      }
      (void)store_.deleteRange(nodeKey(node));
    }
    (void)store_.deleteRange(policyKey("", nodePolicyName(node)));
    {
      std::lock_guard lock(mu_);
      policies_[""].erase(nodePolicyName(node));
    }
    core::logInfo("node {} removed", node);
    return noContent();
  }
  const bool cordon = op == "cordon" || op == "drain";
  if (!cordon && op != "uncordon") {
    return error(404, "unsupported path: nodes/<node>/cordon, uncordon or drain");
  }
  NodeRecord updated;
  if (*rec) {
    updated = std::move(**rec);
  } else {
    updated.node.name = node;  // A declared node's state.
  }
  updated.cordoned = cordon;
  // Stored first: a restart keeps the node out of service, and a failed write changes nothing.
  bool known = false;
  for (const NodeState& s : driver_.nodeStates()) {
    known |= s.name == node;
  }
  if (!known) {
    return error(404, "no node '" + node + "'");
  }
  if (core::Status st = putNodeRecord(updated); !st.isOk()) {
    return fromStatus(st);
  }
  core::Status st = op == "drain" ? driver_.drain(node) : driver_.setCordoned(node, cordon);
  if (!st.isOk()) {
    return fromStatus(st);
  }
  for (const NodeState& s : driver_.nodeStates()) {
    if (s.name == node) {
      return reply(200, {{"request_id", r.request_id}, {"data", nodeJson(s, std::nullopt)}});
    }
  }
  return noContent();
}

HttpResponse ControlPlane::poolsApi(Request& r) {
  const std::string pool = r.match.params.contains("pool") ? r.match.params.at("pool") : "";
  if (r.method == "GET" || r.method == "LIST") {
    json pools = json::object();
    for (const auto& [p, tenant] : driver_.dedicatedPools()) {
      pools[p] = {{"tenant", tenant}};
    }
    if (!pool.empty()) {
      if (!pools.contains(pool)) {
        return error(404, "pool '" + pool + "' is not dedicated to a tenant");
      }
      return reply(200, {{"request_id", r.request_id}, {"data", pools[pool]}});
    }
    return reply(200, {{"request_id", r.request_id}, {"data", {{"pools", pools}}}});
  }
  if (core::Status st = model::validateLabel(std::string(model::kPoolLabel), pool);
      !st.isOk() || pool.empty()) {
    return error(
        400, "pool name '" + pool + "': " + (pool.empty() ? std::string("empty") : st.message()));
  }
  if (r.method == "DELETE") {
    if (auto del = store_.deleteRange(std::string(kPoolsPrefix) + pool); !del.isOk()) {
      return fromStatus(del.status());
    }
    driver_.dedicatePool(pool, "");
    return noContent();
  }
  const std::string source = "pool '" + pool + "'";
  core::JsonNode body(r.body, "", source);
  if (core::Status st = body.checkKeys({"tenant"}); !st.isOk()) {
    return fromStatus(st);
  }
  if (!body.has("tenant")) {
    return error(400,
                 source + ": tenant: required (the tenant to dedicate it to: {\"tenant\": \"t\"})");
  }
  auto tenant = body.child("tenant").str();
  if (!tenant.isOk()) {
    return fromStatus(tenant.status());
  }
  {
    std::shared_lock lock(mu_);
    if (!tenants_.contains(*tenant)) {
      return error(400, "tenant: no tenant '" + *tenant + "'");
    }
  }
  if (auto put = store_.put(std::string(kPoolsPrefix) + pool, json{{"tenant", *tenant}}.dump());
      !put.isOk()) {
    return fromStatus(put.status());
  }
  driver_.dedicatePool(pool, *tenant);
  return reply(200,
               {{"request_id", r.request_id}, {"data", {{"pool", pool}, {"tenant", *tenant}}}});
}

core::Status ControlPlane::loadNodeState() {
  TESSERA_ASSIGN_OR_RETURN(auto records, loadNodeRecords(store_, catalogue_));
  for (const auto& [name, rec] : records) {
    if (rec.cordoned) {
      if (core::Status st = driver_.setCordoned(name, true); !st.isOk()) {
        core::logWarn("stored node {} is not in service: {}", name, st.message());
      }
    }
  }
  const std::string prefix(kPoolsPrefix);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult pools,
                           store_.range(prefix, store::prefixEnd(prefix)));
  for (const store::KeyValue& kv : pools.kvs) {
    const json j = json::parse(kv.value, nullptr, false);
    if (j.is_discarded() || !j.contains("tenant") || !j["tenant"].is_string()) {
      return core::internalError("stored pool at " + kv.key + " is corrupt");
    }
    driver_.dedicatePool(kv.key.substr(prefix.size()), j["tenant"].get<std::string>());
  }
  return core::Status::ok();
}

void ControlPlane::sweepJoinTokens() {
  const std::string prefix(kJoinTokensPrefix);
  auto got = store_.range(prefix, store::prefixEnd(prefix));
  if (!got.isOk()) {
    return;
  }
  const int64_t now_ms = core::unixMillis(clock_.wallNow());
  for (const store::KeyValue& kv : got->kvs) {
    const json t = json::parse(kv.value, nullptr, false);
    if (t.is_discarded() || t.value("expires_ms", int64_t{0}) <= now_ms) {
      (void)store_.deleteRange(kv.key);
    }
  }
}

json ControlPlane::nodeJson(const NodeState& s,
                            const std::optional<std::string>& tenant_view) const {
  json gpus = json::object();
  for (const model::GpuDevice& g : s.node.gpus) {
    gpus[catalogue_.model(g.model).name] = gpus.value(catalogue_.model(g.model).name, 0) + 1;
  }
  json node = {{"name", s.name},
               {"cpu_milli", s.node.cpu.value()},
               {"memory_mib", s.node.memory.value()},
               {"gpus", gpus},
               {"state", s.state},
               {"labels", s.node.labels},
               {"cordoned", s.cordoned}};
  // Each GPU, with what runs on it: a tenant sees its own tasks only.
  // How much of each GPU is allocated, all tenants together, is shown to every reader (it is
  // capacity); who holds it only to operators and to the tenant itself.
  json devices = json::array();
  int64_t allocated_milli = 0;
  for (size_t i = 0; i < s.gpus.size(); ++i) {
    const GpuState& g = s.gpus[i];
    const int64_t on_gpu = g.allocatedMilli();
    allocated_milli += on_gpu;
    json uses = json::array();
    for (const GpuUse& u : g.uses) {
      if (tenant_view && u.tenant != *tenant_view) {
        continue;
      }
      json use = {{"tenant", u.tenant},
                  {"workload", u.workload},
                  {"task", u.task},
                  {"milli", u.milli},
                  {"terminating", u.terminating}};
      if (!u.mig_profile.empty()) {
        use["mig_profile"] = u.mig_profile;
        use["mig_slot"] = u.mig_slot;
      }
      uses.push_back(std::move(use));
    }
    devices.push_back({{"index", i},
                       {"model", g.model},
                       {"mig", g.mig},
                       {"allocated_milli", on_gpu},
                       {"uses", uses}});
  }
  node["devices"] = std::move(devices);
  node["allocated_milli_gpu"] = allocated_milli;
  if (!tenant_view) {  // Operators also see how its agent is doing, and whose pool it is.
    node["agent"] = s.agent;
    node["seconds_since_heartbeat"] = s.seconds_since_heartbeat;
    node["tasks"] = s.tasks;
    if (!s.dedicated_to.empty()) {
      node["dedicated_to"] = s.dedicated_to;
    }
  }
  return node;
}

}  // namespace tessera::server
