// Dynamic PostgreSQL credentials (issue #6; Vault's database secrets engine, PostgreSQL only).
//
// A tenant configures connections (an admin login to a PostgreSQL server) and roles (the SQL that
// creates a user there). Each `createCredential` creates a fresh PostgreSQL user with a random
// password and a VALID UNTIL, under a lease of kind "db": when the lease expires or is revoked,
// the lease manager calls this engine's `revoke`, which ends the user's sessions and drops it;
// a renewal calls `extend`, which moves its VALID UNTIL.
//
//   DatabaseEngine db(store, keys, leases, clock);
//   leases.setRevoker("db", &db);  // The owner registers it; the engine registers nothing.
//   TESSERA_RETURN_IF_ERROR(db.putConnection("team-1", "main", {
//       {"connection_url", "host=10.0.0.5 port=5432 dbname=app"}, {"username", "vault_admin"},
//       {"password", "..."}, {"allowed_roles", {"readonly"}}}));
//   TESSERA_RETURN_IF_ERROR(db.putRole("team-1", "readonly", {
//       {"db_name", "main"}, {"default_ttl", "1h"}, {"max_ttl", "24h"},
//       {"creation_statements",
//        {"CREATE ROLE \"{{name}}\" LOGIN PASSWORD '{{password}}' VALID UNTIL '{{expiration}}'",
//         "GRANT SELECT ON ALL TABLES IN SCHEMA public TO \"{{name}}\""}}}));
//   TESSERA_ASSIGN_OR_RETURN(DbCredential c, db.createCredential("team-1", "readonly", {}));
//   // c.username "v-team-1-readonly-x7f0a9c2kq", c.password (32 chars), c.lease.id
//   // "db/creds/readonly/<hex>".
//
// Records (sealed for the tenant and the key, never in the clear; the admin password lives only
// in the sealed connection record):
//   /secrets/<tenant>/db/config/<name>   {"connection_url", "username", "password",
//                                         "allowed_roles", "verify_connection"}
//   /secrets/<tenant>/db/roles/<name>    {"db_name", "creation_statements",
//                                         "revocation_statements", "renew_statements",
//                                         "default_ttl", "max_ttl"} (TTLs in seconds)
// The generated password is never stored: the caller gets it once. Statements get it as a
// SCRAM-SHA-256 verifier (`{{password}}`), so the plaintext never reaches PostgreSQL's logs.
//
// Errors: a PostgreSQL server that cannot be reached is unavailable (the lease manager retries a
// revocation); a lease whose connection is gone is failed precondition (the lease manager makes
// it irrevocable at once); while the barrier is sealed every call is unavailable. No message
// holds a password.
// Thread-safety: every method may be called from any thread at once; each call that talks to
// PostgreSQL opens its own connection (no pool) and closes it before returning.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "secrets/keys.h"
#include "secrets/leases.h"
#include "store/store.h"

namespace tessera::secrets {

// The lease kind whose revoker is a DatabaseEngine.
inline constexpr std::string_view kDatabaseLeaseKind = "db";

struct DatabaseOptions {
  // Bounds each connection attempt to a configured PostgreSQL server.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
};

// A credential as issued: the only time the password is seen.
struct DbCredential {
  std::string username;
  std::string password;
  Lease lease;
};

class DatabaseEngine : public Revoker {
 public:
  // Keeps references to every collaborator: they must outlive the engine.
  DatabaseEngine(store::Store& store, const KeyManager& keys, LeaseManager& leases,
                 const core::Clock& clock, DatabaseOptions options = {});

  // Creates or replaces connection `name` ([a-z0-9_-]{1,64}). Body fields:
  //   connection_url     libpq "key=value ..." string or postgres:// URL, without the password
  //                      (a Vault-style "{{username}}:{{password}}@" in a URL is accepted and
  //                      ignored); required.
  //   username           the admin user; required.
  //   password           the admin user's password (default: none).
  //   allowed_roles      role names that may use the connection, or ["*"] (default: none).
  //   verify_connection  log in once before storing (default true).
  // Invalid argument names a bad or unknown field, or says why verification failed (never with
  // the password); nothing is stored then.
  core::Status putConnection(const std::string& tenant, const std::string& name,
                             const nlohmann::json& body);
  // {"connection_url", "username", "allowed_roles", "verify_connection"}: never the password.
  core::Result<nlohmann::json> readConnection(const std::string& tenant,
                                              const std::string& name) const;
  // Not found if there is none. Leases issued through it become irrevocable when they come due.
  core::Status deleteConnection(const std::string& tenant, const std::string& name);
  // The tenant's connection names, sorted (empty if none).
  core::Result<std::vector<std::string>> listConnections(const std::string& tenant) const;

  // Creates or replaces role `name` ([a-z0-9_-]{1,64}). Body fields:
  //   db_name                the connection it uses; required.
  //   creation_statements    SQL statements (a list of strings, or one string); required.
  //   revocation_statements  run instead of the default revocation (optional).
  //   renew_statements       run instead of ALTER ROLE ... VALID UNTIL on renewal (optional).
  //   default_ttl, max_ttl   whole seconds, or durations such as "90s", "30m", "1h30m", "7d"
  //                          (default 1h, or max_ttl if smaller, and 24h); default_ttl <= max_ttl.
  // Statements may use {{name}} (also {{username}}), {{password}} and {{expiration}}; any other
  // {{...}} is refused.
  core::Status putRole(const std::string& tenant, const std::string& name,
                       const nlohmann::json& body);
  // The role as stored, TTLs in seconds.
  core::Result<nlohmann::json> readRole(const std::string& tenant, const std::string& name) const;
  core::Status deleteRole(const std::string& tenant, const std::string& name);
  core::Result<std::vector<std::string>> listRoles(const std::string& tenant) const;

  // Creates a PostgreSQL user for `role` with the role's creation statements (one transaction on
  // the connection's server) and a lease "db/creds/<role>/<random>" for it. `ttl` 0: the role's
  // default_ttl; capped by its max_ttl. Not found for an unknown role; permission denied if the
  // connection's allowed_roles does not list it; failed precondition if the connection is gone;
  // unavailable if PostgreSQL cannot be reached. If the lease cannot be written the user is
  // dropped again.
  core::Result<DbCredential> createCredential(const std::string& tenant, const std::string& role,
                                              core::Duration ttl);

  // Revoker of leases of kind "db". Idempotent: a user that is gone already is a success. By
  // default: NOLOGIN, end the user's sessions, then in one transaction REASSIGN OWNED (to the
  // admin) and DROP OWNED in the connection's database, and DROP ROLE; or the role's
  // revocation_statements. A lease naming a user that does not look generated ("v-...") is
  // refused (invalid argument): lease records are not sealed.
  core::Status revoke(const Lease& lease) override;
  // Moves the user's VALID UNTIL to `expires` (or runs the role's renew_statements).
  core::Status extend(const Lease& lease, core::WallTime expires) override;

  // Checks a connection or role name: [a-z0-9_-]{1,64}.
  static core::Status checkName(std::string_view what, const std::string& name);

 private:
  store::Store& store_;
  const KeyManager& keys_;
  LeaseManager& leases_;
  const core::Clock& clock_;
  const DatabaseOptions options_;
};

// Whole seconds from a number or a Go-style duration string ("90s", "30m", "1h30m", "7d"; a
// string of digits alone is seconds), at most 100 years. Sub-second units are refused. The
// error names `engine` ("db", "aws") and `field`. Shared by the engines' role settings.
core::Result<int64_t> parseSeconds(const nlohmann::json& v, const std::string& field,
                                   std::string_view engine);

// Records the engines keep sealed with the tenant's key, as JSON. Errors name `engine`.
// A tenant name fit for a store key: not empty, no '/'.
core::Status checkEngineTenant(const std::string& tenant, std::string_view engine);
// The record at `key`, decrypted: nullopt if there is none. The plaintext is wiped.
core::Result<std::optional<nlohmann::json>> loadSealed(store::Store& store, const KeyManager& keys,
                                                       const std::string& tenant,
                                                       const std::string& key,
                                                       std::string_view engine);
// Seals `value` with the tenant's key and stores it at `key`. The plaintext is wiped.
core::Status storeSealed(store::Store& store, const KeyManager& keys, const std::string& tenant,
                         const std::string& key, const nlohmann::json& value);

}  // namespace tessera::secrets
