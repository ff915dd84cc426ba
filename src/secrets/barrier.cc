#include "secrets/barrier.h"

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

#include <algorithm>
#include <memory>

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

core::Result<Key> Barrier::tenantKey(uint32_t term, const std::string& tenant) const {
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
  return out;
}

core::Result<std::string> Barrier::seal(std::string_view plaintext, const std::string& tenant,
                                        const std::string& path) const {
  const uint32_t term = ring_.activeTerm();
  TESSERA_ASSIGN_OR_RETURN(const Key key, tenantKey(term, tenant));
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
  const std::string ad = associatedData(tenant, path);
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
  const size_t n = sealed.size() - kHeader - kTag;
  std::string out(n, '\0');
  const std::string ad = associatedData(tenant, path);
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
    return core::invalidArgument("barrier: cannot open the value at '" + path + "' of tenant '" +
                                 tenant +
                                 "': authentication failed (tampered with, or sealed for "
                                 "another path or tenant)");
  }
  return out;
}

}  // namespace tessera::secrets
