#include "secrets/identity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "secrets/test_util.h"

namespace tessera::secrets {
namespace {

using json = nlohmann::json;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::filesContaining;
using testing::openStore;
using testing::TempDir;
using testing::ThreadSafeFakeClock;

constexpr int64_t kStart = 1'780'000'000;  // 2026-05-28T20:26:40Z.
constexpr const char* kIssuer = "https://tessera.example";
constexpr const char* kSts = "sts.amazonaws.com";

TaskIdentity trainTask() {
  return {.tenant = "team-1",
          .project = "vision",
          .workload = "train",
          .task = 3,
          .node = "node-7",
          .generation = 42};
}

// The JOSE header's kid, read without verifying anything.
std::string kidOf(const std::string& token) {
  const std::string header = token.substr(0, token.find('.'));
  auto bytes = base64UrlDecode(header);
  EXPECT_TRUE(bytes.isOk()) << bytes.status().toString();
  return bytes.isOk() ? json::parse(*bytes).value("kid", "") : "";
}

std::vector<std::string> kidsOf(const json& jwks) {
  std::vector<std::string> kids;
  for (const json& k : jwks.at("keys")) {
    kids.push_back(k.at("kid").get<std::string>());
  }
  return kids;
}

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clock_.advance(seconds(kStart));
    openStoreAndKeys();
  }

  void openStoreAndKeys() {
    store_ = openStore(data_dir_.path(), clock_);
    ASSERT_TRUE(store_);
    auto keys = KeyManager::open(*store_, {SealOptions::Mode::kKeyFile, keys_dir_.file("key")});
    ASSERT_TRUE(keys.isOk()) << keys.status().toString();
    keys_ = std::move(keys).value();
  }

  static IdentityOptions options() {
    return {.issuer = kIssuer, .token_ttl = hours(1), .key_rotation = hours(24)};
  }

  std::unique_ptr<IdentityIssuer> openIssuer(IdentityOptions o = options()) {
    auto issuer = IdentityIssuer::open(*store_, *keys_, clock_, std::move(o));
    EXPECT_TRUE(issuer.isOk()) << issuer.status().toString();
    return issuer.isOk() ? std::move(issuer).value() : nullptr;
  }

  static std::string issueOrEmpty(IdentityIssuer& issuer, const std::vector<std::string>& aud,
                                  core::Duration ttl = core::Duration::zero()) {
    auto token = issuer.issue(trainTask(), aud, ttl);
    EXPECT_TRUE(token.isOk()) << token.status().toString();
    return token.isOk() ? *token : "";
  }

  // The private keys' PEMs in the stored record, opened here the way the issuer opens it.
  std::vector<std::string> storedPems() {
    auto kv = store_->get(kOidcKeysKey);
    EXPECT_TRUE(kv.isOk() && kv->has_value());
    if (!kv.isOk() || !kv->has_value()) {
      return {};
    }
    auto plain = keys_->decrypt(kSystemTenant, std::string(kOidcKeysKey), (*kv)->value);
    EXPECT_TRUE(plain.isOk()) << plain.status().toString();
    const json record = json::parse(plain.isOk() ? *plain : R"({"keys":[]})");
    std::vector<std::string> pems;
    for (const json& k : record.at("keys")) {
      pems.push_back(k.at("private_key_pem").get<std::string>());
    }
    return pems;
  }

  TempDir data_dir_;
  TempDir keys_dir_;
  ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<KeyManager> keys_;
};

TEST_F(IdentityTest, IssuedTokenVerifiesWithTheTaskClaims) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string token = issueOrEmpty(*issuer, {kSts}, minutes(15));

  auto claims = issuer->verify(token, kSts);
  ASSERT_TRUE(claims.isOk()) << claims.status().toString();
  EXPECT_EQ(claims->at("iss"), kIssuer);
  EXPECT_EQ(claims->at("sub"), "tenant:team-1:workload:train:task:3");
  EXPECT_EQ(claims->at("aud"), kSts);  // One audience: a string, as AWS expects.
  EXPECT_EQ(claims->at("iat"), kStart);
  EXPECT_EQ(claims->at("nbf"), kStart);
  EXPECT_EQ(claims->at("exp"), kStart + 900);
  EXPECT_EQ(claims->at("jti").get<std::string>().size(), 32U);
  EXPECT_EQ(claims->at("tenant"), "team-1");
  EXPECT_EQ(claims->at("tessera"), (json{{"tenant", "team-1"},
                                         {"project", "vision"},
                                         {"workload", "train"},
                                         {"task", 3},
                                         {"node", "node-7"},
                                         {"generation", 42}}));

  // A relying party with only the published JWKS gets the same answer.
  auto jwks = issuer->jwks();
  ASSERT_TRUE(jwks.isOk()) << jwks.status().toString();
  EXPECT_EQ(kidsOf(*jwks), std::vector<std::string>{kidOf(token)});
  auto outside =
      verifyJwt(token, *jwks, {.issuer = kIssuer, .audience = kSts, .now = clock_.wallNow()});
  ASSERT_TRUE(outside.isOk()) << outside.status().toString();
  EXPECT_EQ(*outside, *claims);
}

TEST_F(IdentityTest, AudiencesAndTtlDefaultsAndCap) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  // No audience: the default one; ttl 0: token_ttl.
  const std::string plain = issueOrEmpty(*issuer, {});
  auto c = issuer->verify(plain, "tessera");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_EQ(c->at("aud"), "tessera");
  EXPECT_EQ(c->at("exp").get<int64_t>() - c->at("iat").get<int64_t>(), 3600);

  // Several audiences: an array, and each one verifies; a ttl over token_ttl is cut to it.
  const std::string multi = issueOrEmpty(*issuer, {kSts, "vault"}, hours(5));
  auto m = issuer->verify(multi, "vault");
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->at("aud"), json::array({kSts, "vault"}));
  EXPECT_EQ(m->at("exp").get<int64_t>() - m->at("iat").get<int64_t>(), 3600);
  EXPECT_TRUE(issuer->verify(multi, kSts).isOk());
  EXPECT_NE(m->at("jti"), c->at("jti"));
}

TEST_F(IdentityTest, TokenExpiresAfterItsTtl) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string token = issueOrEmpty(*issuer, {kSts}, minutes(10));
  clock_.advance(minutes(10) - seconds(1));
  EXPECT_TRUE(issuer->verify(token, kSts).isOk());
  clock_.advance(seconds(1));
  auto late = issuer->verify(token, kSts);
  ASSERT_FALSE(late.isOk());
  EXPECT_EQ(late.status().code(), core::StatusCode::kUnauthenticated);
  EXPECT_NE(late.status().message().find("expired"), std::string::npos) << late.status().message();
}

TEST_F(IdentityTest, WrongAudienceAndAnotherIssuersTokensAreRefused) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string token = issueOrEmpty(*issuer, {kSts});
  auto wrong = issuer->verify(token, "vault");
  ASSERT_FALSE(wrong.isOk());
  EXPECT_EQ(wrong.status().code(), core::StatusCode::kUnauthenticated);

  // The same issuer name on another store has other keys: its tokens are not ours.
  TempDir other_dir;
  auto other_store = openStore(other_dir.path(), clock_);
  ASSERT_TRUE(other_store);
  auto other_keys =
      KeyManager::open(*other_store, {SealOptions::Mode::kKeyFile, other_dir.file("key")});
  ASSERT_TRUE(other_keys.isOk()) << other_keys.status().toString();
  auto other = IdentityIssuer::open(*other_store, **other_keys, clock_, options());
  ASSERT_TRUE(other.isOk()) << other.status().toString();
  auto forged = (*other)->issue(trainTask(), {kSts}, minutes(5));
  ASSERT_TRUE(forged.isOk()) << forged.status().toString();
  auto refused = issuer->verify(*forged, kSts);
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.status().code(), core::StatusCode::kUnauthenticated);
}

TEST_F(IdentityTest, BadIdentitiesAndOptionsAreInvalidArguments) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  struct Case {
    const char* name;
    TaskIdentity who;
    std::vector<std::string> aud;
    core::Duration ttl;
  };
  TaskIdentity colon_tenant = trainTask();
  colon_tenant.tenant = "team-1:workload:x";
  TaskIdentity colon_workload = trainTask();
  colon_workload.workload = "a:b";
  TaskIdentity no_tenant = trainTask();
  no_tenant.tenant = "";
  TaskIdentity no_workload = trainTask();
  no_workload.workload = "";
  TaskIdentity negative_task = trainTask();
  negative_task.task = -1;
  const std::vector<Case> cases = {
      {"tenant with ':'", colon_tenant, {}, {}},
      {"workload with ':'", colon_workload, {}, {}},
      {"no tenant", no_tenant, {}, {}},
      {"no workload", no_workload, {}, {}},
      {"negative task", negative_task, {}, {}},
      {"empty audience", trainTask(), {kSts, ""}, {}},
      {"negative ttl", trainTask(), {}, -seconds(1)},
      {"ttl under a second", trainTask(), {}, std::chrono::milliseconds(500)},
  };
  for (const Case& c : cases) {
    auto token = issuer->issue(c.who, c.aud, c.ttl);
    ASSERT_FALSE(token.isOk()) << c.name;
    EXPECT_EQ(token.status().code(), core::StatusCode::kInvalidArgument) << c.name;
  }

  const std::vector<std::string> bad_issuers = {"",
                                                "tessera.example",
                                                "ftp://tessera.example",
                                                "https://",
                                                "https:///x",
                                                "https://t.example/",
                                                "https://t.example?x=1",
                                                "https://t.example#f",
                                                "https://t example"};
  for (const std::string& iss : bad_issuers) {
    IdentityOptions o = options();
    o.issuer = iss;
    auto opened = IdentityIssuer::open(*store_, *keys_, clock_, o);
    ASSERT_FALSE(opened.isOk()) << iss;
    EXPECT_EQ(opened.status().code(), core::StatusCode::kInvalidArgument) << iss;
  }
  IdentityOptions zero_ttl = options();
  zero_ttl.token_ttl = core::Duration::zero();
  EXPECT_FALSE(IdentityIssuer::open(*store_, *keys_, clock_, zero_ttl).isOk());
  IdentityOptions no_audience = options();
  no_audience.default_audience = "";
  EXPECT_FALSE(IdentityIssuer::open(*store_, *keys_, clock_, no_audience).isOk());
  // A path in the issuer is fine (AWS and OIDC allow one).
  IdentityOptions with_path = options();
  with_path.issuer = "https://t.example:8200/v1/identity";
  auto ok = IdentityIssuer::open(*store_, *keys_, clock_, with_path);
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  EXPECT_EQ((*ok)->discoveryDocument().at("jwks_uri"),
            "https://t.example:8200/v1/identity/.well-known/jwks.json");
}

TEST_F(IdentityTest, PrivateKeyIsStoredOnlySealed) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string token = issueOrEmpty(*issuer, {kSts});

  const std::vector<std::string> pems = storedPems();
  ASSERT_EQ(pems.size(), 1U);
  auto key = SigningKey::fromPem(pems[0]);
  ASSERT_TRUE(key.isOk()) << key.status().toString();
  EXPECT_EQ(key->kid(), kidOf(token));

  EXPECT_EQ(filesContaining(data_dir_.path(), "PRIVATE KEY"), std::vector<std::string>{});
  std::istringstream lines(pems[0]);
  std::string line;
  int body_lines = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line.starts_with("-----")) {
      continue;
    }
    ++body_lines;
    EXPECT_EQ(filesContaining(data_dir_.path(), line), std::vector<std::string>{}) << line;
  }
  EXPECT_GT(body_lines, 20);
}

TEST_F(IdentityTest, RestartKeepsTheKeyAndOldTokensStillVerify) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string token = issueOrEmpty(*issuer, {kSts});
  const std::string kid = kidOf(token);
  issuer.reset();
  keys_.reset();
  store_.reset();

  clock_.advance(minutes(30));
  openStoreAndKeys();
  issuer = openIssuer();
  ASSERT_TRUE(issuer);
  auto jwks = issuer->jwks();
  ASSERT_TRUE(jwks.isOk()) << jwks.status().toString();
  EXPECT_EQ(kidsOf(*jwks), std::vector<std::string>{kid});
  EXPECT_TRUE(issuer->verify(token, kSts).isOk());
  EXPECT_EQ(kidOf(issueOrEmpty(*issuer, {kSts})), kid);
  EXPECT_EQ(storedPems().size(), 1U);
}

TEST_F(IdentityTest, RotationKeepsTheOldKeyUntilItsTokensHaveExpired) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const std::string first = issueOrEmpty(*issuer, {kSts});
  const std::string old_kid = kidOf(first);

  // One second before rotation: still the first key, for a token that lives a full hour.
  clock_.advance(hours(24) - seconds(1));
  const std::string last_of_old = issueOrEmpty(*issuer, {kSts});
  EXPECT_EQ(kidOf(last_of_old), old_kid);

  clock_.advance(seconds(1));
  const std::string rotated = issueOrEmpty(*issuer, {kSts});
  const std::string new_kid = kidOf(rotated);
  EXPECT_NE(new_kid, old_kid);
  auto jwks = issuer->jwks();
  ASSERT_TRUE(jwks.isOk()) << jwks.status().toString();
  EXPECT_EQ(kidsOf(*jwks), (std::vector<std::string>{new_kid, old_kid}));
  EXPECT_TRUE(issuer->verify(last_of_old, kSts).isOk());
  EXPECT_TRUE(issuer->verify(rotated, kSts).isOk());

  // A server started now (or sharing the store) sees the same two keys.
  auto peer = openIssuer();
  ASSERT_TRUE(peer);
  auto peer_jwks = peer->jwks();
  ASSERT_TRUE(peer_jwks.isOk());
  EXPECT_EQ(kidsOf(*peer_jwks), (std::vector<std::string>{new_kid, old_kid}));
  EXPECT_EQ(kidOf(issueOrEmpty(*peer, {kSts})), new_kid);

  // The old key's last token expires at key_rotation + token_ttl after the key was made.
  clock_.advance(hours(1) - seconds(2));
  EXPECT_TRUE(issuer->verify(last_of_old, kSts).isOk());
  jwks = issuer->jwks();
  ASSERT_TRUE(jwks.isOk());
  EXPECT_EQ(kidsOf(*jwks).size(), 2U);
  clock_.advance(seconds(2));
  jwks = issuer->jwks();
  ASSERT_TRUE(jwks.isOk());
  EXPECT_EQ(kidsOf(*jwks), std::vector<std::string>{new_kid});
  EXPECT_FALSE(issuer->verify(last_of_old, kSts).isOk());
  const std::string later = issueOrEmpty(*issuer, {kSts});
  EXPECT_EQ(kidOf(later), new_kid);
  EXPECT_TRUE(issuer->verify(later, kSts).isOk());

  // The next rotation drops the old key from the record too.
  clock_.advance(hours(23));
  const std::string third = issueOrEmpty(*issuer, {kSts});
  EXPECT_NE(kidOf(third), new_kid);
  EXPECT_NE(kidOf(third), old_kid);
  const std::vector<std::string> pems = storedPems();
  ASSERT_EQ(pems.size(), 2U);
  EXPECT_EQ(SigningKey::fromPem(pems[0])->kid(), kidOf(third));
  EXPECT_EQ(SigningKey::fromPem(pems[1])->kid(), new_kid);
}

TEST_F(IdentityTest, TwoIssuersOnOneStoreRotateToTheSameKey) {
  auto a = openIssuer();
  auto b = openIssuer();
  ASSERT_TRUE(a && b);
  const std::string old_kid = kidOf(issueOrEmpty(*a, {kSts}));
  EXPECT_EQ(kidOf(issueOrEmpty(*b, {kSts})), old_kid);

  clock_.advance(hours(24));
  // Both find the rotation due at once; the compare-and-swap lets one key win.
  std::string from_a;
  std::string from_b;
  std::thread ta([&] { from_a = issueOrEmpty(*a, {kSts}); });
  std::thread tb([&] { from_b = issueOrEmpty(*b, {kSts}); });
  ta.join();
  tb.join();
  EXPECT_NE(kidOf(from_a), old_kid);
  EXPECT_EQ(kidOf(from_a), kidOf(from_b));
  EXPECT_EQ(storedPems().size(), 2U);
  EXPECT_TRUE(a->verify(from_b, kSts).isOk());
  EXPECT_TRUE(b->verify(from_a, kSts).isOk());
}

TEST_F(IdentityTest, ManyThreadsSignAtOnce) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  constexpr int kThreads = 8;
  constexpr int kEach = 10;
  std::vector<std::vector<std::string>> tokens(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        tokens[t].push_back(issueOrEmpty(*issuer, {kSts}));
        EXPECT_TRUE(issuer->jwks().isOk());
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
  std::set<std::string> jtis;
  for (const auto& list : tokens) {
    for (const std::string& token : list) {
      auto c = issuer->verify(token, kSts);
      ASSERT_TRUE(c.isOk()) << c.status().toString();
      jtis.insert(c->at("jti").get<std::string>());
    }
  }
  EXPECT_EQ(jtis.size(), static_cast<size_t>(kThreads * kEach));
}

TEST_F(IdentityTest, SealedIssuerIsUnavailableUntilUnsealed) {
  TempDir shamir_dir;
  auto store = openStore(shamir_dir.path(), clock_);
  ASSERT_TRUE(store);
  auto opened_keys = KeyManager::open(*store, {SealOptions::Mode::kShamir, ""});
  ASSERT_TRUE(opened_keys.isOk()) << opened_keys.status().toString();
  KeyManager& keys = **opened_keys;
  auto shares = keys.initialize(3, 2);
  ASSERT_TRUE(shares.isOk()) << shares.status().toString();
  keys.seal();

  // Opening works while sealed; nothing is made or stored until the keys can be sealed.
  auto opened = IdentityIssuer::open(*store, keys, clock_, options());
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  IdentityIssuer& issuer = **opened;
  EXPECT_EQ(issuer.issue(trainTask(), {kSts}).status().code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(issuer.jwks().status().code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(issuer.verify("a.b.c", kSts).status().code(), core::StatusCode::kUnavailable);
  auto record = store->get(kOidcKeysKey);
  ASSERT_TRUE(record.isOk());
  EXPECT_FALSE(record->has_value());
  EXPECT_EQ(issuer.discoveryDocument().at("issuer"), kIssuer);  // Needs no keys.

  ASSERT_TRUE(keys.unseal((*shares)[0]).isOk());
  ASSERT_TRUE(keys.unseal((*shares)[2]).isOk());
  ASSERT_FALSE(keys.status().sealed);
  auto token = issuer.issue(trainTask(), {kSts});
  ASSERT_TRUE(token.isOk()) << token.status().toString();
  const std::string kid = kidOf(*token);

  // Sealing again stops issuing; after the next unseal the same key is back.
  keys.seal();
  EXPECT_EQ(issuer.issue(trainTask(), {kSts}).status().code(), core::StatusCode::kUnavailable);
  EXPECT_EQ(issuer.verify(*token, kSts).status().code(), core::StatusCode::kUnavailable);
  ASSERT_TRUE(keys.unseal((*shares)[1]).isOk());
  ASSERT_TRUE(keys.unseal((*shares)[0]).isOk());
  EXPECT_TRUE(issuer.verify(*token, kSts).isOk());
  auto again = issuer.issue(trainTask(), {kSts});
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(kidOf(*again), kid);
}

TEST_F(IdentityTest, ARecordThatDoesNotOpenFailsOpenAndIsKept) {
  ASSERT_TRUE(store_->put(kOidcKeysKey, "not a sealed record").isOk());
  auto issuer = IdentityIssuer::open(*store_, *keys_, clock_, options());
  ASSERT_FALSE(issuer.isOk());
  EXPECT_EQ(issuer.status().code(), core::StatusCode::kInternal);
  EXPECT_NE(issuer.status().message().find(std::string(kOidcKeysKey)), std::string::npos)
      << issuer.status().message();
  auto kv = store_->get(kOidcKeysKey);
  ASSERT_TRUE(kv.isOk() && kv->has_value());
  EXPECT_EQ((*kv)->value, "not a sealed record");
}

TEST_F(IdentityTest, DiscoveryDocumentHasWhatAwsReads) {
  auto issuer = openIssuer();
  ASSERT_TRUE(issuer);
  const json d = issuer->discoveryDocument();
  EXPECT_EQ(d.at("issuer"), kIssuer);
  EXPECT_EQ(d.at("jwks_uri"), "https://tessera.example/.well-known/jwks.json");
  EXPECT_EQ(d.at("response_types_supported"), json::array({"id_token"}));
  EXPECT_EQ(d.at("subject_types_supported"), json::array({"public"}));
  EXPECT_EQ(d.at("id_token_signing_alg_values_supported"), json::array({"RS256"}));
  EXPECT_EQ(d.at("scopes_supported"), json::array({"openid"}));
  const json& claims = d.at("claims_supported");
  for (const char* c : {"iss", "sub", "aud", "exp", "iat", "tessera"}) {
    EXPECT_NE(std::find(claims.begin(), claims.end(), c), claims.end()) << c;
  }
}

}  // namespace
}  // namespace tessera::secrets
