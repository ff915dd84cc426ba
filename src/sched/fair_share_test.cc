#include "sched/fair_share.h"

#include <gtest/gtest.h>

#include "core/rng.h"

namespace tessera::sched {
namespace {

struct DivideCase {
  const char* name;
  int64_t total;
  std::vector<Claimant> claimants;  // {demand, quota, weight, priority}
  std::vector<int64_t> want;
};

TEST(DivideTest, Table) {
  const DivideCase cases[] = {
      {"quota first, surplus to who still wants",
       100,
       {{50, 30, 1, 100}, {20, 30, 1, 100}},
       {50, 20}},
      {"quotas above capacity scale down in proportion",
       60,
       {{100, 60, 1, 100}, {100, 40, 1, 100}},
       {36, 24}},
      {"demand-driven: no demand, no share", 100, {{0, 50, 1, 100}, {100, 0, 1, 100}}, {0, 100}},
      {"weight 0 gets no surplus", 100, {{100, 0, 0, 100}, {100, 0, 1, 100}}, {0, 100}},
      {"weight 0 still gets its quota", 100, {{100, 30, 0, 100}, {100, 0, 1, 100}}, {30, 70}},
      {"surplus by weight 1:2", 90, {{100, 0, 1, 100}, {100, 0, 2, 100}}, {30, 60}},
      {"higher priority first", 100, {{70, 0, 1, 200}, {100, 0, 5, 100}}, {70, 30}},
      {"priority beats weight", 100, {{100, 0, 1, 200}, {100, 0, 100, 100}}, {100, 0}},
      {"satisfied child's portion is shared again",
       100,
       {{10, 0, 1, 100}, {100, 0, 1, 100}, {100, 0, 1, 100}},
       {10, 45, 45}},
      {"remainder to the first declared on ties",
       10,
       {{100, 0, 1, 100}, {100, 0, 1, 100}, {100, 0, 1, 100}},
       {4, 3, 3}},
      {"remainder to the largest remainder",
       10,
       {{100, 0, 1, 100}, {100, 0, 1, 100}, {100, 0, 2, 100}},
       {3, 2, 5}},
      {"everyone satisfied leaves capacity unused",
       100,
       {{10, 5, 1, 100}, {20, 0, 1, 100}},
       {10, 20}},
      {"nothing to divide", 0, {{10, 5, 1, 100}}, {0}},
      {"all weights zero: quotas only", 100, {{50, 10, 0, 100}, {50, 20, 0, 100}}, {10, 20}},
      {"fixed point: 0.1 + 0.2 GPU is 0.3 GPU",
       300,
       {{100, 100, 1, 100}, {200, 200, 1, 100}},
       {100, 200}},
  };
  for (const DivideCase& c : cases) {
    EXPECT_EQ(divide(c.total, c.claimants), c.want) << c.name;
  }
}

// Invariants over random inputs: no share above its demand; the sum never above the total; all
// of the total handed out while some child with a positive weight still wants more; and no child
// below min(quota, demand) unless quotas are oversubscribed.
TEST(DivideTest, InvariantsOnRandomInputs) {
  core::Rng rng(11);
  for (int round = 0; round < 2000; ++round) {
    const size_t n = 1 + rng.uniform(6);
    std::vector<Claimant> cs(n);
    int64_t quota_sum = 0;
    for (Claimant& c : cs) {
      c.demand = static_cast<int64_t>(rng.uniform(5000));
      c.quota = static_cast<int64_t>(rng.uniform(3000));
      c.weight = static_cast<int64_t>(rng.uniform(4));
      c.priority = static_cast<int32_t>(100 * rng.uniform(3));
      quota_sum += std::min(c.quota, c.demand);
    }
    const auto total = static_cast<int64_t>(rng.uniform(12000));
    std::vector<int64_t> s = divide(total, cs);
    int64_t sum = 0;
    bool someone_wants_more = false;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_GE(s[i], 0);
      ASSERT_LE(s[i], cs[i].demand);
      sum += s[i];
      if (quota_sum <= total) {
        ASSERT_GE(s[i], std::min(cs[i].quota, cs[i].demand));
      }
      someone_wants_more |= cs[i].weight > 0 && s[i] < cs[i].demand;
    }
    ASSERT_LE(sum, total);
    if (someone_wants_more) {
      ASSERT_EQ(sum, total) << "work conservation, round " << round;
    }
  }
}

class FairShareTreeTest : public ::testing::Test {
 protected:
  model::GpuCatalogue cat_ = model::GpuCatalogue::builtin();
  model::GpuModelId h200_ = *cat_.find("H200-141GB");
  model::GpuModelId a100_ = *cat_.find("A100-80GB");
  ResourceSpace space_ = ResourceSpace::withModels(cat_, {h200_, a100_});

  Amounts gpus(int64_t whole) {
    Amounts a = space_.zeros();
    a[kGpuDim] = whole * 1000;
    return a;
  }
  QueueSpec spec(const char* name, const char* parent, int64_t quota_gpus, int64_t weight = 1,
                 int32_t priority = 100) {
    return {name, parent, gpus(quota_gpus), {}, weight, priority};
  }
};

TEST_F(FairShareTreeTest, DeepTreeSplitsTopDown) {
  auto tree = QueueTree::create(
      space_, {spec("org", "", 0), spec("t1", "org", 20), spec("t2", "org", 10, 3),
               spec("t1-a", "t1", 5), spec("t1-b", "t1", 5, 2), spec("t2-x", "t2", 0)});
  ASSERT_TRUE(tree.isOk()) << tree.status().message();
  QueueTree& t = tree.value();
  // Everyone wants 40 GPUs; the cluster has 64.
  for (const char* leaf : {"t1-a", "t1-b", "t2-x"}) {
    t.addPending(*t.find(leaf), gpus(40), +1);
  }
  Amounts capacity = space_.zeros();
  capacity[kGpuDim] = 64000;
  computeFairShare(t, capacity);
  auto fs = [&](const char* q) { return t.queue(*t.find(q)).fair_share[kGpuDim]; };
  EXPECT_EQ(fs("org"), 64000);
  // org's 64: quotas t1 20, t2 10; surplus 34 by weight 1:3 -> t1 +8.5, t2 +25.5.
  EXPECT_EQ(fs("t1"), 28500);
  EXPECT_EQ(fs("t2"), 35500);
  // t1's 28.5: quotas 5 + 5; surplus 18.5 by weight 1:2.
  EXPECT_EQ(fs("t1-a"), 5000 + 6167);
  EXPECT_EQ(fs("t1-b"), 5000 + 12333);
  EXPECT_EQ(fs("t2-x"), 35500);
}

TEST_F(FairShareTreeTest, DeservedIsTheGuaranteedPartOfTheShare) {
  auto tree = QueueTree::create(space_, {spec("big", "", 40), spec("small", "", 10),
                                         spec("modest", "", 20), spec("none", "", 0)});
  ASSERT_TRUE(tree.isOk());
  QueueTree& t = tree.value();
  t.addPending(*t.find("big"), gpus(100), +1);    // Wants more than its quota.
  t.addPending(*t.find("small"), gpus(4), +1);    // Wants less than its quota.
  t.addPending(*t.find("modest"), gpus(20), +1);  // Exactly its quota.
  t.addPending(*t.find("none"), gpus(100), +1);   // No quota at all.
  Amounts capacity = space_.zeros();
  capacity[kGpuDim] = 100000;
  computeFairShare(t, capacity);
  auto deserved = [&](const char* q) { return t.queue(*t.find(q)).deserved[kGpuDim]; };
  auto fs = [&](const char* q) { return t.queue(*t.find(q)).fair_share[kGpuDim]; };
  EXPECT_EQ(deserved("big"), 40000);
  EXPECT_EQ(deserved("small"), 4000);
  EXPECT_EQ(deserved("modest"), 20000);
  EXPECT_EQ(deserved("none"), 0);
  EXPECT_GT(fs("none"), 0);  // It gets surplus, but none of it is guaranteed.
  EXPECT_EQ(fs("big") - deserved("big") + fs("none"), 100000 - 4000 - 20000 - 40000);
  // Quotas over capacity: the guarantees are the scaled-down shares.
  capacity[kGpuDim] = 32000;
  computeFairShare(t, capacity);
  EXPECT_EQ(deserved("big"), fs("big"));
  EXPECT_EQ(deserved("small"), fs("small"));
  EXPECT_EQ(deserved("big") + deserved("small") + deserved("modest"), 32000);
  // CPU without a quota is not a guarantee: there the fair share stands in.
  EXPECT_EQ(t.queue(*t.find("big")).deserved[kCpuDim], t.queue(*t.find("big")).fair_share[kCpuDim]);
}

TEST_F(FairShareTreeTest, LimitsClipDemandAndIdleQueuesHoldNothing) {
  QueueSpec capped = spec("capped", "", 0);
  capped.limit = space_.unlimited();
  capped.limit[kGpuDim] = 8000;
  auto tree = QueueTree::create(space_, {capped, spec("idle", "", 32), spec("busy", "", 0)});
  ASSERT_TRUE(tree.isOk());
  QueueTree& t = tree.value();
  t.addPending(*t.find("capped"), gpus(100), +1);
  t.addPending(*t.find("busy"), gpus(100), +1);
  Amounts capacity = space_.zeros();
  capacity[kGpuDim] = 64000;
  computeFairShare(t, capacity);
  EXPECT_EQ(t.queue(*t.find("capped")).fair_share[kGpuDim], 8000);
  EXPECT_EQ(t.queue(*t.find("idle")).fair_share[kGpuDim], 0);  // Quota 32, but wants nothing.
  EXPECT_EQ(t.queue(*t.find("busy")).fair_share[kGpuDim], 56000);
}

TEST_F(FairShareTreeTest, PerModelQuotasAreTheirOwnDimension) {
  QueueSpec a = spec("a", "", 0);
  a.quota[space_.modelDim(h200_)] = 16000;  // "16 H200".
  QueueSpec b = spec("b", "", 0);
  b.quota[space_.modelDim(a100_)] = 8000;  // "8 A100".
  auto tree = QueueTree::create(space_, {a, b});
  ASSERT_TRUE(tree.isOk());
  QueueTree& t = tree.value();
  Amounts want = space_.zeros();
  want[space_.modelDim(h200_)] = 32000;
  want[space_.modelDim(a100_)] = 32000;
  t.addPending(*t.find("a"), want, +1);
  t.addPending(*t.find("b"), want, +1);
  Amounts capacity = space_.zeros();
  capacity[space_.modelDim(h200_)] = 24000;
  capacity[space_.modelDim(a100_)] = 16000;
  computeFairShare(t, capacity);
  // H200: a's quota 16, surplus 8 split 4/4. A100: b's quota 8, surplus 8 split 4/4.
  EXPECT_EQ(t.queue(*t.find("a")).fair_share[space_.modelDim(h200_)], 20000);
  EXPECT_EQ(t.queue(*t.find("b")).fair_share[space_.modelDim(h200_)], 4000);
  EXPECT_EQ(t.queue(*t.find("a")).fair_share[space_.modelDim(a100_)], 4000);
  EXPECT_EQ(t.queue(*t.find("b")).fair_share[space_.modelDim(a100_)], 12000);
  EXPECT_EQ(space_.name(space_.modelDim(h200_)), "gpu:H200-141GB");
}

TEST_F(FairShareTreeTest, AllocatedCountsAsDemandAndTotalsFollowThePath) {
  auto tree = QueueTree::create(space_, {spec("org", "", 0), spec("a", "org", 0)});
  ASSERT_TRUE(tree.isOk());
  QueueTree& t = tree.value();
  t.addAllocated(*t.find("a"), gpus(3), +1);
  t.addPending(*t.find("a"), gpus(2), +1);
  EXPECT_EQ(t.queue(*t.find("org")).allocated[kGpuDim], 3000);
  EXPECT_EQ(t.queue(*t.find("org")).pending[kGpuDim], 2000);
  Amounts capacity = space_.zeros();
  capacity[kGpuDim] = 100000;
  computeFairShare(t, capacity);
  EXPECT_EQ(t.queue(*t.find("a")).fair_share[kGpuDim], 5000);
  t.addAllocated(*t.find("a"), gpus(3), -1);
  EXPECT_EQ(t.queue(*t.find("org")).allocated[kGpuDim], 0);
}

TEST_F(FairShareTreeTest, ARenamedQueueKeepsItsIdTotalsAndChildren) {
  auto tree =
      QueueTree::create(space_, {spec("org", "", 4), spec("a", "org", 2), spec("b", "", 1)});
  ASSERT_TRUE(tree.isOk());
  QueueTree& t = tree.value();
  const QueueId org = *t.find("org");
  const QueueId a = *t.find("a");
  t.addAllocated(a, gpus(3), +1);
  ASSERT_TRUE(t.rename(org, "team").isOk());
  EXPECT_FALSE(t.find("org").has_value());
  EXPECT_EQ(t.find("team"), org);
  EXPECT_EQ(t.queue(org).name, "team");
  EXPECT_EQ(t.queue(org).quota[kGpuDim], 4000);
  EXPECT_EQ(t.queue(org).allocated[kGpuDim], 3000);
  EXPECT_EQ(t.queue(a).parent, org);
  // A name in use, or none, is refused and changes nothing.
  EXPECT_EQ(t.rename(a, "b").message(), "queue 'b' is declared twice");
  EXPECT_EQ(t.rename(a, "").message(), "queue 1 has an empty name");
  EXPECT_EQ(t.queue(a).name, "a");
  EXPECT_EQ(t.find("a"), a);
}

// `add` extends the tree in place (a server adds a queue per tenant): the tree it makes, one
// queue at a time, divides as the one `create` makes at once, totals kept; it refuses what
// `create` refuses, changing nothing.
TEST_F(FairShareTreeTest, QueuesAddedOneByOneDivideAsATreeCreatedAtOnce) {
  const std::vector<QueueSpec> specs = {spec("org", "", 0),       spec("t1", "org", 20),
                                        spec("t2", "org", 10, 3), spec("t1-a", "t1", 5),
                                        spec("t1-b", "t1", 5, 2), spec("t2-x", "t2", 0)};
  auto whole = QueueTree::create(space_, specs);
  auto grown = QueueTree::create(space_, {specs[0]});
  ASSERT_TRUE(whole.isOk() && grown.isOk());
  for (size_t i = 1; i < specs.size(); ++i) {
    auto id = grown->add(specs[i]);
    ASSERT_TRUE(id.isOk()) << id.status().message();
    EXPECT_EQ(*id, i);
    if (specs[i].name == "t1-a") {
      grown->addAllocated(*id, gpus(1), +1);  // Kept through the adds that follow.
    }
  }
  whole->addAllocated(*whole->find("t1-a"), gpus(1), +1);
  EXPECT_EQ(grown->add(spec("t1", "", 0)).status().message(), "queue 't1' is declared twice");
  EXPECT_EQ(grown->add(spec("z", "nope", 0)).status().message(),
            "queue 'z': parent 'nope' is not declared");
  EXPECT_EQ(grown->add(spec("w", "org", 0, -1)).status().message(),
            "queue 'w': overQuotaWeight is negative");
  ASSERT_EQ(grown->size(), specs.size());
  EXPECT_EQ(grown->queue(0).allocated[kGpuDim], 1000);  // org, through t1 from t1-a.
  // Parents before children, as the fair share walks it.
  std::vector<bool> seen(grown->size(), false);
  for (QueueId q : grown->topDown()) {
    const QueueId parent = grown->queue(q).parent;
    EXPECT_TRUE(parent == kNoQueue || seen[parent]) << grown->queue(q).name;
    seen[q] = true;
  }
  Amounts capacity = space_.zeros();
  capacity[kGpuDim] = 64000;
  for (QueueTree* t : {&whole.value(), &grown.value()}) {
    for (const char* leaf : {"t1-a", "t1-b", "t2-x"}) {
      t->addPending(*t->find(leaf), gpus(40), +1);
    }
    computeFairShare(*t, capacity);
  }
  for (const QueueSpec& s : specs) {
    const Queue& a = whole->queue(*whole->find(s.name));
    const Queue& b = grown->queue(*grown->find(s.name));
    EXPECT_EQ(a.fair_share, b.fair_share) << s.name;
    EXPECT_EQ(a.depth, b.depth) << s.name;
    EXPECT_EQ(a.children, b.children) << s.name;
  }
}

TEST_F(FairShareTreeTest, TreeValidation) {
  auto err = [&](std::vector<QueueSpec> specs) {
    auto t = QueueTree::create(space_, std::move(specs));
    return t.isOk() ? std::string("ok") : t.status().message();
  };
  EXPECT_EQ(err({spec("a", "", 0), spec("a", "", 0)}), "queue 'a' is declared twice");
  EXPECT_EQ(err({spec("a", "nope", 0)}), "queue 'a': parent 'nope' is not declared");
  EXPECT_EQ(err({spec("a", "b", 0), spec("b", "a", 0)}), "queue 'a' is part of a parent cycle");
  EXPECT_EQ(err({spec("a", "a", 0)}), "queue 'a' is part of a parent cycle");
  QueueSpec low = spec("low", "", 10);
  low.limit = space_.unlimited();
  low.limit[kGpuDim] = 5000;
  EXPECT_EQ(err({low}), "queue 'low': limit.gpu (5000) is below quota.gpu (10000)");
  EXPECT_EQ(err({spec("w", "", 0, -1)}), "queue 'w': overQuotaWeight is negative");
  EXPECT_EQ(err({spec("", "", 0)}), "queue 0 has an empty name");
}

}  // namespace
}  // namespace tessera::sched
