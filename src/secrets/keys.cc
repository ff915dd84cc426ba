#include "secrets/keys.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>

#include "audit/crypto.h"
#include "secrets/shamir.h"

namespace tessera::secrets {
namespace {

using nlohmann::json;

constexpr std::string_view kSealKey = "/sys/secrets/seal";
constexpr std::string_view kKeyringKey = "/sys/secrets/keyring";
constexpr std::string_view kRootAd = "tessera/root-key";
constexpr std::string_view kKeyringAd = "tessera/keyring";

core::Result<Key> randomKey() {
  Key k{};
  if (RAND_bytes(k.data(), static_cast<int>(k.size())) != 1) {
    return core::unavailable("keys: no randomness");
  }
  return k;
}

std::string_view view(const Key& k) { return {reinterpret_cast<const char*>(k.data()), k.size()}; }

core::Result<Key> keyFromBytes(const std::string& raw, const std::string& what) {
  if (raw.size() != Key{}.size()) {
    return core::invalidArgument(what + " is not a 256-bit key");
  }
  Key k{};
  std::copy(raw.begin(), raw.end(), k.begin());
  return k;
}

core::Result<Key> readKeyFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string hex, audit::readSaltFile(path));
  auto raw = fromHex(hex);
  OPENSSL_cleanse(hex.data(), hex.size());
  if (!raw.isOk() || raw->size() != Key{}.size()) {
    return core::invalidArgument("unseal key file " + path + ": expected 64 hex digits");
  }
  auto k = keyFromBytes(*raw, "unseal key file " + path);
  OPENSSL_cleanse(raw->data(), raw->size());
  return k;
}

const char* modeName(SealOptions::Mode m) {
  return m == SealOptions::Mode::kKeyFile ? "file" : "shamir";
}

}  // namespace

core::Result<std::unique_ptr<KeyManager>> KeyManager::open(store::Store& store,
                                                           SealOptions options) {
  if (options.mode == SealOptions::Mode::kKeyFile && options.key_file.empty()) {
    return core::invalidArgument("secrets: seal mode \"file\" needs a key file");
  }
  std::unique_ptr<KeyManager> m(new KeyManager(store, std::move(options)));
  TESSERA_RETURN_IF_ERROR(m->load());
  return m;
}

KeyManager::~KeyManager() {
  std::unique_lock lock(mu_);
  forgetLocked();
}

core::Status KeyManager::load() {
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(kSealKey));
  if (!r.kvs.empty()) {
    json rec;
    try {
      rec = json::parse(r.kvs[0].value);
    } catch (const json::exception& e) {
      return core::internalError(std::string("secrets: the seal record is corrupt: ") + e.what());
    }
    const std::string mode = rec.value("mode", "");
    if (mode != modeName(options_.mode)) {
      return core::failedPrecondition("secrets: the store was initialized with seal mode \"" +
                                      mode + "\" but the server is configured with \"" +
                                      modeName(options_.mode) + "\"");
    }
    auto root = fromHex(rec.value("root", ""));
    if (!root.isOk()) {
      return core::internalError("secrets: the seal record's root key is corrupt");
    }
    sealed_root_ = *root;
    shares_ = rec.value("shares", 0);
    threshold_ = rec.value("threshold", 0);
    initialized_ = true;
  }
  if (options_.mode != SealOptions::Mode::kKeyFile) {
    return core::Status::ok();
  }
  if (!initialized_) {
    // A new store: a key file kept from before is used, else one is made.
    if (!std::filesystem::exists(options_.key_file)) {
      TESSERA_RETURN_IF_ERROR(audit::createSaltFile(options_.key_file).status());
    }
    TESSERA_ASSIGN_OR_RETURN(const Key unseal, readKeyFile(options_.key_file));
    TESSERA_ASSIGN_OR_RETURN(const Key root, randomKey());
    TESSERA_ASSIGN_OR_RETURN(Keyring ring, Keyring::generate());
    TESSERA_RETURN_IF_ERROR(ring.addTenant(kSystemTenant));
    TESSERA_ASSIGN_OR_RETURN(std::string wrapped, sealWithKey(unseal, 0, view(root), kRootAd));
    std::unique_lock lock(mu_);
    root_ = root;
    TESSERA_RETURN_IF_ERROR(persistKeyringLocked(ring));
    const json rec = {{"mode", "file"}, {"shares", 1}, {"threshold", 1}, {"root", toHex(wrapped)}};
    TESSERA_RETURN_IF_ERROR(store_.put(kSealKey, rec.dump()).status());
    sealed_root_ = wrapped;
    shares_ = threshold_ = 1;
    initialized_ = true;
    ring_ = std::make_unique<Keyring>(std::move(ring));
    return core::Status::ok();
  }
  return unsealWithKeyFile();
}

core::Status KeyManager::unsealWithKeyFile() {
  if (options_.mode != SealOptions::Mode::kKeyFile) {
    return core::failedPrecondition("secrets: the seal mode is shamir; unseal with shares");
  }
  TESSERA_ASSIGN_OR_RETURN(const Key unseal, readKeyFile(options_.key_file));
  std::unique_lock lock(mu_);
  return unsealLocked(unseal);
}

core::Status KeyManager::unsealLocked(const Key& unseal_key) {
  auto root_raw = openWithKey(unseal_key, sealed_root_, kRootAd);
  if (!root_raw.isOk()) {
    return core::permissionDenied(
        "secrets: the unseal key does not open the root key (wrong key file or shares)");
  }
  TESSERA_ASSIGN_OR_RETURN(const Key root, keyFromBytes(*root_raw, "the root key"));
  OPENSSL_cleanse(root_raw->data(), root_raw->size());
  TESSERA_ASSIGN_OR_RETURN(store::RangeResult r, store_.range(kKeyringKey));
  if (r.kvs.empty()) {
    return core::internalError("secrets: the keyring record is missing from the store");
  }
  auto plain = openWithKey(root, r.kvs[0].value, kKeyringAd);
  if (!plain.isOk()) {
    return core::internalError("secrets: the keyring record does not open (tampered with?)");
  }
  json j;
  try {
    j = json::parse(*plain);
  } catch (const json::exception&) {
    return core::internalError("secrets: the keyring record is not JSON");
  }
  OPENSSL_cleanse(plain->data(), plain->size());
  TESSERA_ASSIGN_OR_RETURN(Keyring ring, Keyring::fromJson(j));
  root_ = root;
  ring_ = std::make_unique<Keyring>(std::move(ring));
  given_.clear();
  return core::Status::ok();
}

core::Status KeyManager::persistKeyringLocked(const Keyring& ring) {
  std::string plain = ring.toJson().dump();
  auto wrapped = sealWithKey(*root_, 0, plain, kKeyringAd);
  OPENSSL_cleanse(plain.data(), plain.size());
  TESSERA_RETURN_IF_ERROR(wrapped.status());
  return store_.put(kKeyringKey, *wrapped).status();
}

void KeyManager::forgetLocked() {
  if (root_) {
    OPENSSL_cleanse(root_->data(), root_->size());
    root_.reset();
  }
  ring_.reset();  // Keyring's keys are plain arrays; cleared with the allocation.
  derived_.clear();
  for (auto& [x, s] : given_) {
    OPENSSL_cleanse(s.data(), s.size());
  }
  given_.clear();
}

SealStatus KeyManager::status() const {
  std::shared_lock lock(mu_);
  SealStatus s;
  s.initialized = initialized_;
  s.sealed = ring_ == nullptr;
  s.mode = modeName(options_.mode);
  s.shares = shares_;
  s.threshold = threshold_;
  s.progress = static_cast<int>(given_.size());
  s.term = ring_ ? ring_->activeTerm() : 0;
  return s;
}

core::Result<std::vector<std::string>> KeyManager::initialize(int shares, int threshold) {
  if (options_.mode != SealOptions::Mode::kShamir) {
    return core::failedPrecondition(
        "secrets: the seal mode is \"file\"; the server initialized itself with its key file");
  }
  std::unique_lock lock(mu_);
  if (initialized_) {
    return core::failedPrecondition("secrets: already initialized");
  }
  TESSERA_ASSIGN_OR_RETURN(Key unseal, randomKey());
  TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> parts,
                           splitSecret(view(unseal), shares, threshold));
  TESSERA_ASSIGN_OR_RETURN(const Key root, randomKey());
  TESSERA_ASSIGN_OR_RETURN(Keyring ring, Keyring::generate());
  TESSERA_RETURN_IF_ERROR(ring.addTenant(kSystemTenant));
  TESSERA_ASSIGN_OR_RETURN(std::string wrapped, sealWithKey(unseal, 0, view(root), kRootAd));
  OPENSSL_cleanse(unseal.data(), unseal.size());
  root_ = root;
  TESSERA_RETURN_IF_ERROR(persistKeyringLocked(ring));
  const json rec = {
      {"mode", "shamir"}, {"shares", shares}, {"threshold", threshold}, {"root", toHex(wrapped)}};
  TESSERA_RETURN_IF_ERROR(store_.put(kSealKey, rec.dump()).status());
  sealed_root_ = wrapped;
  shares_ = shares;
  threshold_ = threshold;
  initialized_ = true;
  ring_ = std::make_unique<Keyring>(std::move(ring));
  std::vector<std::string> out;
  out.reserve(parts.size());
  for (std::string& p : parts) {
    out.push_back(toHex(p));
    OPENSSL_cleanse(p.data(), p.size());
  }
  return out;
}

core::Result<SealStatus> KeyManager::unseal(const std::string& share_hex) {
  {
    std::unique_lock lock(mu_);
    if (!initialized_) {
      return core::failedPrecondition("secrets: not initialized; run `tessera operator init`");
    }
    if (options_.mode != SealOptions::Mode::kShamir) {
      // Key-file mode: the key file is read again (after `operator seal`); no share is needed.
      if (ring_ == nullptr) {
        auto key = readKeyFile(options_.key_file);
        TESSERA_RETURN_IF_ERROR(key.status());
        TESSERA_RETURN_IF_ERROR(unsealLocked(*key));
      }
    } else if (ring_ == nullptr) {
      auto raw = fromHex(share_hex);
      if (!raw.isOk() || raw->size() != Key{}.size() + 1) {
        return core::invalidArgument("secrets: not an unseal share (expected 66 hex digits)");
      }
      const auto x = static_cast<uint8_t>(raw->back());
      given_[x] = *raw;
      OPENSSL_cleanse(raw->data(), raw->size());
      if (static_cast<int>(given_.size()) >= threshold_) {
        std::vector<std::string> parts;
        parts.reserve(given_.size());
        for (const auto& [px, s] : given_) {
          parts.push_back(s);
        }
        auto secret = combineShares(parts);
        for (std::string& p : parts) {
          OPENSSL_cleanse(p.data(), p.size());
        }
        core::Status st = secret.status();
        if (st.isOk()) {
          auto key = keyFromBytes(*secret, "the combined shares");
          OPENSSL_cleanse(secret->data(), secret->size());
          st = key.isOk() ? unsealLocked(*key) : key.status();
        }
        if (!st.isOk()) {
          forgetLocked();
          return core::permissionDenied(
              "secrets: the shares given do not reconstruct the unseal key; start again");
        }
      }
    }
  }
  return status();
}

void KeyManager::resetUnseal() {
  std::unique_lock lock(mu_);
  for (auto& [x, s] : given_) {
    OPENSSL_cleanse(s.data(), s.size());
  }
  given_.clear();
}

void KeyManager::seal() {
  std::unique_lock lock(mu_);
  forgetLocked();
}

core::Status KeyManager::checkQuorum(const std::vector<std::string>& shares_hex) const {
  std::shared_lock lock(mu_);
  if (!initialized_) {
    return core::failedPrecondition("secrets: not initialized");
  }
  std::string unseal;
  if (options_.mode == SealOptions::Mode::kKeyFile) {
    if (shares_hex.size() != 1) {
      return core::invalidArgument("secrets: give the unseal key file's contents, once");
    }
    TESSERA_ASSIGN_OR_RETURN(unseal, fromHex(shares_hex[0]));
  } else {
    if (static_cast<int>(shares_hex.size()) < threshold_) {
      return core::invalidArgument("secrets: " + std::to_string(threshold_) +
                                   " unseal shares are needed, " +
                                   std::to_string(shares_hex.size()) + " given");
    }
    std::vector<std::string> parts;
    parts.reserve(shares_hex.size());
    for (const std::string& h : shares_hex) {
      TESSERA_ASSIGN_OR_RETURN(std::string raw, fromHex(h));
      parts.push_back(std::move(raw));
    }
    auto combined = combineShares(parts);
    for (std::string& p : parts) {
      OPENSSL_cleanse(p.data(), p.size());
    }
    TESSERA_ASSIGN_OR_RETURN(unseal, std::move(combined));
  }
  auto key = keyFromBytes(unseal, "the unseal key");
  OPENSSL_cleanse(unseal.data(), unseal.size());
  if (!key.isOk() || !openWithKey(*key, sealed_root_, kRootAd).isOk()) {
    return core::permissionDenied("secrets: the shares given do not reconstruct the unseal key");
  }
  return core::Status::ok();
}

core::Result<uint32_t> KeyManager::rotate() {
  std::unique_lock lock(mu_);
  if (ring_ == nullptr) {
    return core::unavailable("secrets are sealed");
  }
  Keyring next = *ring_;
  TESSERA_ASSIGN_OR_RETURN(const uint32_t term, next.rotate());
  TESSERA_RETURN_IF_ERROR(persistKeyringLocked(next));
  *ring_ = std::move(next);
  return term;
}

core::Status KeyManager::addTenant(const std::string& tenant) {
  {
    std::shared_lock lock(mu_);
    if (ring_ != nullptr && ring_->hasTenant(tenant)) {
      return core::Status::ok();
    }
  }
  std::unique_lock lock(mu_);
  if (ring_ == nullptr) {
    return core::unavailable("secrets are sealed");
  }
  if (ring_->hasTenant(tenant)) {
    return core::Status::ok();
  }
  Keyring next = *ring_;
  TESSERA_RETURN_IF_ERROR(next.addTenant(tenant));
  TESSERA_RETURN_IF_ERROR(persistKeyringLocked(next));
  *ring_ = std::move(next);
  return core::Status::ok();
}

core::Status KeyManager::shred(const std::string& tenant) {
  std::unique_lock lock(mu_);
  if (ring_ == nullptr) {
    return core::unavailable("secrets are sealed");
  }
  Keyring next = *ring_;
  next.shred(tenant);
  TESSERA_RETURN_IF_ERROR(persistKeyringLocked(next));
  *ring_ = std::move(next);
  derived_.forget(tenant);
  return core::Status::ok();
}

core::Result<std::string> KeyManager::encrypt(const std::string& tenant, const std::string& key,
                                              std::string_view plaintext) const {
  std::shared_lock lock(mu_);
  if (ring_ == nullptr) {
    return core::unavailable("secrets are sealed; unseal with `tessera operator unseal`");
  }
  return Barrier(*ring_, &derived_).seal(plaintext, tenant, key);
}

core::Result<std::string> KeyManager::decrypt(const std::string& tenant, const std::string& key,
                                              std::string_view sealed) const {
  std::shared_lock lock(mu_);
  if (ring_ == nullptr) {
    return core::unavailable("secrets are sealed; unseal with `tessera operator unseal`");
  }
  return Barrier(*ring_, &derived_).open(sealed, tenant, key);
}

uint32_t KeyManager::activeTerm() const {
  std::shared_lock lock(mu_);
  return ring_ ? ring_->activeTerm() : 0;
}

}  // namespace tessera::secrets
