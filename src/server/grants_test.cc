#include "server/grants.h"

#include <gtest/gtest.h>

#include "store/sqlite_store.h"
#include "store/test_util.h"

namespace tessera::server {
namespace {

using std::chrono::hours;
using std::chrono::seconds;

class GrantsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open(dir_.file("s.db"), store::testOptions(), clock_);
    ASSERT_TRUE(s.isOk());
    store_ = std::move(s).value();
    auto t = GrantTable::open(*store_);
    ASSERT_TRUE(t.isOk());
    table_ = std::move(t).value();
  }
  core::Result<Grant> grant(const std::string& on, core::Duration ttl,
                            const std::string& policy = "read") {
    return table_->create("team-2", "team-1", on, policy, ttl, hours(24), "acc", now_);
  }
  store::TempDir dir_;
  store::ThreadSafeFakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<GrantTable> table_;
  core::WallTime now_{std::chrono::seconds(1'800'000'000)};
};

TEST_F(GrantsTest, CoversItsPrefixOnlyUntilItExpires) {
  auto g = grant("secrets/kv/data/projects/x", seconds(4));
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  struct Case {
    const char* path;
    bool covered;
  };
  for (const Case& c : std::initializer_list<Case>{
           {"secrets/kv/data/projects/x", true},
           {"secrets/kv/data/projects/x/db", true},
           {"secrets/kv/data/projects/xy", false},  // A sibling with the same start.
           {"secrets/kv/data/projects", false},
           {"secrets/kv/data/projects/x/../y", false},  // Never a path that walks out.
           {"secrets/kv/data/projects/x//db", false},
           {"workloads/x", false},
       }) {
    EXPECT_EQ(table_->find("team-2", "team-1", c.path, now_).has_value(), c.covered) << c.path;
  }
  // Only from its owner to its grantee.
  EXPECT_FALSE(table_->find("team-1", "team-2", "secrets/kv/data/projects/x", now_));
  EXPECT_FALSE(table_->find("team-2", "team-3", "secrets/kv/data/projects/x", now_));
  // Up to the last instant of its TTL, and not at it.
  EXPECT_TRUE(table_->find("team-2", "team-1", "secrets/kv/data/projects/x",
                           now_ + seconds(4) - std::chrono::milliseconds(1)));
  EXPECT_FALSE(table_->find("team-2", "team-1", "secrets/kv/data/projects/x", now_ + seconds(4)));
  EXPECT_TRUE(g->capabilities.allows(Capability::kRead));
  EXPECT_FALSE(g->capabilities.allows(Capability::kUpdate));
}

TEST_F(GrantsTest, RefusesWhatItMustNotGrant) {
  EXPECT_FALSE(grant("secrets/kv/data/x", seconds(0)).isOk());  // No TTL: no grant.
  EXPECT_FALSE(grant("secrets/kv/data/x", hours(25)).isOk());   // Above the cap.
  EXPECT_FALSE(grant("workloads", hours(1)).isOk());            // Not a secret.
  EXPECT_FALSE(grant("secrets/../workloads", hours(1)).isOk());
  EXPECT_FALSE(grant("/secrets/kv", hours(1)).isOk());
  EXPECT_FALSE(grant("secrets/kv", hours(1), "Not A Name").isOk());
  EXPECT_FALSE(grant("secrets/kv", hours(1), "").isOk());
  // Any name a policy may have (Vault's rules: '_' allowed) names an owner's policy.
  EXPECT_TRUE(grant("secrets/kv/data/a", hours(1), "dev_team").isOk());
  EXPECT_FALSE(
      table_->create("team-2", "team-2", "secrets/kv", "read", hours(1), hours(24), "a", now_)
          .isOk());
  auto w = grant("secrets/kv", hours(1), "write");
  ASSERT_TRUE(w.isOk());
  EXPECT_TRUE(w->capabilities.allows(Capability::kUpdate));
  EXPECT_FALSE(w->capabilities.allows(Capability::kSudo));
}

TEST_F(GrantsTest, AnOwnersPolicyIsNamedNotCopied) {
  // Whether the owner has the policy is the control plane's check; the grant keeps the name and
  // no capabilities of its own, so the policy as it is at each use decides.
  auto g = grant("secrets/kv/data/x", hours(1), "x-readers");
  ASSERT_TRUE(g.isOk()) << g.status().toString();
  EXPECT_TRUE(g->ownerPolicy());
  EXPECT_FALSE(g->capabilities.allows(Capability::kRead));
  auto reopened = GrantTable::open(*store_);
  ASSERT_TRUE(reopened.isOk());
  const auto listed = (*reopened)->list("team-1");
  ASSERT_EQ(listed.size(), 1U);
  EXPECT_EQ(listed[0].policy, "x-readers");
  EXPECT_TRUE(listed[0].ownerPolicy());
  EXPECT_FALSE(grant("secrets/kv/data/x", hours(1), "read")->ownerPolicy());
}

TEST_F(GrantsTest, SurvivesARestartAndExpiresOnce) {
  auto a = grant("secrets/kv/data/a", seconds(10));
  auto b = grant("secrets/kv/data/b", hours(1));
  ASSERT_TRUE(a.isOk() && b.isOk());
  auto reopened = GrantTable::open(*store_);
  ASSERT_TRUE(reopened.isOk());
  table_ = std::move(reopened).value();
  EXPECT_EQ(table_->list("team-1").size(), 2U);
  EXPECT_EQ(table_->list("team-2").size(), 2U);
  EXPECT_TRUE(table_->expireDue(now_ + seconds(9)).empty());
  const std::vector<Grant> gone = table_->expireDue(now_ + seconds(10));
  ASSERT_EQ(gone.size(), 1U);
  EXPECT_EQ(gone[0].id, a->id);
  EXPECT_TRUE(table_->expireDue(now_ + seconds(11)).empty());
  EXPECT_EQ(table_->revoke("team-1", b->id).status().code(), core::StatusCode::kNotFound);
  ASSERT_TRUE(table_->revoke("team-2", b->id).isOk());
  EXPECT_TRUE(table_->list("team-1").empty());
  EXPECT_TRUE(GrantTable::open(*store_).value()->list("team-2").empty());
}

}  // namespace
}  // namespace tessera::server
