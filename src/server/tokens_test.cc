#include "server/tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>

#include "store/sqlite_store.h"
#include "store/test_util.h"

namespace tessera::server {
namespace {

using std::chrono::hours;
using std::chrono::minutes;

class TokensTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/tokens-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    reopen();
  }
  void reopen() {
    tokens_.reset();
    store_.reset();
    auto s = store::SqliteStore::open(dir_ + "/t.db", {}, clock_);
    ASSERT_TRUE(s.isOk()) << s.status().message();
    store_ = std::move(s).value();
    auto t = TokenManager::open(*store_, clock_, {});
    ASSERT_TRUE(t.isOk()) << t.status().message();
    tokens_ = std::move(t).value();
  }
  CreatedToken root() {
    auto r = tokens_->bootstrapRoot();
    EXPECT_TRUE(r.isOk()) << r.status().message();
    return std::move(r).value();
  }

  std::string dir_;
  core::FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<TokenManager> tokens_;
};

TEST_F(TokensTest, ExpireOnTheirOwnAndOnlyRootHasNoTtl) {
  CreatedToken r = root();
  EXPECT_TRUE(tokens_->rootTokenExists());
  EXPECT_EQ(r.info.ttlSeconds(clock_.wallNow()), -1);
  EXPECT_EQ(r.secret.substr(0, 4), "tsr.");
  EXPECT_EQ(r.secret.size(), 28U);
  EXPECT_FALSE(tokens_->bootstrapRoot().isOk());  // One root token at a time.
  // No TTL asked: the default (1 h) applies.
  auto t = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t.isOk()) << t.status().message();
  EXPECT_EQ(t->info.ttlSeconds(clock_.wallNow()), 3600);
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  clock_.advance(minutes(59));
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  clock_.advance(minutes(1));
  EXPECT_EQ(tokens_->lookup(t->secret).status().code(), core::StatusCode::kNotFound);
  EXPECT_EQ(tokens_->expire().value(), 1);
  // Above the system maximum: refused.
  EXPECT_FALSE(tokens_->create(r.info, {.tenant = "team-1", .ttl = hours(24 * 33)}).isOk());
  EXPECT_FALSE(tokens_->lookup("tsr.nonsense").isOk());
}

TEST_F(TokensTest, RenewalStopsAtTheExplicitMaxTtl) {
  CreatedToken r = root();
  auto t = tokens_->create(
      r.info,
      {.tenant = "team-1", .policies = {"dev"}, .ttl = hours(1), .explicit_max_ttl = hours(2)});
  ASSERT_TRUE(t.isOk());
  clock_.advance(minutes(50));
  auto renewed = tokens_->renew(t->info.accessor, core::Duration::zero());
  ASSERT_TRUE(renewed.isOk());
  EXPECT_EQ(renewed->ttlSeconds(clock_.wallNow()), 3600);
  clock_.advance(minutes(50));
  renewed = tokens_->renew(t->info.accessor, hours(10));
  ASSERT_TRUE(renewed.isOk());
  EXPECT_EQ(renewed->ttlSeconds(clock_.wallNow()), 20 * 60);  // Capped at issue + 2 h.
  clock_.advance(minutes(20));
  EXPECT_FALSE(tokens_->lookup(t->secret).isOk());
  EXPECT_FALSE(tokens_->renew(t->info.accessor, hours(1)).isOk());
}

TEST_F(TokensTest, AccessForFourHoursThenGone) {
  CreatedToken r = root();
  auto t = tokens_->create(r.info, {.tenant = "team-1",
                                    .policies = {"read-only"},
                                    .ttl = hours(4),
                                    .explicit_max_ttl = hours(4),
                                    .renewable = false});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(tokens_->renew(t->info.accessor, hours(1)).status().code(),
            core::StatusCode::kFailedPrecondition);
  clock_.advance(hours(4));
  EXPECT_FALSE(tokens_->lookup(t->secret).isOk());
}

TEST_F(TokensTest, RevokingAParentRevokesItsChildren) {
  CreatedToken r = root();
  auto admin = tokens_->create(r.info, {.policies = {"ops", "dev"}, .ttl = hours(8)});
  ASSERT_TRUE(admin.isOk());
  auto child = tokens_->create(admin->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(child.isOk()) << child.status().message();
  auto grandchild = tokens_->create(child->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(grandchild.isOk()) << grandchild.status().message();
  auto other = tokens_->create(r.info, {.tenant = "team-2", .policies = {"dev"}});
  EXPECT_EQ(tokens_->revoke(admin->info.accessor).value(), 3);
  EXPECT_FALSE(tokens_->lookup(admin->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
  EXPECT_FALSE(tokens_->lookup(grandchild->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  // And it stays revoked after a restart.
  reopen();
  EXPECT_FALSE(tokens_->lookup(grandchild->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
}

TEST_F(TokensTest, ParentsExpiryTakesItsChildren) {
  CreatedToken r = root();
  auto parent =
      tokens_->create(r.info, {.policies = {"dev"}, .ttl = hours(1), .explicit_max_ttl = hours(1)});
  auto child =
      tokens_->create(parent->info, {.tenant = "team-1", .policies = {"dev"}, .ttl = hours(8)});
  ASSERT_TRUE(child.isOk());
  // The child's cap is its parent's.
  EXPECT_EQ(child->info.ttlSeconds(clock_.wallNow()), 3600);
  clock_.advance(hours(1));
  EXPECT_FALSE(tokens_->lookup(child->secret).isOk());
}

TEST_F(TokensTest, TenantTokensStayInTheirTenantAndPolicies) {
  CreatedToken r = root();
  auto t1 = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t1.isOk());
  auto cross = tokens_->create(t1->info, {.tenant = "team-2", .policies = {"dev"}});
  EXPECT_EQ(cross.status().code(), core::StatusCode::kPermissionDenied);
  auto admin = tokens_->create(t1->info, {.tenant = "", .policies = {"dev"}});
  EXPECT_EQ(admin.status().code(), core::StatusCode::kPermissionDenied);
  auto more = tokens_->create(t1->info, {.tenant = "team-1", .policies = {"dev", "ops"}});
  EXPECT_EQ(more.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(more.status().message().find("'ops'"), std::string::npos);
  auto as_root = tokens_->create(t1->info, {.tenant = "team-1", .policies = {"root"}});
  EXPECT_FALSE(as_root.isOk());
  EXPECT_EQ(tokens_->list("team-1").size(), 1U);
  EXPECT_EQ(tokens_->list("team-2").size(), 0U);
}

TEST_F(TokensTest, ATenantHoldsAtMostItsCapOfTokensUntilSomeGo) {
  CreatedToken r = root();
  const TokenRequest team1{.tenant = "team-1", .policies = {"dev"}, .ttl = hours(1)};
  auto a = tokens_->create(r.info, team1, 2);
  auto b = tokens_->create(r.info, team1, 2);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(tokens_->held("team-1"), 2U);
  auto refused = tokens_->create(r.info, team1, 2);
  EXPECT_EQ(refused.status().code(), core::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("limit of 2 tokens"), std::string::npos)
      << refused.status().message();
  // Other tenants and the admin scope are not held to team-1's count.
  EXPECT_TRUE(tokens_->create(r.info, {.tenant = "team-2", .ttl = hours(1)}, 2).isOk());
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(tokens_->create(r.info, {.policies = {"root"}, .ttl = hours(1)}, 1).isOk());
  }
  // A revoked token frees its place, with its children.
  ASSERT_TRUE(tokens_->revoke(a->info.accessor).isOk());
  EXPECT_EQ(tokens_->held("team-1"), 1U);
  auto child = tokens_->create(b->info, {.tenant = "team-1", .policies = {"dev"}}, 2);
  ASSERT_TRUE(child.isOk()) << child.status().message();
  EXPECT_FALSE(tokens_->create(r.info, team1, 2).isOk());
  ASSERT_EQ(tokens_->revoke(b->info.accessor).value(), 2);
  EXPECT_EQ(tokens_->held("team-1"), 0U);
  // So does an expired one, once swept; and the count survives a restart.
  ASSERT_TRUE(tokens_->create(r.info, team1, 2).isOk());
  ASSERT_TRUE(tokens_->create(r.info, {.tenant = "team-1", .ttl = hours(3)}, 2).isOk());
  reopen();
  EXPECT_EQ(tokens_->held("team-1"), 2U);
  EXPECT_EQ(tokens_->held("team-2"), 1U);
  clock_.advance(hours(2));
  ASSERT_TRUE(tokens_->expire().isOk());
  EXPECT_EQ(tokens_->held("team-1"), 1U);
  EXPECT_EQ(tokens_->held("team-2"), 0U);
  EXPECT_TRUE(tokens_->create(r.info, team1, 2).isOk());
}

TEST_F(TokensTest, LookupsNeverWaitForAChangesStoreWrite) {
  // Every request looks its token up: a change (each one a disk flush) must not hold them.
  store::HeldStore held(*store_);
  auto opened = TokenManager::open(held, clock_, {});
  ASSERT_TRUE(opened.isOk());
  TokenManager& tokens = **opened;
  auto r = tokens.bootstrapRoot();
  ASSERT_TRUE(r.isOk());
  auto a = tokens.create(r->info, {.tenant = "team-1", .ttl = hours(1), .renewable = true});
  auto b = tokens.create(r->info, {.tenant = "team-1", .ttl = hours(1)});
  ASSERT_TRUE(a.isOk() && b.isOk());
  held.hold("/tokens/");
  auto created = std::async(std::launch::async, [&] {
    return tokens.create(r->info, {.tenant = "team-2", .ttl = hours(1)});
  });
  ASSERT_TRUE(held.waitHeld(1));
  // Changes take turns: these wait behind the create.
  auto renewed =
      std::async(std::launch::async, [&] { return tokens.renew(a->info.accessor, hours(2)); });
  auto revoked = std::async(std::launch::async, [&] { return tokens.revoke(b->info.accessor); });
  auto reads = std::async(std::launch::async, [&] {
    return tokens.lookup(a->secret).isOk() && tokens.lookup(b->secret).isOk() &&
           tokens.lookupAccessor(a->info.accessor).isOk() && tokens.list("team-1").size() == 2 &&
           tokens.held("team-1") == 2 && tokens.rootTokenExists();
  });
  ASSERT_EQ(reads.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "a lookup waited for a change's store write";
  EXPECT_TRUE(reads.get());
  EXPECT_EQ(renewed.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  held.release();
  auto c = created.get();
  ASSERT_TRUE(c.isOk()) << c.status().message();
  EXPECT_TRUE(tokens.lookup(c->secret).isOk());
  ASSERT_TRUE(renewed.get().isOk());
  EXPECT_EQ(tokens.lookup(a->secret)->expires, clock_.wallNow() + hours(2));
  auto gone = revoked.get();
  ASSERT_TRUE(gone.isOk());
  EXPECT_EQ(*gone, 1);
  EXPECT_FALSE(tokens.lookup(b->secret).isOk());
  EXPECT_EQ(tokens.held("team-1"), 1U);
}

TEST_F(TokensTest, RevokingATenantsTokensLeavesNoneOfItsOwnAndTouchesNoOther) {
  CreatedToken r = root();
  auto a = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  auto b = tokens_->create(r.info, {.tenant = "team-1"});
  auto other = tokens_->create(r.info, {.tenant = "team-2"});
  ASSERT_TRUE(a.isOk() && b.isOk() && other.isOk());
  auto child = tokens_->create(a->info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(child.isOk());
  EXPECT_EQ(tokens_->revokeTenant("team-1").value(), 3);
  for (const std::string& secret : {a->secret, b->secret, child->secret}) {
    EXPECT_FALSE(tokens_->lookup(secret).isOk());
  }
  EXPECT_EQ(tokens_->held("team-1"), 0U);
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(r.secret).isOk());
  // Gone from the store as well.
  reopen();
  EXPECT_FALSE(tokens_->lookup(a->secret).isOk());
  EXPECT_TRUE(tokens_->lookup(other->secret).isOk());
  EXPECT_EQ(tokens_->revokeTenant("team-1").value(), 0);
}

TEST_F(TokensTest, OnlyTheHashOfASecretIsStored) {
  CreatedToken r = root();
  auto t = tokens_->create(r.info, {.tenant = "team-1", .policies = {"dev"}});
  ASSERT_TRUE(t.isOk());
  auto all = store_->range("/", store::prefixEnd("/"));
  ASSERT_TRUE(all.isOk());
  for (const store::KeyValue& kv : all->kvs) {
    EXPECT_EQ(kv.key.find(t->secret), std::string::npos);
    EXPECT_EQ(kv.value.find(t->secret), std::string::npos);
    EXPECT_EQ(kv.value.find(r.secret), std::string::npos);
  }
  // Survives a restart by hash.
  reopen();
  EXPECT_TRUE(tokens_->lookup(t->secret).isOk());
  EXPECT_TRUE(tokens_->rootTokenExists());
}

}  // namespace
}  // namespace tessera::server
