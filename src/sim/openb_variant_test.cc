#include "sim/openb_variant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <set>
#include <string>

namespace tessera::sim {
namespace {

// 10 GPU pods (6 whole: 1000 x 1 four times, 1000 x 2 twice; 4 sharing: 200, 300, 500, 810) and
// 3 CPU-only pods, not in creation order.
const char* kBase =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,creation_time\n"
    "p0,1000,100,1,1000,,50\n"
    "p1,2000,200,1,1000,,10\n"
    "p2,3000,300,1,1000,,20\n"
    "p3,4000,400,1,1000,,30\n"
    "p4,5000,500,2,1000,,40\n"
    "p5,6000,600,2,1000,,60\n"
    "p6,7000,700,1,200,,70\n"
    "p7,8000,800,1,300,,80\n"
    "p8,9000,900,1,500,,90\n"
    "p9,9500,950,1,810,,100\n"
    "c0,100,10,0,0,,5\n"
    "c1,200,20,0,0,,15\n"
    "c2,300,30,0,0,,25\n";

VariantSpec spec(std::optional<double> cpu, std::optional<double> share, uint64_t seed) {
  VariantSpec s;
  s.cpu_pct = cpu;
  s.gpushare_pct = share;
  s.seed = seed;
  return s;
}

core::CsvTable table(const std::string& text, const std::string& source = "base.csv") {
  auto t = core::CsvTable::parse(text, source);
  EXPECT_TRUE(t.isOk()) << t.status().message();
  return std::move(t).value();
}

// Rows without the name column, as a multiset, to compare pod contents across renaming.
std::multiset<std::string> rowsWithoutName(const core::CsvTable& t, bool gpu_only) {
  std::multiset<std::string> out;
  for (size_t r = 0; r < t.rowCount(); ++r) {
    if (gpu_only && t.cell(r, 3) == "0") {
      continue;
    }
    std::string row;
    for (size_t c = 1; c < t.header().size(); ++c) {
      row += std::string(t.cell(r, c)) + ",";
    }
    out.insert(row);
  }
  return out;
}

TEST(OpenbVariantTest, StatsCountPodsAndResources) {
  auto s = podListStats(table(kBase));
  ASSERT_TRUE(s.isOk()) << s.status().message();
  EXPECT_EQ(s->pods, 13);
  EXPECT_EQ(s->cpu_only_pods, 3);
  EXPECT_EQ(s->share_pods, 4);
  EXPECT_EQ(s->whole_gpu_pods, 6);
  EXPECT_EQ(s->gpu_milli, 4 * 1000 + 2 * 2000 + 200 + 300 + 500 + 810);
  EXPECT_EQ(s->share_gpu_milli, 1810);
  EXPECT_EQ(s->cpu_milli, 54500 + 600);
  EXPECT_EQ(s->memory_mib, 5450 + 60);
}

TEST(OpenbVariantTest, CpuShareAboveThePoolKeepsGpuPodsAndDrawsWithReplacement) {
  auto v = makeOpenbVariant(table(kBase), spec(50, std::nullopt, 3));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  // 10 GPU pods; CPU-only pods make up 50 % of all: 10 of 20.
  EXPECT_EQ(v->stats.pods, 20);
  EXPECT_EQ(v->stats.cpu_only_pods, 10);
  const core::CsvTable out = table(v->csv, "out.csv");
  EXPECT_EQ(rowsWithoutName(out, true), rowsWithoutName(table(kBase), true));
  // Every base CPU-only pod is kept, and the rest are copies of them.
  std::multiset<std::string> all = rowsWithoutName(out, false);
  for (const char* row : {"100,10,0,0,,5,", "200,20,0,0,,15,", "300,30,0,0,,25,"}) {
    EXPECT_GE(all.count(row), 1u) << row;
  }
}

TEST(OpenbVariantTest, CpuShareBelowThePoolDrawsDistinctBasePods) {
  // 10 % of all pods: round(0.1 x 10 / 0.9) = 1.
  auto v = makeOpenbVariant(table(kBase), spec(10, std::nullopt, 3));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->stats.pods, 11);
  EXPECT_EQ(v->stats.cpu_only_pods, 1);
  // 0 % drops them all.
  auto none = makeOpenbVariant(table(kBase), spec(0, std::nullopt, 3));
  ASSERT_TRUE(none.isOk());
  EXPECT_EQ(none->stats.cpu_only_pods, 0);
  EXPECT_EQ(none->stats.pods, 10);
}

TEST(OpenbVariantTest, GpuShareUpReplacesWholeGpuPodsAndKeepsCounts) {
  const PodListStats base = podListStats(table(kBase)).value();
  for (double target : {50.0, 80.0, 100.0}) {
    auto v = makeOpenbVariant(table(kBase), spec(std::nullopt, target, 11));
    ASSERT_TRUE(v.isOk()) << v.status().message();
    EXPECT_GE(v->stats.sharePct(), target) << target;
    EXPECT_EQ(v->stats.pods, base.pods);
    EXPECT_EQ(v->stats.cpu_only_pods, base.cpu_only_pods);
    EXPECT_EQ(v->stats.share_pods + v->stats.whole_gpu_pods, base.share_pods + base.whole_gpu_pods);
    EXPECT_GT(v->stats.share_pods, base.share_pods);
  }
  auto all = makeOpenbVariant(table(kBase), spec(std::nullopt, 100, 11));
  EXPECT_EQ(all->stats.whole_gpu_pods, 0);
}

TEST(OpenbVariantTest, GpuShareDownReplacesSharingPods) {
  auto v = makeOpenbVariant(table(kBase), spec(std::nullopt, 0, 5));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->stats.share_pods, 0);
  EXPECT_EQ(v->stats.whole_gpu_pods, 10);
  EXPECT_EQ(v->stats.cpu_only_pods, 3);
}

TEST(OpenbVariantTest, BothStepsCompose) {
  auto v = makeOpenbVariant(table(kBase), spec(50, 100, 2));
  ASSERT_TRUE(v.isOk()) << v.status().message();
  EXPECT_EQ(v->stats.whole_gpu_pods, 0);
  EXPECT_EQ(v->stats.share_pods, 10);
  EXPECT_EQ(v->stats.cpu_only_pods, 10);
}

TEST(OpenbVariantTest, OrdersByCreationTimeAndRenumbers) {
  auto v = makeOpenbVariant(table(kBase), spec(20, std::nullopt, 1));
  ASSERT_TRUE(v.isOk());
  const core::CsvTable out = table(v->csv, "out.csv");
  ASSERT_EQ(out.header(), table(kBase).header());
  int64_t last = INT64_MIN;
  for (size_t r = 0; r < out.rowCount(); ++r) {
    const int64_t t = out.getInt(r, 6).value();
    EXPECT_GE(t, last);
    last = t;
    char want[32];
    std::snprintf(want, sizeof want, "openb-pod-%04zu", r);
    EXPECT_EQ(out.cell(r, 0), want);
  }
}

TEST(OpenbVariantTest, SameSeedSameBytesOtherSeedOtherDraws) {
  const VariantSpec a = spec(60, 70, 42);
  VariantSpec b = a;
  b.seed = 43;
  const std::string first = makeOpenbVariant(table(kBase), a)->csv;
  EXPECT_EQ(makeOpenbVariant(table(kBase), a)->csv, first);
  bool differs = false;
  for (uint64_t seed = 43; seed < 53 && !differs; ++seed) {
    b.seed = seed;
    differs = makeOpenbVariant(table(kBase), b)->csv != first;
  }
  EXPECT_TRUE(differs);
}

TEST(OpenbVariantTest, GpuSpecsAreDrawnByPodKindForTheGivenShareOfGpuPods) {
  // Specs: sharing pods accept T4; 1-GPU whole pods P100 or G2; no 2-GPU pod has one, so the
  // 2-GPU pods draw from all of them.
  const core::CsvTable from = table(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
      "s0,1,1,1,500,T4\n"
      "w0,1,1,1,1000,P100\n"
      "w1,1,1,1,1000,G2\n"
      "w2,1,1,2,1000,\n"
      "c0,1,1,0,0,V100M16\n",
      "specs.csv");
  for (uint64_t seed : {1, 2, 3}) {
    VariantSpec sp = spec(std::nullopt, std::nullopt, seed);
    sp.gpuspec_pct = 50;
    sp.gpuspec_from = &from;
    auto v = makeOpenbVariant(table(kBase), sp);
    ASSERT_TRUE(v.isOk()) << v.status().message();
    EXPECT_EQ(v->stats.spec_pods, 5);  // Half of the 10 GPU pods.
    const core::CsvTable out = table(v->csv);
    for (size_t r = 0; r < out.rowCount(); ++r) {
      const std::string num(out.cell(r, 3));
      const std::string milli(out.cell(r, 4));
      const std::string got(out.cell(r, 5));
      if (got.empty()) {
        continue;
      }
      if (num == "0") {
        ADD_FAILURE() << "a CPU-only pod got spec " << got;
      } else if (milli != "1000") {
        EXPECT_EQ(got, "T4");
      } else if (num == "1") {
        EXPECT_TRUE(got == "P100" || got == "G2") << got;
      } else {
        EXPECT_TRUE(got == "T4" || got == "P100" || got == "G2") << got;
      }
    }
    // Everything else is the base's, pod for pod.
    EXPECT_EQ(rowsWithoutName(out, false).size(), 13U);
  }
  VariantSpec sp = spec(std::nullopt, std::nullopt, 1);
  sp.gpuspec_pct = 50;
  auto no_source = makeOpenbVariant(table(kBase), sp);
  ASSERT_FALSE(no_source.isOk());
  EXPECT_NE(no_source.status().message().find("--gpuspec-from"), std::string::npos);
  const core::CsvTable bare = table("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n", "bare.csv");
  sp.gpuspec_from = &bare;
  EXPECT_FALSE(makeOpenbVariant(table(kBase), sp).isOk());
  sp.gpuspec_from = &from;
  sp.gpuspec_pct = 101;
  EXPECT_FALSE(makeOpenbVariant(table(kBase), sp).isOk());
}

TEST(OpenbVariantTest, BadInputGivesClearErrors) {
  auto bad_cell = makeOpenbVariant(
      table("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\np1,1,1,x,1000\n",
            "pods.csv"),
      spec(10, std::nullopt, 1));
  ASSERT_FALSE(bad_cell.isOk());
  EXPECT_NE(bad_cell.status().message().find("pods.csv:3"), std::string::npos)
      << bad_cell.status().message();
  EXPECT_NE(bad_cell.status().message().find("num_gpu"), std::string::npos);

  auto multi_share = makeOpenbVariant(
      table("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,2,500\n", "pods.csv"), {});
  ASSERT_FALSE(multi_share.isOk());
  EXPECT_NE(multi_share.status().message().find("pods.csv:2: column 'gpu_milli'"),
            std::string::npos)
      << multi_share.status().message();

  auto missing = makeOpenbVariant(table("name,cpu_milli,memory_mib,num_gpu\np0,1,1,1\n"), {});
  ASSERT_FALSE(missing.isOk());
  EXPECT_NE(missing.status().message().find("gpu_milli"), std::string::npos);

  EXPECT_FALSE(makeOpenbVariant(table(kBase), spec(100, std::nullopt, 1)).isOk());
  EXPECT_FALSE(makeOpenbVariant(table(kBase), spec(-1, std::nullopt, 1)).isOk());
  EXPECT_FALSE(makeOpenbVariant(table(kBase), spec(std::nullopt, 101, 1)).isOk());

  auto no_cpu_pods = makeOpenbVariant(
      table("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\n", "gpu.csv"),
      spec(50, std::nullopt, 1));
  ASSERT_FALSE(no_cpu_pods.isOk());
  EXPECT_NE(no_cpu_pods.status().message().find("no CPU-only pods"), std::string::npos);

  auto no_sharing = makeOpenbVariant(
      table("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\n", "gpu.csv"),
      spec(std::nullopt, 50, 1));
  ASSERT_FALSE(no_sharing.isOk());
  EXPECT_NE(no_sharing.status().message().find("no sharing"), std::string::npos)
      << no_sharing.status().message();
}

}  // namespace
}  // namespace tessera::sim
