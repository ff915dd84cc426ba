// Placement throughput on a large synthetic cluster: 10,000 (or 100,000) nodes x 8 GPUs (H100,
// H200 and A100), filled to half its GPUs with a mix of fractional and whole-GPU tasks, then
// each iteration places one more task of the same mix and releases it again (so the cluster
// stays half full). Reported: placements per second per policy, with warm caches (see below);
// the cold first decision per request shape is timed separately by BM_ColdStart (a new shape
// every time) and BM_ManyTenants (the mix's shapes from 1,000 tenants, as a live server sees
// them).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <vector>

#include "core/rng.h"
#include "model/gpu_catalogue.h"
#include "sched/cluster_state.h"
#include "sched/frag.h"
#include "sched/placer.h"
#include "sched/policy.h"

namespace tessera::sched {
namespace {

constexpr int kGpusPerNode = 8;

model::TaskRequest drawTask(core::Rng& rng) {
  model::TaskRequest r;
  r.cpu = core::MilliCpu{static_cast<int64_t>(2000 + 2000 * rng.uniform(8))};
  r.memory = core::MiB{static_cast<int64_t>(8192 * (1 + rng.uniform(8)))};
  const uint64_t kind = rng.uniform(100);
  static constexpr int64_t kShares[] = {100, 250, 300, 500, 700};
  if (kind < 35) {
    r.gpu_count = 1;
    r.gpu_milli = core::MilliGpu{kShares[rng.uniform(5)]};
    r.isolation = model::Isolation::kProcess;
  } else {
    static constexpr int kCounts[] = {1, 1, 1, 1, 1, 1, 2, 2, 4, 8};
    r.gpu_count = kCounts[rng.uniform(10)];
    r.gpu_milli = core::kWholeGpu;
  }
  return r;
}

struct World {
  model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  std::unique_ptr<ClusterState> state;
  std::unique_ptr<FragModel> frag;
};

World& world(int nodes = 10000) {
  static std::map<int, World*> worlds;
  World*& slot = worlds[nodes];
  if (slot == nullptr) {
    slot = [kNodes = nodes] {
      auto* w = new World();
      const model::GpuModelId models[] = {*w->catalogue.find("H100-80GB"),
                                          *w->catalogue.find("H200-141GB"),
                                          *w->catalogue.find("A100-80GB")};
      std::vector<model::Node> nodes;
      nodes.reserve(kNodes);
      for (int i = 0; i < kNodes; ++i) {
        const model::GpuModelId m = models[i % 10 < 5 ? 0 : (i % 10 < 8 ? 1 : 2)];
        nodes.push_back(model::makeNode("node-" + std::to_string(i), core::MilliCpu{224000},
                                        core::MiB{2048 * 1024}, w->catalogue, m, kGpusPerNode));
      }
      w->state = std::make_unique<ClusterState>(w->catalogue, std::move(nodes));
      core::Rng rng(1);
      std::vector<PodShape> shapes;
      for (int i = 0; i < 10000; ++i) {
        model::TaskRequest r = drawTask(rng);
        shapes.push_back(
            {r.cpu.value(), static_cast<int32_t>(r.gpu_milli.value()), r.gpu_count, {}});
      }
      w->frag = std::make_unique<FragModel>(typicalPods(shapes), w->catalogue.size());
      // Fill to half the GPUs with a fast policy.
      PolicyContext ctx{w->frag.get(), &rng};
      auto fill_policy = std::move(makePolicy("bestfit", ctx, *w->state)).value();
      Placer filler(*w->state, *fill_policy);
      // The fill is set-up, not measured: keep all of the mix's ~600 shapes (at 100,000 nodes
      // they would not fit the default budget, and each would be built again and again).
      filler.setCacheBudget(SIZE_MAX);
      const int64_t half = 1000LL * kNodes * kGpusPerNode / 2;
      while (w->state->usedGpuMilli() < half) {
        if (!filler.place(drawTask(rng)).placed) {
          break;
        }
      }
      return w;
    }();
  }
  return *slot;
}

void BM_Place(benchmark::State& st, const char* policy_name) {
  World& w = world();
  core::Rng rng(7);
  PolicyContext ctx{w.frag.get(), &rng};
  auto policy = std::move(makePolicy(policy_name, ctx, *w.state)).value();
  Placer placer(*w.state, *policy);
  // Pre-draw tasks so the loop measures placement only.
  std::vector<model::TaskRequest> tasks;
  for (int i = 0; i < 4096; ++i) {
    tasks.push_back(drawTask(rng));
  }
  // Warm up: a scheduler that has been running has seen every request shape; the first
  // decision for a shape scores all 10,000 nodes, later ones only the nodes that changed.
  for (const model::TaskRequest& t : tasks) {
    Placer::Decision d = placer.place(t);
    if (d.placed) {
      placer.release(t, d.assignment);
    }
  }
  size_t i = 0;
  int64_t placed = 0;
  for (auto _ : st) {
    const model::TaskRequest& t = tasks[i++ % tasks.size()];
    Placer::Decision d = placer.place(t);
    if (d.placed) {
      ++placed;
      placer.release(t, d.assignment);
    }
  }
  st.counters["placements/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["placed_frac"] =
      static_cast<double>(placed) / static_cast<double>(std::max<int64_t>(1, st.iterations()));
  st.counters["gpus_used_pct"] =
      100.0 * static_cast<double>(w.state->usedGpuMilli()) /
      (1000.0 * static_cast<double>(w.state->nodeCount()) * kGpusPerNode);
}

// The first decision for a request shape never seen before: every node is filtered and scored.
void BM_ColdStart(benchmark::State& st, const char* policy_name) {
  World& w = world(static_cast<int>(st.range(0)));
  core::Rng rng(9);
  PolicyContext ctx{w.frag.get(), &rng};
  auto policy = std::move(makePolicy(policy_name, ctx, *w.state)).value();
  Placer placer(*w.state, *policy);
  int64_t n = 0;
  for (auto _ : st) {
    model::TaskRequest t = drawTask(rng);
    t.cpu = core::MilliCpu{1000 + n++};  // A new shape each time.
    benchmark::DoNotOptimize(placer.decide(t));
  }
  st.counters["decisions/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["classes"] = static_cast<double>(placer.classCount());
  st.counters["node_states"] = static_cast<double>(placer.stateCount());
  st.counters["cache_MiB"] = static_cast<double>(placer.cacheBytes()) / (1 << 20);
}

// A live server's stream: the mix's request shapes (about 600) from 1,000 tenants, each decision
// from a tenant drawn at random, none of them placed. What a decision costs depends on how often
// its class is new; `classes` and `cache_MiB` are what the placer holds at the end.
void BM_ManyTenants(benchmark::State& st, const char* policy_name) {
  World& w = world(static_cast<int>(st.range(0)));
  core::Rng rng(11);
  PolicyContext ctx{w.frag.get(), &rng};
  auto policy = std::move(makePolicy(policy_name, ctx, *w.state)).value();
  Placer placer(*w.state, *policy);
  for (auto _ : st) {
    model::TaskRequest t = drawTask(rng);
    t.tenant = model::TenantId{static_cast<uint32_t>(1 + rng.uniform(1000))};
    benchmark::DoNotOptimize(placer.decide(t));
  }
  st.counters["decisions/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.counters["classes"] = static_cast<double>(placer.classCount());
  st.counters["node_states"] = static_cast<double>(placer.stateCount());
  st.counters["cache_MiB"] = static_cast<double>(placer.cacheBytes()) / (1 << 20);
}

BENCHMARK_CAPTURE(BM_Place, fgd, "fgd")->Unit(benchmark::kMicrosecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Place, tessera, "tessera")->Unit(benchmark::kMicrosecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_Place, bestfit, "bestfit")->Unit(benchmark::kMicrosecond)->MinTime(2.0);
BENCHMARK_CAPTURE(BM_ColdStart, fgd, "fgd")
    ->Unit(benchmark::kMicrosecond)
    ->Arg(10000)
    ->Iterations(200);
BENCHMARK_CAPTURE(BM_ColdStart, tessera, "tessera")
    ->Unit(benchmark::kMicrosecond)
    ->Arg(10000)
    ->Iterations(200);
BENCHMARK_CAPTURE(BM_ColdStart, tessera, "tessera")
    ->Unit(benchmark::kMicrosecond)
    ->Arg(100000)
    ->Iterations(50);
BENCHMARK_CAPTURE(BM_ManyTenants, tessera, "tessera")
    ->Unit(benchmark::kMicrosecond)
    ->Arg(10000)
    ->Iterations(5000);
BENCHMARK_CAPTURE(BM_ManyTenants, tessera, "tessera")
    ->Unit(benchmark::kMicrosecond)
    ->Arg(100000)
    ->Iterations(1000);

}  // namespace
}  // namespace tessera::sched

BENCHMARK_MAIN();
