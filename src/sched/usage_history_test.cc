#include "sched/usage_history.h"

#include <gtest/gtest.h>

#include "sched/fair_share.h"

namespace tessera::sched {
namespace {

using std::chrono::hours;

class UsageHistoryTest : public ::testing::Test {
 protected:
  UsageHistoryTest() {
    auto t = QueueTree::create(space_, {{"a", "", {}, {}, 1, 100}, {"b", "", {}, {}, 1, 100}});
    tree_ = std::make_unique<QueueTree>(std::move(t).value());
  }
  Amounts gpus(int64_t n) {
    Amounts a = space_.zeros();
    a[kGpuDim] = n * 1000;
    return a;
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  ResourceSpace space_ = ResourceSpace::withModels(cat_, {});
  std::unique_ptr<QueueTree> tree_;
  core::FakeClock clock_;
};

TEST_F(UsageHistoryTest, RecentUsageShrinksTheSurplusShareAndDecays) {
  UsageHistory h(tree_->size(), hours(1));
  const QueueId a = *tree_->find("a");
  const QueueId b = *tree_->find("b");
  h.advance(*tree_, clock_.now());
  tree_->addAllocated(a, gpus(8), +1);  // a alone ran 8 GPUs for an hour.
  clock_.advance(hours(1));
  h.advance(*tree_, clock_.now());
  EXPECT_NEAR(h.usage(a), 8 * 3600.0, 1e-6);
  EXPECT_EQ(h.usage(b), 0);
  // Both now want 16 of 16 GPUs; equal weights, but a used everything: k = 1 tilts a's weight to
  // 0.5 + (0.5 - 1) = 0 and b's to 1.
  tree_->addAllocated(a, gpus(8), -1);
  tree_->addPending(a, gpus(16), +1);
  tree_->addPending(b, gpus(16), +1);
  std::vector<int64_t> w = h.tiltedWeights(*tree_, 1.0);
  EXPECT_EQ(w[a], 0);
  EXPECT_EQ(w[b], 1'000'000);
  computeFairShare(*tree_, gpus(16), w);
  EXPECT_EQ(tree_->queue(a).fair_share[kGpuDim], 0);
  EXPECT_EQ(tree_->queue(b).fair_share[kGpuDim], 16000);
  // With k = 0.5 the tilt is milder: a 0.25, b 0.75.
  w = h.tiltedWeights(*tree_, 0.5);
  computeFairShare(*tree_, gpus(16), w);
  EXPECT_EQ(tree_->queue(a).fair_share[kGpuDim], 4000);
  EXPECT_EQ(tree_->queue(b).fair_share[kGpuDim], 12000);
  // b now uses 16 GPUs for 3 hours: a's old usage has decayed to 1/8 of what it was, b's is much
  // larger, so the tilt turns in a's favour.
  tree_->addAllocated(b, gpus(16), +1);
  clock_.advance(hours(3));
  h.advance(*tree_, clock_.now());
  EXPECT_NEAR(h.usage(a), 8 * 3600.0 / 8, 1e-6);
  w = h.tiltedWeights(*tree_, 1.0);
  EXPECT_GT(w[a], w[b]);
}

TEST_F(UsageHistoryTest, AForgottenQueueStartsOverAndTheOthersKeepTheirs) {
  UsageHistory h(tree_->size(), hours(1));
  const QueueId a = *tree_->find("a");
  const QueueId b = *tree_->find("b");
  h.advance(*tree_, clock_.now());
  tree_->addAllocated(a, gpus(8), +1);
  tree_->addAllocated(b, gpus(2), +1);
  clock_.advance(hours(1));
  h.advance(*tree_, clock_.now());
  h.forget(a);
  EXPECT_EQ(h.usage(a), 0);
  EXPECT_NEAR(h.usage(b), 2 * 3600.0, 1e-6);
}

TEST_F(UsageHistoryTest, NoUsageMeansPlainWeights) {
  UsageHistory h(tree_->size(), hours(1));
  std::vector<int64_t> w = h.tiltedWeights(*tree_, 1.0);
  EXPECT_EQ(w[*tree_->find("a")], 1'000'000);
  EXPECT_EQ(w[*tree_->find("b")], 1'000'000);
}

}  // namespace
}  // namespace tessera::sched
