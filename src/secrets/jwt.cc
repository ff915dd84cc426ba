#include "secrets/jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <optional>

namespace tessera::secrets {
namespace {

using json = nlohmann::json;

constexpr int kRsaBits = 2048;
constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

struct PkeyFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
};
struct MdCtxFree {
  void operator()(EVP_MD_CTX* p) const { EVP_MD_CTX_free(p); }
};
struct BioFree {
  void operator()(BIO* p) const { BIO_free(p); }
};
struct BnFree {
  void operator()(BIGNUM* p) const { BN_free(p); }
};
struct ParamBldFree {
  void operator()(OSSL_PARAM_BLD* p) const { OSSL_PARAM_BLD_free(p); }
};
struct ParamFree {
  void operator()(OSSL_PARAM* p) const { OSSL_PARAM_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyFree>;
using PkeyCtx = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using MdCtx = std::unique_ptr<EVP_MD_CTX, MdCtxFree>;
using Bio = std::unique_ptr<BIO, BioFree>;
using Bignum = std::unique_ptr<BIGNUM, BnFree>;

const unsigned char* bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

// The first queued OpenSSL error appended to `what`; the queue is cleared so that a later,
// unrelated failure does not report this one.
std::string sslError(std::string what) {
  const unsigned long e = ERR_get_error();
  if (e != 0) {
    std::array<char, 256> buf{};
    ERR_error_string_n(e, buf.data(), buf.size());
    what += ": ";
    what += buf.data();
  }
  ERR_clear_error();
  return what;
}

core::Status unauthenticated(std::string message) {
  return {core::StatusCode::kUnauthenticated, std::move(message)};
}

// Text from a token, for an error message: quoted, cut short, bytes other than printable ASCII
// shown as '?'.
std::string shown(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out = "'";
  for (const char c : s.substr(0, kMax)) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  out += s.size() > kMax ? "...'" : "'";
  return out;
}

// A JSON value from a token, for an error message: a string as `shown`, anything else as its
// JSON, cut short likewise.
std::string shownJson(const json& j) {
  if (j.is_string()) {
    return shown(std::string_view(j.get_ref<const std::string&>()));
  }
  constexpr size_t kMax = 64;
  std::string text = j.dump();
  if (text.size() > kMax) {
    text.resize(kMax);
    text += "...";
  }
  return text;
}

// A NumericDate as people read it: "2026-03-01T12:00:00Z" (whole seconds, UTC).
std::string dateText(double secs) {
  // Up to the end of year 9999; anything else is shown as the number it is.
  if (!(secs >= 0 && secs < 253402300800.0)) {
    return json(secs).dump() + " (seconds since the epoch)";
  }
  const auto t = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

int sextet(char c) {
  if (c >= 'A' && c <= 'Z') {
    return c - 'A';
  }
  if (c >= 'a' && c <= 'z') {
    return c - 'a' + 26;
  }
  if (c >= '0' && c <= '9') {
    return c - '0' + 52;
  }
  if (c == '-') {
    return 62;
  }
  if (c == '_') {
    return 63;
  }
  return -1;
}

core::Result<std::string> sha256(std::string_view data) {
  std::array<unsigned char, 32> digest{};
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(), nullptr) != 1 ||
      len != digest.size()) {
    return core::internalError(sslError("jwt: SHA-256 failed"));
  }
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string bignumBytes(const BIGNUM* bn) {
  std::string out(static_cast<size_t>(BN_num_bytes(bn)), '\0');
  BN_bn2bin(bn, reinterpret_cast<unsigned char*>(out.data()));  // Big-endian, no leading zeros.
  return out;
}

core::Result<std::string> rsaParam(const EVP_PKEY* key, const char* name) {
  BIGNUM* raw = nullptr;
  if (EVP_PKEY_get_bn_param(key, name, &raw) != 1) {
    return core::internalError(sslError(std::string("jwt: cannot read the RSA key's ") + name));
  }
  const Bignum bn(raw);
  return base64UrlEncode(bignumBytes(bn.get()));
}

core::Result<std::string> thumbprint(std::string_view n, std::string_view e) {
  // RFC 7638 §3.2: the required members in lexicographic order, no whitespace.
  std::string canonical = R"({"e":")";
  canonical += e;
  canonical += R"(","kty":"RSA","n":")";
  canonical += n;
  canonical += R"("})";
  TESSERA_ASSIGN_OR_RETURN(const std::string digest, sha256(canonical));
  return base64UrlEncode(digest);
}

// Sets PKCS#1 v1.5 padding, what RS256 means (RFC 7518 §3.3), on a DigestSign/Verify context.
bool setRs256Padding(EVP_PKEY_CTX* pctx) {
  return pctx != nullptr && EVP_PKEY_CTX_set_rsa_padding(pctx, RSA_PKCS1_PADDING) > 0;
}

core::Result<Bignum> jwkInteger(const json& jwk, const char* member, std::string_view kid) {
  auto it = jwk.find(member);
  if (it == jwk.end() || !it->is_string()) {
    return core::invalidArgument("jwks: key " + shown(kid) + " has no string '" + member + "'");
  }
  auto decoded = base64UrlDecode(it->get_ref<const std::string&>());
  if (!decoded.isOk() || decoded->empty()) {
    return core::invalidArgument("jwks: key " + shown(kid) + ": '" + member +
                                 "' is not a base64url integer" +
                                 (decoded.isOk() ? "" : " (" + decoded.status().message() + ")"));
  }
  Bignum bn(BN_bin2bn(bytes(*decoded), static_cast<int>(decoded->size()), nullptr));
  if (bn == nullptr) {
    return core::internalError(sslError("jwks: cannot read '" + std::string(member) + "'"));
  }
  return bn;
}

// The RSA public key of a JWK, from its n and e (EVP_PKEY_fromdata).
core::Result<Pkey> publicKeyOf(const json& jwk, std::string_view kid) {
  auto kty = jwk.find("kty");
  if (kty == jwk.end() || *kty != "RSA") {
    return core::invalidArgument("jwks: key " + shown(kid) + " is not an RSA key (kty " +
                                 (kty == jwk.end() ? std::string("missing") : shownJson(*kty)) +
                                 ")");
  }
  TESSERA_ASSIGN_OR_RETURN(const Bignum n, jwkInteger(jwk, "n", kid));
  TESSERA_ASSIGN_OR_RETURN(const Bignum e, jwkInteger(jwk, "e", kid));
  if (BN_num_bits(n.get()) < kRsaBits) {
    return core::invalidArgument("jwks: key " + shown(kid) + " has a " +
                                 std::to_string(BN_num_bits(n.get())) +
                                 "-bit modulus; at least 2048 bits are required");
  }
  // An even or unit exponent is no RSA key (e = 1 would make any signature verify).
  if (!BN_is_odd(e.get()) || BN_is_one(e.get())) {
    return core::invalidArgument("jwks: key " + shown(kid) + " has an invalid exponent");
  }
  const std::unique_ptr<OSSL_PARAM_BLD, ParamBldFree> bld(OSSL_PARAM_BLD_new());
  if (bld == nullptr || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e.get()) != 1) {
    return core::internalError(sslError("jwks: cannot build key parameters"));
  }
  const std::unique_ptr<OSSL_PARAM, ParamFree> params(OSSL_PARAM_BLD_to_param(bld.get()));
  const PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  EVP_PKEY* raw = nullptr;
  if (params == nullptr || ctx == nullptr || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &raw, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return core::invalidArgument(sslError("jwks: key " + shown(kid) + " is not a usable RSA key"));
  }
  return Pkey(raw);
}

// The JWK of the JWKS whose kid is `kid`; the first one if several share it.
core::Result<const json*> findJwk(const json& jwks, const std::string& kid) {
  auto keys = jwks.is_object() ? jwks.find("keys") : jwks.end();
  if (!jwks.is_object() || keys == jwks.end() || !keys->is_array()) {
    return core::invalidArgument("jwks: not a JWKS document (an object with a 'keys' array)");
  }
  for (const json& jwk : *keys) {
    if (!jwk.is_object()) {
      continue;
    }
    auto k = jwk.find("kid");
    if (k != jwk.end() && *k == kid) {
      return &jwk;
    }
  }
  return unauthenticated("jwt kid " + shown(kid) + " is not in the JWKS");
}

// A NumericDate claim: nullopt when absent; unauthenticated when present but not a finite number.
core::Result<std::optional<double>> numericDate(const json& claims, const char* name) {
  auto it = claims.find(name);
  if (it == claims.end()) {
    return std::optional<double>();
  }
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    return unauthenticated(std::string("jwt claim '") + name +
                           "' is not a number: " + shownJson(*it));
  }
  return std::optional<double>(it->get<double>());
}

core::Result<json> parseObject(std::string_view part, const char* what) {
  auto decoded = base64UrlDecode(part);
  if (!decoded.isOk()) {
    return unauthenticated(std::string("jwt ") + what +
                           " is not base64url: " + decoded.status().message());
  }
  json j = json::parse(*decoded, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return unauthenticated(std::string("jwt ") + what + " is not a JSON object");
  }
  return j;
}

core::Status verifySignature(std::string_view signing_input, std::string_view signature,
                             EVP_PKEY* key) {
  const MdCtx ctx(EVP_MD_CTX_new());
  EVP_PKEY_CTX* pctx = nullptr;
  if (ctx == nullptr || EVP_DigestVerifyInit(ctx.get(), &pctx, EVP_sha256(), nullptr, key) != 1 ||
      !setRs256Padding(pctx)) {
    return core::internalError(sslError("jwt: cannot set up RS256 verification"));
  }
  if (EVP_DigestVerify(ctx.get(), bytes(signature), signature.size(), bytes(signing_input),
                       signing_input.size()) != 1) {
    ERR_clear_error();
    return unauthenticated("jwt signature is invalid");
  }
  return core::Status::ok();
}

core::Status checkClaims(const json& claims, const VerifyOptions& opts) {
  auto iss = claims.find("iss");
  if (iss == claims.end() || *iss != opts.issuer) {
    return unauthenticated("jwt issuer mismatch: expected " + shown(opts.issuer) + ", got " +
                           (iss == claims.end() ? std::string("none") : shownJson(*iss)));
  }
  auto aud = claims.find("aud");
  bool aud_ok = false;
  if (aud != claims.end() && aud->is_string()) {
    aud_ok = *aud == opts.audience;
  } else if (aud != claims.end() && aud->is_array()) {
    for (const json& a : *aud) {
      aud_ok = aud_ok || (a.is_string() && a == opts.audience);
    }
  }
  if (!aud_ok) {
    return unauthenticated("jwt audience mismatch: " + shown(opts.audience) + " is not in " +
                           (aud == claims.end() ? std::string("(no aud claim)") : shownJson(*aud)));
  }

  const double now = std::chrono::duration<double>(opts.now.time_since_epoch()).count();
  const auto leeway = static_cast<double>(opts.leeway.count());
  const std::string at_now =
      " (now " + dateText(now) + ", leeway " + std::to_string(opts.leeway.count()) + "s)";
  TESSERA_ASSIGN_OR_RETURN(const std::optional<double> exp, numericDate(claims, "exp"));
  if (!exp.has_value()) {
    return unauthenticated("jwt has no exp claim");
  }
  if (now >= *exp + leeway) {
    return unauthenticated("jwt expired at " + dateText(*exp) + at_now);
  }
  TESSERA_ASSIGN_OR_RETURN(const std::optional<double> nbf, numericDate(claims, "nbf"));
  if (nbf.has_value() && *nbf - leeway > now) {
    return unauthenticated("jwt not valid before " + dateText(*nbf) + at_now);
  }
  TESSERA_ASSIGN_OR_RETURN(const std::optional<double> iat, numericDate(claims, "iat"));
  if (iat.has_value() && *iat - leeway > now) {
    return unauthenticated("jwt issued in the future, at " + dateText(*iat) + at_now);
  }
  return core::Status::ok();
}

core::Result<json> verify(std::string_view token, const json& jwks, const VerifyOptions& opts) {
  if (opts.issuer.empty() || opts.audience.empty() || opts.now == core::WallTime{} ||
      opts.leeway.count() < 0) {
    return core::invalidArgument(
        "jwt: verify options need an issuer, an audience, the time now and a leeway >= 0");
  }
  const size_t dot1 = token.find('.');
  const size_t dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (dot2 == std::string_view::npos || token.find('.', dot2 + 1) != std::string_view::npos) {
    return unauthenticated("jwt is not a compact JWS (three base64url parts joined by '.')");
  }
  const std::string_view signing_input = token.substr(0, dot2);
  TESSERA_ASSIGN_OR_RETURN(const json header, parseObject(token.substr(0, dot1), "header"));

  auto alg = header.find("alg");
  if (alg == header.end() || *alg != "RS256") {
    return unauthenticated("jwt alg " +
                           (alg == header.end() ? std::string("(none given)") : shownJson(*alg)) +
                           " is not accepted (only RS256)");
  }
  if (header.contains("crit")) {
    return unauthenticated("jwt header has 'crit' extensions, which are not supported");
  }
  auto kid = header.find("kid");
  if (kid == header.end() || !kid->is_string()) {
    return unauthenticated("jwt header has no kid");
  }
  TESSERA_ASSIGN_OR_RETURN(const json* jwk, findJwk(jwks, kid->get_ref<const std::string&>()));
  // A JWKS may list keys for other algorithms or uses; a token naming one of those is refused.
  auto jwk_kty = jwk->find("kty");
  auto jwk_alg = jwk->find("alg");
  auto jwk_use = jwk->find("use");
  if (jwk_kty == jwk->end() || *jwk_kty != "RSA" ||
      (jwk_alg != jwk->end() && *jwk_alg != "RS256") ||
      (jwk_use != jwk->end() && *jwk_use != "sig")) {
    return unauthenticated("jwt kid " + shownJson(*kid) +
                           " names a JWKS key not meant for RS256 signatures");
  }
  TESSERA_ASSIGN_OR_RETURN(const Pkey key, publicKeyOf(*jwk, kid->get_ref<const std::string&>()));

  auto signature = base64UrlDecode(token.substr(dot2 + 1));
  if (!signature.isOk()) {
    return unauthenticated("jwt signature is not base64url: " + signature.status().message());
  }
  if (signature->empty()) {
    return unauthenticated("jwt has no signature");
  }
  TESSERA_RETURN_IF_ERROR(verifySignature(signing_input, *signature, key.get()));

  TESSERA_ASSIGN_OR_RETURN(json claims,
                           parseObject(token.substr(dot1 + 1, dot2 - dot1 - 1), "payload"));
  TESSERA_RETURN_IF_ERROR(checkClaims(claims, opts));
  return claims;
}

}  // namespace

std::string base64UrlEncode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() * 4 + 2) / 3);
  auto byte = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])); };
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    const uint32_t v = (byte(i) << 16) | (rest == 2 ? byte(i + 1) << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    if (rest == 2) {
      out.push_back(kAlphabet[(v >> 6) & 63]);
    }
  }
  return out;
}

core::Result<std::string> base64UrlDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const int v = sextet(text[i]);
    if (v < 0) {
      if (text[i] == '=') {
        return core::invalidArgument("base64url: padding '=' at offset " + std::to_string(i) +
                                     " (JWS base64url has none)");
      }
      return core::invalidArgument("base64url: invalid character " + shown(text.substr(i, 1)) +
                                   " at offset " + std::to_string(i));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
      acc &= (1U << bits) - 1;
    }
  }
  if (text.size() % 4 == 1) {
    return core::invalidArgument("base64url: length " + std::to_string(text.size()) +
                                 " is not a possible unpadded length");
  }
  if (acc != 0) {
    return core::invalidArgument("base64url: non-zero unused bits in the last character");
  }
  return out;
}

core::Result<SigningKey> SigningKey::generate() {
  const PkeyCtx ctx(EVP_PKEY_CTX_new_from_name(nullptr, "RSA", nullptr));
  EVP_PKEY* raw = nullptr;
  if (ctx == nullptr || EVP_PKEY_keygen_init(ctx.get()) != 1 ||
      EVP_PKEY_CTX_set_rsa_keygen_bits(ctx.get(), kRsaBits) != 1 ||
      EVP_PKEY_generate(ctx.get(), &raw) != 1) {
    return core::unavailable(sslError("jwt: cannot generate an RSA key"));
  }
  return fromKey(std::shared_ptr<EVP_PKEY>(raw, PkeyFree()));
}

core::Result<SigningKey> SigningKey::fromPem(std::string_view private_key_pem) {
  constexpr size_t kMaxPem = 1 << 20;
  if (private_key_pem.size() > kMaxPem) {
    return core::invalidArgument("jwt: the signing key PEM is over 1 MiB");
  }
  const Bio bio(BIO_new_mem_buf(private_key_pem.data(), static_cast<int>(private_key_pem.size())));
  if (bio == nullptr) {
    return core::internalError(sslError("jwt: cannot read the PEM"));
  }
  // A callback that gives no passphrase: an encrypted PEM fails instead of prompting on a TTY.
  auto no_passphrase = [](char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; };
  EVP_PKEY* raw = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
  if (raw == nullptr) {
    return core::invalidArgument(
        sslError("jwt: the signing key is not an unencrypted PEM private key"));
  }
  std::shared_ptr<EVP_PKEY> key(raw, PkeyFree());
  if (EVP_PKEY_is_a(key.get(), "RSA") != 1) {
    const char* type = EVP_PKEY_get0_type_name(key.get());
    return core::invalidArgument(std::string("jwt: the signing key is a ") +
                                 (type != nullptr ? type : "non-RSA") +
                                 " key; RS256 needs an RSA key");
  }
  if (EVP_PKEY_get_bits(key.get()) < kRsaBits) {
    return core::invalidArgument("jwt: the signing key has " +
                                 std::to_string(EVP_PKEY_get_bits(key.get())) +
                                 " bits; at least 2048 are required");
  }
  return fromKey(std::move(key));
}

core::Result<SigningKey> SigningKey::fromKey(std::shared_ptr<evp_pkey_st> key) {
  TESSERA_ASSIGN_OR_RETURN(std::string n, rsaParam(key.get(), OSSL_PKEY_PARAM_RSA_N));
  TESSERA_ASSIGN_OR_RETURN(std::string e, rsaParam(key.get(), OSSL_PKEY_PARAM_RSA_E));
  TESSERA_ASSIGN_OR_RETURN(std::string kid, thumbprint(n, e));
  return SigningKey(std::move(key), std::move(n), std::move(e), std::move(kid));
}

core::Result<std::string> SigningKey::privatePem() const {
  const Bio bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return core::internalError(sslError("jwt: cannot write the signing key as PEM"));
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

json SigningKey::publicJwk() const {
  return {{"kty", "RSA"}, {"alg", "RS256"}, {"use", "sig"}, {"kid", kid_}, {"n", n_}, {"e", e_}};
}

core::Result<std::string> SigningKey::sign(const json& claims) const {
  if (!claims.is_object()) {
    return core::invalidArgument("jwt: the claims must be a JSON object, not " +
                                 std::string(claims.type_name()));
  }
  std::string signing_input;
  try {
    const json header = {{"alg", "RS256"}, {"typ", "JWT"}, {"kid", kid_}};
    signing_input = base64UrlEncode(header.dump()) + "." + base64UrlEncode(claims.dump());
  } catch (const json::exception& e) {
    return core::invalidArgument(std::string("jwt: the claims cannot be serialized: ") + e.what());
  }
  const MdCtx ctx(EVP_MD_CTX_new());
  EVP_PKEY_CTX* pctx = nullptr;
  std::string signature(static_cast<size_t>(EVP_PKEY_get_size(key_.get())), '\0');
  size_t len = signature.size();
  if (ctx == nullptr ||
      EVP_DigestSignInit(ctx.get(), &pctx, EVP_sha256(), nullptr, key_.get()) != 1 ||
      !setRs256Padding(pctx) ||
      EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(signature.data()), &len,
                     bytes(signing_input), signing_input.size()) != 1) {
    return core::internalError(sslError("jwt: RS256 signing failed"));
  }
  signature.resize(len);
  return signing_input + "." + base64UrlEncode(signature);
}

json jwksDocument(const std::vector<SigningKey>& keys) {
  json list = json::array();
  for (const SigningKey& key : keys) {
    list.push_back(key.publicJwk());
  }
  return {{"keys", std::move(list)}};
}

core::Result<std::string> jwkThumbprint(const json& jwk) {
  try {
    auto kty = jwk.is_object() ? jwk.find("kty") : jwk.end();
    auto n = jwk.is_object() ? jwk.find("n") : jwk.end();
    auto e = jwk.is_object() ? jwk.find("e") : jwk.end();
    if (kty == jwk.end() || *kty != "RSA" || n == jwk.end() || !n->is_string() || e == jwk.end() ||
        !e->is_string()) {
      return core::invalidArgument("jwk: not an RSA JWK (kty \"RSA\" with string n and e)");
    }
    return thumbprint(n->get_ref<const std::string&>(), e->get_ref<const std::string&>());
  } catch (const json::exception& e) {
    return core::internalError(std::string("jwk: ") + e.what());
  }
}

core::Result<json> verifyJwt(std::string_view token, const json& jwks, const VerifyOptions& opts) {
  // Only json's own checked accessors are used, but no nlohmann exception may leave this module.
  try {
    return verify(token, jwks, opts);
  } catch (const json::exception& e) {
    return core::internalError(std::string("jwt: ") + e.what());
  }
}

}  // namespace tessera::secrets
