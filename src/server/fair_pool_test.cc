#include "server/fair_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::server {
namespace {

// A gate jobs wait at until the test opens it.
class Gate {
 public:
  void wait() {
    std::unique_lock lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_; });
  }
  void open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  // Waits until `n` jobs are held at the gate.
  bool waitForWaiting(int n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return waiting_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  int waiting_ = 0;
};

TEST(FairPoolTest, KeysTakeTurnsSoAFloodDoesNotDelayAnotherKeysJob) {
  FairPool pool(1);
  Gate gate;
  std::mutex mu;
  std::vector<std::string> order;
  std::atomic<int> done{0};
  auto job = [&](std::string name) {
    return [&, name] {
      std::lock_guard lock(mu);
      order.push_back(name);
      ++done;
    };
  };
  ASSERT_TRUE(pool.submit("flood", {8, 64}, [&] { gate.wait(); }));
  ASSERT_TRUE(gate.waitForWaiting(1));
  for (int i = 0; i < 3; ++i) {
    std::string name = "f";  // Not "f" + to_string(i): GCC 12 warns falsely (-Wrestrict).
    name += std::to_string(i);
    ASSERT_TRUE(pool.submit("flood", {8, 64}, job(name)));
  }
  ASSERT_TRUE(pool.submit("quiet", {8, 64}, job("q0")));
  ASSERT_TRUE(pool.submit("quiet", {8, 64}, job("q1")));
  gate.open();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pool.stop();
  // flood was served first (it was first in the ring); from then on the keys alternate, so
  // quiet's first job waits for one of flood's, not for all three.
  EXPECT_EQ(order, (std::vector<std::string>{"f0", "q0", "f1", "q1", "f2"}));
}

TEST(FairPoolTest, NeverRunsMoreOfAKeysJobsThanItsLimit) {
  FairPool pool(6);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  std::atomic<int> done{0};
  for (int i = 0; i < 30; ++i) {
    ASSERT_TRUE(pool.submit("a", {2, 64}, [&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      --running;
      ++done;
    }));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (done < 30 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  pool.stop();
  EXPECT_EQ(done, 30);
  EXPECT_EQ(most, 2);  // Six workers, but key a may use two.
}

TEST(FairPoolTest, RefusesBeyondAKeysQueueAndOnlyThatKey) {
  FairPool pool(1);
  Gate gate;
  ASSERT_TRUE(pool.submit("a", {1, 2}, [&] { gate.wait(); }));
  ASSERT_TRUE(gate.waitForWaiting(1));
  EXPECT_TRUE(pool.submit("a", {1, 2}, [] {}));
  EXPECT_TRUE(pool.submit("a", {1, 2}, [] {}));
  EXPECT_FALSE(pool.submit("a", {1, 2}, [] {}));  // Two wait already.
  EXPECT_TRUE(pool.submit("b", {1, 2}, [] {}));   // Another key is not affected.
  gate.open();
  pool.stop();
  EXPECT_FALSE(pool.submit("b", {1, 2}, [] {}));  // Stopped.
}

TEST(FairPoolTest, AJobRunNowTakesOneOfItsKeysPlacesAndNeverJumpsItsQueue) {
  FairPool pool(2);
  const auto caller = std::this_thread::get_id();
  // A key with a free place and nothing waiting: run here, at once.
  std::thread::id ran_on;
  EXPECT_TRUE(pool.runNowIfFree("a", {1, 8}, [&] { ran_on = std::this_thread::get_id(); }));
  EXPECT_EQ(ran_on, caller);
  // While it runs, it holds the key's one place: the key's next job waits for it, and is
  // started when it ends.
  std::atomic<bool> queued_ran{false};
  Gate gate;
  std::thread runner([&] {
    EXPECT_TRUE(pool.runNowIfFree("a", {1, 8}, [&] {
      gate.wait();
      EXPECT_FALSE(queued_ran);
    }));
  });
  ASSERT_TRUE(gate.waitForWaiting(1));
  ASSERT_TRUE(pool.submit("a", {1, 8}, [&] { queued_ran = true; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(queued_ran);
  // No place free, and then a job waiting: not run now, whoever asks.
  bool ran = false;
  EXPECT_FALSE(pool.runNowIfFree("a", {1, 8}, [&] { ran = true; }));
  EXPECT_FALSE(pool.runNowIfFree("a", {2, 8}, [&] { ran = true; }));  // Its queue is not empty.
  EXPECT_FALSE(ran);
  // Another key is not affected.
  EXPECT_TRUE(pool.runNowIfFree("b", {1, 8}, [&] { ran = true; }));
  EXPECT_TRUE(ran);
  gate.open();
  runner.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!queued_ran && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(queued_ran);
  // A job that throws gives its place back.
  EXPECT_THROW(pool.runNowIfFree("c", {1, 8}, [] { throw std::runtime_error("boom"); }),
               std::runtime_error);
  EXPECT_TRUE(pool.runNowIfFree("c", {1, 8}, [] {}));
  pool.stop();
  EXPECT_FALSE(pool.runNowIfFree("c", {1, 8}, [] {}));  // Stopped.
}

TEST(FairPoolTest, StopDropsWaitingJobsAndLetsRunningOnesFinish) {
  auto pool = std::make_unique<FairPool>(1);
  Gate gate;
  std::atomic<bool> finished{false};
  auto token = std::make_shared<int>(0);
  ASSERT_TRUE(pool->submit("a", {1, 8}, [&] {
    gate.wait();
    finished = true;
  }));
  ASSERT_TRUE(gate.waitForWaiting(1));
  std::atomic<bool> ran{false};
  ASSERT_TRUE(pool->submit("a", {1, 8}, [&ran, token] { ran = true; }));
  EXPECT_EQ(token.use_count(), 2);  // Held by the waiting job.
  std::thread stopper([&] { pool->stop(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  gate.open();
  stopper.join();
  EXPECT_TRUE(finished);
  EXPECT_FALSE(ran);
  EXPECT_EQ(token.use_count(), 1);  // The dropped job (and what it held) is gone.
  EXPECT_EQ(pool->queued(), 0U);
}

}  // namespace
}  // namespace tessera::server
