// The cryptography of the audit log, on OpenSSL 3: SHA-256 for the hash chain, HMAC-SHA256 for
// sensitive values, Ed25519 for signed checkpoints. Thin wrappers that return hex strings and
// never throw; the formulas here are the ones documented for auditors (see audit/record.h).
//
//   std::string h = sha256Hex("abc");                  // "ba7816bf..."
//   std::string m = hmacValue(salt, "s.token-value");  // "hmac-sha256:5bdc..."
//   auto pair = generateKeyPairPem();                  // Ed25519, PKCS#8 / SubjectPublicKeyInfo
//   auto key = SigningKey::fromPem(pair->private_pem);
//   auto sig = (*key)->signHex("message");
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY, kept out of this header.

namespace tessera::audit {

// Prefix of every HMAC'd value in an audit record, as in Vault's audit devices.
inline constexpr std::string_view kHmacPrefix = "hmac-sha256:";

// Lowercase hex of SHA-256(data).
std::string sha256Hex(std::string_view data);

// Standard base64 with padding (RFC 4648 §4), as Kubernetes' Secret data and Docker's config
// carry bytes. Decoding ignores trailing whitespace; anything else not base64 is an error.
std::string base64Encode(std::string_view bytes);
core::Result<std::string> base64Decode(std::string_view text);

// "hmac-sha256:" + lowercase hex of HMAC-SHA256(key = the salt's bytes, message = the value's
// bytes). This is what a sink writes in place of a sensitive string; an operator who holds the
// salt computes it for a candidate value to answer "was this the value?".
std::string hmacValue(std::string_view salt, std::string_view value);

// `n_bytes` bytes from OpenSSL's CSPRNG, hex-encoded. Salts and keys are secrets, so they never
// come from the seeded `core::Rng`.
core::Result<std::string> randomHex(size_t n_bytes);

// Reads a salt file: its bytes with trailing whitespace (newline) removed; must not be empty.
core::Result<std::string> readSaltFile(const std::string& path);
// Creates `path` (mode 0600, refuses to overwrite) holding a new random salt (64 hex digits and a
// newline) and returns the salt.
core::Result<std::string> createSaltFile(const std::string& path);

struct KeyPairPem {
  std::string private_pem;  // PKCS#8 "PRIVATE KEY", unencrypted: keep it mode 0600.
  std::string public_pem;   // SubjectPublicKeyInfo "PUBLIC KEY".
};

// A fresh Ed25519 key pair for signing audit checkpoints.
core::Result<KeyPairPem> generateKeyPairPem();

// Writes a fresh key pair to two files (the private one mode 0600); refuses to overwrite either.
core::Status writeKeyPairFiles(const std::string& private_path, const std::string& public_path);

// An Ed25519 private key. Immutable after creation; `signHex` is thread-safe.
class SigningKey {
 public:
  static core::Result<std::unique_ptr<SigningKey>> fromPem(std::string_view pem);
  static core::Result<std::unique_ptr<SigningKey>> fromPemFile(const std::string& path);
  ~SigningKey();
  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;

  // Lowercase hex of the 64-byte Ed25519 signature of `message`.
  core::Result<std::string> signHex(std::string_view message) const;
  // First 16 hex digits of SHA-256 of the raw 32-byte public key; names the key in checkpoints.
  const std::string& keyId() const { return key_id_; }

 private:
  SigningKey(evp_pkey_st* key, std::string key_id) : key_(key), key_id_(std::move(key_id)) {}
  evp_pkey_st* key_;  // Owned.
  std::string key_id_;
};

// An Ed25519 public key. Immutable after creation; `verifyHex` is thread-safe.
class VerifyingKey {
 public:
  static core::Result<std::unique_ptr<VerifyingKey>> fromPem(std::string_view pem);
  static core::Result<std::unique_ptr<VerifyingKey>> fromPemFile(const std::string& path);
  ~VerifyingKey();
  VerifyingKey(const VerifyingKey&) = delete;
  VerifyingKey& operator=(const VerifyingKey&) = delete;

  // True iff `signature_hex` is a valid signature of `message` by this key.
  bool verifyHex(std::string_view message, std::string_view signature_hex) const;
  const std::string& keyId() const { return key_id_; }

 private:
  VerifyingKey(evp_pkey_st* key, std::string key_id) : key_(key), key_id_(std::move(key_id)) {}
  evp_pkey_st* key_;  // Owned.
  std::string key_id_;
};

}  // namespace tessera::audit
