// Time-bound grants (issue #6; docs/secrets.md "Grants"): a tenant lets another tenant's tokens
// reach some of its secrets, for a while. "team-2 grants team-1 `read` on
// secrets/kv/data/projects/x for 4h": a team-1 token may then read team-2's secrets under that
// prefix, through team-2's paths (/v1/tenants/team-2/secrets/kv/data/projects/x/...), until the
// grant expires or is revoked; everywhere else team-2 stays invisible to it (404).
//
// Every grant has a TTL (none without). Grants cover only paths under `secrets/`, with either a
// preset capability set ("read": read and list; "write": also create, update and delete) or one
// of the owner's ACL policies, by name, judged at each use (so editing or deleting the policy
// changes or ends what the grant allows). A use is checked against the clock each time, so a
// grant stops at its expiry to the request; `expireDue` then removes its record so its expiry
// can be audited.
//
// Records: /grants/<id> (JSON). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "server/acl.h"
#include "store/store.h"

namespace tessera::server {

struct Grant {
  std::string id;
  std::string owner;          // The tenant whose secrets it opens.
  std::string grantee;        // The tenant whose tokens it lets in.
  std::string on;             // A path prefix inside the owner ("secrets/kv/data/projects/x").
  std::string policy;         // "read" or "write" (presets), or the name of an owner's policy.
  Capabilities capabilities;  // A preset's; empty for an owner's policy.

  bool ownerPolicy() const { return policy != "read" && policy != "write"; }
  core::WallTime created{};
  core::WallTime expires{};
  std::string created_by;  // The creating token's accessor.

  nlohmann::json toJson(core::WallTime now) const;
  // True if `path` (inside the owner, no leading '/') is `on` or below it.
  bool covers(const std::string& path) const;
};

class GrantTable {
 public:
  // Loads /grants/ from the store.
  static core::Result<std::unique_ptr<GrantTable>> open(store::Store& store);

  // Checks and stores a new grant. `max_ttl` caps the TTL. A `policy` that is not a preset must
  // name a policy of the owner's; the caller checks that it exists.
  core::Result<Grant> create(const std::string& owner, const std::string& grantee,
                             const std::string& on, const std::string& policy, core::Duration ttl,
                             core::Duration max_ttl, const std::string& created_by,
                             core::WallTime now);
  // Removes the owner's grant early.
  core::Result<Grant> revoke(const std::string& owner, const std::string& id);
  // The grants a tenant gave or received (expired ones not yet swept included, marked so).
  std::vector<Grant> list(const std::string& tenant) const;
  // The live grant from `owner` to `grantee` that covers `path` at `now`, if any.
  std::optional<Grant> find(const std::string& owner, const std::string& grantee,
                            const std::string& path, core::WallTime now) const;
  // Removes grants expired at `now` and returns them (for the audit log).
  std::vector<Grant> expireDue(core::WallTime now);
  // A deleted tenant: removes every grant it gave or received.
  core::Status forgetTenant(const std::string& tenant);

 private:
  explicit GrantTable(store::Store& store) : store_(store) {}
  store::Store& store_;
  mutable std::mutex mu_;                // Guards grants_.
  std::map<std::string, Grant> grants_;  // id -> grant
};

}  // namespace tessera::server
