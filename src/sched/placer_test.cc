#include "sched/placer.h"

#include <gtest/gtest.h>

#include <numeric>

#include "core/rng.h"
#include "sched/frag.h"
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
  // Node verdicts agree with their count; no node at all is said in words.
  Placer::Decision none;
  none.rejected[static_cast<size_t>(FilterReason::kNodeSelector)] = 2;
  none.rejected[static_cast<size_t>(FilterReason::kNodeDown)] = 1;
  none.rejected[static_cast<size_t>(FilterReason::kCordoned)] = 3;
  EXPECT_EQ(none.explain(6),
            "0/6 nodes fit: 1 node down, 3 nodes cordoned, 2 nodes lack the selected labels");
  EXPECT_EQ(Placer::Decision{}.explain(0),
            "no node is in service yet (none is declared, none has joined)");
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

// The classes are bounded by a budget: past it the least recently used goes, comes back with a
// new id when needed again, and decides exactly as before. A class is indexed (and takes its
// bytes per node) from its second decision.
TEST_F(PlacerTest, TheLeastRecentlyUsedClassGoesPastTheBudget) {
  // Enough nodes that an index outweighs a class's own fields.
  std::vector<model::Node> nodes;
  for (int i = 0; i < 200; ++i) {
    nodes.push_back(testing::node(cat_, "n" + std::to_string(i), 8 + i % 3, 32, "T4", 2));
  }
  ClusterState state(cat_, std::move(nodes));
  auto policy = std::move(makePolicy("bestfit", PolicyContext{nullptr, &rng_}, state)).value();
  Placer placer(state, *policy);
  const model::TaskRequest a = gpuTask(1000, 1);
  const model::TaskRequest b = gpuTask(2000, 1);
  const model::TaskRequest c = gpuTask(3000, 1);
  const uint32_t id_a = placer.classId(a);
  const uint32_t id_b = placer.classId(b);
  EXPECT_NE(id_a, id_b);
  ASSERT_TRUE(placer.decide(a).placed && placer.decide(b).placed);  // First: nothing kept.
  const size_t unindexed = placer.cacheBytes();
  ASSERT_TRUE(placer.decide(a).placed && placer.decide(b).placed);  // Second: indexed.
  const size_t two = placer.cacheBytes();
  EXPECT_GT(two, unindexed);
  EXPECT_EQ(placer.classCount(), 2U);
  placer.setCacheBudget(two + two / 4);  // Room for two indexed classes, not three.
  EXPECT_EQ(placer.classCount(), 2U);
  const Placer::Decision b_before = placer.decide(b);
  (void)placer.decide(a);  // a is now the most recently used.
  const uint32_t id_c = placer.classId(c);
  EXPECT_TRUE(placer.decide(c).placed);
  EXPECT_EQ(placer.classCount(), 3U);  // c is not indexed yet: it fits.
  EXPECT_TRUE(placer.decide(c).placed);
  EXPECT_EQ(placer.classCount(), 2U);             // Indexing c pushed b out.
  EXPECT_EQ(placer.classId(a), id_a);             // Kept.
  const uint32_t id_b_again = placer.classId(b);  // Dropped, built anew: a fresh id.
  EXPECT_NE(id_b_again, id_b);
  EXPECT_NE(id_b_again, id_a);
  EXPECT_NE(id_b_again, id_c);
  for (int i = 0; i < 2; ++i) {  // Its first decision (a scan), then its index.
    const Placer::Decision b_after = placer.decide(b);
    EXPECT_EQ(b_after.placed, b_before.placed);
    EXPECT_EQ(b_after.placement.node, b_before.placement.node);
    EXPECT_EQ(b_after.placement.gpus, b_before.placement.gpus);
    EXPECT_LE(placer.cacheBytes(), two + two / 4);
  }
  EXPECT_EQ(placer.classCount(), 2U);
  // A budget below one class keeps the one in use.
  placer.setCacheBudget(1);
  EXPECT_EQ(placer.classCount(), 1U);
  EXPECT_EQ(placer.classId(b), id_b_again);
  EXPECT_TRUE(placer.decide(c).placed);
  EXPECT_TRUE(placer.decide(c).placed);
  EXPECT_EQ(placer.classCount(), 1U);
}

model::TaskRequest of(model::TaskRequest r, uint32_t tenant) {
  r.tenant = model::TenantId{tenant};
  return r;
}

// Tenants share a class where the tenant cannot change the answer, and only there.
TEST_F(PlacerTest, TenantsShareAClassUnlessAPoolOrTheTrustRuleSetsThemApart) {
  Placer placer(state_, *policy_);
  const model::TaskRequest whole = gpuTask(1000, 1);
  const model::TaskRequest share = gpuTask(1000, 1, 500);
  EXPECT_EQ(placer.classId(of(whole, 1)), placer.classId(of(whole, 2)));
  EXPECT_EQ(placer.classId(of(cpuTask(1000), 1)), placer.classId(of(cpuTask(1000), 2)));
  EXPECT_NE(placer.classId(of(share, 1)), placer.classId(of(share, 2)));

  // The trust rule: tenant 1's share on the V100 (bestfit's first choice) keeps tenant 2 off
  // that GPU, but not tenant 1.
  Placer::Decision first = placer.place(of(share, 1));
  ASSERT_TRUE(first.placed);
  EXPECT_EQ(first.placement.node, 2U);
  EXPECT_EQ(placer.decide(of(share, 1)).placement.node, 2U);
  EXPECT_NE(placer.decide(of(share, 2)).placement.node, 2U);
  placer.release(of(share, 1), first.assignment);

  // Tenant 6 used the shared class first; then the V100 node is dedicated to it. Its own
  // requests now reach the node; tenant 8's, still in the shared class, never do.
  EXPECT_EQ(placer.decide(of(whole, 6)).placement.node, 2U);
  const uint32_t shared_id = placer.classId(of(whole, 6));
  state_.setDedicated(2, model::TenantId{6});
  EXPECT_NE(placer.classId(of(whole, 6)), shared_id);
  EXPECT_EQ(placer.classId(of(whole, 8)), shared_id);
  EXPECT_EQ(placer.decide(of(whole, 6)).placement.node, 2U);
  const Placer::Decision other = placer.decide(of(whole, 8));
  ASSERT_TRUE(other.placed);
  EXPECT_NE(other.placement.node, 2U);
  EXPECT_EQ(other.rejected[static_cast<size_t>(FilterReason::kDedicated)], 1U);
  // The pool taken away: tenant 6 is like any other again.
  state_.setDedicated(2, std::nullopt);
  EXPECT_EQ(placer.classId(of(whole, 6)), shared_id);
  EXPECT_EQ(placer.decide(of(whole, 8)).placement.node, 2U);
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

TEST_F(PlacerTest, MarkedPreferencesPickThePreferredAndSkipTheForbidden) {
  Placer placer(state_, *policy_);
  const model::TaskRequest req = gpuTask(1000, 1);
  ASSERT_EQ(placer.decide(req).placement.node, 2U);  // bestfit's choice without preferences.

  // The best node forbidden: the next best wins; a repeated mark counts once.
  std::vector<uint8_t> pref = {0, 0, Placer::kForbidden};
  std::vector<NodeIndex> marked = {2, 2};
  Placer::Decision d = placer.decide(req, pref, marked);
  EXPECT_EQ(d.placement.node, 0U);
  EXPECT_EQ(d.rejected[static_cast<size_t>(FilterReason::kReserved)], 1U);
  EXPECT_EQ(d.feasible, 2U);

  // A preferred node beats a better score; forbidding everything places nothing.
  pref = {0, 1, Placer::kForbidden};
  marked = {1, 2, 1};
  EXPECT_EQ(placer.decide(req, pref, marked).placement.node, 1U);
  pref = {Placer::kForbidden, Placer::kForbidden, Placer::kForbidden};
  marked = {0, 1, 2};
  d = placer.decide(req, pref, marked);
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.feasible, 0U);
  EXPECT_EQ(d.explain(3), "0/3 nodes fit: 3 reserved for a waiting gang");

  // Without `marked`, the full scan answers the same.
  d = placer.decide(req, pref);
  EXPECT_FALSE(d.placed);
  EXPECT_EQ(d.rejected[static_cast<size_t>(FilterReason::kReserved)], 3U);
}

// The index must give exactly the decisions of the full scan. Two identical clusters, one
// placer path each: the reference always takes the full scan (a preference span without
// `marked`, all zeros when there is no preference), the other the index. Both see the same
// random sequence of placements, releases and decisions with random preferences.
namespace equivalence {

std::vector<model::Node> mixedNodes(const model::GpuCatalogue& cat, int n) {
  std::vector<model::Node> nodes;
  for (int i = 0; i < n; ++i) {
    std::string name = "n";  // Not "n" + to_string(i): GCC 12 warns falsely (-Wrestrict).
    name += std::to_string(i);
    switch (i % 7) {
      case 0:
        nodes.push_back(testing::node(cat, name, 8, 32, "T4", 2));
        break;
      case 1:
        nodes.push_back(testing::node(cat, name, 32, 128, "T4", 4));
        break;
      case 2:
        nodes.push_back(testing::node(cat, name, 64, 256, "V100M32", 8));
        break;
      case 3:
        nodes.push_back(testing::node(cat, name, 128, 1024, "H100-80GB", 8));
        break;
      case 4:
        nodes.push_back(testing::node(cat, name, 48, 512, "A100-80GB", 4));
        break;
      case 5:
        nodes.push_back(testing::node(cat, name, 16, 64, "T4", 0));  // CPU only.
        break;
      default:
        nodes.push_back(testing::node(cat, name, 96, 768, "H100-80GB", 2));
        break;
    }
  }
  return nodes;
}

std::vector<model::TaskRequest> requestMix(const model::GpuCatalogue& cat) {
  std::vector<model::TaskRequest> mix = {
      testing::cpuTask(4000, 8192),
      testing::gpuTask(4000, 1),
      testing::gpuTask(8000, 2),
      testing::gpuTask(16000, 4),
      testing::gpuTask(24000, 8),
      testing::gpuTask(2000, 1, 250),
      testing::gpuTask(2000, 1, 500),
      testing::gpuTask(1000, 1, 700),
      testing::gpuTask(4000, 1, 1000, 300 * 1024),  // Fits only the big-memory nodes.
      testing::migTask("1g.10gb"),
      testing::migTask("3g.40gb"),
      testing::migTask("7g.80gb", 8000),
  };
  model::TaskRequest v100_only = testing::gpuTask(4000, 1);
  v100_only.models = {*cat.find("V100M32")};
  mix.push_back(v100_only);
  model::TaskRequest other_tenant = testing::gpuTask(2000, 1, 500);
  other_tenant.tenant = model::TenantId{1};  // May not share a GPU with tenant 0 (trust).
  mix.push_back(other_tenant);
  return mix;
}

FragModel fragFor(const model::GpuCatalogue& cat, const std::vector<model::TaskRequest>& mix) {
  std::vector<PodShape> shapes;
  for (const model::TaskRequest& r : mix) {
    if (!r.isMig()) {
      shapes.push_back(
          {r.cpu.value(), static_cast<int32_t>(r.gpu_milli.value()), r.gpu_count, r.models});
    }
  }
  return FragModel(typicalPods(shapes, 1.0), cat.size());
}

// One cluster with its policy.
struct Side {
  Side(const model::GpuCatalogue& cat, const std::vector<model::Node>& nodes,
       const std::string& policy_name, const FragModel& frag)
      : state(cat, nodes), rng(11) {
    policy = std::move(makePolicy(policy_name, PolicyContext{&frag, &rng}, state)).value();
  }
  ClusterState state;
  core::Rng rng;
  std::unique_ptr<Policy> policy;
};

std::string describe(const Placer::Decision& d) {
  std::string out = d.placed ? "placed on " + std::to_string(d.placement.node) : "not placed";
  out += " gpus=" + std::to_string(d.placement.gpus) +
         " mig=" + std::to_string(d.placement.mig_profile) + "@" +
         std::to_string(d.placement.mig_start) + " feasible=" + std::to_string(d.feasible) +
         " rejected=";
  for (uint32_t r : d.rejected) {
    out += std::to_string(r) + ",";
  }
  return out;
}

// One string per decision, so a mismatch shows both in full.
::testing::AssertionResult same(const Placer::Decision& want, const Placer::Decision& got) {
  if (describe(want) == describe(got)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "full scan: " << describe(want) << "\n    index: " << describe(got);
}

}  // namespace equivalence

class PlacerIndexTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PlacerIndexTest, DecisionsMatchTheFullScan) {
  using equivalence::Side;
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  const std::vector<model::Node> nodes = equivalence::mixedNodes(cat, 350);
  const std::vector<model::TaskRequest> mix = equivalence::requestMix(cat);
  const FragModel frag = equivalence::fragFor(cat, mix);
  const auto n = static_cast<NodeIndex>(nodes.size());
  core::Rng rng(2024);
  std::vector<uint32_t> rank(n);
  std::iota(rank.begin(), rank.end(), 0);
  rng.shuffle(std::span<uint32_t>(rank));

  Side ref(cat, nodes, GetParam(), frag);
  Side idx(cat, nodes, GetParam(), frag);
  Placer scan(ref.state, *ref.policy, rank);
  // Two placers over the indexed cluster: each keeps its own classes and reads the journal.
  Placer indexed_a(idx.state, *idx.policy, rank);
  Placer indexed_b(idx.state, *idx.policy, rank);

  struct Live {
    size_t req;
    Assignment ref, idx;
    Placer* placer;
  };
  std::vector<Live> live;
  std::vector<uint8_t> pref(n, 0);
  std::vector<NodeIndex> marked;
  int placed = 0;
  int skipped_forbidden = 0;
  for (int step = 0; step < 6000; ++step) {
    // Phases of filling and draining, so decisions see both roomy and nearly full clusters.
    const uint64_t release_pct = (step / 1500) % 2 == 0 ? 20 : 60;
    const uint64_t op = rng.uniform(100);
    if (op < release_pct && !live.empty()) {
      const size_t k = rng.uniform(live.size());
      const Live l = live[k];
      live[k] = live.back();
      live.pop_back();
      scan.release(mix[l.req], l.ref);
      l.placer->release(mix[l.req], l.idx);
      continue;
    }
    if (step % 61 == 0) {
      // Drop indexed_a's classes (all but the last used), so they are built anew from a busy
      // cluster: each distinct node state scored once for all its nodes.
      indexed_a.setCacheBudget(1);
      indexed_a.setCacheBudget(Placer::kDefaultCacheBudget);
    }
    const size_t req = rng.uniform(mix.size());
    const model::TaskRequest& r = mix[req];
    Placer& indexed = rng.uniform(2) == 0 ? indexed_a : indexed_b;

    // Preferences: none, a few preferred and forbidden nodes, many forbidden, or the best
    // nodes forbidden so the index must walk past them.
    std::fill(pref.begin(), pref.end(), 0);
    marked.clear();
    const uint64_t mode = rng.uniform(4);
    auto mark = [&](NodeIndex m, uint8_t level) {
      pref[m] = level;
      marked.push_back(m);
      if (rng.uniform(4) == 0) {
        marked.push_back(m);  // Repeats are allowed.
      }
    };
    if (mode == 1) {
      for (uint64_t k = rng.uniform(12); k > 0; --k) {
        static constexpr uint8_t kLevels[] = {1, 2, 3, Placer::kForbidden};
        mark(static_cast<NodeIndex>(rng.uniform(n)), kLevels[rng.uniform(4)]);
      }
    } else if (mode == 2) {
      for (NodeIndex m = 0; m < n; ++m) {
        if (rng.uniform(3) == 0) {
          mark(m, Placer::kForbidden);
        }
      }
    } else if (mode == 3) {
      for (uint64_t k = 1 + rng.uniform(6); k > 0; --k) {
        Placer::Decision best = scan.decide(r, pref);
        ASSERT_TRUE(equivalence::same(best, indexed.decide(r, pref, marked))) << "step " << step;
        if (!best.placed) {
          break;
        }
        mark(best.placement.node, Placer::kForbidden);
        ++skipped_forbidden;
      }
      if (rng.uniform(2) == 0) {
        mark(static_cast<NodeIndex>(rng.uniform(n)), 2);
      }
    }
    if (!marked.empty() && rng.uniform(3) == 0) {
      marked.push_back(static_cast<NodeIndex>(rng.uniform(n)));  // Level 0 in `marked`: ignored.
    }
    // Now and then the indexed placer also takes the full scan on its (indexed) classes.
    const bool indexed_scans = mode != 0 && rng.uniform(10) == 0;
    const std::span<const uint8_t> idx_pref =
        mode == 0 ? std::span<const uint8_t>{} : std::span<const uint8_t>(pref);
    const std::span<const NodeIndex> idx_marked =
        indexed_scans ? std::span<const NodeIndex>{} : std::span<const NodeIndex>(marked);

    const bool apply = rng.uniform(4) != 0;
    Placer::Decision want = apply ? scan.place(r, pref) : scan.decide(r, pref);
    Placer::Decision got =
        apply ? indexed.place(r, idx_pref, idx_marked) : indexed.decide(r, idx_pref, idx_marked);
    ASSERT_TRUE(equivalence::same(want, got))
        << "step " << step << ", request " << req << ", preference mode " << mode;
    if (apply && want.placed) {
      live.push_back({req, want.assignment, got.assignment, &indexed});
      ++placed;
    }
  }
  // The sequence did exercise what it is meant to.
  EXPECT_GT(placed, 1000);
  EXPECT_GT(skipped_forbidden, 500);
}

INSTANTIATE_TEST_SUITE_P(Policies, PlacerIndexTest,
                         ::testing::Values("dotprod", "bestfit", "gpupacking", "gpuclustering",
                                           "fgd", "tessera", "random"));

// A class left unused while the journal drops the entries it has not read rebuilds its index
// from every node, and still answers as the full scan does.
TEST(PlacerIndexJournalTest, ClassFallenBehindTheJournalRebuilds) {
  using equivalence::Side;
  const model::GpuCatalogue cat = model::GpuCatalogue::builtin();
  const std::vector<model::Node> nodes = equivalence::mixedNodes(cat, 14);
  const std::vector<model::TaskRequest> mix = equivalence::requestMix(cat);
  const FragModel frag = equivalence::fragFor(cat, mix);
  for (const char* policy : {"bestfit", "fgd", "tessera"}) {
    Side ref(cat, nodes, policy, frag);
    Side idx(cat, nodes, policy, frag);
    Placer scan(ref.state, *ref.policy);
    Placer indexed(idx.state, *idx.policy);
    std::vector<uint8_t> no_pref(nodes.size(), 0);
    const model::TaskRequest watched = testing::gpuTask(4000, 1);
    ASSERT_TRUE(equivalence::same(scan.decide(watched, no_pref), indexed.decide(watched)))
        << policy;

    // Churn with other shapes until the journal has dropped what `watched` has not read,
    // leaving the cluster partly filled.
    const uint64_t seen = idx.state.journalEnd();
    core::Rng rng(5);
    std::vector<std::pair<size_t, std::pair<Assignment, Assignment>>> live;
    while (idx.state.changesSince(seen).has_value() || live.size() < 20) {
      if (live.size() > 30 || (live.size() > 5 && rng.uniform(2) == 0)) {
        auto [req, a] = live.back();
        live.pop_back();
        scan.release(mix[req], a.first);
        indexed.release(mix[req], a.second);
        continue;
      }
      const size_t req = 5 + rng.uniform(3);  // The fractional shapes only.
      Placer::Decision want = scan.place(mix[req], no_pref);
      Placer::Decision got = indexed.place(mix[req]);
      ASSERT_TRUE(equivalence::same(want, got)) << policy;
      if (want.placed) {
        live.push_back({req, {want.assignment, got.assignment}});
      }
    }
    std::vector<uint8_t> pref(nodes.size(), 0);
    const std::vector<NodeIndex> marked = {scan.decide(watched, no_pref).placement.node};
    pref[marked[0]] = Placer::kForbidden;
    EXPECT_TRUE(
        equivalence::same(scan.decide(watched, pref), indexed.decide(watched, pref, marked)))
        << policy;
    EXPECT_TRUE(equivalence::same(scan.decide(watched, no_pref), indexed.decide(watched)))
        << policy;
  }
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
