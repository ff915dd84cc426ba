// The key chain behind the barrier, and the seal (issue #6; docs/secrets.md).
//
//   unseal key --wraps--> root key --wraps--> keyring (one key per term, one salt per tenant)
//
// The unseal key is never stored: it is either a key file (`mode = "file"`: 64 hex digits, mode
// 0600, created on the first start; the server unseals itself at start) or split into Shamir
// shares by `tessera operator init -key-shares=5 -key-threshold=3` (`mode = "shamir"`: the
// server starts sealed, and `tessera operator unseal` takes one share at a time). Store records:
//   /sys/secrets/seal     {"mode", "shares", "threshold", "root": hex(root key sealed by unseal
//   key)} /sys/secrets/keyring  the keyring's JSON, sealed by the root key (raw bytes)
// Sealed, the manager holds no key: every encrypt/decrypt answers unavailable ("sealed").
//
// Values are sealed for a tenant and a storage key (the associated data), so a value copied to
// another key does not open. System records use the tenant "" (kSystemTenant).
// Thread-safe: reads (encrypt/decrypt) share a lock; changes to the keyring take it alone and
// are on disk before they return.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "secrets/barrier.h"
#include "store/store.h"

namespace tessera::secrets {

inline const std::string kSystemTenant;  // NOLINT(readability-identifier-naming)

struct SealOptions {
  enum class Mode { kKeyFile, kShamir };
  Mode mode = Mode::kKeyFile;
  std::string key_file;  // kKeyFile: where the unseal key is (created if the store is new).
};

struct SealStatus {
  bool initialized = false;
  bool sealed = true;
  std::string mode;  // "file" or "shamir".
  int shares = 0;
  int threshold = 0;
  int progress = 0;   // Shares given so far towards the next unseal.
  uint32_t term = 0;  // The keyring's active term (0 while sealed).
};

class KeyManager {
 public:
  // Reads the seal record. Key-file mode initializes a new store (creating the key file) and
  // unseals at once; Shamir mode stays sealed (and uninitialized on a new store).
  static core::Result<std::unique_ptr<KeyManager>> open(store::Store& store, SealOptions options);

  SealStatus status() const;
  // Shamir mode, new store only: makes the unseal key, root key and keyring and returns the
  // unseal key's shares (hex). The manager is unsealed afterwards.
  core::Result<std::vector<std::string>> initialize(int shares, int threshold);
  // Shamir mode: adds one share (hex). At the threshold the shares are combined and tried;
  // wrong ones give an error and progress starts again. Key-file mode: reads the key file again
  // (the share is ignored). Unsealed already: nothing to do.
  core::Result<SealStatus> unseal(const std::string& share_hex);
  void resetUnseal();
  // Forgets every key (the root key, the keyring) until the next unseal. In key-file mode the
  // next unseal is a restart (or `unsealWithKeyFile`).
  void seal();
  core::Status unsealWithKeyFile();
  // True if the shares (hex; for key-file mode, the key file's hex) reconstruct the unseal key:
  // the quorum `tessera operator generate-root` asks for.
  core::Status checkQuorum(const std::vector<std::string>& shares_hex) const;

  // A new keyring term for new writes; older terms stay readable. Returns the new term.
  core::Result<uint32_t> rotate();
  // Gives a tenant its keys (idempotent); shred deletes them for good (crypto-shredding).
  core::Status addTenant(const std::string& tenant);
  core::Status shred(const std::string& tenant);

  core::Result<std::string> encrypt(const std::string& tenant, const std::string& key,
                                    std::string_view plaintext) const;
  core::Result<std::string> decrypt(const std::string& tenant, const std::string& key,
                                    std::string_view sealed) const;
  uint32_t activeTerm() const;

  ~KeyManager();
  KeyManager(const KeyManager&) = delete;
  KeyManager& operator=(const KeyManager&) = delete;

 private:
  KeyManager(store::Store& store, SealOptions options)
      : store_(store), options_(std::move(options)) {}
  core::Status load();
  // Opens the root key and the keyring with `unseal_key`. Requires mu_ held alone.
  core::Status unsealLocked(const Key& unseal_key);
  core::Status persistKeyringLocked(const Keyring& ring);
  void forgetLocked();

  store::Store& store_;
  const SealOptions options_;
  mutable std::shared_mutex mu_;  // Guards everything below.
  bool initialized_ = false;
  int shares_ = 0;
  int threshold_ = 0;
  std::string sealed_root_;        // The root key sealed by the unseal key.
  std::optional<Key> root_;        // Unsealed only.
  std::unique_ptr<Keyring> ring_;  // Unsealed only.
  // Keys derived from ring_ (cleared with it; a shredded tenant's are forgotten). Has its own
  // lock, as encrypt and decrypt fill it under mu_ shared.
  mutable TenantKeyCache derived_;
  std::map<uint8_t, std::string> given_;  // Shamir shares given so far, by x.
};

}  // namespace tessera::secrets
