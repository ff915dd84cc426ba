#include "server/grants.h"

#include <algorithm>

#include "audit/crypto.h"
#include "audit/record.h"
#include "core/rfc3339.h"
#include "server/route.h"

namespace tessera::server {
namespace {

using nlohmann::json;

core::Result<Capabilities> preset(const std::string& policy) {
  Capabilities c;
  if (policy == "read") {
    c.add(Capability::kRead);
    c.add(Capability::kList);
  } else if (policy == "write") {
    for (Capability k : {Capability::kCreate, Capability::kRead, Capability::kUpdate,
                         Capability::kDelete, Capability::kList}) {
      c.add(k);
    }
  } else if (!validPolicyName(policy)) {
    return core::invalidArgument(
        "grant: policy must be \"read\", \"write\" or the name of one of your policies, not \"" +
        policy + "\"");
  }
  return c;  // Empty for an owner's policy: judged by that policy at each use.
}

// A clean relative path: segments non-empty, no "." or "..".
bool cleanPath(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.back() == '/') {
    return false;
  }
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = std::min(p.find('/', start), p.size());
    const std::string_view seg(p.data() + start, end - start);
    if (seg.empty() || seg == "." || seg == "..") {
      return false;
    }
    start = end + 1;
  }
  return std::none_of(p.begin(), p.end(),
                      [](char c) { return static_cast<unsigned char>(c) < 0x20; });
}

std::string storeKey(const std::string& id) { return "/grants/" + id; }

json stored(const Grant& g) {
  return {{"id", g.id},
          {"owner", g.owner},
          {"grantee", g.grantee},
          {"on", g.on},
          {"policy", g.policy},
          {"created_ms", core::unixMillis(g.created)},
          {"expires_ms", core::unixMillis(g.expires)},
          {"created_by", g.created_by}};
}

core::Result<Grant> fromStored(const json& j) {
  try {
    Grant g;
    g.id = j.at("id").get<std::string>();
    g.owner = j.at("owner").get<std::string>();
    g.grantee = j.at("grantee").get<std::string>();
    g.on = j.at("on").get<std::string>();
    g.policy = j.at("policy").get<std::string>();
    TESSERA_ASSIGN_OR_RETURN(g.capabilities, preset(g.policy));
    g.created = core::fromUnixMillis(j.at("created_ms").get<int64_t>());
    g.expires = core::fromUnixMillis(j.at("expires_ms").get<int64_t>());
    g.created_by = j.at("created_by").get<std::string>();
    return g;
  } catch (const std::exception& e) {
    return core::internalError(std::string("a stored grant is malformed: ") + e.what());
  }
}

}  // namespace

json Grant::toJson(core::WallTime now) const {
  const int64_t left =
      now >= expires ? 0 : std::chrono::ceil<std::chrono::seconds>(expires - now).count();
  return {{"id", id},
          {"owner", owner},
          {"grantee", grantee},
          {"on", "tenants/" + owner + "/" + on},
          {"policy", policy},
          {"capabilities", capabilities.names()},
          {"created_time", core::formatRfc3339Millis(created)},
          {"expire_time", core::formatRfc3339Millis(expires)},
          {"ttl", left},
          {"expired", now >= expires}};
}

bool Grant::covers(const std::string& path) const {
  return path == on ||
         (path.size() > on.size() && path.compare(0, on.size(), on) == 0 && path[on.size()] == '/');
}

core::Result<std::unique_ptr<GrantTable>> GrantTable::open(store::Store& store) {
  std::unique_ptr<GrantTable> t(new GrantTable(store));
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r,
                           store.range("/grants/", store::prefixEnd("/grants/")));
  for (const store::KeyValue& kv : r.kvs) {
    json j;
    try {
      j = json::parse(kv.value);
    } catch (const json::exception&) {
      return core::internalError("the grant at " + kv.key + " is not JSON");
    }
    TESSERA_ASSIGN_OR_RETURN(Grant g, fromStored(j));
    t->grants_[g.id] = std::move(g);
  }
  return t;
}

core::Result<Grant> GrantTable::create(const std::string& owner, const std::string& grantee,
                                       const std::string& on, const std::string& policy,
                                       core::Duration ttl, core::Duration max_ttl,
                                       const std::string& created_by, core::WallTime now) {
  if (!validName(grantee)) {
    return core::invalidArgument("grant: \"to\" must name a tenant");
  }
  if (grantee == owner) {
    return core::invalidArgument("grant: a tenant needs no grant to its own secrets");
  }
  if (!cleanPath(on) || (on != "secrets" && on.rfind("secrets/", 0) != 0)) {
    return core::invalidArgument(
        "grant: on: expected secrets/<path> of tenant '" + owner +
        "' (like secrets/kv/data/app/config, or tenants/" + owner +
        "/secrets/kv/data/app/config), without '.', '..' or empty segments");
  }
  if (ttl <= core::Duration::zero()) {
    return core::invalidArgument("grant: a TTL is required (like \"4h\"); no grant is forever");
  }
  if (ttl > max_ttl) {
    return core::invalidArgument(
        "grant: the TTL is above the longest allowed (" +
        std::to_string(std::chrono::duration_cast<std::chrono::hours>(max_ttl).count()) + "h)");
  }
  TESSERA_ASSIGN_OR_RETURN(const Capabilities caps, preset(policy));
  TESSERA_ASSIGN_OR_RETURN(std::string id, audit::randomHex(12));
  Grant g{
      id,        owner, grantee, on,
      policy,    caps,  now,     now + std::chrono::duration_cast<core::WallTime::duration>(ttl),
      created_by};
  TESSERA_RETURN_IF_ERROR(store_.put(storeKey(id), stored(g).dump()).status());
  std::lock_guard lock(mu_);
  grants_[id] = g;
  return g;
}

core::Result<Grant> GrantTable::revoke(const std::string& owner, const std::string& id) {
  Grant g;
  {
    std::lock_guard lock(mu_);
    auto it = grants_.find(id);
    if (it == grants_.end() || it->second.owner != owner) {
      return core::notFound("no grant '" + id + "'");
    }
    g = it->second;
  }
  TESSERA_RETURN_IF_ERROR(store_.deleteRange(storeKey(id)).status());
  std::lock_guard lock(mu_);
  grants_.erase(id);
  return g;
}

std::vector<Grant> GrantTable::list(const std::string& tenant) const {
  std::vector<Grant> out;
  std::lock_guard lock(mu_);
  for (const auto& [id, g] : grants_) {
    if (g.owner == tenant || g.grantee == tenant) {
      out.push_back(g);
    }
  }
  return out;
}

std::optional<Grant> GrantTable::find(const std::string& owner, const std::string& grantee,
                                      const std::string& path, core::WallTime now) const {
  if (!cleanPath(path)) {
    return std::nullopt;
  }
  std::lock_guard lock(mu_);
  for (const auto& [id, g] : grants_) {
    if (g.owner == owner && g.grantee == grantee && now < g.expires && g.covers(path)) {
      return g;
    }
  }
  return std::nullopt;
}

std::vector<Grant> GrantTable::expireDue(core::WallTime now) {
  std::vector<Grant> due;
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, g] : grants_) {
      if (now >= g.expires) {
        due.push_back(g);
      }
    }
  }
  std::vector<Grant> removed;
  for (const Grant& g : due) {
    if (store_.deleteRange(storeKey(g.id)).isOk()) {
      std::lock_guard lock(mu_);
      grants_.erase(g.id);
      removed.push_back(g);
    }
  }
  return removed;
}

core::Status GrantTable::forgetTenant(const std::string& tenant) {
  for (const Grant& g : list(tenant)) {
    TESSERA_RETURN_IF_ERROR(store_.deleteRange(storeKey(g.id)).status());
    std::lock_guard lock(mu_);
    grants_.erase(g.id);
  }
  return core::Status::ok();
}

}  // namespace tessera::server
