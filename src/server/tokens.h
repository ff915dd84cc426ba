// Tokens: who is calling, in which scope, with which policies, until when (Vault's model).
//
//   auto tokens = TokenManager::open(store, clock, {});
//   auto root = tokens->bootstrapRoot();                     // once, at first start
//   TokenRequest req{.tenant = "team-1", .policies = {"dev"}, .ttl = hours(4),
//                    .explicit_max_ttl = hours(4), .renewable = false};
//   auto child = tokens->create(root->info, req);            // "access for 4 h", then gone
//   auto who = tokens->lookup(child->secret);                 // NOT_FOUND once expired
//
// Rules (docs/server.md):
//   - Every token expires: a TTL is required (the default TTL applies when none is asked) and
//     capped by the system maximum; only the bootstrap root token has none, and the server warns
//     while it exists.
//   - `explicit_max_ttl` is a hard cap from issue time that no renewal passes. A child can never
//     outlive its parent's cap, and revoking (or expiry of) a parent revokes all its children.
//     A token stops working the moment any ancestor expires: `lookup` reads the chain's expiry,
//     kept with each token, rather than waiting for housekeeping's sweep (`expire`).
//   - Renewal moves the expiry to now + increment (or the token's TTL), within its caps; a token
//     created with `renewable = false` cannot be renewed. A periodic token (`period`) is
//     renewed by its period each time and has no cap but `explicit_max_ttl` and its parent's:
//     renewed within each period it lives for ever, otherwise it expires.
//   - An orphan (`orphan`, Vault's no_parent) has no parent: its creator's revocation, expiry
//     and cap do not reach it.
//   - A tenant token is bound to its tenant: its children belong to the same tenant. Only an
//     admin token (tenant "") can create tokens for a tenant.
//   - A parent gives a child only power it has itself (`checkChildPower`): each policy the child
//     gets, read in the child's scope, allows nothing the parent's policies, read in the parent's
//     scope, do not allow on the same paths; a tenant's policy is seen from the admin scope under
//     `tenants/<t>/`. Across scopes names decide nothing (every tenant has its own
//     `tenant-admin`); within one, a child also gets only its parent's own policies, unless it
//     comes from a role. A "root" parent may give anything; only a root parent gives "root".
//   - A token role (Vault's auth/token/roles/<name>, one set per scope) names the policies that
//     tokens created from it (`auth/token/create/<name>`) may carry, their TTL and cap; the
//     child is capped at its parent's current expiry too.
//   - The secret ("tsr." + 24 base62 characters, 143 bits) is shown once, at creation. The store
//     keeps only its SHA-256; the accessor is a second, public handle for lookup, renew and
//     revoke that cannot authenticate.
// Thread-safe: changes take turns (each waits for its store write); lookups read an in-memory
// copy of every live token and never wait for a store write.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "server/acl.h"
#include "store/store.h"

namespace tessera::server {

struct TokenInfo {
  std::string accessor;
  std::string tenant;  // "" = admin scope.
  std::vector<std::string> policies;
  std::string parent;  // Accessor of the parent; "" for the root token.
  std::string display_name;
  core::WallTime issued{};
  core::WallTime expires{};     // WallTime::max() for the bootstrap root token only.
  core::WallTime max_expiry{};  // No renewal goes past it.
  core::Duration ttl{0};        // The TTL it was created with: the default renewal increment.
  bool renewable = true;
  std::string role;  // The token role it was created from; "" for none.
  // A periodic token (Vault's `period`): each renewal sets its expiry to now + period, and no
  // system maximum caps it (only `explicit_max_ttl` and its parent's cap): it lives for as long
  // as it is renewed within each period, and no longer. 0: not periodic.
  core::Duration period{0};
  // Vault's token metadata: free-form key/value pairs its creator gave, shown by lookups and in
  // the audit log.
  std::map<std::string, std::string> meta;

  bool isRoot() const;
  // Seconds left at `now` (0 when expired; -1 for the never-expiring root token).
  int64_t ttlSeconds(core::WallTime now) const;
  nlohmann::json toJson(core::WallTime now) const;  // For the API: never the secret.
};

// `n` base62 characters from the OS's random source (rejection sampling: no modulo bias): the
// body of every secret the server hands out.
std::string randomBase62(size_t n);

struct TokenRequest {
  std::string tenant = {};
  std::vector<std::string> policies = {};
  std::string display_name = {};
  core::Duration ttl{0};               // 0: the default TTL.
  core::Duration explicit_max_ttl{0};  // 0: none beyond the system maximum.
  bool renewable = true;
  core::Duration period{0};  // 0: not periodic (see TokenInfo::period).
  std::map<std::string, std::string> meta = {};
  // An orphan (Vault's no_parent): the token has no parent, so revoking or the expiry of its
  // creator does not end it, and its creator's cap does not bound it. The API allows it only
  // to a root token or one with sudo on auth/token/create.
  bool orphan = false;
  // Set only by the role path once it has checked the creating token's power over `policies`:
  // the name of the role (see the rules above).
  std::string role = {};
};

// A token role: what tokens made from it may be. Stored under /tenants/<t>/token-roles/<name>
// (admin scope: /token-roles/<name>), so a tenant's roles go with the tenant's keys when it is
// deleted and no scope reads another's.
struct TokenRole {
  std::vector<std::string> allowed_policies;
  core::Duration token_ttl{0};      // 0: the default TTL.
  core::Duration token_max_ttl{0};  // A hard cap from issue time; 0: the system maximum.
  core::Duration token_period{0};   // Tokens from it are periodic with this period; 0: not.
  bool renewable = true;

  // As the API shows it (TTLs in seconds).
  nlohmann::json toJson() const;
};

// What the power rule reads: a scope's policies, and what every token of a tenant reaches
// whatever its policies. The control plane answers from its policies and grants; tests from a
// table. Called with none of the manager's locks held, from any thread.
struct PowerSource {
  // A copy of policy `name` of `scope` ("" = admin) as it is now; nullopt if there is none.
  // Unset: no policy exists.
  std::function<std::optional<Policy>(const std::string& scope, const std::string& name)> policy;
  // What every token of tenant `tenant` reaches beyond its policies (the live grants other
  // tenants made to it), as rules on admin-scope paths. Unset: nothing.
  std::function<Policy(const std::string& tenant)> tenant_reach;
};

// Whether `parent` may give a child token of scope `scope` ("" = admin) the policies `names`
// (docs/server.md "What a parent may give"): OK, or PERMISSION_DENIED saying which policy goes
// beyond which of the parent's rules.
//   - Power: each named policy, read in the child's scope, allows nothing that the parent's
//     policies, read in the parent's scope, do not allow on the same paths (checkWithinPower);
//     a tenant's policy is seen from the admin scope under `tenants/<scope>/`. A tenant child
//     of an admin parent also reaches what other tenants granted to its tenant, so the parent
//     must reach that too.
//   - Names, in the parent's own scope and not `through_role`: each must also be one of the
//     parent's own policies (Vault's rule; narrower ones go through a token role). Across
//     scopes names decide nothing: every tenant has its own `tenant-admin`.
//   - A name the child's scope does not have is refused, unless it is one of the parent's own
//     in the same scope (its power cannot be judged, and it would grow once written).
//   - A root parent gives anything; only a root parent gives "root".
core::Status checkChildPower(const TokenInfo& parent, const std::string& scope,
                             const std::vector<std::string>& names, const PowerSource& source,
                             bool through_role = false);

struct CreatedToken {
  std::string secret;
  TokenInfo info;
};

struct TokenOptions {
  core::Duration default_ttl = std::chrono::hours(1);
  core::Duration max_ttl = std::chrono::hours(24 * 32);  // Vault's system maximum.
};

class TokenManager {
 public:
  // Loads every token from the store (under /tokens/); drops those already expired (or whose
  // parent is gone). `power` answers the power rule's questions (see PowerSource).
  static core::Result<std::unique_ptr<TokenManager>> open(store::Store& store,
                                                          const core::Clock& clock,
                                                          TokenOptions options,
                                                          PowerSource power = {});

  // Creates the never-expiring root token if no root token exists yet (NOT the normal way to
  // get a token: operators are told to revoke it). ALREADY_EXISTS otherwise.
  core::Result<CreatedToken> bootstrapRoot();
  bool rootTokenExists() const;

  // Creates a child of `parent` (see the rules above: the power rule is checked here, for every
  // creation, role or not); errors say which rule failed. A tenant's
  // token is refused (RESOURCE_EXHAUSTED) if its tenant already holds `max_tenant_tokens` tokens
  // (0: no cap; admin tokens have none): each one lives in this manager's memory until it expires.
  core::Result<CreatedToken> create(const TokenInfo& parent, const TokenRequest& req,
                                    size_t max_tenant_tokens = 0);
  // The live token with this secret; NOT_FOUND for unknown, revoked or expired ones, and for
  // those with an expired ancestor. One hash and one map search, whatever the chain's depth.
  core::Result<TokenInfo> lookup(const std::string& secret) const;
  core::Result<TokenInfo> lookupAccessor(const std::string& accessor) const;
  // Extends the token's expiry (increment 0: its TTL; a periodic token: always its period, as
  // Vault does); returns it updated.
  core::Result<TokenInfo> renew(const std::string& accessor, core::Duration increment);
  // Revokes the token and every descendant; returns how many were revoked.
  core::Result<int> revoke(const std::string& accessor);
  // Revokes every token past its expiry or its chain's (with its descendants). Call on a timer;
  // lookups refuse such tokens already.
  core::Result<int> expire();
  // Revokes every token of a tenant (with its descendants): for a tenant being deleted, so that
  // none works for a tenant created later under the same name. Returns how many were revoked.
  core::Result<int> revokeTenant(const std::string& tenant);
  // Token roles of a scope ("" = admin). Read from the store each time (rare calls), so that
  // every replica sees the same roles.
  core::Status putRole(const std::string& scope, const std::string& name, const TokenRole& role);
  core::Result<TokenRole> role(const std::string& scope, const std::string& name) const;
  core::Result<std::vector<std::string>> roleNames(const std::string& scope) const;
  core::Status deleteRole(const std::string& scope, const std::string& name);

  // Live tokens of a tenant ("" = admin), by accessor.
  std::vector<TokenInfo> list(const std::string& tenant) const;
  // When each live token stops working (its own expiry or an ancestor's, whichever is first;
  // every tenant's and the admin scope's), with its tenant: for
  // the metrics of tokens expiring soon, in one pass over the tokens.
  std::vector<std::pair<std::string, core::WallTime>> expiries() const;
  // How many tokens a tenant holds: those not yet revoked, or swept by expire() once expired.
  size_t held(const std::string& tenant) const;

  static std::string hashSecret(const std::string& secret);

 private:
  // A live token and when it stops working: its own expiry or an ancestor's, whichever comes
  // first (WallTime::min() once its parent is gone). Kept up to date by create, renew and open,
  // so that a lookup reads the chain's expiry without walking it.
  struct Live {
    TokenInfo info;
    core::WallTime until{};
  };

  TokenManager(store::Store& store, const core::Clock& clock, TokenOptions options,
               PowerSource power)
      : store_(store), clock_(clock), options_(options), power_(std::move(power)) {}
  core::Status persist(const std::string& hash, const TokenInfo& info);
  // Revokes the token and its descendants, each out of the store and then out of the maps.
  // Requires write_mu_ (and not mu_, which it takes for each map update).
  core::Result<int> revokeLocked(const std::string& accessor);
  // Revokes every token that `matches` (with its descendants); returns how many went. Requires
  // write_mu_, as revokeLocked.
  core::Result<int> revokeWhereLocked(const std::function<bool(const Live&)>& matches);
  // Adds `t` to the in-memory maps under `hash` (not to the store). Requires mu_ (alone) and
  // write_mu_, or no other thread (open).
  void addLocked(const std::string& hash, TokenInfo t);
  // When a token with this parent and own expiry stops working (see Live). Requires mu_ or
  // write_mu_.
  core::WallTime chainUntilLocked(const std::string& parent, core::WallTime expires) const;
  // Recomputes `until` of the token and of all its descendants (after its expiry changed).
  // Requires mu_ (alone) and write_mu_, or no other thread (open).
  void refreshUntilLocked(const std::string& accessor);

  store::Store& store_;
  const core::Clock& clock_;
  TokenOptions options_;
  PowerSource power_;
  // One change at a time, held across its store write, so that a change reads the maps without
  // mu_ and no two writes of a token cross. Taken before mu_.
  std::mutex write_mu_;
  // Guards the maps below: lookups share it; a change takes it alone only to update them, after
  // its store write, so a lookup (every request's) never waits for a disk flush.
  mutable std::shared_mutex mu_;
  std::map<std::string, Live> by_hash_;
  std::map<std::string, std::string> hash_of_;        // accessor -> hash
  std::multimap<std::string, std::string> children_;  // parent accessor -> child accessor
  std::map<std::string, size_t> held_;                // tenant -> tokens in by_hash_
};

}  // namespace tessera::server
