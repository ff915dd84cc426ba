#include "server/tokens.h"

#include <openssl/rand.h>

#include <algorithm>

#include "audit/crypto.h"
#include "core/rfc3339.h"

namespace tessera::server {
namespace {

using nlohmann::json;
constexpr std::string_view kPrefix = "/tokens/";
constexpr std::string_view kAlphabet =
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

}  // namespace

std::string randomBase62(size_t n) {
  std::string out;
  while (out.size() < n) {
    unsigned char buf[64];
    RAND_bytes(buf, sizeof(buf));
    for (unsigned char b : buf) {
      if (b < 248 && out.size() < n) {  // 248 = 4 * 62.
        out.push_back(kAlphabet[b % 62]);
      }
    }
  }
  return out;
}

namespace {

int64_t millisOf(core::Duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

int64_t toMillis(core::WallTime t) {
  if (t == core::WallTime::max()) {
    return -1;
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

core::WallTime fromMillis(int64_t ms) {
  return ms < 0 ? core::WallTime::max() : core::WallTime(std::chrono::milliseconds(ms));
}

std::string rfc3339(core::WallTime t) {
  return t == core::WallTime::max() ? "" : core::formatRfc3339(t);
}

json encode(const TokenInfo& t) {
  return {{"accessor", t.accessor},
          {"tenant", t.tenant},
          {"policies", t.policies},
          {"parent", t.parent},
          {"display_name", t.display_name},
          {"issued_ms", toMillis(t.issued)},
          {"expires_ms", toMillis(t.expires)},
          {"max_expiry_ms", toMillis(t.max_expiry)},
          {"ttl_ms", std::chrono::duration_cast<std::chrono::milliseconds>(t.ttl).count()},
          {"renewable", t.renewable},
          {"role", t.role},
          {"period_ms", millisOf(t.period)},
          {"meta", t.meta}};
}

core::Result<TokenInfo> decode(std::string_view key, std::string_view value) {
  try {
    const json j = json::parse(value);
    TokenInfo t;
    t.accessor = j.at("accessor").get<std::string>();
    t.tenant = j.at("tenant").get<std::string>();
    t.policies = j.at("policies").get<std::vector<std::string>>();
    t.parent = j.at("parent").get<std::string>();
    t.display_name = j.at("display_name").get<std::string>();
    t.issued = fromMillis(j.at("issued_ms").get<int64_t>());
    t.expires = fromMillis(j.at("expires_ms").get<int64_t>());
    t.max_expiry = fromMillis(j.at("max_expiry_ms").get<int64_t>());
    t.ttl = std::chrono::milliseconds(j.at("ttl_ms").get<int64_t>());
    t.renewable = j.at("renewable").get<bool>();
    t.role = j.value("role", std::string());  // Absent in tokens stored before roles existed.
    // Absent in tokens stored before periodic tokens and metadata existed.
    t.period = std::chrono::milliseconds(j.value("period_ms", int64_t{0}));
    t.meta = j.value("meta", std::map<std::string, std::string>());
    return t;
  } catch (const json::exception& e) {
    return core::internalError("stored token " + std::string(key) + " is corrupt: " + e.what());
  }
}

std::string roleKey(const std::string& scope, const std::string& name) {
  return scope.empty() ? "/token-roles/" + name : "/tenants/" + scope + "/token-roles/" + name;
}

int64_t secondsOf(core::Duration d) {
  return std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

}  // namespace

json TokenRole::toJson() const {
  return {{"allowed_policies", allowed_policies},
          {"token_ttl", secondsOf(token_ttl)},
          {"token_max_ttl", secondsOf(token_max_ttl)},
          {"token_period", secondsOf(token_period)},
          {"renewable", renewable}};
}

bool TokenInfo::isRoot() const {
  return std::find(policies.begin(), policies.end(), "root") != policies.end();
}

int64_t TokenInfo::ttlSeconds(core::WallTime now) const {
  if (expires == core::WallTime::max()) {
    return -1;
  }
  return std::max<int64_t>(0,
                           std::chrono::duration_cast<std::chrono::seconds>(expires - now).count());
}

json TokenInfo::toJson(core::WallTime now) const {
  return {
      {"accessor", accessor},
      {"tenant", tenant},
      {"policies", policies},
      {"display_name", display_name},
      {"issue_time", rfc3339(issued)},
      {"expire_time", expires == core::WallTime::max() ? json(nullptr) : json(rfc3339(expires))},
      {"explicit_max_ttl_time",
       max_expiry == core::WallTime::max() ? json(nullptr) : json(rfc3339(max_expiry))},
      {"ttl", ttlSeconds(now)},
      {"renewable", renewable},
      {"role", role},
      {"orphan", parent.empty()},
      // Vault's lookup fields, for its clients.
      {"creation_time",
       std::chrono::duration_cast<std::chrono::seconds>(issued.time_since_epoch()).count()},
      {"creation_ttl", secondsOf(ttl)},
      {"explicit_max_ttl",
       max_expiry == core::WallTime::max() ? 0 : secondsOf(max_expiry - issued)},
      {"period", secondsOf(period)},
      {"meta", meta.empty() ? json(nullptr) : json(meta)},
      {"num_uses", 0},
      {"type", "service"},
      {"entity_id", ""},
      {"path", role.empty() ? "auth/token/create" : "auth/token/create/" + role}};
}

namespace {

std::string scopeName(const std::string& scope) {
  return scope.empty() ? "the admin scope" : "tenant '" + scope + "'";
}

// A tenant's policy as an admin token's policies see its paths: each pattern under
// `tenants/<tenant>/` (ControlPlane::authorizedOn evaluates an admin token there).
Policy seenFromAdminScope(Policy p, const std::string& tenant) {
  for (PathRule& rule : p.rules) {
    rule.pattern = "tenants/" + tenant + "/" + rule.pattern;
  }
  return p;
}

}  // namespace

core::Status checkChildPower(const TokenInfo& parent, const std::string& scope,
                             const std::vector<std::string>& names, const PowerSource& source,
                             bool through_role) {
  if (!parent.tenant.empty() && scope != parent.tenant) {
    return core::Status(core::StatusCode::kPermissionDenied,
                        "a tenant token can only create tokens of its own tenant");
  }
  if (parent.isRoot()) {
    return core::Status::ok();
  }
  auto deny = [](const std::string& why) {
    return core::Status(core::StatusCode::kPermissionDenied, why);
  };
  for (const std::string& name : names) {
    if (name == "root") {
      return deny("only a root token can create a root token");
    }
  }
  const bool same_scope = parent.tenant == scope;
  // The parent's power: its policies as they are now, in its own scope (a name its scope no
  // longer has gives nothing).
  std::vector<Policy> held;
  if (source.policy) {
    for (const std::string& p : parent.policies) {
      if (std::optional<Policy> got = source.policy(parent.tenant, p)) {
        held.push_back(std::move(*got));
      }
    }
  }
  std::vector<const Policy*> holder;
  for (const Policy& p : held) {
    holder.push_back(&p);
  }
  for (const std::string& name : names) {
    const bool own = same_scope && std::find(parent.policies.begin(), parent.policies.end(),
                                             name) != parent.policies.end();
    if (same_scope && !through_role && !own) {
      // Vault's rule in one scope: narrower policies are handed on through a token role.
      return deny("cannot give policy '" + name +
                  "': the parent token does not have it (narrower policies are handed on "
                  "through a token role, auth/token/roles)");
    }
    std::optional<Policy> candidate =
        source.policy ? source.policy(scope, name) : std::optional<Policy>();
    if (!candidate) {
      if (own) {
        continue;  // One of the parent's own names: whatever it becomes, the parent has it too.
      }
      return deny("cannot give policy '" + name + "': " + scopeName(scope) +
                  " has no such policy (only a root token may name one that does not exist)");
    }
    const Policy judged =
        same_scope ? std::move(*candidate) : seenFromAdminScope(std::move(*candidate), scope);
    if (core::Status st = checkWithinPower(holder, judged); !st.isOk()) {
      return deny("cannot give policy '" + name + "' of " + scopeName(scope) + ": " + st.message());
    }
  }
  if (!same_scope && source.tenant_reach) {
    // Every token of the tenant reaches what other tenants granted to it, whatever its
    // policies: a parent that could not reach that itself does not get it by proxy.
    const Policy reach = source.tenant_reach(scope);
    if (core::Status st = checkWithinPower(holder, reach); !st.isOk()) {
      return deny("cannot create a token of tenant '" + scope +
                  "': every token of it reaches what other tenants granted to it, and " +
                  st.message());
    }
  }
  return core::Status::ok();
}

std::string TokenManager::hashSecret(const std::string& secret) { return audit::sha256Hex(secret); }

core::Result<std::unique_ptr<TokenManager>> TokenManager::open(store::Store& store,
                                                               const core::Clock& clock,
                                                               TokenOptions options,
                                                               PowerSource power) {
  std::unique_ptr<TokenManager> m(new TokenManager(store, clock, options, std::move(power)));
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult all, store.range(kPrefix, store::prefixEnd(kPrefix)));
  for (const store::KeyValue& kv : all.kvs) {
    TESSERA_ASSIGN_OR_RETURN(TokenInfo t, decode(kv.key, kv.value));
    m->addLocked(kv.key.substr(kPrefix.size()), std::move(t));
  }
  // Tokens come in hash order, children before their parents as often as not: the chains'
  // expiries are set from the top once all are in. A token whose parent is gone keeps
  // WallTime::min(), and the sweep below revokes it with its line.
  std::vector<std::string> tops;
  for (const auto& [hash, live] : m->by_hash_) {
    if (live.info.parent.empty()) {
      tops.push_back(live.info.accessor);
    }
  }
  for (const std::string& a : tops) {
    m->refreshUntilLocked(a);
  }
  TESSERA_RETURN_IF_ERROR(m->expire().status());
  return m;
}

core::WallTime TokenManager::chainUntilLocked(const std::string& parent,
                                              core::WallTime expires) const {
  if (parent.empty()) {
    return expires;
  }
  auto h = hash_of_.find(parent);
  if (h == hash_of_.end()) {
    return core::WallTime::min();  // Its parent is gone: so is it.
  }
  return std::min(expires, by_hash_.at(h->second).until);
}

void TokenManager::refreshUntilLocked(const std::string& accessor) {
  // Parents before children, without recursion (a chain may be long).
  std::vector<std::string> todo = {accessor};
  while (!todo.empty()) {
    const std::string a = std::move(todo.back());
    todo.pop_back();
    auto h = hash_of_.find(a);
    if (h == hash_of_.end()) {
      continue;
    }
    Live& live = by_hash_.at(h->second);
    live.until = chainUntilLocked(live.info.parent, live.info.expires);
    for (auto [it, end] = children_.equal_range(a); it != end; ++it) {
      todo.push_back(it->second);
    }
  }
}

void TokenManager::addLocked(const std::string& hash, TokenInfo t) {
  hash_of_[t.accessor] = hash;
  if (!t.parent.empty()) {
    children_.emplace(t.parent, t.accessor);
  }
  ++held_[t.tenant];
  const core::WallTime until = chainUntilLocked(t.parent, t.expires);
  by_hash_[hash] = Live{std::move(t), until};
}

size_t TokenManager::held(const std::string& tenant) const {
  std::shared_lock lock(mu_);
  auto it = held_.find(tenant);
  return it == held_.end() ? 0 : it->second;
}

core::Status TokenManager::persist(const std::string& hash, const TokenInfo& info) {
  return store_.put(std::string(kPrefix) + hash, encode(info).dump()).status();
}

bool TokenManager::rootTokenExists() const {
  std::shared_lock lock(mu_);
  return std::any_of(by_hash_.begin(), by_hash_.end(), [](const auto& e) {
    return e.second.info.isRoot() && e.second.info.expires == core::WallTime::max();
  });
}

core::Status TokenManager::putRole(const std::string& scope, const std::string& name,
                                   const TokenRole& role) {
  const json stored = {{"allowed_policies", role.allowed_policies},
                       {"token_ttl_ms", millisOf(role.token_ttl)},
                       {"token_max_ttl_ms", millisOf(role.token_max_ttl)},
                       {"token_period_ms", millisOf(role.token_period)},
                       {"renewable", role.renewable}};
  return store_.put(roleKey(scope, name), stored.dump()).status();
}

core::Result<TokenRole> TokenManager::role(const std::string& scope,
                                           const std::string& name) const {
  const std::string key = roleKey(scope, name);
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult got, store_.range(key));
  if (got.kvs.empty()) {
    return core::notFound("no token role '" + name + "'" +
                          (scope.empty() ? std::string() : " in tenant '" + scope + "'"));
  }
  try {
    const json j = json::parse(got.kvs.front().value);
    TokenRole r;
    r.allowed_policies = j.at("allowed_policies").get<std::vector<std::string>>();
    r.token_ttl = std::chrono::milliseconds(j.at("token_ttl_ms").get<int64_t>());
    r.token_max_ttl = std::chrono::milliseconds(j.at("token_max_ttl_ms").get<int64_t>());
    r.renewable = j.at("renewable").get<bool>();
    r.token_period = std::chrono::milliseconds(j.value("token_period_ms", int64_t{0}));
    return r;
  } catch (const json::exception& e) {
    return core::internalError("stored token role " + key + " is corrupt: " + e.what());
  }
}

core::Result<std::vector<std::string>> TokenManager::roleNames(const std::string& scope) const {
  const std::string prefix = roleKey(scope, "");
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult got, store_.range(prefix, store::prefixEnd(prefix)));
  std::vector<std::string> names;
  for (const store::KeyValue& kv : got.kvs) {
    names.push_back(kv.key.substr(prefix.size()));
  }
  return names;
}

core::Status TokenManager::deleteRole(const std::string& scope, const std::string& name) {
  const std::string key = roleKey(scope, name);
  TESSERA_ASSIGN_OR_RETURN(store::DeleteResult deleted, store_.deleteRange(key));
  if (deleted.deleted == 0) {
    return core::notFound("no token role '" + name + "'");
  }
  return core::Status::ok();
}

core::Result<CreatedToken> TokenManager::bootstrapRoot() {
  std::lock_guard write(write_mu_);
  if (rootTokenExists()) {
    return core::Status(core::StatusCode::kAlreadyExists, "a root token already exists");
  }
  CreatedToken out;
  out.secret = "tsr." + randomBase62(24);
  TokenInfo& t = out.info;
  t.accessor = randomBase62(24);
  t.policies = {"root"};
  t.display_name = "root";
  t.issued = clock_.wallNow();
  t.expires = core::WallTime::max();
  t.max_expiry = core::WallTime::max();
  t.renewable = false;
  const std::string hash = hashSecret(out.secret);
  TESSERA_RETURN_IF_ERROR(persist(hash, t));
  std::lock_guard lock(mu_);
  addLocked(hash, t);
  return out;
}

core::Result<CreatedToken> TokenManager::create(const TokenInfo& parent, const TokenRequest& req,
                                                size_t max_tenant_tokens) {
  const core::WallTime now = clock_.wallNow();
  // Before any lock: the source takes the control plane's.
  TESSERA_RETURN_IF_ERROR(
      checkChildPower(parent, req.tenant, req.policies, power_, !req.role.empty()));
  if (req.ttl < core::Duration::zero() || req.explicit_max_ttl < core::Duration::zero()) {
    return core::invalidArgument("ttl and explicit_max_ttl must not be negative");
  }
  if (req.period < core::Duration::zero()) {
    return core::invalidArgument("period must not be negative");
  }
  const bool periodic = req.period > core::Duration::zero();
  if (periodic && !req.renewable) {
    return core::invalidArgument("a periodic token is renewable: period and renewable=false clash");
  }
  // A periodic token's TTL is its period (Vault ignores `ttl` then).
  const core::Duration ttl = periodic                           ? req.period
                             : req.ttl > core::Duration::zero() ? req.ttl
                                                                : options_.default_ttl;
  if (ttl > options_.max_ttl) {
    return core::invalidArgument(
        std::string(periodic ? "period" : "ttl") + " is above the maximum of " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options_.max_ttl).count()) +
        " s");
  }
  TokenInfo t;
  t.tenant = req.tenant;
  t.policies = req.policies;
  t.parent = req.orphan ? "" : parent.accessor;
  t.display_name = req.display_name;
  t.issued = now;
  t.ttl = ttl;
  t.renewable = req.renewable;
  t.role = req.role;
  t.period = req.period;
  t.meta = req.meta;
  // A periodic token has no system maximum: its period is what keeps it short.
  t.max_expiry = periodic ? core::WallTime::max() : now + options_.max_ttl;
  if (req.explicit_max_ttl > core::Duration::zero()) {
    t.max_expiry = std::min(t.max_expiry, now + req.explicit_max_ttl);
  }
  if (!req.orphan) {
    t.max_expiry = std::min(t.max_expiry, parent.max_expiry);  // Never outlives its parent's cap.
  }
  // The maps change only under write_mu_, so holding it they can be read without mu_; mu_ is
  // taken only to add the token once it is in the store.
  std::lock_guard write(write_mu_);
  // When the parent stops working, as it is now (`parent` was read when its request came in);
  // a parent the manager does not hold (the server itself, for a node's credential) has no
  // chain.
  core::WallTime parent_until = parent.expires;
  if (!parent.accessor.empty()) {
    auto h = hash_of_.find(parent.accessor);
    if (h == hash_of_.end()) {
      return core::notFound("the parent token is gone");
    }
    parent_until = by_hash_.at(h->second).until;
    if (parent_until <= now) {
      return core::notFound("the parent token has expired");
    }
  }
  if (!req.role.empty() && !req.orphan) {
    // A delegated token never outlives the delegating token's present expiry either: what the
    // creator shows as its time left is all it can hand on.
    t.max_expiry = std::min(t.max_expiry, parent_until);
  }
  t.expires = std::min(now + ttl, t.max_expiry);
  if (t.expires <= now) {
    return core::invalidArgument("the token would expire at once (its parent's cap has passed)");
  }
  if (auto h = held_.find(t.tenant); !t.tenant.empty() && max_tenant_tokens > 0 &&
                                     h != held_.end() && h->second >= max_tenant_tokens) {
    return core::Status(core::StatusCode::kResourceExhausted,
                        "tenant '" + t.tenant + "' holds its limit of " +
                            std::to_string(max_tenant_tokens) +
                            " tokens (max_tokens); revoke some, or let them expire");
  }
  CreatedToken out;
  out.secret = "tsr." + randomBase62(24);
  t.accessor = randomBase62(24);
  const std::string hash = hashSecret(out.secret);
  TESSERA_RETURN_IF_ERROR(persist(hash, t));
  out.info = t;
  std::lock_guard lock(mu_);
  addLocked(hash, std::move(t));
  return out;
}

core::Result<TokenInfo> TokenManager::lookup(const std::string& secret) const {
  const std::string hash = hashSecret(secret);
  std::shared_lock lock(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end() || it->second.until <= clock_.wallNow()) {
    return core::notFound("unknown, revoked or expired token");
  }
  return it->second.info;
}

core::Result<TokenInfo> TokenManager::lookupAccessor(const std::string& accessor) const {
  std::shared_lock lock(mu_);
  auto h = hash_of_.find(accessor);
  if (h == hash_of_.end()) {
    return core::notFound("unknown, revoked or expired token");
  }
  const Live& t = by_hash_.at(h->second);
  if (t.until <= clock_.wallNow()) {
    return core::notFound("unknown, revoked or expired token");
  }
  return t.info;
}

core::Result<TokenInfo> TokenManager::renew(const std::string& accessor, core::Duration increment) {
  const core::WallTime now = clock_.wallNow();
  std::lock_guard write(write_mu_);
  auto h = hash_of_.find(accessor);
  if (h == hash_of_.end() || by_hash_.at(h->second).until <= now) {
    return core::notFound("unknown, revoked or expired token");
  }
  TokenInfo t = by_hash_.at(h->second).info;
  if (!t.renewable) {
    return core::failedPrecondition("the token is not renewable");
  }
  if (increment < core::Duration::zero()) {
    return core::invalidArgument("increment must not be negative");
  }
  // A periodic token gets its period each time, whatever the increment (Vault's rule).
  const core::Duration by = t.period > core::Duration::zero()    ? t.period
                            : increment > core::Duration::zero() ? increment
                                                                 : t.ttl;
  t.expires = std::min(now + by, t.max_expiry);
  TESSERA_RETURN_IF_ERROR(persist(h->second, t));
  std::lock_guard lock(mu_);
  by_hash_.at(h->second).info = t;
  refreshUntilLocked(accessor);  // Its descendants may live longer now, up to their own expiry.
  return t;
}

core::Result<int> TokenManager::revokeLocked(const std::string& accessor) {
  auto h = hash_of_.find(accessor);
  if (h == hash_of_.end()) {
    return 0;
  }
  // Depth first: children before the parent, so a crash midway leaves no orphaned child.
  int revoked = 0;
  std::vector<std::string> kids;
  for (auto [it, end] = children_.equal_range(accessor); it != end; ++it) {
    kids.push_back(it->second);
  }
  for (const std::string& k : kids) {
    TESSERA_ASSIGN_OR_RETURN(int n, revokeLocked(k));
    revoked += n;
  }
  const std::string hash = h->second;
  // Out of the store first: if that fails, the token stays, in both.
  TESSERA_RETURN_IF_ERROR(store_.deleteRange(std::string(kPrefix) + hash).status());
  std::lock_guard lock(mu_);
  const TokenInfo& t = by_hash_.at(hash).info;
  for (auto [it, end] = children_.equal_range(t.parent); it != end; ++it) {
    if (it->second == accessor) {
      children_.erase(it);
      break;
    }
  }
  children_.erase(accessor);
  if (auto held = held_.find(t.tenant); held != held_.end() && --held->second == 0) {
    held_.erase(held);
  }
  by_hash_.erase(hash);
  hash_of_.erase(accessor);
  return revoked + 1;
}

core::Result<int> TokenManager::revoke(const std::string& accessor) {
  std::lock_guard write(write_mu_);
  if (!hash_of_.contains(accessor)) {
    return core::notFound("unknown, revoked or expired token");
  }
  return revokeLocked(accessor);
}

core::Result<int> TokenManager::revokeWhereLocked(const std::function<bool(const Live&)>& matches) {
  std::vector<std::string> chosen;
  for (const auto& [hash, live] : by_hash_) {
    if (matches(live)) {
      chosen.push_back(live.info.accessor);
    }
  }
  int revoked = 0;
  for (const std::string& a : chosen) {
    // A token may be gone already, as a descendant of one revoked before it.
    TESSERA_ASSIGN_OR_RETURN(int n, revokeLocked(a));
    revoked += n;
  }
  return revoked;
}

core::Result<int> TokenManager::expire() {
  const core::WallTime now = clock_.wallNow();
  std::lock_guard write(write_mu_);
  return revokeWhereLocked([now](const Live& t) { return t.until <= now; });
}

core::Result<int> TokenManager::revokeTenant(const std::string& tenant) {
  std::lock_guard write(write_mu_);
  return revokeWhereLocked([&tenant](const Live& t) { return t.info.tenant == tenant; });
}

std::vector<std::pair<std::string, core::WallTime>> TokenManager::expiries() const {
  const core::WallTime now = clock_.wallNow();
  std::shared_lock lock(mu_);
  std::vector<std::pair<std::string, core::WallTime>> out;
  out.reserve(by_hash_.size());
  for (const auto& [hash, t] : by_hash_) {
    if (t.until > now) {
      out.emplace_back(t.info.tenant, t.until);
    }
  }
  return out;
}

std::vector<TokenInfo> TokenManager::list(const std::string& tenant) const {
  const core::WallTime now = clock_.wallNow();
  std::shared_lock lock(mu_);
  std::vector<TokenInfo> out;
  for (const auto& [hash, t] : by_hash_) {
    if (t.info.tenant == tenant && t.until > now) {
      out.push_back(t.info);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const TokenInfo& a, const TokenInfo& b) { return a.accessor < b.accessor; });
  return out;
}

}  // namespace tessera::server
