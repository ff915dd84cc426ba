#include "server/leader.h"

#include <gtest/gtest.h>

#include "store/test_util.h"

namespace tessera::server {
namespace {

// Two replicas on one store: one leads, the other learns who; when the leader resigns (or its
// lease lapses) the other takes over.
TEST(LeaderElectionTest, OneLeadsTheOtherKnowsWhoAndTakesOverWhenItGoes) {
  store::TempDir dir;
  core::FakeClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  LeaderElection a(**s, "https://a:8200", std::chrono::seconds(2));
  LeaderElection b(**s, "https://b:8200", std::chrono::seconds(2));
  EXPECT_EQ(b.leader(), "");
  auto won = a.campaign();
  ASSERT_TRUE(won.isOk()) << won.status().toString();
  EXPECT_TRUE(*won);
  EXPECT_TRUE(a.leading());
  won = b.campaign();
  ASSERT_TRUE(won.isOk());
  EXPECT_FALSE(*won);
  EXPECT_FALSE(b.leading());
  EXPECT_EQ(b.leader(), "https://a:8200");
  a.resign();
  EXPECT_FALSE(a.leading());
  won = b.campaign();
  ASSERT_TRUE(won.isOk());
  EXPECT_TRUE(*won);
  EXPECT_EQ(b.leader(), "https://b:8200");
  // b's lease lapses (it stopped renewing): the key goes with it, and a leads again.
  won = a.campaign();
  ASSERT_TRUE(won.isOk());
  EXPECT_FALSE(*won);
  clock.advance(std::chrono::seconds(3));
  ASSERT_TRUE((*s)->expireLeases().isOk());
  won = a.campaign();
  ASSERT_TRUE(won.isOk());
  EXPECT_TRUE(*won);
  EXPECT_EQ(a.leader(), "https://a:8200");
}

}  // namespace
}  // namespace tessera::server
