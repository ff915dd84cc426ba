#include "sched/policy.h"

#include <gtest/gtest.h>

#include <set>

#include "sched/placer.h"
#include "sched/tessera_policy.h"
#include "sched/test_util.h"

namespace tessera::sched {
namespace {

using testing::cpuTask;
using testing::gpuTask;

class PolicyTest : public ::testing::Test {
 protected:
  // Node 0: 64 cores, 8 T4 (so the normalisers are 64000 milli-CPU and 8000 milli-GPU).
  // Node 1: 16 cores, 2 T4.
  PolicyTest()
      : state_(cat_, {testing::node(cat_, "big", 64, 512, "T4", 8),
                      testing::node(cat_, "small", 16, 64, "T4", 2)}) {}

  std::unique_ptr<Policy> make(const std::string& name) {
    PolicyContext ctx{&frag_, &rng_};
    auto p = makePolicy(name, ctx, state_);
    EXPECT_TRUE(p.isOk()) << p.status().message();
    return std::move(p).value();
  }

  Choice scoreOn(Policy& p, NodeIndex n, const model::TaskRequest& req) {
    ResolvedRequest r = resolveRequest(state_, req);
    NodeFit fit = checkNode(state_, n, r);
    EXPECT_TRUE(fit.fits());
    return p.score(state_, n, r, fit.eligible);
  }

  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  ClusterState state_;
  core::Rng rng_{1};
  FragModel frag_{{{{1000, 1000, 1, {}}, 1, 0.5}, {{1000, 500, 1, {}}, 1, 0.5}}, cat_.size()};
};

TEST_F(PolicyTest, UnknownPolicyListsKnownOnes) {
  PolicyContext ctx{&frag_, &rng_};
  auto p = makePolicy("tetris", ctx, state_);
  ASSERT_FALSE(p.isOk());
  EXPECT_EQ(p.status().message(),
            "unknown policy 'tetris' (known: random, dotprod, bestfit, gpupacking, gpuclustering, "
            "fgd, tessera)");
  EXPECT_FALSE(makePolicy("fgd", PolicyContext{}, state_).isOk());
}

TEST_F(PolicyTest, DotProdPrefersTheSmallerProduct) {
  auto p = make("dotprod");
  // small: 1 - (16/64 * 4/64 + 2/8 * 1/8) / 2 = 0.9765 -> 97; big: 1 - (4/64 + 1/8) / 2 -> 90.
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(4000, 1)).score, 97);
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(4000, 1)).score, 90);
}

TEST_F(PolicyTest, BestFitPrefersLeastLeftOver) {
  auto p = make("bestfit");
  // small: 1 - (12/64 * 0.5 + 1/8 * 0.5) = 0.84375 -> 84; big: 1 - (60/64 + 7/8) / 2 -> 9.
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(4000, 1)).score, 84);
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(4000, 1)).score, 9);
  // A share goes to the tightest GPU that fits.
  state_.apply(gpuTask(1000, 1, 500), Placement{1, 0b01});
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1, 300)).gpus, 0b01U);
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1, 600)).gpus, 0b10U);
}

TEST_F(PolicyTest, GpuPackingTiers) {
  auto p = make("gpupacking");
  EXPECT_EQ(scoreOn(*p, 0, cpuTask(1000)).score, 0);
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1, 300)).score, 31);  // Idle node: 33 - 2 GPUs.
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(1000, 1, 300)).score, 25);  // 33 - 8.
  state_.apply(gpuTask(1000, 1, 600), Placement{1, 0b01});     // Shared GPU with 400 left.
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1, 300)).score, 96);  // 100 - 40/10.
  state_.apply(gpuTask(1000, 1), Placement{0, 0b01});          // Partly used node.
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(1000, 1)).score, 49);       // 50 - 1 idle GPU taken.
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(1000, 2)).score, 48);
}

TEST_F(PolicyTest, GpuClusteringGroupsSameShapes) {
  auto p = make("gpuclustering");
  Placer placer(state_, *p);
  EXPECT_EQ(scoreOn(*p, 0, cpuTask(1000)).score, 0);
  // Idle: base 25 * (8000 - left) / 8000 plus 25 for an empty node.
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1)).score, 18 + 25);  // 25 * 6000 / 8000 = 18.
  EXPECT_EQ(scoreOn(*p, 0, gpuTask(1000, 1)).score, 0 + 25);
  // A share on node 1: shares now prefer node 1 (same and only class), whole GPUs do not.
  model::TaskRequest share = gpuTask(1000, 1, 400);
  state_.apply(share, Placement{1, 0b01});
  p->onApplied(state_, resolveRequest(state_, share), Placement{1, 0b01});
  EXPECT_EQ(scoreOn(*p, 1, share).score, 25 * (8000 - 1600) / 8000 + 75);
  EXPECT_EQ(scoreOn(*p, 1, gpuTask(1000, 1)).score, 25 * (8000 - 1600) / 8000);
  model::TaskRequest whole = gpuTask(1000, 1);
  state_.apply(whole, Placement{1, 0b10});
  p->onApplied(state_, resolveRequest(state_, whole), Placement{1, 0b10});
  EXPECT_EQ(scoreOn(*p, 1, share).score, 25 * (8000 - 600) / 8000 + 50);  // Mixed classes.
}

TEST_F(PolicyTest, FgdPicksTheGpuThatLeastFragments) {
  auto p = make("fgd");
  state_.apply(gpuTask(1000, 1, 500), Placement{1, 0b01});  // small: GPUs left {500, 1000}.
  // Putting a 500 share on GPU 0 leaves {0, 1000}: nothing fragmented (F 250 -> 0), score
  // floor(100 * sigmoid(0.25)) = 56. On GPU 1 it would leave {500, 500}: whole-GPU pods no
  // longer fit (F -> 500), score 43.
  Choice c = scoreOn(*p, 1, gpuTask(1000, 1, 500));
  EXPECT_EQ(c.gpus, 0b01U);
  EXPECT_EQ(c.score, 56);
}

TEST_F(PolicyTest, FgdPrefersTheNodeThatStaysUsable) {
  auto p = make("fgd");
  Placer placer(state_, *p);
  // A 500 share: the half-used GPU of node 1 is the perfect fit.
  state_.apply(gpuTask(1000, 1, 500), Placement{1, 0b10});
  Placer::Decision d = placer.place(gpuTask(1000, 1, 500));
  ASSERT_TRUE(d.placed);
  EXPECT_EQ(d.placement.node, 1U);
  EXPECT_EQ(d.placement.gpus, 0b10U);
}

TEST_F(PolicyTest, RandomSpreadsOverFeasibleNodesOnly) {
  auto p = make("random");
  std::set<NodeIndex> chosen;
  std::set<uint64_t> gpus;
  for (int i = 0; i < 200; ++i) {
    Placer placer(state_, *p);
    Placer::Decision d = placer.decide(gpuTask(20000, 1, 300));  // Only node 0 has 20 cores.
    ASSERT_TRUE(d.placed);
    chosen.insert(d.placement.node);
    gpus.insert(d.placement.gpus);
    d = placer.decide(gpuTask(1000, 1));
    chosen.insert(d.placement.node);
  }
  EXPECT_EQ(chosen, (std::set<NodeIndex>{0, 1}));
  EXPECT_EQ(gpus.size(), 8U);  // Every GPU of node 0 was drawn at some point.
}

// #40 item 3: when the typical mix asks for more CPU than the cluster has by the time its GPU
// requests fill the GPUs, CPU runs out first; keeping CPU beside free GPUs then costs GPUs where
// CPU binds, and the policy places by FGD's rule (the same node as FGD). With CPU held for free
// GPUs, CPU-only work cannot take it and the stranding term is back.
TEST(TesseraPolicyTest, WhenCpuRunsOutFirstItPlacesByFgdsRule) {
  model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  ClusterState state(cat, {testing::node(cat, "gpus-free", 40, 256, "T4", 4),
                           testing::node(cat, "gpus-busy", 40, 256, "T4", 4)});
  state.apply(gpuTask(20000, 4), Placement{1, 0b1111});
  // 20 cores per GPU: 160 cores for 8 GPUs, on 80.
  FragModel frag{{{{20000, 1000, 1, {}}, 1, 1.0}}, cat.size()};
  EXPECT_DOUBLE_EQ(cpuBinding(frag, state), 2.0);
  ASSERT_TRUE(cpuBinds(frag, state));
  core::Rng rng(1);
  PolicyContext ctx{&frag, &rng};
  auto fgd = std::move(makePolicy("fgd", ctx, state)).value();
  auto ours = std::move(makePolicy("tessera", ctx, state)).value();
  EXPECT_EQ(Placer(state, *fgd).decide(cpuTask(16000)).placement.node, 0U);
  EXPECT_EQ(Placer(state, *ours).decide(cpuTask(16000)).placement.node, 0U);
  state.setCpuPerFreeGpu(20000);
  EXPECT_FALSE(cpuBinds(frag, state));
  auto held = std::move(makePolicy("tessera", ctx, state)).value();
  EXPECT_EQ(Placer(state, *held).decide(cpuTask(16000)).placement.node, 1U);
}

TEST(TesseraPolicyTest, CpuOnlyTasksDoNotStrandGpus) {
  model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  // Two 4-GPU nodes with 40 cores. The typical GPU task needs 10 cores per GPU.
  ClusterState state(cat, {testing::node(cat, "gpus-free", 40, 256, "T4", 4),
                           testing::node(cat, "gpus-busy", 40, 256, "T4", 4)});
  state.apply(gpuTask(20000, 4), Placement{1, 0b1111});
  FragModel frag{{{{10000, 1000, 1, {}}, 1, 1.0}}, cat.size()};
  core::Rng rng(1);
  PolicyContext ctx{&frag, &rng};
  // 16 cores on the free node would leave 24 for 4 GPUs that need 40: FGD does not see it (the
  // typical task still fits) and takes the first node in rank order; tessera does not strand.
  auto fgd = std::move(makePolicy("fgd", ctx, state)).value();
  auto ours = std::move(makePolicy("tessera", ctx, state)).value();
  EXPECT_EQ(Placer(state, *fgd).decide(cpuTask(16000)).placement.node, 0U);
  EXPECT_EQ(Placer(state, *ours).decide(cpuTask(16000)).placement.node, 1U);
  // A GPU task that uses what it takes is fine on the free node.
  EXPECT_EQ(Placer(state, *ours).decide(gpuTask(10000, 1)).placement.node, 0U);
}

TEST(TesseraPolicyTest, SharesAvoidGapsABiggerShareNeeds) {
  model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  ClusterState state(cat, {testing::node(cat, "n", 64, 256, "T4", 3)});
  state.apply(gpuTask(1000, 1, 470), Placement{0, 0b001});  // Gap 530.
  state.apply(gpuTask(1000, 1, 100), Placement{0, 0b010});  // Gap 900.
  // Typical shares: 810 and 470 in equal numbers.
  FragModel frag{{{{1000, 810, 1, {}}, 1, 0.5}, {{1000, 470, 1, {}}, 1, 0.5}}, cat.size()};
  core::Rng rng(1);
  auto ours = std::move(makePolicy("tessera", PolicyContext{&frag, &rng}, state)).value();
  Placer placer(state, *ours);
  // A 470 completes the 470 pair rather than break the 900 gap an 810 could use.
  EXPECT_EQ(placer.decide(gpuTask(1000, 1, 470)).placement.gpus, 0b001U);
  // An 810 takes the 900 gap (the idle GPU stays whole).
  EXPECT_EQ(placer.decide(gpuTask(1000, 1, 810)).placement.gpus, 0b010U);
}

TEST(TesseraPolicyTest, TasksThatAcceptAnyModelLeaveTheModelsRestrictedTasksNeed) {
  model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  const model::GpuModelId t4 = *cat.find("T4");
  ClusterState state(cat, {testing::node(cat, "t4", 32, 256, "T4", 1),
                           testing::node(cat, "p100", 64, 512, "P100", 8)});
  // 2 % of the typical tasks need a T4; the T4 is a ninth of the GPUs, so they need 18 % of it.
  FragModel frag{{{{4000, 1000, 1, {t4}}, 1, 0.02}, {{4000, 1000, 1, {}}, 1, 0.98}}, cat.size()};
  core::Rng rng(1);
  PolicyContext ctx{&frag, &rng};
  auto fgd = std::move(makePolicy("fgd", ctx, state)).value();
  auto ours = std::move(makePolicy("tessera", ctx, state)).value();
  // FGD's fragmentation barely moves (the T4 tasks are 2 % of the mix): its integer scores tie
  // and it takes the first node, the T4. Tessera keeps the T4.
  EXPECT_EQ(Placer(state, *fgd).decide(gpuTask(4000, 1)).placement.node, 0U);
  EXPECT_EQ(Placer(state, *ours).decide(gpuTask(4000, 1)).placement.node, 1U);
  // A task that needs a T4 still gets it.
  model::TaskRequest needs_t4 = gpuTask(4000, 1);
  needs_t4.models = {t4};
  EXPECT_EQ(Placer(state, *ours).decide(needs_t4).placement.node, 0U);
  // With no restricted typical task, tessera is back to rank order.
  FragModel any{{{{4000, 1000, 1, {}}, 1, 1.0}}, cat.size()};
  auto plain = std::move(makePolicy("tessera", PolicyContext{&any, &rng}, state)).value();
  EXPECT_EQ(Placer(state, *plain).decide(gpuTask(4000, 1)).placement.node, 0U);
}

}  // namespace
}  // namespace tessera::sched
