#include "server/node_watchers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

namespace tessera::server {
namespace {

using namespace std::chrono_literals;

TEST(NodeWatchersTest, AWatchFiresOnceOnNewsForItsNodeOrAtItsDeadline) {
  NodeWatchers w;
  std::atomic<int> a = 0;
  std::atomic<int> b = 0;
  std::promise<void> timed_out;
  const auto t0 = NodeWatchers::Clock::now();
  ASSERT_TRUE(w.wait("gpu-a", t0 + 10s, [&] { ++a; }));
  ASSERT_TRUE(w.wait("gpu-b", t0 + 10s, [&] { ++b; }));
  ASSERT_TRUE(w.wait("gpu-c", t0 + 50ms, [&] { timed_out.set_value(); }));
  EXPECT_EQ(w.waiting(), 3U);
  w.notify("gpu-a");
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0);  // Another node's news.
  w.notify("gpu-a");
  EXPECT_EQ(a, 1);  // Once.
  ASSERT_EQ(timed_out.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_GE(NodeWatchers::Clock::now() - t0, 50ms);
  EXPECT_EQ(w.waiting(), 1U);
  // Stopping answers what still waits, and takes no more.
  w.stop();
  EXPECT_EQ(b, 1);
  EXPECT_FALSE(w.wait("gpu-b", t0 + 10s, [&] { ++b; }));
  EXPECT_EQ(b, 1);
}

TEST(NodeWatchersTest, ANodeHoldsAtMostItsShareOfWaitingWatches) {
  NodeWatchers w;
  const auto later = NodeWatchers::Clock::now() + 10s;
  for (size_t i = 0; i < NodeWatchers::kMaxPerNode; ++i) {
    EXPECT_TRUE(w.wait("gpu-a", later, [] {}));
  }
  EXPECT_FALSE(w.wait("gpu-a", later, [] {}));
  EXPECT_TRUE(w.wait("gpu-b", later, [] {}));
}

}  // namespace
}  // namespace tessera::server
