#include "sched/placer.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace tessera::sched {
namespace {

using testing::cpuTask;
using testing::gpuTask;

class PlacerTest : public ::testing::Test {
 protected:
  PlacerTest()
      : state_(cat_,
               {testing::node(cat_, "a", 8, 32, "T4", 2), testing::node(cat_, "b", 8, 32, "T4", 2),
                testing::node(cat_, "c", 4, 16, "V100M32", 1)}) {
    PolicyContext ctx{nullptr, &rng_};
    policy_ = std::move(makePolicy("bestfit", ctx, state_)).value();
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  core::Rng rng_{3};
  ClusterState state_;
  std::unique_ptr<Policy> policy_;
};

TEST_F(PlacerTest, TiesGoToTheSmallestRank) {
  // Nodes a and b are identical; rank decides.
  Placer by_index(state_, *policy_);
  EXPECT_EQ(by_index.decide(gpuTask(6000, 1)).placement.node, 0U);
  Placer reversed(state_, *policy_, {2, 1, 0});
  EXPECT_EQ(reversed.decide(gpuTask(6000, 1)).placement.node, 1U);
}

TEST_F(PlacerTest, FillsTheClusterThenExplainsFailures) {
  Placer placer(state_, *policy_);
  int placed = 0;
  for (int i = 0; i < 6; ++i) {
    placed += placer.place(gpuTask(1000, 1)).placed ? 1 : 0;
  }
  EXPECT_EQ(placed, 5);  // 2 + 2 + 1 GPUs.
  Placer::Decision d = placer.decide(gpuTask(1000, 1));
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.rejected[static_cast<size_t>(FilterReason::kGpuShare)], 3U);
  EXPECT_EQ(d.explain(3), "0/3 nodes fit: 3 insufficient free GPU share");

  model::TaskRequest picky = gpuTask(6000, 1);
  picky.models = {*cat_.find("V100M32")};
  d = placer.decide(picky);
  EXPECT_EQ(d.explain(3), "0/3 nodes fit: 1 insufficient CPU, 2 GPU model not accepted");
}

TEST_F(PlacerTest, CachedScoresFollowStateChanges) {
  Placer placer(state_, *policy_);
  // bestfit prefers the node with least left over: the V100 node (4 cores, 1 GPU) first.
  Placer::Decision first = placer.place(gpuTask(1000, 1));
  EXPECT_EQ(first.placement.node, 2U);
  // Same request class again: node 2 changed and is now full; the cache must not reuse it.
  Placer::Decision second = placer.place(gpuTask(1000, 1));
  EXPECT_EQ(second.placement.node, 0U);
  placer.release(gpuTask(1000, 1), first.assignment);
  EXPECT_EQ(placer.decide(gpuTask(1000, 1)).placement.node, 2U);
}

TEST_F(PlacerTest, PlaceAppliesTheChoice) {
  Placer placer(state_, *policy_);
  Placer::Decision d = placer.place(gpuTask(2000, 2));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(std::popcount(d.placement.gpus), 2);
  EXPECT_EQ(state_.nodeState(d.placement.node).idle_gpus, 0);
  EXPECT_EQ(state_.usedGpuMilli(), 2000);
  EXPECT_EQ(placer.place(cpuTask(100000)).placed, false);
}

class MigPlacementTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MigPlacementTest, SlicesPackIntoValidLayouts) {
  model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  ClusterState state(cat, {testing::node(cat, "h100", 64, 512, "H100-80GB", 2)});
  FragModel frag{{{{1000, 1000, 1, {}}, 1, 1.0}}, cat.size()};
  core::Rng rng(1);
  auto policy = std::move(makePolicy(GetParam(), PolicyContext{&frag, &rng}, state)).value();
  Placer placer(state, *policy);
  // 3g + 3g fill one GPU, 4g + 3g the other: all 14 compute slices of the node.
  std::vector<Placer::Decision> ds;
  for (const char* p : {"3g.40gb", "3g.40gb", "4g.40gb", "3g.40gb"}) {
    ds.push_back(placer.place(testing::migTask(p)));
    ASSERT_TRUE(ds.back().placed) << p;
  }
  EXPECT_FALSE(placer.place(testing::migTask("1g.10gb")).placed);
  EXPECT_FALSE(placer.place(testing::gpuTask(1000, 1)).placed);  // No GPU is whole any more.
  const model::GpuModelInfo& h100 = cat.model(*cat.find("H100-80GB"));
  for (int g = 0; g < 2; ++g) {
    std::vector<model::MigInstance> layout;
    for (const Placer::Decision& d : ds) {
      if (d.placement.gpus == (uint64_t{1} << g)) {
        layout.push_back({d.placement.mig_profile, d.placement.mig_start});
      }
    }
    EXPECT_TRUE(model::validateMigLayout(h100, layout).isOk()) << "GPU " << g;
    EXPECT_EQ(state.gpus(0)[g].mode, GpuMode::kMig);
  }
  // Releasing everything gives whole GPUs back.
  for (const Placer::Decision& d : ds) {
    state.release(d.assignment);
  }
  EXPECT_TRUE(placer.place(testing::gpuTask(1000, 2)).placed);
}

INSTANTIATE_TEST_SUITE_P(Policies, MigPlacementTest,
                         ::testing::Values("random", "dotprod", "bestfit", "gpupacking",
                                           "gpuclustering", "fgd", "tessera"));

}  // namespace
}  // namespace tessera::sched
