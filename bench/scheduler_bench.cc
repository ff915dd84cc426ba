// Scheduling-pass cost at scale: 10,000 DGX H100 nodes (80,000 GPUs), 500 leaf queues
// (50 tenants x 10 teams), the cluster full of running work, and 100,000 more tasks pending.
//   BM_FullPass:        a pass after the 100,000 tasks arrived with every standing verdict
//                       dropped (Scheduler::forgetVerdicts): every queue and bucket of pending
//                       work considered, fair share recomputed, as after a restart.
//   BM_IncrementalPass: a pass after 100 running tasks completed.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <chrono>
#include <memory>

#include "core/clock.h"
#include "core/rng.h"
#include "model/node_profiles.h"
#include "sched/scheduler.h"

namespace tessera::sched {
namespace {

constexpr int kNodes = 10000;
constexpr int kTenants = 50;
constexpr int kTeams = 10;

struct World {
  model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  core::FakeClock clock;
  std::unique_ptr<Scheduler> s;
  std::vector<TaskId> running;
  core::Rng rng{5};
};

WorkloadSpec drawWorkload(World& w, QueueId queue, int n) {
  WorkloadSpec spec;
  spec.name = fmt::format("w{}", n);  // "w" + to_string(n) trips a GCC 12 -Wrestrict false alarm.
  spec.queue = queue;
  spec.request.cpu = core::MilliCpu{8000};
  spec.request.memory = core::MiB{65536};
  const uint64_t kind = w.rng.uniform(100);
  if (kind < 60) {
    spec.request.gpu_count = 1;
    spec.request.gpu_milli = core::kWholeGpu;
  } else if (kind < 75) {
    spec.request.gpu_count = 1;
    spec.request.gpu_milli = core::MilliGpu{250};
    spec.request.isolation = model::Isolation::kProcess;
  } else if (kind < 95) {
    spec.request.gpu_count = 8;
    spec.request.gpu_milli = core::kWholeGpu;
  } else {
    spec.tasks = 4;
    spec.min_available = 4;
    spec.request.gpu_count = 8;
    spec.request.gpu_milli = core::kWholeGpu;
  }
  return spec;
}

World& world() {
  static World* w = [] {
    auto* w = new World();
    std::vector<model::Node> nodes;
    for (int i = 0; i < kNodes; ++i) {
      nodes.push_back(
          *model::makeProfileNode("dgx-h100", "n" + std::to_string(i), w->catalogue, i));
    }
    ResourceSpace space = ResourceSpace::withModels(w->catalogue, {});
    std::vector<QueueSpec> specs = {{"org", "", {}, {}, 1, 100}};
    for (int t = 0; t < kTenants; ++t) {
      specs.push_back({"t" + std::to_string(t), "org", {}, {}, 1, 100});
      for (int k = 0; k < kTeams; ++k) {
        Amounts quota = space.zeros();
        quota[kGpuDim] = 160 * 1000;  // 500 x 160 = 80,000 GPUs.
        specs.push_back({"t" + std::to_string(t) + "-" + std::to_string(k),
                         "t" + std::to_string(t),
                         quota,
                         {},
                         1 + k % 3,
                         100});
      }
    }
    auto tree = QueueTree::create(space, specs);
    SchedulerOptions options;
    options.policy = "bestfit";
    w->s = std::move(Scheduler::create(w->catalogue, std::move(nodes), std::move(tree).value(), {},
                                       options, w->clock))
               .value();
    std::vector<QueueId> leaves;
    for (QueueId q = 0; q < w->s->queues().size(); ++q) {
      if (w->s->queues().queue(q).isLeaf()) {
        leaves.push_back(q);
      }
    }
    // Fill the cluster: submit until a pass starts nothing more.
    int n = 0;
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < 4000; ++i) {
        (void)w->s->submit(drawWorkload(*w, leaves[w->rng.uniform(leaves.size())], n++));
      }
      PassResult r = w->s->schedule();
      for (const StartDecision& d : r.started) {
        w->running.push_back(d.task);
      }
      if (w->s->cluster().usedGpuMilli() > 79000LL * 1000) {
        break;
      }
    }
    // Drain what is still pending from filling, then add 100,000 pending tasks.
    for (WorkloadId id = 0; id < w->s->workloadCount(); ++id) {
      if (w->s->workload(id).pending > 0 && w->s->workload(id).running == 0) {
        w->s->cancel(id);
      }
    }
    w->s->schedule();
    int tasks = 0;
    while (tasks < 100000) {
      WorkloadSpec spec = drawWorkload(*w, leaves[w->rng.uniform(leaves.size())], n++);
      tasks += spec.tasks;
      (void)w->s->submit(spec);
    }
    return w;
  }();
  return *w;
}

// Runs one pass, reports its wall time to `st` and remembers what started.
PassResult timedPass(World& w, benchmark::State& st) {
  const auto start = std::chrono::steady_clock::now();
  PassResult r = w.s->schedule();
  st.SetIterationTime(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  for (const StartDecision& d : r.started) {
    w.running.push_back(d.task);
  }
  return r;
}

void BM_FullPass(benchmark::State& st) {
  World& w = world();
  for (auto _ : st) {
    w.s->forgetVerdicts();
    PassResult r = timedPass(w, st);
    st.counters["started"] = static_cast<double>(r.started.size());
    st.counters["evicted"] = static_cast<double>(r.evicted.size());
  }
  st.counters["gpus_used_pct"] =
      100.0 * static_cast<double>(w.s->cluster().usedGpuMilli()) / (1000.0 * kNodes * 8);
}

void BM_IncrementalPass(benchmark::State& st) {
  World& w = world();
  for (auto _ : st) {
    st.PauseTiming();
    w.clock.advance(std::chrono::seconds(10));
    for (int i = 0; i < 100 && !w.running.empty(); ++i) {
      const size_t k = w.rng.uniform(w.running.size());
      w.s->taskFinished(w.running[k]);
      w.running[k] = w.running.back();
      w.running.pop_back();
    }
    st.ResumeTiming();
    PassResult r = timedPass(w, st);
    st.counters["started"] = static_cast<double>(r.started.size());
  }
}

BENCHMARK(BM_FullPass)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IncrementalPass)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::sched

BENCHMARK_MAIN();
