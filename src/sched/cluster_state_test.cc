#include "sched/cluster_state.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace tessera::sched {
namespace {

using testing::gpuTask;
using testing::migTask;

class ClusterStateTest : public ::testing::Test {
 protected:
  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  ClusterState state_{cat_,
                      {testing::node(cat_, "a", 64, 256, "H100-80GB", 4),
                       testing::node(cat_, "b", 32, 128, "T4", 2)}};
};

TEST_F(ClusterStateTest, InitialCapacity) {
  EXPECT_EQ(state_.totalGpus(), 6);
  EXPECT_EQ(state_.totalCpuMilli(), 96000);
  const NodeState& a = state_.nodeState(0);
  EXPECT_EQ(a.free_cpu_milli, 64000);
  EXPECT_EQ(a.free_memory_mib, 256 * 1024);
  EXPECT_EQ(a.idle_gpus, 4);
  EXPECT_EQ(a.free_gpu_milli, 4000);
  EXPECT_EQ(state_.gpus(1).size(), 2U);
  EXPECT_EQ(state_.gpus(0)[0].free_memory_mib, 81559);
}

TEST_F(ClusterStateTest, ApplyAndReleaseWholeAndShared) {
  const uint32_t v0 = state_.version(0);
  Assignment whole = state_.apply(gpuTask(8000, 2), Placement{0, 0b0011});
  EXPECT_GT(state_.version(0), v0);
  EXPECT_EQ(state_.version(1), 1U);  // Untouched node keeps its version.
  EXPECT_EQ(state_.nodeState(0).idle_gpus, 2);
  EXPECT_EQ(state_.nodeState(0).free_cpu_milli, 56000);
  EXPECT_EQ(state_.gpus(0)[0].free_milli, 0);
  EXPECT_EQ(state_.gpus(0)[0].free_memory_mib, 0);
  EXPECT_EQ(state_.usedGpuMilli(), 2000);

  Assignment share = state_.apply(gpuTask(1000, 1, 250), Placement{0, 0b0100});
  const GpuState& g = state_.gpus(0)[2];
  EXPECT_EQ(g.mode, GpuMode::kShared);
  EXPECT_EQ(g.free_milli, 750);
  // No explicit GPU memory: a quarter of the GPU's memory.
  EXPECT_EQ(g.free_memory_mib, 81559 - 81559 / 4);
  EXPECT_EQ(state_.nodeState(0).free_gpu_milli, 1750);

  state_.release(share);
  EXPECT_EQ(state_.gpus(0)[2].mode, GpuMode::kExclusive);
  EXPECT_EQ(state_.gpus(0)[2].free_milli, 1000);
  EXPECT_TRUE(state_.gpus(0)[2].tenants.empty());
  state_.release(whole);
  EXPECT_EQ(state_.nodeState(0).idle_gpus, 4);
  EXPECT_EQ(state_.nodeState(0).free_cpu_milli, 64000);
  EXPECT_EQ(state_.usedGpuMilli(), 0);
}

TEST_F(ClusterStateTest, MigInstancesTrackSlicesAndShare) {
  const model::GpuModelInfo& h100 = cat_.model(*cat_.find("H100-80GB"));
  const int g3 = h100.findMigProfile("3g.40gb");
  Assignment a = state_.apply(migTask("3g.40gb"), Placement{0, 0b1, g3, 4});
  const GpuState& g = state_.gpus(0)[0];
  EXPECT_EQ(g.mode, GpuMode::kMig);
  EXPECT_EQ(g.mig.used_slices, 0xF0);
  EXPECT_EQ(g.free_milli, 1000 - 428);  // 3 of 7 compute slices.
  EXPECT_EQ(g.free_memory_mib, 81559 - 40448);
  state_.release(a);
  EXPECT_TRUE(state_.gpus(0)[0].mig.empty());
  EXPECT_EQ(state_.gpus(0)[0].mode, GpuMode::kExclusive);
}

TEST(TrustGroupsTest, SameTenantOrSameGroup) {
  TrustGroups t;
  model::TenantId a{1}, b{2}, c{3}, d{4};
  t.setGroup(a, 7);
  t.setGroup(b, 7);
  t.setGroup(c, 8);
  EXPECT_TRUE(t.mayShare(a, a));
  EXPECT_TRUE(t.mayShare(d, d));
  EXPECT_TRUE(t.mayShare(a, b));
  EXPECT_FALSE(t.mayShare(a, c));
  EXPECT_FALSE(t.mayShare(a, d));  // d has no group: alone.
  EXPECT_FALSE(t.mayShare(d, model::TenantId{5}));
}

TEST_F(ClusterStateTest, JournalListsEveryChangeSinceASequence) {
  const uint64_t start = state_.journalEnd();
  Assignment on_b = state_.apply(gpuTask(1000, 1), Placement{1, 0b01});
  const uint64_t middle = state_.journalEnd();
  Assignment on_a = state_.apply(gpuTask(1000, 1), Placement{0, 0b01});
  state_.release(on_b);
  auto all = state_.changesSince(start);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(std::vector<NodeIndex>(all->begin(), all->end()), (std::vector<NodeIndex>{1, 0, 1}));
  auto later = state_.changesSince(middle);
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(std::vector<NodeIndex>(later->begin(), later->end()), (std::vector<NodeIndex>{0, 1}));
  EXPECT_TRUE(state_.changesSince(state_.journalEnd())->empty());
  state_.release(on_a);
  EXPECT_EQ(state_.journalEnd(), start + 4);
}

TEST_F(ClusterStateTest, JournalTrimsItsOlderHalfAndSaysWhenEntriesAreGone) {
  const uint64_t start = state_.journalEnd();
  const size_t limit = state_.journalLimit();
  for (size_t i = 0; i < limit; ++i) {
    state_.release(state_.apply(gpuTask(1000, 1), Placement{static_cast<NodeIndex>(i % 2), 1}));
  }
  // 2 x limit changes: the journal never kept more than `limit` of them, always the newest.
  EXPECT_EQ(state_.journalEnd(), start + 2 * limit);
  EXPECT_FALSE(state_.changesSince(start).has_value());
  auto recent = state_.changesSince(state_.journalEnd() - limit / 2);
  ASSERT_TRUE(recent.has_value());
  ASSERT_EQ(recent->size(), limit / 2);
  EXPECT_EQ(recent->back(), 1U);  // The last change was on node (limit - 1) % 2 = 1.
}

}  // namespace
}  // namespace tessera::sched
