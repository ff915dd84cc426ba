#include "secrets/keys.h"

#include <gtest/gtest.h>

#include <fstream>

#include "audit/crypto.h"
#include "secrets/shamir.h"
#include "secrets/test_util.h"

namespace tessera::secrets {
namespace {

using testing::filesContaining;
using testing::openStore;
using testing::TempDir;
using testing::ThreadSafeFakeClock;

class KeysTest : public ::testing::Test {
 protected:
  SealOptions fileMode() const {
    return {SealOptions::Mode::kKeyFile, keys_dir_.file("unseal.key")};
  }
  std::unique_ptr<KeyManager> openKeys(store::Store& s, SealOptions options) {
    auto m = KeyManager::open(s, std::move(options));
    EXPECT_TRUE(m.isOk()) << m.status().toString();
    return m.isOk() ? std::move(m).value() : nullptr;
  }
  TempDir data_dir_;
  TempDir keys_dir_;
  ThreadSafeFakeClock clock_;
};

TEST_F(KeysTest, KeyFileModeInitializesOnceAndUnsealsAtEveryStart) {
  std::string sealed;
  {
    auto store = openStore(data_dir_.path(), clock_);
    auto keys = openKeys(*store, fileMode());
    ASSERT_TRUE(keys);
    EXPECT_FALSE(keys->status().sealed);
    EXPECT_EQ(keys->status().mode, "file");
    ASSERT_TRUE(keys->addTenant("team-1").isOk());
    auto s = keys->encrypt("team-1", "/secrets/team-1/kv/db", "correct horse battery staple");
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    sealed = *s;
    ASSERT_TRUE(store->put("/secrets/team-1/kv/db", sealed).isOk());
  }
  auto store = openStore(data_dir_.path(), clock_);
  auto keys = openKeys(*store, fileMode());
  ASSERT_TRUE(keys);
  EXPECT_EQ(*keys->decrypt("team-1", "/secrets/team-1/kv/db", sealed),
            "correct horse battery staple");
  // The value, the unseal key and the keyring's keys are nowhere in the store's files.
  EXPECT_EQ(filesContaining(data_dir_.path(), "correct horse"), std::vector<std::string>{});
  auto unseal_hex = audit::readSaltFile(keys_dir_.file("unseal.key"));
  ASSERT_TRUE(unseal_hex.isOk());
  EXPECT_EQ(filesContaining(data_dir_.path(), *unseal_hex), std::vector<std::string>{});
  EXPECT_EQ(filesContaining(data_dir_.path(), *fromHex(*unseal_hex)), std::vector<std::string>{});
}

TEST_F(KeysTest, AnotherKeyFileDoesNotUnseal) {
  {
    auto store = openStore(data_dir_.path(), clock_);
    ASSERT_TRUE(openKeys(*store, fileMode()));
  }
  TempDir other;
  ASSERT_TRUE(audit::createSaltFile(other.file("k")).isOk());
  auto store = openStore(data_dir_.path(), clock_);
  auto keys = KeyManager::open(*store, {SealOptions::Mode::kKeyFile, other.file("k")});
  ASSERT_FALSE(keys.isOk());
  EXPECT_EQ(keys.status().code(), core::StatusCode::kPermissionDenied);
  // Nor does a server configured for Shamir shares.
  auto shamir = KeyManager::open(*store, {SealOptions::Mode::kShamir, ""});
  ASSERT_FALSE(shamir.isOk());
  EXPECT_NE(shamir.status().message().find("\"file\""), std::string::npos);
}

TEST_F(KeysTest, RotationKeepsOldTermsReadableAndSurvivesRestart) {
  std::string old_value;
  std::string new_value;
  {
    auto store = openStore(data_dir_.path(), clock_);
    auto keys = openKeys(*store, fileMode());
    ASSERT_TRUE(keys->addTenant("t").isOk());
    old_value = *keys->encrypt("t", "/k/1", "one");
    EXPECT_EQ(*Barrier::termOf(old_value), 1U);
    auto term = keys->rotate();
    ASSERT_TRUE(term.isOk());
    EXPECT_EQ(*term, 2U);
    new_value = *keys->encrypt("t", "/k/2", "two");
    EXPECT_EQ(*Barrier::termOf(new_value), 2U);
    EXPECT_EQ(*keys->decrypt("t", "/k/1", old_value), "one");
  }
  auto store = openStore(data_dir_.path(), clock_);
  auto keys = openKeys(*store, fileMode());
  EXPECT_EQ(keys->activeTerm(), 2U);
  EXPECT_EQ(*keys->decrypt("t", "/k/1", old_value), "one");
  EXPECT_EQ(*keys->decrypt("t", "/k/2", new_value), "two");
}

TEST_F(KeysTest, ShreddingATenantLosesItsSecretsForGoodAndNoOneElses) {
  auto store = openStore(data_dir_.path(), clock_);
  auto keys = openKeys(*store, fileMode());
  ASSERT_TRUE(keys->addTenant("a").isOk());
  ASSERT_TRUE(keys->addTenant("b").isOk());
  const std::string a = *keys->encrypt("a", "/x", "alpha");
  const std::string b = *keys->encrypt("b", "/x", "bravo");
  ASSERT_TRUE(keys->shred("a").isOk());
  EXPECT_EQ(keys->decrypt("a", "/x", a).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(*keys->decrypt("b", "/x", b), "bravo");
  // Re-adding the name makes new keys; the old value stays unreadable.
  ASSERT_TRUE(keys->addTenant("a").isOk());
  EXPECT_FALSE(keys->decrypt("a", "/x", a).isOk());
  // And after a restart too.
  keys.reset();
  keys = openKeys(*store, fileMode());
  EXPECT_FALSE(keys->decrypt("a", "/x", a).isOk());
  EXPECT_EQ(*keys->decrypt("b", "/x", b), "bravo");
}

TEST_F(KeysTest, ShamirModeStartsSealedAndUnsealsWithAnyThresholdShares) {
  std::vector<std::string> shares;
  std::string sealed;
  {
    auto store = openStore(data_dir_.path(), clock_);
    auto keys = openKeys(*store, {SealOptions::Mode::kShamir, ""});
    EXPECT_FALSE(keys->status().initialized);
    EXPECT_TRUE(keys->status().sealed);
    EXPECT_EQ(keys->encrypt("t", "/k", "v").status().code(), core::StatusCode::kUnavailable);
    EXPECT_EQ(keys->unseal("00").status().code(), core::StatusCode::kFailedPrecondition);
    auto s = keys->initialize(5, 3);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    shares = *s;
    ASSERT_EQ(shares.size(), 5U);
    EXPECT_FALSE(keys->status().sealed);
    EXPECT_FALSE(keys->initialize(5, 3).isOk());  // Once only.
    ASSERT_TRUE(keys->addTenant("t").isOk());
    sealed = *keys->encrypt("t", "/k", "v");
  }
  for (const std::string& share : shares) {
    EXPECT_EQ(filesContaining(data_dir_.path(), share), std::vector<std::string>{});
  }
  auto store = openStore(data_dir_.path(), clock_);
  auto keys = openKeys(*store, {SealOptions::Mode::kShamir, ""});
  EXPECT_TRUE(keys->status().initialized);
  EXPECT_TRUE(keys->status().sealed);
  EXPECT_EQ(keys->decrypt("t", "/k", sealed).status().code(), core::StatusCode::kUnavailable);
  // A share from another split: refused at the threshold, and progress starts again.
  std::vector<std::string> other = *splitSecret(std::string(32, 'x'), 5, 3);
  ASSERT_TRUE(keys->unseal(shares[0]).isOk());
  ASSERT_TRUE(keys->unseal(shares[1]).isOk());
  EXPECT_EQ(keys->status().progress, 2);
  EXPECT_EQ(keys->unseal(toHex(other[2])).status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_TRUE(keys->status().sealed);
  EXPECT_EQ(keys->status().progress, 0);
  EXPECT_FALSE(keys->unseal("not hex").isOk());
  // Shares 4, 2, 0: unsealed.
  ASSERT_TRUE(keys->unseal(shares[4]).isOk());
  ASSERT_TRUE(keys->unseal(shares[2]).isOk());
  auto st = keys->unseal(shares[0]);
  ASSERT_TRUE(st.isOk());
  EXPECT_FALSE(st->sealed);
  EXPECT_EQ(*keys->decrypt("t", "/k", sealed), "v");
  // The quorum check for generate-root.
  EXPECT_TRUE(keys->checkQuorum({shares[1], shares[3], shares[4]}).isOk());
  EXPECT_FALSE(keys->checkQuorum({shares[1], shares[3]}).isOk());
  EXPECT_FALSE(keys->checkQuorum({shares[1], shares[3], toHex(other[4])}).isOk());
  // Sealing forgets the keys.
  keys->seal();
  EXPECT_TRUE(keys->status().sealed);
  EXPECT_EQ(keys->decrypt("t", "/k", sealed).status().code(), core::StatusCode::kUnavailable);
}

TEST_F(KeysTest, ATamperedKeyringDoesNotUnseal) {
  {
    auto store = openStore(data_dir_.path(), clock_);
    ASSERT_TRUE(openKeys(*store, fileMode()));
  }
  auto store = openStore(data_dir_.path(), clock_);
  auto ring = store->range("/sys/secrets/keyring");
  ASSERT_TRUE(ring.isOk());
  ASSERT_EQ(ring->kvs.size(), 1U);
  std::string bytes = ring->kvs[0].value;
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_TRUE(store->put("/sys/secrets/keyring", bytes).isOk());
  auto keys = KeyManager::open(*store, fileMode());
  ASSERT_FALSE(keys.isOk());
  EXPECT_NE(keys.status().message().find("tampered"), std::string::npos);
}

}  // namespace
}  // namespace tessera::secrets
