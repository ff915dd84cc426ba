#include "server/leader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "server/fenced_store.h"
#include "store/forwarding_store.h"
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

// A store whose keepAlive blocks while the test says so, as etcd's does when the leader is cut
// off from it (until the request timeout, seconds later). Everything else passes through.
class KeepAliveBlockingStore final : public store::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void block(bool on) {
    {
      std::lock_guard lock(mu_);
      blocked_ = on;
    }
    cv_.notify_all();
  }
  std::atomic<int> waiting{0};

  core::Result<core::Duration> keepAlive(store::LeaseId id) override {
    std::unique_lock lock(mu_);
    ++waiting;
    cv_.wait(lock, [&] { return !blocked_; });
    --waiting;
    lock.unlock();
    return inner().keepAlive(id);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool blocked_ = false;
};

// Issue 42: a leader whose renewal hangs (etcd out of reach) stops leading on its own clock,
// within three quarters of its lease, while the renewal still hangs: not when the call returns.
TEST(LeaderElectionTest, StepsDownOnItsOwnClockWhileARenewalHangs) {
  store::TempDir dir;
  core::FakeClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  KeepAliveBlockingStore blocking(**s);
  const auto ttl = std::chrono::milliseconds(400);
  LeaderElection a(blocking, "https://a:8200", ttl);
  ASSERT_TRUE(*a.campaign());
  std::mutex mu;
  std::condition_variable cv;
  bool lost = false;
  a.startKeepAlive([&] {
    std::lock_guard lock(mu);
    lost = true;
    cv.notify_all();
  });
  // Renewals go through for a while: it keeps leading.
  std::this_thread::sleep_for(ttl * 2);
  EXPECT_TRUE(a.leading());
  blocking.block(true);
  const auto cut = std::chrono::steady_clock::now();
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return lost; }));
  }
  const auto after = std::chrono::steady_clock::now() - cut;
  EXPECT_FALSE(a.leading());
  EXPECT_GE(blocking.waiting.load(), 1) << "it stepped down while a renewal still hung";
  // Within the lease (3/4 of it after the last renewal that got through, which is at most a
  // quarter of it before the cut), with room for a loaded machine's scheduling.
  EXPECT_LT(after, ttl) << std::chrono::duration_cast<std::chrono::milliseconds>(after).count();
  blocking.block(false);
}

// A leader that no longer holds the key (its lease lapsed while it was paused, and another
// replica leads) cannot write, whatever it believes: the store refuses every write it makes,
// nothing of the write happens, and it is told once, to step down.
TEST(FencedStoreTest, ADeposedLeaderCannotWrite) {
  store::TempDir dir;
  core::FakeClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  LeaderElection a(**s, "https://a:8200", std::chrono::seconds(2));
  ASSERT_TRUE(*a.campaign());
  int told = 0;
  FencedStore fenced(**s, a.fence(), [&] { ++told; });
  ASSERT_TRUE(fenced.put("/k", "1").isOk());
  // A txn of its own with a guard that fails is the caller's business, not a fence.
  store::Txn own;
  own.guard = {store::Compare::version("/k", store::Compare::kEqual, 0)};
  own.success = {store::Op::put("/k", "x")};
  auto guarded = fenced.txn(std::move(own));
  ASSERT_TRUE(guarded.isOk()) << guarded.status().toString();
  EXPECT_TRUE(guarded->guard_failed);
  EXPECT_EQ(told, 0);
  // a's lease lapses; b takes the key.
  clock.advance(std::chrono::seconds(3));
  ASSERT_TRUE((*s)->expireLeases().isOk());
  LeaderElection b(**s, "https://b:8200", std::chrono::seconds(2));
  ASSERT_TRUE(*b.campaign());
  EXPECT_TRUE(a.leading()) << "a has not noticed (no keepalive ran)";
  auto put = fenced.put("/k", "2");
  ASSERT_FALSE(put.isOk());
  EXPECT_EQ(put.status().code(), core::StatusCode::kUnavailable);
  EXPECT_NE(put.status().message().find(kNotLeading), std::string::npos);
  auto del = fenced.deleteRange("/k");
  EXPECT_FALSE(del.isOk());
  store::Txn txn;
  txn.success = {store::Op::put("/other", "v")};
  EXPECT_FALSE(fenced.txn(std::move(txn)).isOk());
  EXPECT_EQ(told, 1);
  EXPECT_EQ(fenced.fencedWrites(), 3);
  auto k = (*s)->get("/k");
  ASSERT_TRUE(k.isOk() && *k);
  EXPECT_EQ((*k)->value, "1");
  auto other = (*s)->get("/other");
  ASSERT_TRUE(other.isOk());
  EXPECT_FALSE(*other);
  // b's writes, through its own fence, go through.
  FencedStore b_store(**s, b.fence(), [] {});
  EXPECT_TRUE(b_store.put("/k", "3").isOk());
}

// A leader restarted at once (a crash, then systemd's Restart=always) finds the key naming its
// own address under its dead predecessor's lease: it takes it over at once, instead of sending
// clients to itself until the lease lapses.
TEST(LeaderElectionTest, ARestartedLeaderTakesItsOwnKeyOver) {
  store::TempDir dir;
  core::FakeClock clock;
  auto s = store::SqliteStore::open(dir.file("t.db"), {}, clock);
  ASSERT_TRUE(s.isOk()) << s.status().toString();
  auto before = std::make_unique<LeaderElection>(**s, "https://a:8200", std::chrono::seconds(2));
  ASSERT_TRUE(*before->campaign());
  const store::Compare old_fence = before->fence();
  before.reset();  // Gone without resigning: its lease is still alive.
  LeaderElection other(**s, "https://b:8200", std::chrono::seconds(2));
  EXPECT_FALSE(*other.campaign());
  LeaderElection again(**s, "https://a:8200", std::chrono::seconds(2));
  auto won = again.campaign();
  ASSERT_TRUE(won.isOk()) << won.status().toString();
  EXPECT_TRUE(*won);
  EXPECT_NE(again.fence().number, old_fence.number) << "a new term";
  EXPECT_FALSE(*other.campaign());
  EXPECT_EQ(other.leader(), "https://a:8200");
}

}  // namespace
}  // namespace tessera::server
