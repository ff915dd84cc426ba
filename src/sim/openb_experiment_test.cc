#include "sim/openb_experiment.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sched/cluster_state.h"
#include "sim/placement_check.h"
#include "sim/report.h"

namespace tessera::sim {
namespace {

std::string sampleDir() {
  const char* d = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(d != nullptr ? d : ".") + "/testdata/openb-sample/";
}

OpenbPod pod(const std::string& name, int num_gpu, int32_t milli) {
  OpenbPod p;
  p.name = name;
  p.cpu_milli = 1000;
  p.num_gpu = num_gpu;
  p.gpu_milli = milli;
  return p;
}

int64_t totalMilli(const std::vector<OpenbPod>& pods) {
  int64_t t = 0;
  for (const OpenbPod& p : pods) {
    t += p.totalGpuMilli();
  }
  return t;
}

TEST(TuneTest, UpAppendsDrawsUntilTheNextShareWouldPassTheTarget) {
  std::vector<OpenbPod> original = {pod("a", 1, 500), pod("b", 0, 0), pod("c", 2, 1000)};
  core::Rng rng(5);
  std::vector<OpenbPod> tuned = tunePodList(original, original, 20000, rng);
  ASSERT_GT(tuned.size(), original.size());
  for (size_t i = 0; i < original.size(); ++i) {
    EXPECT_EQ(tuned[i].name, original[i].name);  // The originals stay first, in order.
  }
  EXPECT_NE(tuned.back().name.find("-tuned-"), std::string::npos);
  // The artifact's stop rule compares the per-GPU share, so a 2-GPU pod may overshoot by at most
  // one GPU; and the loop stops only when one more per-GPU share would pass the target.
  EXPECT_LE(totalMilli(tuned), 20000 + 1000);
  EXPECT_GT(totalMilli(tuned) + 1000, 20000);
}

TEST(TuneTest, DownDropsPodsUntilAtOrBelowTheTarget) {
  std::vector<OpenbPod> pods;
  for (int i = 0; i < 20; ++i) {
    std::string name = "p";  // Not "p" + to_string(i): GCC 12 warns falsely (-Wrestrict).
    name += std::to_string(i);
    pods.push_back(pod(name, 1, 1000));
  }
  core::Rng rng(5);
  std::vector<OpenbPod> tuned = tunePodList(pods, pods, 12500, rng);
  EXPECT_EQ(tuned.size(), 12U);
  EXPECT_EQ(totalMilli(tuned), 12000);
}

TEST(BinCurveTest, RoundsHalfToEvenAndFillsEmptyBinsFromNeighbours) {
  // 10 GPUs: 1% of capacity = 100 milli.
  std::vector<PodEvent> events = {
      {50, 50, 0},    // 0.5% -> bin 0 (half to even).
      {150, 150, 0},  // 1.5% -> bin 2.
      {250, 200, 0},  // 2.5% -> bin 2.
      {400, 300, 0},  // bin 4; bin 3 is empty and averages bins 2 and 4.
  };
  std::vector<CurvePoint> c = binCurve(events, 10);
  ASSERT_EQ(c.size(), 131U);
  EXPECT_TRUE(c[0].present);
  EXPECT_DOUBLE_EQ(c[0].alloc_pct, 0.5);
  EXPECT_TRUE(c[1].present);               // Empty: neighbours 0 and 2.
  EXPECT_DOUBLE_EQ(c[1].alloc_pct, 1.33);  // mean(0.5, 1.5, 2.0) rounded to 2 places.
  EXPECT_DOUBLE_EQ(c[2].alloc_pct, 1.75);
  EXPECT_DOUBLE_EQ(c[3].alloc_pct, 2.17);  // mean(1.5, 2.0, 3.0).
  EXPECT_DOUBLE_EQ(c[4].unalloc_pct, 97);
  EXPECT_FALSE(c[6].present);
}

class SampleRunTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SampleRunTest, PlacementsRespectCapacityAndRunsAreDeterministic) {
  auto exp = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv");
  ASSERT_TRUE(exp.isOk()) << exp.status().message();
  auto a = (*exp)->run(GetParam(), 7, 1.3);
  ASSERT_TRUE(a.isOk()) << a.status().message();
  auto b = (*exp)->run(GetParam(), 7, 1.3);
  ASSERT_TRUE(b.isOk());
  ASSERT_EQ(a->outcomes.size(), b->outcomes.size());
  for (size_t i = 0; i < a->outcomes.size(); ++i) {
    ASSERT_EQ(a->outcomes[i].node, b->outcomes[i].node) << i;
    ASSERT_EQ(a->outcomes[i].gpus, b->outcomes[i].gpus) << i;
  }
  // Demand reaches 130% of capacity, so something fails, and the curve covers 0..130.
  EXPECT_GT(a->failed, 0);
  EXPECT_LT(a->failed, static_cast<int64_t>(a->outcomes.size()));
  EXPECT_TRUE(a->curve[100].present);
  EXPECT_TRUE(a->curve[130].present);
  EXPECT_GE(a->unallocAt(100), 0);
  EXPECT_LT(a->unallocAt(100), 40);

  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("tessera-placements-" + GetParam() + "-" + std::to_string(::getpid()) + ".csv"))
          .string();
  ASSERT_TRUE(writePlacements(path, *a, (*exp)->nodes()).isOk());
  auto check = checkPlacements(sampleDir() + "nodes.csv", path);
  std::filesystem::remove(path);
  ASSERT_TRUE(check.isOk()) << check.status().message();
  EXPECT_EQ(check->failed, static_cast<size_t>(a->failed));
  EXPECT_EQ(check->placed + check->failed, a->outcomes.size());
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, SampleRunTest,
                         ::testing::Values("random", "dotprod", "bestfit", "gpupacking",
                                           "gpuclustering", "fgd", "tessera"));

// Replays a run's placements: the CPU-only pods placed on CPU held for free GPUs (`held`
// milli-CPU per GPU), and those that failed before arrived passed 100 %.
struct HeldCpuReplay {
  int64_t took_held = 0;
  int64_t cpu_only_failed_100 = 0;
};

HeldCpuReplay replayHeldCpu(const OpenbExperiment& exp, const RunResult& run, int64_t held) {
  sched::ClusterState state(exp.catalogue(), exp.nodes());
  HeldCpuReplay r;
  int64_t arrived = 0;
  for (const PodOutcome& o : run.outcomes) {
    const OpenbPod& p = run.pods[o.pod];
    arrived += p.totalGpuMilli();
    if (o.node < 0) {
      r.cpu_only_failed_100 += p.num_gpu == 0 && arrived <= exp.totalGpus() * 1000 ? 1 : 0;
      continue;
    }
    const auto n = static_cast<sched::NodeIndex>(o.node);
    const sched::NodeState& ns = state.nodeState(n);
    if (p.num_gpu == 0 && (ns.free_cpu_milli - p.cpu_milli) * 1000 < held * ns.free_gpu_milli) {
      ++r.took_held;
    }
    state.apply(p.toRequest(), sched::Placement{n, o.gpus});
  }
  return r;
}

TEST(HeldCpuTest, CpuOnlyPodsNeverTakeTheCpuHeldForFreeGpus) {
  auto exp = OpenbExperiment::load(sampleDir() + "nodes.csv", sampleDir() + "pods.csv");
  ASSERT_TRUE(exp.isOk()) << exp.status().message();
  const int64_t typical = (*exp)->typicalCpuPerGpu();
  EXPECT_GT(typical, 1000);  // The sample's GPU pods ask for several cores per GPU.
  for (const std::string policy : {"fgd", "tessera"}) {
    (*exp)->setCpuPerFreeGpu(0);
    auto free_run = (*exp)->run(policy, 3, 1.3);
    ASSERT_TRUE(free_run.isOk());
    (*exp)->setCpuPerFreeGpu(typical);
    auto held_run = (*exp)->run(policy, 3, 1.3);
    ASSERT_TRUE(held_run.isOk());
    // Without the hold, FGD lets CPU-only pods take CPU the GPUs would need (tessera's
    // stranding term happens to avoid it on this sample); with it, no policy does.
    if (policy == "fgd") {
      EXPECT_GT(replayHeldCpu(**exp, *free_run, typical).took_held, 0);
    }
    const HeldCpuReplay held = replayHeldCpu(**exp, *held_run, typical);
    EXPECT_EQ(held.took_held, 0) << policy;
    EXPECT_EQ(held.cpu_only_failed_100, held_run->cpu_only_failed_100) << policy;
    EXPECT_EQ(replayHeldCpu(**exp, *free_run, 0).cpu_only_failed_100, free_run->cpu_only_failed_100)
        << policy;
  }
}

TEST(PlacementCheckTest, CatchesOverCommitment) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string nodes = (dir / "tessera-check-nodes.csv").string();
  const std::string placements = (dir / "tessera-check-placements.csv").string();
  std::ofstream(nodes) << "sn,cpu_milli,memory_mib,gpu,model\na,4000,1000,2,T4\n";
  auto run = [&](const std::string& rows) {
    std::ofstream(placements) << "seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpus,status\n"
                              << rows;
    return checkPlacements(nodes, placements);
  };
  EXPECT_TRUE(run("0,p,1000,10,1,600,a,0,placed\n1,q,1000,10,1,400,a,0,placed\n").isOk());
  auto r = run("0,p,1000,10,1,600,a,0,placed\n1,q,1000,10,1,500,a,0,placed\n");
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.status().message().find(":3: GPU 0 of node 'a' over-committed by 100 milli"),
            std::string::npos)
      << r.status().message();
  r = run("0,p,5000,10,0,0,a,,placed\n");
  EXPECT_NE(r.status().message().find("CPU over-committed by 1000 milli"), std::string::npos);
  r = run("0,p,1000,1001,0,0,a,,placed\n");
  EXPECT_NE(r.status().message().find("memory over-committed by 1 MiB"), std::string::npos);
  r = run("0,p,1000,1,2,1000,a,1;1,placed\n");
  EXPECT_NE(r.status().message().find("GPU 1 of node 'a' over-committed"), std::string::npos);
  r = run("0,p,1000,1,2,1000,a,0,placed\n");
  EXPECT_NE(r.status().message().find("asked for 2 GPUs and got 1"), std::string::npos);
  r = run("0,p,1000,1,1,1000,a,2,placed\n");
  EXPECT_NE(r.status().message().find("has no GPU 2"), std::string::npos);
  r = run("0,p,1000,1,1,1000,zz,0,placed\n");
  EXPECT_NE(r.status().message().find("node 'zz' is not in"), std::string::npos);
  std::filesystem::remove(nodes);
  std::filesystem::remove(placements);
}

}  // namespace
}  // namespace tessera::sim
