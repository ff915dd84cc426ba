#include "server/tenant_usage.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "store/test_util.h"

namespace tessera::server {
namespace {

// Waits (up to 5 s) until the tenant's count is `want`; returns the count then.
int64_t settle(const TenantUsage& u, const std::string& tenant, int64_t want) {
  for (int i = 0; i < 500 && u.bytes(tenant) != want; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return u.bytes(tenant);
}

TEST(TenantUsageTest, CountsEachTenantsKeysAndValuesAndFollowsTheStore) {
  EXPECT_EQ(TenantUsage::tenantOf("/tenants/a/workloads/w"), "a");
  EXPECT_EQ(TenantUsage::tenantOf("/tenants/a"), "a");
  EXPECT_EQ(TenantUsage::tenantOf("/secrets/b/kv/x"), "b");
  EXPECT_EQ(TenantUsage::tenantOf("/tokens/abc"), "");
  store::TempDir dir;
  core::RealClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  store::Store& store = **s;
  ASSERT_TRUE(store.put("/tenants/a", "{}").isOk());                   // 10 + 2
  ASSERT_TRUE(store.put("/secrets/a/kv/k", "0123456789").isOk());      // 15 + 10
  ASSERT_TRUE(store.put("/tokens/t", std::string(1000, 'x')).isOk());  // No tenant's.
  auto opened = TenantUsage::open(store);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  const TenantUsage& u = **opened;
  EXPECT_EQ(u.bytes("a"), 37);
  EXPECT_EQ(u.bytes("nobody"), 0);
  // Writes after open: a new key, a bigger value, another tenant's, a delete.
  ASSERT_TRUE(store.put("/tenants/a/workloads/w", std::string(100, 'w')).isOk());  // 22 + 100
  EXPECT_EQ(settle(u, "a", 159), 159);
  ASSERT_TRUE(store.put("/secrets/a/kv/k", std::string(30, 'k')).isOk());  // +20
  EXPECT_EQ(settle(u, "a", 179), 179);
  ASSERT_TRUE(store.put("/tenants/b", "{}").isOk());
  EXPECT_EQ(settle(u, "b", 12), 12);
  ASSERT_TRUE(store.deleteRange("/tenants/a/", store::prefixEnd("/tenants/a/")).isOk());
  EXPECT_EQ(settle(u, "a", 57), 57);
  EXPECT_EQ(u.bytes("b"), 12);
}

// A watch the store ends (its history compacted while the server was cut off) is not the end
// of the count: it is counted again from the store, and followed from there.
TEST(TenantUsageTest, AWatchThatEndsIsCountedAgainAndFollowedOn) {
  store::TempDir dir;
  core::RealClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  store::Store& inner = **s;
  store::HeldStore store(inner);
  ASSERT_TRUE(inner.put("/tenants/a", "{}").isOk());  // 10 + 2
  auto opened = TenantUsage::open(store);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  const TenantUsage& u = **opened;
  EXPECT_EQ(u.bytes("a"), 12);
  // Both of its watches end; meanwhile a key is written and another tenant's removed.
  ASSERT_TRUE(inner.put("/tenants/b", "{}").isOk());
  EXPECT_EQ(settle(u, "b", 12), 12);
  EXPECT_EQ(store.endWatches(core::outOfRange("history compacted")), 2U);
  ASSERT_TRUE(inner.put("/secrets/a/kv/k", "0123456789").isOk());  // 15 + 10
  ASSERT_TRUE(inner.deleteRange("/tenants/b", "").isOk());
  EXPECT_EQ(settle(u, "a", 37), 37);
  EXPECT_EQ(settle(u, "b", 0), 0);
  // And what comes after, through the watches it made again.
  ASSERT_TRUE(inner.put("/tenants/a/workloads/w", std::string(100, 'w')).isOk());  // 22 + 100
  EXPECT_EQ(settle(u, "a", 159), 159);
}

}  // namespace
}  // namespace tessera::server
