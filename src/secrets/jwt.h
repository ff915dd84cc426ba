// Workload identity tokens (issue #6): the server is an OIDC issuer, and every running task gets a
// short-lived JWT signed with RS256 that outside systems (AWS STS AssumeRoleWithWebIdentity, any
// OIDC relying party) verify against the server's JWKS.
//
//   SigningKey key = *SigningKey::generate();              // RSA 2048; seal key.privatePem()
//   std::string token = *key.sign({{"iss", issuer}, {"sub", "team-1/train"},
//                                  {"aud", "sts.amazonaws.com"}, {"iat", t}, {"exp", t + 900}});
//   nlohmann::json jwks = jwksDocument({key, previous_key});  // served at /.well-known/jwks.json
//   auto claims = verifyJwt(token, jwks, {.issuer = issuer, .audience = "sts.amazonaws.com",
//                                         .now = clock.wallNow()});
//
// Tokens are compact JWS (RFC 7515) with the header {"alg":"RS256","kid":...,"typ":"JWT"}; the kid
// is the key's RFC 7638 JWK thumbprint, so it is stable for a key and needs no bookkeeping. Key
// rotation: sign with the newest key and publish it together with the previous one until the
// tokens signed with the previous one have expired.
//
// All cryptography is OpenSSL 3's EVP API.
#pragma once

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"
#include "core/status.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY.

namespace tessera::secrets {

// Base64url without padding (RFC 4648 §5, as JWS uses it). Decoding refuses '=' padding,
// characters outside the URL-safe alphabet, impossible lengths and non-zero unused trailing bits
// (so every byte string has exactly one accepted encoding).
std::string base64UrlEncode(std::string_view bytes);
core::Result<std::string> base64UrlDecode(std::string_view text);

// An RSA private key that signs RS256 JWTs. Copies share the underlying key, which is never
// modified: const methods may be called from several threads at once.
class SigningKey {
 public:
  // A new random RSA 2048 key. Unavailable if OpenSSL cannot generate one.
  static core::Result<SigningKey> generate();
  // A key from its PEM (PKCS#8 "PRIVATE KEY" or PKCS#1 "RSA PRIVATE KEY", unencrypted), as
  // `privatePem` writes it. Invalid argument if it is not an RSA private key of at least 2048 bits.
  static core::Result<SigningKey> fromPem(std::string_view private_key_pem);

  // The private key as unencrypted PKCS#8 PEM: secret, the caller seals it before storing it.
  core::Result<std::string> privatePem() const;
  // The RFC 7638 JWK thumbprint (SHA-256, base64url) of the public key.
  const std::string& kid() const { return kid_; }
  // {"kty":"RSA","alg":"RS256","use":"sig","kid":...,"n":...,"e":...}: what the JWKS lists.
  nlohmann::json publicJwk() const;
  // The compact JWS of `claims` (a JSON object), signed RS256 with this key. Invalid argument if
  // `claims` is not an object or holds a string that is not UTF-8. The caller sets iss, sub, aud,
  // iat, exp and the rest; nothing is added here.
  core::Result<std::string> sign(const nlohmann::json& claims) const;

 private:
  SigningKey(std::shared_ptr<evp_pkey_st> key, std::string n, std::string e, std::string kid)
      : key_(std::move(key)), n_(std::move(n)), e_(std::move(e)), kid_(std::move(kid)) {}
  static core::Result<SigningKey> fromKey(std::shared_ptr<evp_pkey_st> key);

  std::shared_ptr<evp_pkey_st> key_;
  std::string n_;  // Base64url modulus, big-endian, no leading zero bytes.
  std::string e_;  // Base64url public exponent, likewise.
  std::string kid_;
};

// {"keys":[<publicJwk of each key>]}, in the order given (the current key and the ones before it
// whose tokens may still be in use).
nlohmann::json jwksDocument(const std::vector<SigningKey>& keys);

// The RFC 7638 thumbprint of an RSA JWK: base64url(SHA-256('{"e":..,"kty":"RSA","n":..}')), with
// e and n exactly as they appear in `jwk`. Invalid argument if `jwk` is not an RSA JWK.
core::Result<std::string> jwkThumbprint(const nlohmann::json& jwk);

struct VerifyOptions {
  std::string issuer;  // The `iss` claim must equal it. Required.
  std::string
      audience;  // The `aud` claim (a string or an array of strings) must hold it. Required.
  core::WallTime now{};            // The time to check exp, nbf and iat against (UTC). Required.
  std::chrono::seconds leeway{0};  // Allowed clock skew for exp, nbf and iat; not negative.
};

// Verifies a compact JWS against a JWKS document ({"keys":[...]}) and returns its claims.
// Checks, in order: three base64url parts; a JSON object header whose alg is exactly "RS256"
// (no "none", no HMAC) and with no "crit"; its kid names a JWKS key for RS256 signatures (kty
// "RSA"; alg "RS256" and use "sig" where given); the signature; then the claims: `iss` equals
// `opts.issuer`, `aud` holds `opts.audience`, `exp` is present and not past
// (now < exp + leeway), `nbf` and `iat`, where present, not in the future (<= now + leeway).
// Unauthenticated, with a message that names the failed check, when the token is refused;
// invalid argument when `jwks` or `opts` is unusable (including a JWKS key under 2048 bits or
// with a bad n or e). The JWKS is trusted: it is the issuer's own or fetched from it. Thread-safe.
core::Result<nlohmann::json> verifyJwt(std::string_view token, const nlohmann::json& jwks,
                                       const VerifyOptions& opts);

}  // namespace tessera::secrets
