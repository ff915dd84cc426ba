#include "secrets/jwt.h"

#include <gtest/gtest.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::secrets {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using std::chrono::seconds;

constexpr int64_t kIssuedAt = 1'780'000'000;  // 2026-05-28T20:26:40Z.
constexpr int64_t kExpiry = kIssuedAt + 900;  // 2026-05-28T20:41:40Z.
constexpr const char* kIssuer = "https://tessera.example.com";
constexpr const char* kAudience = "sts.amazonaws.com";

// RSA key generation takes a while: the tests share two keys, made once.
const SigningKey& testKey(size_t i) {
  static const std::vector<SigningKey> keys = [] {
    std::vector<SigningKey> v;
    v.reserve(2);
    for (int k = 0; k < 2; ++k) {
      auto r = SigningKey::generate();
      if (!r.isOk()) {
        ADD_FAILURE() << r.status().message();
        std::abort();
      }
      v.push_back(*r);
    }
    return v;
  }();
  return keys.at(i);
}

json claims() {
  return {{"iss", kIssuer},   {"sub", "team-1/train/0"}, {"aud", kAudience},
          {"iat", kIssuedAt}, {"nbf", kIssuedAt},        {"exp", kExpiry}};
}

VerifyOptions optionsAt(int64_t now_secs, seconds leeway = seconds(0)) {
  return {.issuer = kIssuer,
          .audience = kAudience,
          .now = core::WallTime(seconds(now_secs)),
          .leeway = leeway};
}

VerifyOptions options() { return optionsAt(kIssuedAt + 60); }

std::string signOrDie(const SigningKey& key, const json& c) {
  auto token = key.sign(c);
  EXPECT_TRUE(token.isOk()) << token.status().message();
  return token.isOk() ? *token : "";
}

std::vector<std::string> split(const std::string& token) {
  std::vector<std::string> parts;
  std::stringstream in(token);
  std::string part;
  while (std::getline(in, part, '.')) {
    parts.push_back(part);
  }
  return parts;
}

// RS256 over `input` with `key`'s private key, done here with OpenSSL directly: lets a test build
// a validly signed token with a header our signer would never write.
std::string rawRs256(const SigningKey& key, const std::string& input) {
  const std::string pem = *key.privatePem();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), -1), &BIO_free);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), &EVP_PKEY_free);
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  std::string sig(512, '\0');
  size_t len = sig.size();
  EXPECT_EQ(EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, pkey.get()), 1);
  EXPECT_EQ(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                           reinterpret_cast<const unsigned char*>(input.data()), input.size()),
            1);
  sig.resize(len);
  return sig;
}

std::string withHeader(const json& header, const SigningKey& key) {
  const std::string input = base64UrlEncode(header.dump()) + "." + base64UrlEncode(claims().dump());
  return input + "." + base64UrlEncode(rawRs256(key, input));
}

void expectRefused(const core::Result<json>& r, const std::string& message_part) {
  ASSERT_FALSE(r.isOk()) << "accepted: " << r->dump();
  EXPECT_EQ(r.status().code(), core::StatusCode::kUnauthenticated) << r.status().message();
  EXPECT_NE(r.status().message().find(message_part), std::string::npos)
      << "'" << r.status().message() << "' does not say '" << message_part << "'";
}

std::string hex(std::string_view bytes) {
  static constexpr std::string_view kDigits = "0123456789ABCDEF";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

TEST(Base64Url, EncodesAndDecodesTheRfc4648Vectors) {
  // RFC 4648 §10, unpadded, plus bytes that map to the URL-safe '-' and '_'.
  const std::vector<std::pair<std::string, std::string>> table = {
      {"", ""},
      {"f", "Zg"},
      {"fo", "Zm8"},
      {"foo", "Zm9v"},
      {"foob", "Zm9vYg"},
      {"fooba", "Zm9vYmE"},
      {"foobar", "Zm9vYmFy"},
      {std::string("\0", 1), "AA"},
      {"\xfb\xff", "-_8"},       // Standard base64: "+/8=".
      {"\xff\xfe\xfd", "__79"},  // Standard base64: "//79".
      {"\x3e\xff\xbf", "Pv-_"},  // Standard base64: "Pv+/".
  };
  for (const auto& [raw, encoded] : table) {
    EXPECT_EQ(base64UrlEncode(raw), encoded) << hex(raw);
    auto back = base64UrlDecode(encoded);
    ASSERT_TRUE(back.isOk()) << encoded << ": " << back.status().message();
    EXPECT_EQ(*back, raw) << encoded;
  }
  std::string all;
  for (int b = 0; b < 256; ++b) {
    all.push_back(static_cast<char>(b));
  }
  for (size_t n = 0; n <= all.size(); n += 37) {
    EXPECT_EQ(*base64UrlDecode(base64UrlEncode(all.substr(0, n))), all.substr(0, n));
  }
}

TEST(Base64Url, RefusesPaddingBadCharactersAndNonCanonicalInput) {
  const std::vector<std::pair<std::string, std::string>> table = {
      {"Zg==", "padding"},
      {"Zm8=", "padding"},
      {"Zm9v+w", "invalid character"},
      {"Zm9v/w", "invalid character"},
      {"Zm9 v", "invalid character"},
      {"Zm8\n", "invalid character"},
      {"Z", "length 1"},
      {"Zm9vY", "length 5"},
      {"Zh", "unused bits"},
      {"Zm9", "unused bits"},
  };
  for (const auto& [text, message] : table) {
    auto r = base64UrlDecode(text);
    ASSERT_FALSE(r.isOk()) << "'" << text << "' decoded";
    EXPECT_EQ(r.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(message), std::string::npos)
        << text << ": " << r.status().message();
  }
}

TEST(Jwt, SignedTokensVerifyAndGiveBackTheClaims) {
  const SigningKey& key = testKey(0);
  const std::string token = signOrDie(key, claims());
  const std::vector<std::string> parts = split(token);
  ASSERT_EQ(parts.size(), 3U);
  EXPECT_EQ(json::parse(*base64UrlDecode(parts[0])),
            json({{"alg", "RS256"}, {"typ", "JWT"}, {"kid", key.kid()}}));
  EXPECT_EQ(base64UrlDecode(parts[2])->size(), 256U);  // RSA 2048.

  auto r = verifyJwt(token, jwksDocument({key}), options());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(*r, claims());
  // RSASSA-PKCS1-v1_5 is deterministic: the same claims give the same token.
  EXPECT_EQ(signOrDie(key, claims()), token);
}

TEST(Jwt, SignRefusesClaimsThatAreNotAnObjectOrNotUtf8) {
  EXPECT_EQ(testKey(0).sign(json::array()).status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(testKey(0).sign({{"sub", "\xff\xfe"}}).status().code(),
            core::StatusCode::kInvalidArgument);
}

TEST(Jwt, TamperedPayloadOrSignatureIsRefused) {
  const SigningKey& key = testKey(0);
  const json jwks = jwksDocument({key});
  const std::string token = signOrDie(key, claims());
  const std::vector<std::string> parts = split(token);

  json other = claims();
  other["sub"] = "team-2/train/0";
  expectRefused(
      verifyJwt(parts[0] + "." + base64UrlEncode(other.dump()) + "." + parts[2], jwks, options()),
      "signature is invalid");

  std::string sig = *base64UrlDecode(parts[2]);
  sig[100] = static_cast<char>(sig[100] ^ 1);
  expectRefused(verifyJwt(parts[0] + "." + parts[1] + "." + base64UrlEncode(sig), jwks, options()),
                "signature is invalid");
  expectRefused(
      verifyJwt(parts[0] + "." + parts[1] + "." + parts[2].substr(0, 40), jwks, options()),
      "signature is invalid");
  expectRefused(verifyJwt(parts[0] + "." + parts[1] + ".", jwks, options()), "no signature");
  expectRefused(verifyJwt(parts[0] + "." + parts[1] + "." + parts[2] + "=", jwks, options()),
                "not base64url");

  // Another key's signature under this key's kid.
  const std::string input = parts[0] + "." + parts[1];
  expectRefused(
      verifyJwt(input + "." + base64UrlEncode(rawRs256(testKey(1), input)), jwks, options()),
      "signature is invalid");
}

TEST(Jwt, MalformedTokensAreRefused) {
  const json jwks = jwksDocument({testKey(0)});
  const std::string token = signOrDie(testKey(0), claims());
  for (const std::string& bad :
       {std::string(), std::string("abc"), std::string("a.b"), token + ".x", std::string("..")}) {
    EXPECT_EQ(verifyJwt(bad, jwks, options()).status().code(), core::StatusCode::kUnauthenticated)
        << bad;
  }
  expectRefused(verifyJwt(base64UrlEncode("[1]") + ".e30.c2ln", jwks, options()),
                "header is not a JSON object");
  expectRefused(verifyJwt(base64UrlEncode("{\"alg\":") + ".e30.c2ln", jwks, options()),
                "header is not a JSON object");
}

TEST(Jwt, OnlyRs256IsAccepted) {
  const SigningKey& key = testKey(0);
  const json jwks = jwksDocument({key});

  // alg "none" with no signature, as the classic attack sends it, and with a valid RS256
  // signature: refused for the alg either way.
  const json none = {{"alg", "none"}, {"typ", "JWT"}, {"kid", key.kid()}};
  expectRefused(
      verifyJwt(base64UrlEncode(none.dump()) + "." + base64UrlEncode(claims().dump()) + ".", jwks,
                options()),
      "alg 'none' is not accepted");
  expectRefused(verifyJwt(withHeader(none, key), jwks, options()), "alg 'none' is not accepted");

  // HS256 keyed with the public key's bytes (algorithm confusion).
  const json hs = {{"alg", "HS256"}, {"typ", "JWT"}, {"kid", key.kid()}};
  const std::string input = base64UrlEncode(hs.dump()) + "." + base64UrlEncode(claims().dump());
  const std::string secret = key.publicJwk().dump();
  std::array<unsigned char, 32> mac{};
  size_t mac_len = 0;
  ASSERT_NE(EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret.data(), secret.size(),
                      reinterpret_cast<const unsigned char*>(input.data()), input.size(),
                      mac.data(), mac.size(), &mac_len),
            nullptr);
  expectRefused(verifyJwt(input + "." +
                              base64UrlEncode(std::string_view(
                                  reinterpret_cast<const char*>(mac.data()), mac_len)),
                          jwks, options()),
                "alg 'HS256' is not accepted");

  for (const json& alg : {json("rs256"), json("RS384"), json("PS256"), json(nullptr)}) {
    expectRefused(verifyJwt(withHeader({{"alg", alg}, {"kid", key.kid()}}, key), jwks, options()),
                  "is not accepted (only RS256)");
  }
  expectRefused(verifyJwt(withHeader({{"kid", key.kid()}}, key), jwks, options()),
                "alg (none given) is not accepted");
  expectRefused(
      verifyJwt(withHeader({{"alg", "RS256"}, {"kid", key.kid()}, {"crit", {"exp"}}}, key), jwks,
                options()),
      "crit");
  // The same header our signer writes, signed by hand, does verify: the refusals above are for
  // the alg, not for the way the tokens were made.
  EXPECT_TRUE(
      verifyJwt(withHeader({{"alg", "RS256"}, {"kid", key.kid()}}, key), jwks, options()).isOk());
}

TEST(Jwt, UnknownOrMissingKidIsRefused) {
  const json jwks = jwksDocument({testKey(0)});
  expectRefused(verifyJwt(signOrDie(testKey(1), claims()), jwks, options()),
                "kid '" + testKey(1).kid() + "' is not in the JWKS");
  expectRefused(verifyJwt(withHeader({{"alg", "RS256"}}, testKey(0)), jwks, options()), "no kid");
  expectRefused(verifyJwt(withHeader({{"alg", "RS256"}, {"kid", 7}}, testKey(0)), jwks, options()),
                "no kid");
  // A JWKS key of the right kid but meant for something else.
  json enc = jwks;
  enc["keys"][0]["use"] = "enc";
  expectRefused(verifyJwt(signOrDie(testKey(0), claims()), enc, options()), "not meant for RS256");
  json ec = jwks;
  ec["keys"][0]["kty"] = "EC";
  expectRefused(verifyJwt(signOrDie(testKey(0), claims()), ec, options()), "not meant for RS256");
}

TEST(Jwt, BothKeysOfARotationVerify) {
  const json jwks = jwksDocument({testKey(1), testKey(0)});
  ASSERT_EQ(jwks["keys"].size(), 2U);
  EXPECT_EQ(jwks["keys"][0], testKey(1).publicJwk());
  EXPECT_EQ(jwks["keys"][1], testKey(0).publicJwk());
  EXPECT_TRUE(verifyJwt(signOrDie(testKey(0), claims()), jwks, options()).isOk());
  EXPECT_TRUE(verifyJwt(signOrDie(testKey(1), claims()), jwks, options()).isOk());
  EXPECT_EQ(jwksDocument({}), json({{"keys", json::array()}}));
}

TEST(Jwt, ExpiryAndNotBeforeAreCheckedAgainstTheInjectedTime) {
  const json jwks = jwksDocument({testKey(0)});
  const std::string token = signOrDie(testKey(0), claims());

  EXPECT_TRUE(verifyJwt(token, jwks, optionsAt(kExpiry - 1)).isOk());
  expectRefused(verifyJwt(token, jwks, optionsAt(kExpiry)),
                "jwt expired at 2026-05-28T20:41:40Z (now 2026-05-28T20:41:40Z, leeway 0s)");
  expectRefused(verifyJwt(token, jwks, optionsAt(kExpiry + 3600)), "jwt expired at");
  EXPECT_TRUE(verifyJwt(token, jwks, optionsAt(kExpiry + 29, seconds(30))).isOk());
  expectRefused(verifyJwt(token, jwks, optionsAt(kExpiry + 30, seconds(30))), "jwt expired at");

  EXPECT_TRUE(verifyJwt(token, jwks, optionsAt(kIssuedAt)).isOk());
  expectRefused(verifyJwt(token, jwks, optionsAt(kIssuedAt - 1)),
                "jwt not valid before 2026-05-28T20:26:40Z");
  EXPECT_TRUE(verifyJwt(token, jwks, optionsAt(kIssuedAt - 30, seconds(30))).isOk());

  json future_iat = claims();
  future_iat.erase("nbf");
  future_iat["iat"] = kIssuedAt + 600;
  expectRefused(verifyJwt(signOrDie(testKey(0), future_iat), jwks, options()),
                "jwt issued in the future");

  json no_exp = claims();
  no_exp.erase("exp");
  expectRefused(verifyJwt(signOrDie(testKey(0), no_exp), jwks, options()), "no exp claim");
  json text_exp = claims();
  text_exp["exp"] = "tomorrow";
  expectRefused(verifyJwt(signOrDie(testKey(0), text_exp), jwks, options()),
                "claim 'exp' is not a number");
  // NumericDate may have a fraction (RFC 7519 §2).
  json fractional = claims();
  fractional["exp"] = static_cast<double>(kExpiry) + 0.5;
  EXPECT_TRUE(verifyJwt(signOrDie(testKey(0), fractional), jwks, optionsAt(kExpiry)).isOk());
}

TEST(Jwt, IssuerAndAudienceMustMatch) {
  const json jwks = jwksDocument({testKey(0)});
  json c = claims();
  c["iss"] = "https://evil.example.com";
  expectRefused(verifyJwt(signOrDie(testKey(0), c), jwks, options()), "jwt issuer mismatch");
  c.erase("iss");
  expectRefused(verifyJwt(signOrDie(testKey(0), c), jwks, options()), "jwt issuer mismatch");

  c = claims();
  c["aud"] = "someone-else";
  expectRefused(verifyJwt(signOrDie(testKey(0), c), jwks, options()), "jwt audience mismatch");
  c["aud"] = json::array({"someone-else", 3});
  expectRefused(verifyJwt(signOrDie(testKey(0), c), jwks, options()), "jwt audience mismatch");
  c.erase("aud");
  expectRefused(verifyJwt(signOrDie(testKey(0), c), jwks, options()), "jwt audience mismatch");

  c["aud"] = json::array({"someone-else", kAudience});
  auto r = verifyJwt(signOrDie(testKey(0), c), jwks, options());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ((*r)["aud"], c["aud"]);
}

TEST(Jwt, UnusableOptionsOrJwksAreInvalidArguments) {
  const std::string token = signOrDie(testKey(0), claims());
  const json jwks = jwksDocument({testKey(0)});
  VerifyOptions o = options();
  o.issuer.clear();
  EXPECT_EQ(verifyJwt(token, jwks, o).status().code(), core::StatusCode::kInvalidArgument);
  o = options();
  o.audience.clear();
  EXPECT_EQ(verifyJwt(token, jwks, o).status().code(), core::StatusCode::kInvalidArgument);
  o = options();
  o.now = {};  // Forgetting the time must not make every token unexpired.
  EXPECT_EQ(verifyJwt(token, jwks, o).status().code(), core::StatusCode::kInvalidArgument);
  o = options();
  o.leeway = seconds(-1);
  EXPECT_EQ(verifyJwt(token, jwks, o).status().code(), core::StatusCode::kInvalidArgument);

  EXPECT_EQ(verifyJwt(token, json::array(), options()).status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_EQ(verifyJwt(token, json({{"keys", 1}}), options()).status().code(),
            core::StatusCode::kInvalidArgument);
  json bad = jwks;
  bad["keys"][0]["n"] = "not base64!";
  EXPECT_EQ(verifyJwt(token, bad, options()).status().code(), core::StatusCode::kInvalidArgument);
  bad = jwks;
  bad["keys"][0]["e"] = "AQ";  // e = 1.
  EXPECT_EQ(verifyJwt(token, bad, options()).status().code(), core::StatusCode::kInvalidArgument);
  bad = jwks;
  bad["keys"][0]["n"] = base64UrlEncode(std::string(128, '\xc1'));  // 1024 bits.
  EXPECT_EQ(verifyJwt(token, bad, options()).status().code(), core::StatusCode::kInvalidArgument);
}

TEST(Jwt, PemRoundTripKeepsTheKey) {
  const SigningKey& key = testKey(0);
  auto pem = key.privatePem();
  ASSERT_TRUE(pem.isOk()) << pem.status().message();
  EXPECT_EQ(pem->rfind("-----BEGIN PRIVATE KEY-----", 0), 0U);
  auto back = SigningKey::fromPem(*pem);
  ASSERT_TRUE(back.isOk()) << back.status().message();
  EXPECT_EQ(back->kid(), key.kid());
  EXPECT_EQ(back->publicJwk(), key.publicJwk());
  EXPECT_TRUE(verifyJwt(signOrDie(*back, claims()), jwksDocument({key}), options()).isOk());

  EXPECT_EQ(SigningKey::fromPem("not a key").status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_EQ(SigningKey::fromPem("").status().code(), core::StatusCode::kInvalidArgument);

  // Not RSA, too short, encrypted: refused.
  auto pem_of = [](EVP_PKEY* k, const EVP_CIPHER* cipher) {
    std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
    char pass[] = "pw";
    PEM_write_bio_PKCS8PrivateKey(bio.get(), k, cipher, pass, 2, nullptr, nullptr);
    char* data = nullptr;
    const long n = BIO_get_mem_data(bio.get(), &data);
    EVP_PKEY_free(k);
    return std::string(data, static_cast<size_t>(n));
  };
  auto ec = SigningKey::fromPem(pem_of(EVP_EC_gen("P-256"), nullptr));
  EXPECT_EQ(ec.status().code(), core::StatusCode::kInvalidArgument);
  EXPECT_NE(ec.status().message().find("EC key"), std::string::npos) << ec.status().message();
  auto small = SigningKey::fromPem(pem_of(EVP_RSA_gen(1024), nullptr));
  EXPECT_NE(small.status().message().find("1024 bits"), std::string::npos)
      << small.status().message();
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem->data(), -1), &BIO_free);
  const std::string encrypted_pem =
      pem_of(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr), EVP_aes_256_cbc());
  ASSERT_NE(encrypted_pem.find("ENCRYPTED PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(SigningKey::fromPem(encrypted_pem).status().code(), core::StatusCode::kInvalidArgument);
}

TEST(Jwt, KidIsTheRfc7638Thumbprint) {
  // RFC 7638 §3.1's example.
  const json rfc = {
      {"kty", "RSA"},
      {"n",
       "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_"
       "BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_"
       "FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-"
       "bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"},
      {"e", "AQAB"},
      {"alg", "RS256"},
      {"kid", "2011-04-29"}};
  EXPECT_EQ(*jwkThumbprint(rfc), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
  EXPECT_EQ(jwkThumbprint(json({{"kty", "EC"}})).status().code(),
            core::StatusCode::kInvalidArgument);

  const SigningKey& key = testKey(0);
  const json jwk = key.publicJwk();
  EXPECT_EQ(jwk["kty"], "RSA");
  EXPECT_EQ(jwk["alg"], "RS256");
  EXPECT_EQ(jwk["use"], "sig");
  EXPECT_EQ(jwk["kid"], key.kid());
  EXPECT_EQ(jwk["e"], "AQAB");  // 65537.
  const std::string n = *base64UrlDecode(jwk["n"].get<std::string>());
  ASSERT_EQ(n.size(), 256U);
  EXPECT_NE(static_cast<unsigned char>(n[0]) & 0x80, 0);  // Exactly 2048 bits, no leading zero.

  // The thumbprint computed here by hand: SHA-256 of the members in lexicographic order, no
  // whitespace.
  const std::string canonical = R"({"e":")" + jwk["e"].get<std::string>() +
                                R"(","kty":"RSA","n":")" + jwk["n"].get<std::string>() + R"("})";
  std::array<unsigned char, 32> digest{};
  unsigned int len = 0;
  ASSERT_EQ(
      EVP_Digest(canonical.data(), canonical.size(), digest.data(), &len, EVP_sha256(), nullptr),
      1);
  EXPECT_EQ(key.kid(),
            base64UrlEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), len)));
  EXPECT_EQ(*jwkThumbprint(jwk), key.kid());
  // Stable: the same for a copy, and different for another key.
  const SigningKey copy = key;  // NOLINT(performance-unnecessary-copy-initialization)
  EXPECT_EQ(copy.kid(), key.kid());
  EXPECT_NE(testKey(1).kid(), key.kid());
}

// Checks against the openssl command line, so that the signer is not only checked by our own
// verifier (and the verifier not only by our own signer).
class JwtOpensslCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run("openssl version") != 0) {
      FAIL() << "the openssl command line is not installed (scripts/bootstrap installs it)";
    }
    std::string tmpl = (fs::temp_directory_path() / "tessera-jwt-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (!dir_.empty()) {
      fs::remove_all(dir_);
    }
  }
  // Runs `command` in the temp dir (or anywhere before there is one), its output going to cli.log
  // there. Returns the exit status.
  int run(const std::string& command) const {
    const std::string line = dir_.empty()
                                 ? command + " >/dev/null 2>&1"
                                 : "cd '" + dir_.string() + "' && (" + command + ") >cli.log 2>&1";
    const int rc = std::system(line.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  }
  void write(const std::string& name, std::string_view content) const {
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
  }
  std::string read(const std::string& name) const {
    std::ifstream in(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

TEST_F(JwtOpensslCliTest, OpensslVerifiesOurSignaturesAndWeVerifyItsSignatures) {
  const SigningKey& key = testKey(0);
  write("key.pem", *key.privatePem());
  ASSERT_EQ(run("openssl pkey -in key.pem -pubout -out pub.pem"), 0) << read("cli.log");

  const std::string token = signOrDie(key, claims());
  const size_t dot = token.rfind('.');
  const std::string input = token.substr(0, dot);
  write("input.txt", input);
  write("sig.bin", *base64UrlDecode(token.substr(dot + 1)));
  EXPECT_EQ(run("openssl dgst -sha256 -verify pub.pem -signature sig.bin input.txt"), 0)
      << read("cli.log");
  EXPECT_NE(read("cli.log").find("Verified OK"), std::string::npos) << read("cli.log");
  write("input.txt", input + "x");
  EXPECT_NE(run("openssl dgst -sha256 -verify pub.pem -signature sig.bin input.txt"), 0);

  // The JWK's n is the key's modulus.
  ASSERT_EQ(run("openssl rsa -pubin -in pub.pem -noout -modulus"), 0) << read("cli.log");
  const std::string n = *base64UrlDecode(key.publicJwk()["n"].get<std::string>());
  EXPECT_EQ(read("cli.log"), "Modulus=" + hex(n) + "\n");

  // A signature made by openssl verifies with verifyJwt against our JWKS.
  write("input.txt", input);
  ASSERT_EQ(run("openssl dgst -sha256 -sign key.pem -out cli.sig input.txt"), 0) << read("cli.log");
  const std::string cli_sig = read("cli.sig");
  auto r = verifyJwt(input + "." + base64UrlEncode(cli_sig), jwksDocument({key}), options());
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(*r, claims());
  EXPECT_EQ(base64UrlEncode(cli_sig), token.substr(dot + 1));  // PKCS#1 v1.5 is deterministic.
}

}  // namespace
}  // namespace tessera::secrets
