#include "server/api_util.h"

#include <charconv>
#include <ctime>

#include "core/json_node.h"
#include "core/rfc3339.h"
#include "server/request.h"

namespace tessera::server::api {

using nlohmann::json;

core::Result<core::Duration> parseDuration(const json& j, const std::string& field) {
  TESSERA_ASSIGN_OR_RETURN(int64_t seconds, parseDurationSeconds(j, field));
  return std::chrono::duration_cast<core::Duration>(std::chrono::seconds(seconds));
}

core::Result<int64_t> intOr(const core::JsonNode& n, const json& base, const char* field,
                            int64_t lo, int64_t hi, int64_t def) {
  if (!n.has(field)) {
    return base.value(field, def);
  }
  return n.child(field).integer(lo, hi);
}

core::Result<QueueNumbers> queueNumbers(const core::JsonNode& n, const json& base,
                                        const std::string& source) {
  // A quota left out is 0; a limit left out (or -1, or "limit": {}) is none, and 0 is zero.
  auto gpus = [&](const char* field, const char* stored, int64_t none) -> core::Result<int64_t> {
    if (!n.has(field)) {
      return base.value(stored, none);
    }
    core::JsonNode f = n.child(field);
    TESSERA_RETURN_IF_ERROR(f.checkKeys({"gpu"}));
    if (!f.has("gpu")) {
      return none;
    }
    if (none == kNoGpuLimit && f.child("gpu").value() == -1) {
      return kNoGpuLimit;
    }
    auto milli = f.child("gpu").scaled(1000);
    if (!milli.isOk() && none == kNoGpuLimit) {
      return f.child("gpu").error(
          "expected a number of GPUs, 0 or more (0: none at all), or -1 "
          "for no limit");
    }
    return milli;
  };
  QueueNumbers q;
  TESSERA_ASSIGN_OR_RETURN(q.quota, gpus("quota", "quota_milli_gpu", 0));
  TESSERA_ASSIGN_OR_RETURN(q.limit, gpus("limit", "limit_milli_gpu", kNoGpuLimit));
  if (q.limit >= 0 && q.limit < q.quota) {
    return core::invalidArgument(
        source + ": limit.gpu is below quota.gpu (" + std::to_string(q.limit) + " < " +
        std::to_string(q.quota) + " milli-GPU)" +
        (q.limit == 0 ? "; a tenant or queue with no GPU at all has a quota of 0 too" : ""));
  }
  TESSERA_ASSIGN_OR_RETURN(q.weight, intOr(n, base, "weight", 0, 1000000, 1));
  TESSERA_ASSIGN_OR_RETURN(q.priority, intOr(n, base, "priority", 0, 1000000, 100));
  // -1: back to the scheduler's default.
  TESSERA_ASSIGN_OR_RETURN(q.max_unsaved_gpu_s,
                           intOr(n, base, "max_unsaved_gpu_seconds", -1, 1000000000, -1));
  return q;
}

std::string tenantKey(const std::string& t) { return "/tenants/" + t; }

std::string policyKey(const std::string& scope, const std::string& name) {
  return scope.empty() ? "/policies/" + name : "/tenants/" + scope + "/policies/" + name;
}

std::string workloadKey(const std::string& t, const std::string& name) {
  return "/tenants/" + t + "/workloads/" + name;
}

json tenantAdminPolicy() {
  // `patch` too: a KV PATCH needs it, as in Vault (issue #26).
  return {{"path",
           {{"*", {{"capabilities", {"create", "read", "update", "patch", "delete", "list"}}}}}}};
}

json upgradedTenantPolicy(const std::string& name, json stored) {
  // tenant-admin as tenants were made with it before `patch` existed (issue #26).
  static const json kWithoutPatch = {
      {"path", {{"*", {{"capabilities", {"create", "read", "update", "delete", "list"}}}}}}};
  if (name == "tenant-admin" && stored == kWithoutPatch) {
    return tenantAdminPolicy();
  }
  return stored;
}

json sealJson(const secrets::SealStatus& s) {
  return {{"initialized", s.initialized},
          {"sealed", s.sealed},
          {"type", s.mode},
          {"n", s.shares},
          {"t", s.threshold},
          {"progress", s.progress},
          {"term", s.term}};
}

HttpResponse noSecrets() { return error(503, "this server has no secrets engine configured"); }

std::string tokenLeaseId(const TokenInfo& t) { return std::string(kTokenLeasePrefix) + t.accessor; }

json tokenLeaseJson(const TokenInfo& t, core::WallTime now) {
  auto time = [](core::WallTime w) {
    return w == core::WallTime::max() ? json(nullptr) : json(core::formatRfc3339Millis(w));
  };
  return {{"lease_id", tokenLeaseId(t)},
          {"tenant", t.tenant},
          {"kind", "token"},
          {"data", {{"accessor", t.accessor}, {"policies", t.policies}}},
          {"issue_time", time(t.issued)},
          {"expire_time", time(t.expires)},
          {"max_expire_time", time(t.max_expiry)},
          {"renewable", t.renewable},
          {"revocable", true},
          {"state", "active"},
          {"ttl", t.ttlSeconds(now)}};
}

core::Result<core::Duration> incrementOf(const json& body) {
  if (!body.contains("increment")) {
    return core::Duration::zero();
  }
  return parseDuration(body["increment"], "increment");
}

std::string rest(const std::vector<std::string>& parts, size_t skip) {
  std::string out;
  for (size_t i = skip; i < parts.size(); ++i) {
    out += (i > skip ? "/" : "") + parts[i];
  }
  return out;
}

core::Result<int64_t> versionParam(const ScopedPath& scope) {
  auto it = scope.query.find("version");
  if (it == scope.query.end()) {
    return int64_t{0};
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || end != it->second.data() + it->second.size() || v < 0) {
    return core::invalidArgument("version: '" + it->second + "' is not a version number");
  }
  return v;
}

core::Result<std::vector<int64_t>> versionsField(const json& body, bool required) {
  std::vector<int64_t> out;
  if (!body.contains("versions")) {
    if (required) {
      return core::invalidArgument("\"versions\": a list of version numbers is required");
    }
    return out;
  }
  const json& v = body["versions"];
  if (!v.is_array() || v.size() > 1000) {
    return core::invalidArgument("\"versions\" must be a list of at most 1000 version numbers");
  }
  for (const json& n : v) {
    if (!n.is_number_integer() || n.get<int64_t>() < 1) {
      return core::invalidArgument("\"versions\" holds something that is not a version number");
    }
    out.push_back(n.get<int64_t>());
  }
  return out;
}

}  // namespace tessera::server::api
