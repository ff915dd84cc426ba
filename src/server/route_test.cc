#include "server/route.h"

#include <gtest/gtest.h>

namespace tessera::server {
namespace {

TEST(ScopeTargetTest, PlainListener) {
  auto p = scopeTarget("/v1/tenants/team-1/workloads/train?list=true&x=a%20b", "");
  ASSERT_TRUE(p.isOk()) << p.status().message();
  EXPECT_EQ(p->tenant, "team-1");
  EXPECT_EQ(p->path, "workloads/train");
  EXPECT_EQ(p->query.at("list"), "true");
  EXPECT_EQ(p->query.at("x"), "a b");
  p = scopeTarget("/v1/sys/health", "");
  ASSERT_TRUE(p.isOk());
  EXPECT_FALSE(p->tenant.has_value());
  EXPECT_EQ(p->path, "sys/health");
  // The tenant object itself is in the admin scope.
  p = scopeTarget("/v1/tenants/team-1", "");
  ASSERT_TRUE(p.isOk());
  EXPECT_FALSE(p->tenant.has_value());
  EXPECT_EQ(p->path, "tenants/team-1");
  // A trailing slash is the same path.
  p = scopeTarget("/v1/tenants/team-1/workloads/", "");
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p->path, "workloads");
}

TEST(ScopeTargetTest, ChrootListenerStaysInsideItsTenant) {
  auto p = scopeTarget("/v1/workloads/train", "team-1");
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p->tenant, "team-1");
  EXPECT_EQ(p->path, "workloads/train");
  // Nothing outside can be named, however it is spelled.
  for (const char* target : {
           "/v1/tenants/other/workloads/x",
           "/v1/tenants/team-1/workloads/x",  // Not even its own absolute path.
           "/v1/sys/health",
           "/v1/sys/metrics",
           "/v1/tenants",
       }) {
    auto r = scopeTarget(target, "team-1");
    ASSERT_FALSE(r.isOk()) << target;
    EXPECT_EQ(r.status().code(), core::StatusCode::kNotFound) << target;
  }
}

TEST(ScopeTargetTest, TraversalAndEncodingTricksAreRefused) {
  for (const char* target : {
           "/v1/workloads/../../tenants/other/workloads",
           "/v1/workloads/%2e%2e/%2e%2e/tenants/other",
           "/v1/workloads/%2E%2E/x",
           "/v1/tenants%2Fother%2Fworkloads",
           "/v1/workloads%2f..%2f..%2ftenants",
           "/v1//tenants/other/workloads",
           "/v1/./tenants/other",
           "/v1/workloads/a%00b",
           "/v1/workloads/a\\..\\b",
           "/v1/workloads/%zz",
           "/v1/workloads/%4",
           "/v1/workloads/a b",
           "/v1/workloads//x",
       }) {
    for (const char* chroot : {"", "team-1"}) {
      auto r = scopeTarget(target, chroot);
      EXPECT_FALSE(r.isOk()) << target << " chroot '" << chroot << "' -> "
                             << (r.isOk() ? r->path : "");
    }
  }
  EXPECT_FALSE(scopeTarget("/v2/workloads", "").isOk());
  EXPECT_FALSE(scopeTarget("/v1/", "").isOk());
  EXPECT_FALSE(scopeTarget("/v1/tenants/Bad_Name/workloads", "").isOk());
  EXPECT_FALSE(scopeTarget("/v1/" + std::string(5000, 'a'), "").isOk());
}

TEST(ValidNameTest, Table) {
  EXPECT_TRUE(validName("team-1"));
  EXPECT_TRUE(validName("a"));
  EXPECT_TRUE(validName("0abc"));
  EXPECT_FALSE(validName(""));
  EXPECT_FALSE(validName("-a"));
  EXPECT_FALSE(validName("Team"));
  EXPECT_FALSE(validName("a_b"));
  EXPECT_FALSE(validName("a.b"));
  EXPECT_FALSE(validName(std::string(64, 'a')));
  EXPECT_TRUE(validName(std::string(63, 'a')));
}

}  // namespace
}  // namespace tessera::server
