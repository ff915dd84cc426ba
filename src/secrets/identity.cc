#include "secrets/identity.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

#include "audit/crypto.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;
using std::chrono::duration_cast;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Attempts at the record's compare-and-swap before giving up: each failure means another server
// rotated in between, and the next read finds its key, so more than two is already unusual.
constexpr int kCasRetries = 8;
constexpr size_t kJtiBytes = 16;

core::Status checkOptions(const IdentityOptions& o) {
  std::string_view rest = o.issuer;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    rest.remove_prefix(7);
  } else {
    return core::invalidArgument("identity: issuer '" + o.issuer +
                                 "' must be an https:// URL (the `iss` claim and the base of the "
                                 "discovery document's URL)");
  }
  if (rest.empty() || rest.front() == '/') {
    return core::invalidArgument("identity: issuer '" + o.issuer + "' has no host");
  }
  if (rest.find_first_of("?#") != std::string_view::npos || rest.back() == '/') {
    return core::invalidArgument("identity: issuer '" + o.issuer +
                                 "' must have no query, fragment or trailing '/'");
  }
  if (std::any_of(rest.begin(), rest.end(),
                  [](char c) { return static_cast<unsigned char>(c) <= 0x20 || c == 0x7f; })) {
    return core::invalidArgument("identity: issuer '" + o.issuer +
                                 "' contains spaces or control characters");
  }
  if (o.token_ttl < seconds(1)) {
    return core::invalidArgument("identity: token_ttl must be at least one second");
  }
  if (o.key_rotation < seconds(1)) {
    return core::invalidArgument("identity: key_rotation must be at least one second");
  }
  if (o.default_audience.empty()) {
    return core::invalidArgument("identity: default_audience must not be empty");
  }
  return core::Status::ok();
}

// Tenant and workload make up `sub`; a ':' in either would let one tenant's names read as
// another's prefix ("tenant:a:workload:b..." for tenant "a:workload:b").
core::Status checkSubjectPart(std::string_view what, const std::string& value) {
  if (value.empty()) {
    return core::invalidArgument("identity: a token needs a " + std::string(what));
  }
  if (value.find(':') != std::string::npos) {
    return core::invalidArgument("identity: " + std::string(what) + " '" + value +
                                 "' contains ':', which would make the token's sub ambiguous");
  }
  return core::Status::ok();
}

core::Status checkIdentity(const TaskIdentity& who) {
  TESSERA_RETURN_IF_ERROR(checkSubjectPart("tenant", who.tenant));
  TESSERA_RETURN_IF_ERROR(checkSubjectPart("workload", who.workload));
  if (who.task < 0) {
    return core::invalidArgument("identity: task index " + std::to_string(who.task) +
                                 " is negative");
  }
  return core::Status::ok();
}

core::Status sealedError() {
  return core::unavailable(
      "identity: the secrets barrier is sealed; unseal the server to issue or verify workload "
      "identity tokens");
}

}  // namespace

core::Result<std::unique_ptr<IdentityIssuer>> IdentityIssuer::open(store::Store& store,
                                                                   const KeyManager& keys,
                                                                   const core::Clock& clock,
                                                                   IdentityOptions options) {
  TESSERA_RETURN_IF_ERROR(checkOptions(options));
  std::unique_ptr<IdentityIssuer> issuer(
      new IdentityIssuer(store, keys, clock, std::move(options)));
  if (!keys.status().sealed) {
    std::unique_lock lock(issuer->mu_);
    core::Status loaded = issuer->refreshLocked(clock.wallNow());
    // Unavailable (sealed in between, or a busy record): the first call tries again.
    if (!loaded.isOk() && loaded.code() != core::StatusCode::kUnavailable) {
      return loaded;
    }
  }
  return issuer;
}

core::Result<std::string> IdentityIssuer::issue(const TaskIdentity& who,
                                                const std::vector<std::string>& audiences,
                                                core::Duration ttl) {
  TESSERA_RETURN_IF_ERROR(checkIdentity(who));
  for (const std::string& a : audiences) {
    if (a.empty()) {
      return core::invalidArgument("identity: an audience must not be empty");
    }
  }
  if (ttl < core::Duration::zero()) {
    return core::invalidArgument("identity: a token's ttl must not be negative");
  }
  const core::Duration capped =
      ttl == core::Duration::zero() ? options_.token_ttl : std::min(ttl, options_.token_ttl);
  const int64_t ttl_s = duration_cast<seconds>(capped).count();
  if (ttl_s < 1) {
    return core::invalidArgument("identity: a token's ttl must be at least one second");
  }

  const core::WallTime now = clock_.wallNow();
  TESSERA_ASSIGN_OR_RETURN(std::vector<SigningKey> keys, liveKeys(now));
  TESSERA_ASSIGN_OR_RETURN(std::string jti, audit::randomHex(kJtiBytes));

  json aud;
  if (audiences.empty()) {
    aud = options_.default_audience;
  } else if (audiences.size() == 1) {
    aud = audiences.front();
  } else {
    aud = audiences;
  }
  const int64_t iat = duration_cast<seconds>(now.time_since_epoch()).count();
  const json claims = {
      {"iss", options_.issuer},
      {"sub",
       "tenant:" + who.tenant + ":workload:" + who.workload + ":task:" + std::to_string(who.task)},
      {"aud", std::move(aud)},
      {"iat", iat},
      {"nbf", iat},
      {"exp", iat + ttl_s},
      {"jti", std::move(jti)},
      {"tenant", who.tenant},
      {"tessera",
       {{"tenant", who.tenant},
        {"project", who.project},
        {"workload", who.workload},
        {"task", who.task},
        {"node", who.node},
        {"generation", who.generation}}},
  };
  return keys.front().sign(claims);
}

core::Result<json> IdentityIssuer::jwks() {
  TESSERA_ASSIGN_OR_RETURN(std::vector<SigningKey> keys, liveKeys(clock_.wallNow()));
  return jwksDocument(keys);
}

json IdentityIssuer::discoveryDocument() const {
  return {
      {"issuer", options_.issuer},
      {"jwks_uri", options_.issuer + "/.well-known/jwks.json"},
      {"response_types_supported", json::array({"id_token"})},
      {"subject_types_supported", json::array({"public"})},
      {"id_token_signing_alg_values_supported", json::array({"RS256"})},
      {"scopes_supported", json::array({"openid"})},
      {"claims_supported",
       json::array({"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "tenant", "tessera"})},
  };
}

core::Result<json> IdentityIssuer::verify(std::string_view token, const std::string& audience) {
  const core::WallTime now = clock_.wallNow();
  TESSERA_ASSIGN_OR_RETURN(std::vector<SigningKey> keys, liveKeys(now));
  return verifyJwt(token, jwksDocument(keys),
                   {.issuer = options_.issuer, .audience = audience, .now = now});
}

core::Result<std::vector<SigningKey>> IdentityIssuer::liveKeys(core::WallTime now) {
  if (keys_.status().sealed) {
    // Sealed means no secret is usable: forget the private keys too, and read them again after
    // the next unseal.
    std::unique_lock lock(mu_);
    signing_keys_.clear();
    loaded_ = false;
    return sealedError();
  }
  {
    std::shared_lock lock(mu_);
    if (loaded_ && !rotationDueLocked(now)) {
      return liveLocked(now);
    }
  }
  std::unique_lock lock(mu_);
  // Another thread may have loaded or rotated while this one waited.
  if (!loaded_ || rotationDueLocked(now)) {
    TESSERA_RETURN_IF_ERROR(refreshLocked(now));
  }
  return liveLocked(now);
}

bool IdentityIssuer::rotationDueLocked(core::WallTime now) const {
  return signing_keys_.empty() || now >= signing_keys_.front().created + options_.key_rotation;
}

std::vector<SigningKey> IdentityIssuer::liveLocked(core::WallTime now) const {
  // A key signs only while it is the newest and not yet due for rotation, so its last token
  // expires before `created + key_rotation + token_ttl`.
  std::vector<SigningKey> out;
  for (size_t i = 0; i < signing_keys_.size(); ++i) {
    const StoredKey& k = signing_keys_[i];
    if (i == 0 || now < k.created + options_.key_rotation + options_.token_ttl) {
      out.push_back(k.key);
    }
  }
  return out;
}

core::Status IdentityIssuer::refreshLocked(core::WallTime now) {
  const std::string record_key(kOidcKeysKey);
  for (int attempt = 0; attempt < kCasRetries; ++attempt) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<store::KeyValue> kv, store_.get(record_key));
    std::vector<StoredKey> stored;
    int64_t rev = 0;  // A missing key compares as mod revision 0.
    if (kv.has_value()) {
      TESSERA_ASSIGN_OR_RETURN(stored, parseRecord(kv->value));
      rev = kv->mod_revision;
    }
    if (!stored.empty() && now < stored.front().created + options_.key_rotation) {
      signing_keys_ = std::move(stored);
      loaded_ = true;
      return core::Status::ok();
    }

    TESSERA_ASSIGN_OR_RETURN(SigningKey fresh, SigningKey::generate());
    std::vector<StoredKey> next;
    next.push_back({std::move(fresh), core::fromUnixMillis(core::unixMillis(now))});
    for (StoredKey& k : stored) {
      if (now < k.created + options_.key_rotation + options_.token_ttl) {
        next.push_back(std::move(k));
      }
    }
    TESSERA_ASSIGN_OR_RETURN(std::string sealed, sealRecord(next));
    store::Txn txn{
        .compares = {store::Compare::modRevision(record_key, store::Compare::kEqual, rev)},
        .success = {store::Op::put(record_key, std::move(sealed))},
        .failure = {}};
    TESSERA_ASSIGN_OR_RETURN(store::TxnResult r, store_.txn(std::move(txn)));
    if (r.succeeded) {
      signing_keys_ = std::move(next);
      loaded_ = true;
      return core::Status::ok();
    }
    // Another server wrote the record first: read its keys and look again.
  }
  return core::unavailable("identity: the signing keys at " + record_key +
                           " keep changing under concurrent rotations; try again");
}

core::Result<std::vector<IdentityIssuer::StoredKey>> IdentityIssuer::parseRecord(
    std::string_view sealed) const {
  const std::string record_key(kOidcKeysKey);
  auto opened = keys_.decrypt(kSystemTenant, record_key, sealed);
  if (!opened.isOk()) {
    if (opened.status().code() == core::StatusCode::kUnavailable) {
      return opened.status();
    }
    return core::internalError("identity: the signing keys at " + record_key +
                               " do not open: " + opened.status().message());
  }
  std::string plain = std::move(opened).value();
  std::vector<StoredKey> out;
  std::string error;
  try {
    const json j = json::parse(plain);
    for (const json& k : j.at("keys")) {
      auto key = SigningKey::fromPem(k.at("private_key_pem").get<std::string>());
      if (!key.isOk()) {
        error = key.status().message();
        break;
      }
      out.push_back(
          {std::move(key).value(), core::fromUnixMillis(k.at("created_ms").get<int64_t>())});
    }
  } catch (const json::exception& e) {
    error = e.what();
  }
  OPENSSL_cleanse(plain.data(), plain.size());
  if (!error.empty()) {
    return core::internalError("identity: the signing keys at " + record_key +
                               " are malformed: " + error);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const StoredKey& a, const StoredKey& b) { return a.created > b.created; });
  return out;
}

core::Result<std::string> IdentityIssuer::sealRecord(const std::vector<StoredKey>& keys) const {
  json list = json::array();
  for (const StoredKey& k : keys) {
    TESSERA_ASSIGN_OR_RETURN(std::string pem, k.key.privatePem());
    list.push_back(
        {{"private_key_pem", std::move(pem)}, {"created_ms", core::unixMillis(k.created)}});
  }
  std::string plain = json{{"keys", std::move(list)}}.dump();
  auto sealed = keys_.encrypt(kSystemTenant, std::string(kOidcKeysKey), plain);
  OPENSSL_cleanse(plain.data(), plain.size());
  return sealed;
}

}  // namespace tessera::secrets
