// Workload identity (issue #6): the server is an OIDC issuer, and every task can get a short-lived
// RS256 JWT that names it. Outside systems trust the issuer once (its discovery document and JWKS,
// served at `<issuer>/.well-known/openid-configuration` and `<issuer>/.well-known/jwks.json`) and
// then accept its tokens, e.g. AWS STS AssumeRoleWithWebIdentity.
//
//   auto issuer = *IdentityIssuer::open(store, keys, clock, {.issuer = "https://tessera.example"});
//   std::string token = *issuer->issue({.tenant = "team-1", .workload = "train", .task = 3},
//                                      {"sts.amazonaws.com"}, std::chrono::minutes(15));
//
// Claims: iss; sub = "tenant:<tenant>:workload:<workload>:task:<n>"; aud (a string for one
// audience, an array for several); iat, nbf, exp (whole seconds); jti (random); tenant; and
// "tessera": {tenant, project, workload, task, node, generation}. Tenant and workload names may
// not contain ':', so a sub prefix such as "tenant:team-1:workload:" names exactly one tenant.
//
// AWS: an IAM role's trust policy can condition only on the standard claims, as
// `<issuer without "https://">:sub` and `<issuer without "https://">:aud`, e.g.
//   "StringEquals": {"tessera.example:aud": "sts.amazonaws.com"},
//   "StringLike":   {"tessera.example:sub": "tenant:team-1:workload:train:task:*"}
// so the tenant and workload are in `sub`; the "tessera" object is for relying parties that read
// private claims. AWS fetches the discovery document and JWKS itself: the issuer must be an https
// URL reachable from AWS with a publicly trusted certificate, and AWS's guide says it should
// carry no port.
//
// Signing keys (RSA 2048) exist in the store only sealed by the KeyManager, as one record at
// kOidcKeysKey. The first call that needs a key makes one if there is none. Rotation: once the
// newest key is `key_rotation` old, the next call makes a new one for new tokens; an older key
// stays in the JWKS until every token it can have signed has expired (`key_rotation` +
// `token_ttl` after it was made), and leaves the record at the next rotation. The record is
// written with a compare-and-swap, so servers sharing a store agree on one new key. While the
// KeyManager is sealed every call that needs keys answers unavailable, and the keys held in
// memory are dropped; after unsealing they are read again.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "secrets/jwt.h"
#include "secrets/keys.h"
#include "store/store.h"

namespace tessera::secrets {

// The store key of the signing keys' record, sealed for kSystemTenant with this key as its
// associated data.
inline constexpr std::string_view kOidcKeysKey = "/sys/secrets/oidc/keys";

struct IdentityOptions {
  // The `iss` claim and the base of the discovery URLs: "https://host[/path]", no trailing '/',
  // query or fragment ("http://" is accepted for tests and local relying parties only).
  std::string issuer;
  // The longest lifetime a token gets (and the default); at least one second.
  core::Duration token_ttl = std::chrono::hours(1);
  // A new signing key after this long; at least one second.
  core::Duration key_rotation = std::chrono::hours(24 * 7);
  // The audience of tokens issued for no audience in particular.
  std::string default_audience = "tessera";
};

// Who a token is for.
struct TaskIdentity {
  std::string tenant;    // Required; no ':'.
  std::string project;   // May be empty.
  std::string workload;  // Required; no ':'.
  int task = 0;          // The task's index in its workload; not negative.
  std::string node;      // Where the task runs; may be empty.
  uint64_t generation = 0;
};

// Issues and verifies workload identity tokens. Thread-safe: every method may be called from many
// threads at once; signing shares a lock, and only loading or rotating the keys takes it alone.
class IdentityIssuer {
 public:
  // Loads (or on a new store, makes and stores) the signing keys if `keys` is unsealed; if it is
  // sealed, that waits for the first call that needs them. Invalid argument for unusable
  // options; an error if the stored record does not open. `store`, `keys` and `clock` must
  // outlive the issuer.
  static core::Result<std::unique_ptr<IdentityIssuer>> open(store::Store& store,
                                                            const KeyManager& keys,
                                                            const core::Clock& clock,
                                                            IdentityOptions options);

  // A signed token for `who`, for `audiences` (none: the default audience), valid for `ttl`
  // from now (0: options.token_ttl; longer than that is cut to it). Invalid argument for a bad
  // identity, an empty audience or a ttl under one second; unavailable while sealed.
  core::Result<std::string> issue(const TaskIdentity& who,
                                  const std::vector<std::string>& audiences,
                                  core::Duration ttl = core::Duration::zero());

  // {"keys":[...]}: the public keys whose tokens may still be valid, newest (the signing one)
  // first. Unavailable while sealed.
  core::Result<nlohmann::json> jwks();

  // The OpenID Provider metadata served at `<issuer>/.well-known/openid-configuration`.
  nlohmann::json discoveryDocument() const;

  // The claims of `token` if it is one of ours (see verifyJwt), for `audience`, valid now by the
  // clock's wall time. Unauthenticated if refused; unavailable while sealed.
  core::Result<nlohmann::json> verify(std::string_view token, const std::string& audience);

  const IdentityOptions& options() const { return options_; }

  IdentityIssuer(const IdentityIssuer&) = delete;
  IdentityIssuer& operator=(const IdentityIssuer&) = delete;

 private:
  struct StoredKey {
    SigningKey key;
    core::WallTime created;  // Whole milliseconds, as stored.
  };

  IdentityIssuer(store::Store& store, const KeyManager& keys, const core::Clock& clock,
                 IdentityOptions options)
      : store_(store), keys_(keys), clock_(clock), options_(std::move(options)) {}

  // The keys to publish at `now`, newest first, loading or rotating them first if needed.
  core::Result<std::vector<SigningKey>> liveKeys(core::WallTime now);
  // Reads the record, rotates it if the newest key is due, and caches it. Requires mu_ held
  // alone.
  core::Status refreshLocked(core::WallTime now);
  bool rotationDueLocked(core::WallTime now) const;
  std::vector<SigningKey> liveLocked(core::WallTime now) const;
  core::Result<std::vector<StoredKey>> parseRecord(std::string_view sealed) const;
  core::Result<std::string> sealRecord(const std::vector<StoredKey>& keys) const;

  store::Store& store_;
  const KeyManager& keys_;
  const core::Clock& clock_;
  const IdentityOptions options_;

  mutable std::shared_mutex mu_;  // Guards loaded_ and signing_keys_.
  bool loaded_ = false;
  std::vector<StoredKey> signing_keys_;  // The record's keys, newest first.
};

}  // namespace tessera::secrets
