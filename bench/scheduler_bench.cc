// Scheduling-pass cost at scale: 10,000 DGX H100 nodes (80,000 GPUs), 500 leaf queues
// (50 tenants x 10 teams), the cluster full of running work, and 100,000 more tasks pending.
//   BM_FullPass:        a pass after the 100,000 tasks arrived with every standing verdict
//                       dropped (Scheduler::forgetVerdicts): every queue and bucket of pending
//                       work considered, fair share recomputed, as after a restart.
//   BM_IncrementalPass: a pass after 100 running tasks completed, on a world that first ran an
//                       hour of such passes (every 10 s of cluster time) untimed.
//   BM_BusyPass:        a pass after 1,000 running tasks completed and 1,000 new tasks arrived:
//                       about a thousand placements in one pass.
//   BM_ReclaimPass:     a pass after the 50 queues furthest below their fair share each got one
//                       more 1-GPU job: reclaim searches for victims for up to 16 of them.
//   BM_ConsolidationPass: only work of whole nodes left pending (the rest is cancelled, once),
//                       then each pass after 1,000 completions: the free GPUs are scattered,
//                       the 8-GPU work fits nowhere though the free room would hold it, and
//                       consolidation looks for tasks to move.
//   BM_IncrementalPass/N: the incremental pass on N nodes (same queues, the same mix of work,
//                       the cluster full and 10 pending tasks per node), to see how it scales.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "core/clock.h"
#include "core/rng.h"
#include "model/node_profiles.h"
#include "sched/scheduler.h"

namespace tessera::sched {
namespace {

constexpr int kDefaultNodes = 10000;
constexpr int kTenants = 50;
constexpr int kTeams = 10;

struct World {
  model::GpuCatalogue catalogue = model::GpuCatalogue::builtin();
  core::FakeClock clock;
  std::unique_ptr<Scheduler> s;
  std::vector<TaskId> running;
  std::vector<QueueId> leaves;
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

// A full cluster of `nodes` nodes with 10 pending tasks per node; built once per size.
World& world(int node_count = kDefaultNodes) {
  static std::map<int, World*> worlds;
  World*& slot = worlds[node_count];
  if (slot != nullptr) {
    return *slot;
  }
  slot = [node_count] {
    auto* w = new World();
    const int per_round = 4000 * std::max(1, node_count / kDefaultNodes);
    std::vector<model::Node> nodes;
    for (int i = 0; i < node_count; ++i) {
      nodes.push_back(
          *model::makeProfileNode("dgx-h100", "n" + std::to_string(i), w->catalogue, i));
    }
    ResourceSpace space = ResourceSpace::withModels(w->catalogue, {});
    std::vector<QueueSpec> specs = {{"org", "", {}, {}, 1, 100}};
    for (int t = 0; t < kTenants; ++t) {
      specs.push_back({"t" + std::to_string(t), "org", {}, {}, 1, 100});
      for (int k = 0; k < kTeams; ++k) {
        Amounts quota = space.zeros();
        quota[kGpuDim] = 16LL * node_count;  // 500 x 16 x nodes milli-GPU: every GPU.
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
    std::vector<QueueId>& leaves = w->leaves;
    for (QueueId q = 0; q < w->s->queues().size(); ++q) {
      if (w->s->queues().queue(q).isLeaf()) {
        leaves.push_back(q);
      }
    }
    // Fill the cluster: submit until a pass starts nothing more.
    int n = 0;
    for (int round = 0; round < 50; ++round) {
      for (int i = 0; i < per_round; ++i) {
        (void)w->s->submit(drawWorkload(*w, leaves[w->rng.uniform(leaves.size())], n++));
      }
      PassResult r = w->s->schedule();
      for (const StartDecision& d : r.started) {
        w->running.push_back(d.task);
      }
      if (w->s->cluster().usedGpuMilli() > int64_t{node_count} * 7900) {
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
    while (tasks < 10 * node_count) {
      WorkloadSpec spec = drawWorkload(*w, leaves[w->rng.uniform(leaves.size())], n++);
      tasks += spec.tasks;
      (void)w->s->submit(spec);
    }
    return w;
  }();
  return *slot;
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
      100.0 * static_cast<double>(w.s->cluster().usedGpuMilli()) / (1000.0 * kDefaultNodes * 8);
}

// Ends `count` random running tasks of `w`.
void complete(World& w, int count) {
  for (int i = 0; i < count && !w.running.empty(); ++i) {
    const size_t k = w.rng.uniform(w.running.size());
    if (w.s->task(w.running[k]).state == TaskState::kRunning) {
      w.s->taskFinished(w.running[k]);
    }
    w.running[k] = w.running.back();
    w.running.pop_back();
  }
}

// Stops the tasks a pass evicted (their grace period over), so the next pass sees them pending.
void stopEvicted(World& w, const PassResult& r) {
  for (const EvictDecision& e : r.evicted) {
    w.s->taskStopped(e.task);
  }
}

// A timed pass that counts what it started and evicted, then stops the tasks it evicted.
PassResult countedPass(World& w, benchmark::State& st) {
  PassResult r = timedPass(w, st);
  st.counters["started"] = static_cast<double>(r.started.size());
  st.counters["evicted"] = static_cast<double>(r.evicted.size());
  stopEvicted(w, r);
  return r;
}

// The steady pass: 100 completions every 10 s. The world first runs an hour of such passes
// untimed (once per size), so that its tasks' ages and unsaved work are spread as in a cluster
// that has been running: fresh from the fill, every task is seconds old and a cheap victim, and
// the first passes after it are not the steady state.
void BM_IncrementalPass(benchmark::State& st) {
  World& w = world(st.range(0));
  static std::map<int, bool> warmed;
  if (!warmed[st.range(0)]) {
    warmed[st.range(0)] = true;
    for (int i = 0; i < 360; ++i) {
      w.clock.advance(std::chrono::seconds(10));
      complete(w, 100);
      const PassResult r = w.s->schedule();
      for (const StartDecision& d : r.started) {
        w.running.push_back(d.task);
      }
      stopEvicted(w, r);
    }
  }
  for (auto _ : st) {
    st.PauseTiming();
    w.clock.advance(std::chrono::seconds(10));
    complete(w, 100);
    st.ResumeTiming();
    countedPass(w, st);
  }
}

void BM_BusyPass(benchmark::State& st) {
  World& w = world();
  int n = 1'000'000;
  for (auto _ : st) {
    st.PauseTiming();
    w.clock.advance(std::chrono::seconds(10));
    complete(w, 1000);
    for (int tasks = 0; tasks < 1000;) {
      WorkloadSpec spec = drawWorkload(w, w.leaves[w.rng.uniform(w.leaves.size())], n++);
      tasks += spec.tasks;
      (void)w.s->submit(spec);
    }
    st.ResumeTiming();
    countedPass(w, st);
  }
}

void BM_ReclaimPass(benchmark::State& st) {
  World& w = world();
  int n = 2'000'000;
  for (auto _ : st) {
    st.PauseTiming();
    w.clock.advance(std::chrono::seconds(10));
    // The 50 leaves furthest below their fair share (GPU), one more 1-GPU job each.
    std::vector<std::pair<double, QueueId>> below;
    for (QueueId q = 0; q < w.s->queues().size(); ++q) {
      const Queue& queue = w.s->queues().queue(q);
      if (queue.isLeaf() && queue.fair_share[kGpuDim] > 0) {
        below.emplace_back(static_cast<double>(queue.allocated[kGpuDim]) /
                               static_cast<double>(queue.fair_share[kGpuDim]),
                           q);
      }
    }
    std::sort(below.begin(), below.end());
    for (size_t i = 0; i < std::min<size_t>(50, below.size()); ++i) {
      WorkloadSpec spec = drawWorkload(w, below[i].second, n++);
      spec.tasks = 1;
      spec.min_available = 1;
      spec.request.gpu_count = 1;
      spec.request.gpu_milli = core::kWholeGpu;
      spec.request.isolation = model::Isolation::kHardware;
      (void)w.s->submit(spec);
    }
    st.ResumeTiming();
    countedPass(w, st);
  }
}

void BM_ConsolidationPass(benchmark::State& st) {
  World& w = world();
  for (WorkloadId id = 0; id < w.s->workloadCount(); ++id) {
    const WorkloadInfo& info = w.s->workload(id);
    if (info.pending > 0 && info.spec.request.gpu_count < 8) {
      w.s->cancel(id);
    }
  }
  for (auto _ : st) {
    st.PauseTiming();
    w.clock.advance(std::chrono::seconds(10));
    complete(w, 1000);
    st.ResumeTiming();
    const PassResult r = countedPass(w, st);
    st.counters["moved"] = static_cast<double>(
        std::count_if(r.evicted.begin(), r.evicted.end(), [](const auto& e) { return e.moved; }));
    st.counters["free_gpus"] =
        static_cast<double>(1000LL * w.s->cluster().totalGpus() - w.s->cluster().usedGpuMilli()) /
        1000.0;
  }
}

BENCHMARK(BM_FullPass)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IncrementalPass)
    ->Arg(kDefaultNodes)
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BusyPass)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ReclaimPass)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ConsolidationPass)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IncrementalPass)
    ->Arg(50000)
    ->Arg(100000)
    ->Iterations(20)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::sched

BENCHMARK_MAIN();
