// The barrier (issue #6): every secret value is sealed with AES-256-GCM before it reaches the
// store, under a key of the tenant it belongs to, bound to where it is stored.
//
//   Keyring ring = Keyring::generate();          // term 1; ring.rotate() adds term 2, ...
//   Barrier barrier(ring);
//   std::string blob = *barrier.seal("s3cr3t", "team-1", "kv/data/db");
//   std::string back = *barrier.open(blob, "team-1", "kv/data/db");
//
// Sealed format: "tsb1" | term (4 bytes, big-endian) | nonce (12 random bytes) | ciphertext |
// GCM tag (16 bytes). The associated data is the tenant and the storage path, so a blob copied
// to another path or tenant does not open, and any changed byte fails the tag.
// Keys: the keyring holds one random 256-bit key per term; new writes use the newest term, and
// older terms stay readable (online rotation). Each tenant has a random 256-bit salt in the
// keyring (`addTenant`), and its key for a term is HKDF-SHA256(term key, salt = the tenant's
// salt, info = "tessera-barrier-v1 tenant:" + tenant). `shred` deletes the salt: from then on
// no key opens what was sealed for the tenant, even with every term key (crypto-shredding).
//
// The keyring is persisted wrapped by the root key (secrets/keys.h); `toJson`/`fromJson` are that
// record's plaintext form.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::secrets {

using Key = std::array<unsigned char, 32>;

class Keyring {
 public:
  // A keyring with one random key, term 1.
  static core::Result<Keyring> generate();
  // Adds a new random key; new seals use it. Returns its term.
  core::Result<uint32_t> rotate();
  uint32_t activeTerm() const { return active_; }
  // The key of `term`; not found for a term the keyring never had.
  core::Result<Key> key(uint32_t term) const;
  // Gives the tenant its random salt (nothing is sealed for a tenant without one). Adding a
  // tenant that has one changes nothing.
  core::Status addTenant(const std::string& tenant);
  // Crypto-shredding: deletes the tenant's salt, so nothing sealed for it opens any more.
  void shred(const std::string& tenant) { salts_.erase(tenant); }
  // The tenant's salt; not found for a tenant never added, or shredded.
  core::Result<Key> salt(const std::string& tenant) const;
  bool hasTenant(const std::string& tenant) const { return salts_.contains(tenant); }
  // {"active": N, "keys": {"1": hex, ...}, "tenants": {"team-1": hex salt, ...}}; secret.
  nlohmann::json toJson() const;
  static core::Result<Keyring> fromJson(const nlohmann::json& j);

 private:
  std::map<uint32_t, Key> keys_;
  uint32_t active_ = 0;
  std::map<std::string, Key> salts_;
};

// The barrier's format under a raw key (for wrapping keys with keys): `term` is recorded as
// given, `ad` is the associated data.
core::Result<std::string> sealWithKey(const Key& key, uint32_t term, std::string_view plaintext,
                                      std::string_view ad);
core::Result<std::string> openWithKey(const Key& key, std::string_view sealed, std::string_view ad);

// Derived tenant keys by tenant and term, so the HKDF (15 µs with OpenSSL 3, most of what opening
// a small value costs) runs once per tenant and term instead of once per value. Whoever changes a
// tenant's salt (`Keyring::shred`) or drops the keyring (seal) must `forget` or `clear` it.
// Thread-safe; the keys are wiped when forgotten.
class TenantKeyCache {
 public:
  TenantKeyCache() = default;
  TenantKeyCache(const TenantKeyCache&) = delete;
  TenantKeyCache& operator=(const TenantKeyCache&) = delete;
  ~TenantKeyCache() { clear(); }

  std::optional<Key> find(const std::string& tenant, uint32_t term) const;
  void put(const std::string& tenant, uint32_t term, const Key& key);
  void forget(const std::string& tenant);
  void clear();

 private:
  mutable std::mutex mu_;  // Guards keys_.
  std::map<std::pair<std::string, uint32_t>, Key> keys_;
};

class Barrier {
 public:
  // `cache` (optional) must belong to this keyring: it holds keys derived from it.
  explicit Barrier(const Keyring& ring, TenantKeyCache* cache = nullptr)
      : ring_(ring), cache_(cache) {}
  core::Result<std::string> seal(std::string_view plaintext, const std::string& tenant,
                                 const std::string& path) const;
  // Invalid argument: not a sealed value, or tampered with, or sealed for another tenant or
  // path (GCM does not tell these apart). Not found: an unknown term, or a tenant without keys
  // (never added, or shredded).
  core::Result<std::string> open(std::string_view sealed, const std::string& tenant,
                                 const std::string& path) const;
  // The term a sealed value was written with (for a rewrap job); invalid argument if it is not
  // one.
  static core::Result<uint32_t> termOf(std::string_view sealed);

 private:
  core::Result<Key> tenantKey(uint32_t term, const std::string& tenant) const;
  const Keyring& ring_;
  TenantKeyCache* cache_;
};

}  // namespace tessera::secrets
