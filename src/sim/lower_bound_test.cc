#include "sim/lower_bound.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

#include "core/rng.h"
#include "sim/openb_experiment.h"

namespace tessera::sim {
namespace {

model::Node node(int64_t cpu, int64_t mem, int gpus, int model = 0) {
  model::Node n;
  n.name = "n" + std::to_string(cpu) + "-" + std::to_string(gpus);
  n.cpu = core::MilliCpu{cpu};
  n.memory = core::MiB{mem};
  n.gpus.assign(static_cast<size_t>(gpus),
                model::GpuDevice{model::GpuModelId{static_cast<uint16_t>(model)}});
  return n;
}

OpenbPod pod(int64_t cpu, int num_gpu, int32_t milli, std::vector<int> models = {}) {
  OpenbPod p;
  p.name = "p";
  p.cpu_milli = cpu;
  p.memory_mib = 1;
  p.num_gpu = num_gpu;
  p.gpu_milli = milli;
  for (int m : models) {
    p.models.push_back(model::GpuModelId{static_cast<uint16_t>(m)});
  }
  return p;
}

// The most GPU milli an integral placement allocates, by exhaustive search (tiny instances).
int64_t bruteForceMax(const std::vector<model::Node>& nodes, const std::vector<OpenbPod>& pods) {
  std::vector<int64_t> cpu_left;
  std::vector<int64_t> mem_left;
  std::vector<std::vector<int>> gpu_used;
  for (const model::Node& n : nodes) {
    cpu_left.push_back(n.cpu.value());
    mem_left.push_back(n.memory.value());
    gpu_used.emplace_back(n.gpus.size(), 0);
  }
  int64_t best = 0;
  std::function<void(size_t, int64_t)> go = [&](size_t i, int64_t alloc) {
    best = std::max(best, alloc);
    if (i == pods.size()) {
      return;
    }
    go(i + 1, alloc);  // Leave pod i out.
    const OpenbPod& p = pods[i];
    for (size_t n = 0; n < nodes.size(); ++n) {
      const bool model_ok = p.models.empty() || std::find(p.models.begin(), p.models.end(),
                                                          nodes[n].gpus[0].model) != p.models.end();
      if (!model_ok || p.cpu_milli > cpu_left[n] || p.memory_mib > mem_left[n]) {
        continue;
      }
      cpu_left[n] -= p.cpu_milli;
      mem_left[n] -= p.memory_mib;
      if (p.gpu_milli < 1000) {
        for (int& used : gpu_used[n]) {
          if (used + p.gpu_milli <= 1000) {
            used += p.gpu_milli;
            go(i + 1, alloc + p.gpu_milli);
            used -= p.gpu_milli;
          }
        }
      } else {
        std::vector<int*> free;
        for (int& used : gpu_used[n]) {
          if (used == 0 && static_cast<int>(free.size()) < p.num_gpu) {
            free.push_back(&used);
          }
        }
        if (static_cast<int>(free.size()) == p.num_gpu) {
          for (int* g : free) {
            *g = 1000;
          }
          go(i + 1, alloc + p.totalGpuMilli());
          for (int* g : free) {
            *g = 0;
          }
        }
      }
      cpu_left[n] += p.cpu_milli;
      mem_left[n] += p.memory_mib;
    }
  };
  go(0, 0);
  return best;
}

TEST(LowerBoundTest, TwoLargeSharesCannotShareOneGpu) {
  // Two pods of 600 milli on one GPU: one fits, 40 % stays unallocated. The plain capacity sum
  // would allow 1000 milli (0 %); the per-GPU threshold inequality cuts it to the optimum.
  auto b =
      allocationBound({node(8000, 1000, 1)}, std::vector{pod(1000, 1, 600), pod(1000, 1, 600)});
  ASSERT_TRUE(b.isOk()) << b.status().message();
  EXPECT_NEAR(b->max_alloc_milli, 600, 1e-6);
  EXPECT_NEAR(b->unalloc_pct, 40, 1e-6);
  EXPECT_EQ(b->capacity_milli, 1000);
  EXPECT_EQ(b->arrived_milli, 1200);
}

TEST(LowerBoundTest, PatternsSeeWhichSharesFitTogether) {
  // One GPU; shares 400, 400 and 250: the best pair is 800 (20 % unallocated). No dual-feasible
  // function used separates it (0 %). The maximal patterns are {400,400}, {400,250,250} and
  // {250 x4}; half of each of the first two covers 1.5 x 400 and 1 x 250: 850 milli, 15 %.
  const std::vector<OpenbPod> pods{pod(1, 1, 400), pod(1, 1, 400), pod(1, 1, 250)};
  auto dff = allocationBound({node(8000, 1000, 1)}, pods, {true, false, false, false});
  ASSERT_TRUE(dff.isOk());
  EXPECT_NEAR(dff->unalloc_pct, 0, 1e-6);
  auto patterns = allocationBound({node(8000, 1000, 1)}, pods);
  ASSERT_TRUE(patterns.isOk());
  EXPECT_EQ(patterns->patterns, 3u);
  EXPECT_NEAR(patterns->unalloc_pct, 15, 1e-6);
}

TEST(LowerBoundTest, MultiGpuPodsDoNotSplitAcrossNodes) {
  // Three 3-GPU pods on two 4-GPU nodes: two fit, 6 of 8 GPUs.
  auto b = allocationBound({node(64000, 1000, 4), node(64000, 1000, 4)},
                           std::vector{pod(1, 3, 1000), pod(1, 3, 1000), pod(1, 3, 1000)});
  ASSERT_TRUE(b.isOk());
  EXPECT_NEAR(b->unalloc_pct, 25, 1e-6);
  EXPECT_EQ(b->node_types, 1u);
  EXPECT_EQ(b->shapes, 1u);
}

TEST(LowerBoundTest, CpuAndModelStrandGpus) {
  // CPU: 2 GPUs but room for one pod's CPU. Model: both pods want model 0, one node has model 1.
  auto cpu =
      allocationBound({node(10000, 1000, 2)}, std::vector{pod(6000, 1, 1000), pod(6000, 1, 1000)});
  ASSERT_TRUE(cpu.isOk());
  EXPECT_NEAR(cpu->unalloc_pct, 50, 1e-6);
  auto model = allocationBound({node(8000, 1000, 1, 0), node(8000, 1000, 1, 1)},
                               std::vector{pod(1, 1, 1000, {0}), pod(1, 1, 1000, {0})});
  ASSERT_TRUE(model.isOk());
  EXPECT_NEAR(model->unalloc_pct, 50, 1e-6);
}

TEST(LowerBoundTest, CpuOnlyPodsAreLeftOut) {
  auto b = allocationBound({node(8000, 1000, 1)}, std::vector{pod(8000, 0, 0), pod(1, 1, 1000)});
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ(b->gpu_pods, 1u);
  EXPECT_NEAR(b->unalloc_pct, 0, 1e-6);
}

TEST(LowerBoundTest, PlacingCpuOnlyPodsSeesTheirCpu) {
  // 10 cores, 2 GPUs; a CPU-only pod of 8 cores and two 1-GPU pods of 2 cores. Left out, the
  // CPU-only pod costs nothing (0 %); placed, it leaves room for one GPU pod (50 %).
  const std::vector<model::Node> nodes{node(10000, 1000, 2)};
  const std::vector<OpenbPod> pods{pod(8000, 0, 0), pod(2000, 1, 1000), pod(2000, 1, 1000)};
  auto free = allocationBound(nodes, pods);
  ASSERT_TRUE(free.isOk());
  EXPECT_NEAR(free->unalloc_pct, 0, 1e-6);
  auto placed = allocationBound(nodes, pods, {true, true, true});
  ASSERT_TRUE(placed.isOk()) << placed.status().message();
  EXPECT_TRUE(placed->feasible);
  EXPECT_NEAR(placed->unalloc_pct, 50, 1e-6);
  // Two CPU-only pods of 6 cores cannot both be placed on 10 cores: no bound.
  auto none =
      allocationBound(nodes, std::vector{pod(6000, 0, 0), pod(6000, 0, 0)}, {true, true, true});
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->feasible);
  auto too_big = allocationBound(nodes, std::vector{pod(20000, 0, 0)}, {true, true, true});
  ASSERT_TRUE(too_big.isOk());
  EXPECT_FALSE(too_big->feasible);
}

TEST(LowerBoundTest, NeverBelowTheIntegralOptimumOnRandomTinyInstances) {
  // Soundness: the bound on allocation is at least the true optimum found by search. It also
  // must not be trivial: on some instances it is strictly below the plain capacity bound.
  core::Rng rng(7);
  const int32_t sizes[] = {110, 300, 450, 550, 810, 1000, 1000};
  int tight = 0;
  for (int instance = 0; instance < 60; ++instance) {
    std::vector<model::Node> nodes;
    const int n_nodes = 1 + static_cast<int>(rng.uniform(2));
    for (int i = 0; i < n_nodes; ++i) {
      nodes.push_back(
          node(4000 + 2000 * static_cast<int64_t>(rng.uniform(3)), 1000,
               1 + static_cast<int>(rng.uniform(2)) * (1 + static_cast<int>(rng.uniform(2))),
               static_cast<int>(rng.uniform(2))));
    }
    std::vector<OpenbPod> pods;
    const int n_pods = 3 + static_cast<int>(rng.uniform(3));
    for (int i = 0; i < n_pods; ++i) {
      const int32_t milli = sizes[rng.uniform(std::size(sizes))];
      const int gpus = milli < 1000 ? 1 : 1 + static_cast<int>(rng.uniform(3));
      std::vector<int> models;
      if (rng.uniform(4) == 0) {
        models.push_back(static_cast<int>(rng.uniform(2)));
      }
      pods.push_back(pod(1000 * static_cast<int64_t>(1 + rng.uniform(4)), gpus, milli, models));
    }
    const int64_t exact = bruteForceMax(nodes, pods);
    auto b = allocationBound(nodes, pods);
    ASSERT_TRUE(b.isOk()) << b.status().message();
    EXPECT_GE(b->max_alloc_milli, static_cast<double>(exact) - 1e-6) << "instance " << instance;
    tight += b->max_alloc_milli <
             static_cast<double>(std::min(b->arrived_milli, b->capacity_milli)) - 1e-6;
  }
  EXPECT_GT(tight, 10);
}

TEST(LowerBoundTest, ArrivedPrefixEndsWithTheBin) {
  // 10 GPUs = 10,000 milli; bins are arrived % rounded half to even.
  std::vector<OpenbPod> pods;
  for (int32_t m : {5000, 4900, 100, 50, 50, 500}) {
    pods.push_back(pod(1, 1, m));
  }
  // Arrived after each: 50 %, 99 %, 100 %, 100.5 % (bin 100, half to even), 101 %, 106 %.
  EXPECT_EQ(arrivedPrefix(pods, 10, 100), 4u);
  // No event in bin 100: the curve uses bins 99 and 101, so the prefix runs to the end of 101.
  std::vector<OpenbPod> jump{pod(1, 1, 9800), pod(1, 1, 300), pod(1, 1, 300)};
  EXPECT_EQ(arrivedPrefix(jump, 10, 100), 2u);
}

TEST(LowerBoundTest, NeverAboveWhatPoliciesAchieveOnTheSample) {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  const std::string base = std::string(dir != nullptr ? dir : ".") + "/testdata/openb-sample/";
  for (const char* pods : {"pods.csv", "pods-gpuspec.csv"}) {
    auto exp = OpenbExperiment::load(base + "nodes.csv", base + pods);
    ASSERT_TRUE(exp.isOk()) << exp.status().message();
    for (uint64_t seed : {42, 43}) {
      core::Rng rng(seed);
      const std::vector<OpenbPod> tuned = (*exp)->tunedPods(rng, 1.3);
      const size_t n = arrivedPrefix(tuned, (*exp)->totalGpus(), 100);
      auto b = allocationBound((*exp)->nodes(), std::span(tuned).first(n));
      ASSERT_TRUE(b.isOk()) << b.status().message();
      // Not trivial: the sample's sharing pods cannot all pack (about 2.5 % here).
      EXPECT_GT(b->unalloc_pct, 0.5) << pods << " seed " << seed;
      for (const char* policy : {"fgd", "bestfit", "tessera"}) {
        auto run = (*exp)->run(policy, seed, 1.3);
        ASSERT_TRUE(run.isOk());
        // The curve's allocation is rounded to 0.01 points before averaging.
        EXPECT_LE(b->unalloc_pct, run->unallocAt(100) + 0.01)
            << pods << " seed " << seed << " " << policy;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::sim
