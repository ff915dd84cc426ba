#include "sim/openb_mig.h"

#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <utility>

#include "model/gpu_catalogue.h"
#include "sim/openb_experiment.h"

namespace tessera::sim {
namespace {

std::string sampleDir() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/testdata/openb-sample/";
}

const model::GpuCatalogue& catalogue() {
  static const model::GpuCatalogue c = model::GpuCatalogue::builtin();
  return c;
}

const model::GpuModelInfo& modelNamed(const std::string& name) {
  return catalogue().model(*catalogue().find(name));
}

// The profile's name, or "" when none holds the share.
std::string profileFor(const std::string& model, int32_t milli, std::vector<int> allowed = {}) {
  const model::GpuModelInfo& info = modelNamed(model);
  std::optional<int> p = smallestMigProfile(info, milli, allowed);
  return p ? info.mig_profiles[*p].name : "";
}

TEST(MigProfileTest, ShareMapsToTheSmallestProfileHoldingItsComputeAndMemory) {
  // A100-80GB offers 80384 MiB in MIG mode (7g.80gb), so a share s needs ceil(7s/1000) compute
  // slices and ceil(s x 80384 / 1000) MiB.
  struct Case {
    int32_t milli;
    std::string profile;
  };
  const std::vector<Case> cases = {
      {1, "1g.10gb"},   {122, "1g.10gb"},  // 9807 MiB <= 9856.
      {123, "1g.20gb"},                    // 9888 MiB: one compute slice, but two memory slices.
      {142, "1g.20gb"},                    // Just under 1/7: still one compute slice.
      {143, "2g.20gb"},                    // Just over 1/7: two compute slices.
      {248, "2g.20gb"}, {249, "3g.40gb"},  // 20016 MiB > 2g's 19968.
      {428, "3g.40gb"},                    // 3/7 = 428.6.
      {429, "4g.40gb"}, {500, "4g.40gb"},  // One half: 40192 MiB, exactly 4g's memory.
      {501, "7g.80gb"}, {999, "7g.80gb"}, {0, ""},  // Not a share.
      {1000, ""},                                   // A whole GPU is not served by a slice.
      {-5, ""},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(profileFor("A100-80GB", c.milli), c.profile) << c.milli << " milli";
  }
  EXPECT_EQ(profileFor("A100-40GB", 100), "1g.5gb");
  EXPECT_EQ(profileFor("T4", 100), "");  // No MIG.
}

TEST(MigProfileTest, EveryShareGetsAProfileThatHoldsIt) {
  const model::GpuModelInfo& info = modelNamed("H100-80GB");
  for (int32_t m = 1; m < 1000; ++m) {
    std::optional<int> p = smallestMigProfile(info, m);
    ASSERT_TRUE(p.has_value()) << m;
    const model::MigProfile& prof = info.mig_profiles[*p];
    EXPECT_GE(prof.compute_slices * 1000, 7 * m) << m;
    EXPECT_GE(prof.memory.value(), migMemoryNeed(info, m)) << m;
    EXPECT_EQ(prof.name.find("+me"), std::string::npos) << m;
  }
}

TEST(MigProfileTest, AllowedProfilesRestrictTheChoice) {
  const model::GpuModelInfo& info = modelNamed("A100-80GB");
  const std::vector<int> fixed = {info.findMigProfile("1g.10gb"), info.findMigProfile("2g.20gb"),
                                  info.findMigProfile("3g.40gb")};
  EXPECT_EQ(profileFor("A100-80GB", 100, fixed), "1g.10gb");
  EXPECT_EQ(profileFor("A100-80GB", 130, fixed), "2g.20gb");  // 1g.20gb is not in the layouts.
  EXPECT_EQ(profileFor("A100-80GB", 300, fixed), "3g.40gb");
  EXPECT_EQ(profileFor("A100-80GB", 500, fixed), "");  // Needs 4g.
}

TEST(MigOptionsTest, BadFlagsAreClearErrors) {
  EXPECT_FALSE(parseMigLayout("static").isOk());
  EXPECT_EQ(*parseMigLayout("dynamic"), MigLayout::kDynamic);
  auto map = parseMigMap("G3=A100-80GB,V100M32=H100");
  ASSERT_TRUE(map.isOk());
  EXPECT_EQ(map->size(), 2U);
  EXPECT_EQ((*map)[1], std::make_pair(std::string("V100M32"), std::string("H100")));
  EXPECT_TRUE(parseMigMap("")->empty());
  for (const char* bad : {"G3", "=A100-80GB", "G3=", "G3=A=B", "G3=A100-80GB,"}) {
    EXPECT_FALSE(parseMigMap(bad).isOk()) << bad;
  }
  // The trace has no MIG-capable model: asking for MIG without a map says so.
  auto e = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv",
                                 {MigLayout::kDynamic, {}});
  ASSERT_FALSE(e.isOk());
  EXPECT_NE(e.status().message().find("--mig-map"), std::string::npos);
  EXPECT_FALSE(OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv",
                                     {MigLayout::kNone, {{"G2", "B300"}}})
                   .isOk());
  EXPECT_FALSE(OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv",
                                     {MigLayout::kNone, {{"H100", "A100-80GB"}}})
                   .isOk());
  MigOptions bad_share{MigLayout::kFixed, {{"G2", "A100-80GB"}}};
  bad_share.fixed_share = 1.5;
  EXPECT_FALSE(
      OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv", bad_share).isOk());
}

std::unique_ptr<OpenbExperiment> load(MigLayout layout) {
  auto e = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv",
                                 {layout, {{"G2", "A100-80GB"}}});
  EXPECT_TRUE(e.isOk()) << e.status().message();
  return std::move(e).value();
}

// What the run put on each GPU: MIG instances and other (share or whole) pods.
struct GpuUse {
  std::vector<model::MigInstance> slices;
  int others = 0;
};

std::map<std::pair<int32_t, int>, GpuUse> gpuUse(const RunResult& r) {
  std::map<std::pair<int32_t, int>, GpuUse> use;
  for (const PodOutcome& o : r.outcomes) {
    for (uint64_t m = o.gpus; m != 0; m &= m - 1) {
      GpuUse& u = use[{o.node, std::countr_zero(m)}];
      if (o.mig_profile >= 0) {
        EXPECT_EQ(std::popcount(o.gpus), 1);
        u.slices.push_back({o.mig_profile, o.mig_start});
      } else {
        ++u.others;
      }
    }
  }
  return use;
}

TEST(OpenbMigTest, DynamicSlicesAreValidAndNeverShareAGpuWithOtherPods) {
  auto exp = load(MigLayout::kDynamic);
  for (const char* policy : {"fgd", "tessera"}) {
    auto r = exp->run(policy, 42, 1.3);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_GT(r->mig.mig_pods, 0) << policy;
    EXPECT_GT(r->mig.shared_pods, 0) << policy;
    int64_t padding = 0;
    for (const PodOutcome& o : r->outcomes) {
      if (o.mig_profile < 0) {
        continue;
      }
      const OpenbPod& pod = r->pods[o.pod];
      const model::Node& node = exp->nodes()[static_cast<size_t>(o.node)];
      const model::GpuModelInfo& info = exp->catalogue().model(node.gpus[0].model);
      ASSERT_TRUE(info.supportsMig());
      // The smallest profile for the pod's share.
      EXPECT_EQ(o.mig_profile, smallestMigProfile(info, pod.gpu_milli)) << pod.name;
      padding += info.mig_profiles[o.mig_profile].computeShare().value() - pod.gpu_milli;
    }
    EXPECT_EQ(padding, r->mig.padding_milli);
    for (const auto& [gpu, u] : gpuUse(*r)) {
      if (u.slices.empty()) {
        continue;
      }
      EXPECT_EQ(u.others, 0) << "node " << gpu.first << " GPU " << gpu.second;
      const model::Node& node = exp->nodes()[static_cast<size_t>(gpu.first)];
      const model::GpuModelInfo& info = exp->catalogue().model(node.gpus[0].model);
      EXPECT_TRUE(model::validateMigLayout(info, u.slices).isOk())
          << model::validateMigLayout(info, u.slices).message();
    }
    // Slice padding counts as allocated in `curve`, not in `served_curve`.
    EXPECT_GT(r->unallocAt(100) + 1e-9, 0);
    EXPECT_GT(r->unservedAt(100), r->unallocAt(100));
  }
}

TEST(OpenbMigTest, FixedLayoutsNeverChangeAndTakeOnlySlices) {
  auto exp = load(MigLayout::kFixed);
  size_t fixed_nodes = 0;
  size_t capable = 0;
  for (size_t n = 0; n < exp->nodes().size(); ++n) {
    capable += exp->catalogue().model(exp->nodes()[n].gpus[0].model).supportsMig() ? 1 : 0;
    fixed_nodes += exp->fixedProfileOf(n) >= 0 ? 1 : 0;
  }
  EXPECT_EQ(capable, 29U);
  EXPECT_EQ(fixed_nodes, 14U);  // floor(29 x 0.5), spread evenly.
  for (const char* policy : {"fgd", "tessera"}) {
    auto r = exp->run(policy, 43, 1.3);
    ASSERT_TRUE(r.isOk()) << r.status().message();
    EXPECT_GT(r->mig.mig_pods, 0) << policy;
    for (const auto& [gpu, u] : gpuUse(*r)) {
      const int fixed = exp->fixedProfileOf(static_cast<size_t>(gpu.first));
      if (fixed < 0) {
        EXPECT_TRUE(u.slices.empty()) << "node " << gpu.first << " is not pre-partitioned";
        continue;
      }
      EXPECT_EQ(u.others, 0) << "node " << gpu.first << " takes slices only";
      for (const model::MigInstance& s : u.slices) {
        EXPECT_EQ(s.profile, fixed) << "node " << gpu.first << " was repartitioned";
      }
      const model::Node& node = exp->nodes()[static_cast<size_t>(gpu.first)];
      EXPECT_TRUE(
          model::validateMigLayout(exp->catalogue().model(node.gpus[0].model), u.slices).isOk());
    }
  }
}

TEST(OpenbMigTest, NoneChangesNothing) {
  auto plain = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv");
  ASSERT_TRUE(plain.isOk());
  auto none = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv",
                                    {MigLayout::kNone, {}, 0.3, {"7g.80gb"}});
  ASSERT_TRUE(none.isOk());
  for (const char* policy : {"fgd", "tessera"}) {
    auto a = (*plain)->run(policy, 44, 1.3);
    auto b = (*none)->run(policy, 44, 1.3);
    ASSERT_TRUE(a.isOk() && b.isOk());
    ASSERT_EQ(a->outcomes.size(), b->outcomes.size());
    for (size_t i = 0; i < a->outcomes.size(); ++i) {
      EXPECT_EQ(a->outcomes[i].node, b->outcomes[i].node);
      EXPECT_EQ(a->outcomes[i].gpus, b->outcomes[i].gpus);
      EXPECT_EQ(b->outcomes[i].mig_profile, -1);
    }
    EXPECT_EQ(b->mig.mig_pods + b->mig.shared_pods, 0);
    EXPECT_EQ(b->unallocAt(100), a->unallocAt(100));
    EXPECT_EQ(b->unservedAt(100), b->unallocAt(100));
  }
  // With a map but no MIG, fractional pods still only share (the mapped GPUs too).
  auto mapped = load(MigLayout::kNone);
  auto r = mapped->run("fgd", 44, 1.3);
  ASSERT_TRUE(r.isOk());
  for (const PodOutcome& o : r->outcomes) {
    EXPECT_EQ(o.mig_profile, -1);
  }
}

}  // namespace
}  // namespace tessera::sim
