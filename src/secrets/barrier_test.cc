#include "secrets/barrier.h"

#include <gtest/gtest.h>

namespace tessera::secrets {
namespace {

class BarrierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = Keyring::generate();
    ASSERT_TRUE(r.isOk());
    ring_ = std::move(r).value();
    ASSERT_TRUE(ring_.addTenant("team-1").isOk());
    ASSERT_TRUE(ring_.addTenant("team-2").isOk());
  }
  Keyring ring_;
};

TEST_F(BarrierTest, SealedValuesOpenOnlyForTheirTenantAndPath) {
  Barrier b(ring_);
  auto sealed = b.seal("hunter2", "team-1", "kv/data/db");
  ASSERT_TRUE(sealed.isOk()) << sealed.status().message();
  EXPECT_EQ(sealed->find("hunter2"), std::string::npos);  // No plaintext in what is stored.
  EXPECT_EQ(sealed->size(), 4 + 4 + 12 + 7 + 16U);
  EXPECT_EQ(*b.open(*sealed, "team-1", "kv/data/db"), "hunter2");
  // The same value sealed twice differs (a fresh nonce each time).
  EXPECT_NE(*b.seal("hunter2", "team-1", "kv/data/db"), *sealed);
  // Moved to another path or tenant: refused.
  EXPECT_EQ(b.open(*sealed, "team-1", "kv/data/other").status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.open(*sealed, "team-2", "kv/data/db").status().code(),
            core::StatusCode::kInvalidArgument);
  // Empty values seal too.
  EXPECT_EQ(*b.open(*b.seal("", "team-1", "p"), "team-1", "p"), "");
}

TEST_F(BarrierTest, AnyFlippedByteIsRefused) {
  Barrier b(ring_);
  const std::string sealed = *b.seal("the value", "team-1", "kv/data/x");
  // Every byte after the magic and term: nonce, ciphertext, tag.
  for (size_t i = 8; i < sealed.size(); ++i) {
    std::string bad = sealed;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    auto r = b.open(bad, "team-1", "kv/data/x");
    ASSERT_FALSE(r.isOk()) << "byte " << i;
    EXPECT_NE(r.status().message().find("authentication failed"), std::string::npos);
  }
  EXPECT_EQ(b.open("tsb1", "team-1", "kv/data/x").status().code(),
            core::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.open(std::string(40, 'x'), "team-1", "kv/data/x").status().code(),
            core::StatusCode::kInvalidArgument);
}

TEST_F(BarrierTest, RotationKeepsOldTermsReadable) {
  Barrier b(ring_);
  const std::string old = *b.seal("v1", "team-1", "p");
  EXPECT_EQ(*Barrier::termOf(old), 1U);
  ASSERT_EQ(*ring_.rotate(), 2U);
  const std::string fresh = *b.seal("v2", "team-1", "p");
  EXPECT_EQ(*Barrier::termOf(fresh), 2U);
  EXPECT_EQ(*b.open(old, "team-1", "p"), "v1");
  EXPECT_EQ(*b.open(fresh, "team-1", "p"), "v2");
  // A term the keyring never had.
  std::string future = fresh;
  future[7] = 9;
  EXPECT_EQ(b.open(future, "team-1", "p").status().code(), core::StatusCode::kNotFound);
}

TEST_F(BarrierTest, ShreddingATenantMakesItsValuesUnreadableAndNoOneElses) {
  Barrier b(ring_);
  const std::string mine = *b.seal("team-1's", "team-1", "p");
  const std::string theirs = *b.seal("team-2's", "team-2", "p");
  ring_.shred("team-1");
  EXPECT_EQ(b.open(mine, "team-1", "p").status().code(), core::StatusCode::kNotFound);
  EXPECT_FALSE(b.seal("x", "team-1", "p").isOk());
  EXPECT_EQ(*b.open(theirs, "team-2", "p"), "team-2's");
  // Added again, the tenant gets a new salt: the old values stay unreadable.
  ASSERT_TRUE(ring_.addTenant("team-1").isOk());
  EXPECT_EQ(b.open(mine, "team-1", "p").status().code(), core::StatusCode::kInvalidArgument);
  // A tenant never added has no keys.
  EXPECT_EQ(b.seal("x", "team-9", "p").status().code(), core::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera::secrets
