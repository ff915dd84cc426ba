#include "secrets/barrier.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>

#include "secrets/shamir.h"

namespace tessera::secrets {
namespace {

constexpr std::string_view kMagic = "tsb1";
constexpr size_t kNonce = 12;
constexpr size_t kTag = 16;
constexpr size_t kHeader = 4 + 4 + kNonce;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)>;

// Tenant, a NUL, path: the NUL keeps ("a", "b/c") apart from ("a\0b", "c")-like splits, and
// tenant names cannot hold one.
std::string associatedData(const std::string& tenant, const std::string& path) {
  std::string ad = tenant;
  ad.push_back('\0');
  ad += path;
  return ad;
}

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

core::Result<Keyring> Keyring::generate() {
  Keyring ring;
  TESSERA_RETURN_IF_ERROR(ring.rotate().status());
  return ring;
}

core::Result<uint32_t> Keyring::rotate() {
  Key k{};
  if (RAND_bytes(k.data(), static_cast<int>(k.size())) != 1) {
    return core::unavailable("keyring: no randomness for a new key");
  }
  ++active_;
  keys_[active_] = k;
  return active_;
}

core::Status Keyring::addTenant(const std::string& tenant) {
  if (salts_.contains(tenant)) {
    return core::Status::ok();
  }
  Key salt{};
  if (RAND_bytes(salt.data(), static_cast<int>(salt.size())) != 1) {
    return core::unavailable("keyring: no randomness for tenant '" + tenant + "'");
  }
  salts_[tenant] = salt;
  return core::Status::ok();
}

core::Result<Key> Keyring::salt(const std::string& tenant) const {
  auto it = salts_.find(tenant);
  if (it == salts_.end()) {
    return core::notFound("keyring: tenant '" + tenant +
                          "' has no keys (never added, or shredded)");
  }
  return it->second;
}

core::Result<Key> Keyring::key(uint32_t term) const {
  auto it = keys_.find(term);
  if (it == keys_.end()) {
    return core::notFound("keyring: no key for term " + std::to_string(term));
  }
  return it->second;
}

std::optional<Key> TenantKeyCache::find(const std::string& tenant, uint32_t term) const {
  std::lock_guard lock(mu_);
  auto it = keys_.find({tenant, term});
  if (it == keys_.end()) {
    return std::nullopt;
  }
  return it->second;
}

void TenantKeyCache::put(const std::string& tenant, uint32_t term, const Key& key) {
  std::lock_guard lock(mu_);
  keys_[{tenant, term}] = key;
}

void TenantKeyCache::forget(const std::string& tenant) {
  std::lock_guard lock(mu_);
  for (auto it = keys_.lower_bound({tenant, 0}); it != keys_.end() && it->first.first == tenant;) {
    OPENSSL_cleanse(it->second.data(), it->second.size());
    it = keys_.erase(it);
  }
}

void TenantKeyCache::clear() {
  std::lock_guard lock(mu_);
  for (auto& [id, key] : keys_) {
    OPENSSL_cleanse(key.data(), key.size());
  }
  keys_.clear();
}

core::Result<Key> Barrier::tenantKey(uint32_t term, const std::string& tenant) const {
  if (cache_ != nullptr) {
    if (auto cached = cache_->find(tenant, term)) {
      return *cached;
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const Key salt, ring_.salt(tenant));
  TESSERA_ASSIGN_OR_RETURN(const Key base, ring_.key(term));
  PkeyCtx ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), &EVP_PKEY_CTX_free);
  const std::string info = "tessera-barrier-v1 tenant:" + tenant;
  Key out{};
  size_t len = out.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt.data(), static_cast<int>(salt.size())) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), base.data(), static_cast<int>(base.size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), bytes(info), static_cast<int>(info.size())) <= 0 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &len) <= 0 || len != out.size()) {
    return core::unavailable("barrier: HKDF failed");
  }
  if (cache_ != nullptr) {
    cache_->put(tenant, term, out);
  }
  return out;
}

core::Result<std::string> sealWithKey(const Key& key, uint32_t term, std::string_view plaintext,
                                      std::string_view ad) {
  std::string out(kHeader + plaintext.size() + kTag, '\0');
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  std::copy(kMagic.begin(), kMagic.end(), out.begin());
  for (int i = 0; i < 4; ++i) {
    o[4 + i] = static_cast<unsigned char>(term >> (24 - 8 * i));
  }
  unsigned char* nonce = o + 8;
  if (RAND_bytes(nonce, kNonce) != 1) {
    return core::unavailable("barrier: no randomness for a nonce");
  }
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int len = 0;
  int total = 0;
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, bytes(ad), static_cast<int>(ad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o + kHeader, &len, bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1) {
    return core::unavailable("barrier: encryption failed");
  }
  total = len;
  if (EVP_EncryptFinal_ex(ctx.get(), o + kHeader + total, &len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag, o + kHeader + plaintext.size()) !=
          1) {
    return core::unavailable("barrier: encryption failed");
  }
  return out;
}

core::Result<std::string> openWithKey(const Key& key, std::string_view sealed,
                                      std::string_view ad) {
  TESSERA_RETURN_IF_ERROR(Barrier::termOf(sealed).status());
  const size_t n = sealed.size() - kHeader - kTag;
  std::string out(n, '\0');
  const unsigned char* nonce = bytes(sealed) + 8;
  std::array<unsigned char, kTag> tag{};
  std::copy_n(bytes(sealed) + kHeader + n, kTag, tag.begin());
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  int len = 0;
  const bool ok =
      ctx && EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.data(), nonce) == 1 &&
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, bytes(ad), static_cast<int>(ad.size())) == 1 &&
      EVP_DecryptUpdate(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &len,
                        bytes(sealed) + kHeader, static_cast<int>(n)) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag.data()) == 1 &&
      EVP_DecryptFinal_ex(ctx.get(), reinterpret_cast<unsigned char*>(out.data()) + len, &len) == 1;
  if (!ok) {
    OPENSSL_cleanse(out.data(), out.size());
    return core::invalidArgument("authentication failed");
  }
  return out;
}

core::Result<std::string> Barrier::seal(std::string_view plaintext, const std::string& tenant,
                                        const std::string& path) const {
  const uint32_t term = ring_.activeTerm();
  TESSERA_ASSIGN_OR_RETURN(const Key key, tenantKey(term, tenant));
  return sealWithKey(key, term, plaintext, associatedData(tenant, path));
}

core::Result<uint32_t> Barrier::termOf(std::string_view sealed) {
  if (sealed.size() < kHeader + kTag || sealed.substr(0, 4) != kMagic) {
    return core::invalidArgument("barrier: not a sealed value");
  }
  uint32_t term = 0;
  for (size_t i = 4; i < 8; ++i) {
    term = (term << 8) | static_cast<unsigned char>(sealed[i]);
  }
  return term;
}

core::Result<std::string> Barrier::open(std::string_view sealed, const std::string& tenant,
                                        const std::string& path) const {
  TESSERA_ASSIGN_OR_RETURN(const uint32_t term, termOf(sealed));
  TESSERA_ASSIGN_OR_RETURN(const Key key, tenantKey(term, tenant));
  auto out = openWithKey(key, sealed, associatedData(tenant, path));
  if (!out.isOk()) {
    return core::invalidArgument("barrier: cannot open the value at '" + path + "' of tenant '" +
                                 tenant +
                                 "': authentication failed (tampered with, or sealed for "
                                 "another path or tenant)");
  }
  return out;
}

namespace {

std::string hexOf(const Key& k) {
  return toHex(std::string_view(reinterpret_cast<const char*>(k.data()), k.size()));
}

core::Result<Key> keyOf(const nlohmann::json& j, const std::string& what) {
  if (!j.is_string()) {
    return core::invalidArgument("keyring: " + what + " is not a string");
  }
  auto raw = fromHex(j.get<std::string>());
  if (!raw.isOk() || raw->size() != Key{}.size()) {
    return core::invalidArgument("keyring: " + what + " is not 64 hex digits");
  }
  Key k{};
  std::copy(raw->begin(), raw->end(), k.begin());
  OPENSSL_cleanse(raw->data(), raw->size());
  return k;
}

}  // namespace

nlohmann::json Keyring::toJson() const {
  nlohmann::json keys = nlohmann::json::object();
  for (const auto& [term, k] : keys_) {
    keys[std::to_string(term)] = hexOf(k);
  }
  nlohmann::json tenants = nlohmann::json::object();
  for (const auto& [tenant, s] : salts_) {
    tenants[tenant] = hexOf(s);
  }
  return {{"active", active_}, {"keys", keys}, {"tenants", tenants}};
}

core::Result<Keyring> Keyring::fromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("active") || !j["active"].is_number_unsigned() ||
      !j.contains("keys") || !j["keys"].is_object() || !j.contains("tenants") ||
      !j["tenants"].is_object()) {
    return core::invalidArgument("keyring: malformed record");
  }
  Keyring ring;
  ring.active_ = j["active"].get<uint32_t>();
  for (const auto& [term, hex] : j["keys"].items()) {
    uint32_t t = 0;
    try {
      t = static_cast<uint32_t>(std::stoul(term));
    } catch (const std::exception&) {
      return core::invalidArgument("keyring: bad term '" + term + "'");
    }
    TESSERA_ASSIGN_OR_RETURN(ring.keys_[t], keyOf(hex, "key of term " + term));
  }
  for (const auto& [tenant, hex] : j["tenants"].items()) {
    TESSERA_ASSIGN_OR_RETURN(ring.salts_[tenant], keyOf(hex, "salt of tenant " + tenant));
  }
  if (!ring.keys_.contains(ring.active_)) {
    return core::invalidArgument("keyring: no key for the active term");
  }
  return ring;
}

}  // namespace tessera::secrets
