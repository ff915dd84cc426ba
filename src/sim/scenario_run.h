// Time-driven simulation of a scenario: workloads arrive, run for their duration, are evicted
// and restart (from zero or their last checkpoint), and the scheduler runs a pass whenever
// something happened. Virtual time; nothing sleeps.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "sim/scenario.h"

namespace tessera::sim {

struct SimEvent {
  double time_s = 0;
  std::string event;  // submit, start, finish, evict, fail
  std::string workload;
  int task = -1;  // Index in its workload; -1 for workload events.
  std::string queue;
  std::string node;
  std::string detail;
};

// One row per leaf queue whenever one of its numbers changed.
struct TenantRow {
  double time_s = 0;
  std::string queue;
  int64_t allocated_milli_gpu = 0;
  int64_t fair_share_milli_gpu = 0;
  int64_t quota_milli_gpu = 0;
  int64_t pending_tasks = 0;
};

struct QueueSummary {
  std::string name;
  int jobs_completed = 0;
  double mean_jct_s = 0;
  double p95_jct_s = 0;
  double gpu_seconds = 0;
  int tasks_evicted = 0;
  double lost_gpu_seconds = 0;    // Work its evicted tasks lost (run since their last checkpoint).
  double useful_gpu_seconds = 0;  // Work its finished tasks did (their duration, per GPU).
  // Episodes where the queue demanded at least part of its quota and held less: how long until
  // it held it again.
  int quota_episodes = 0;
  double max_time_to_quota_s = 0;
  double mean_time_to_quota_s = 0;
};

struct ScenarioResult {
  std::vector<SimEvent> events;
  std::vector<TenantRow> tenants;
  std::vector<QueueSummary> queues;  // Leaf queues in declaration order.
  double makespan_s = 0;
  double utilisation = 0;  // GPU-seconds allocated / (GPUs x makespan).
  double mean_jain = 0;    // Time-weighted Jain index of allocated / fair share over leaf queues.
  int evictions = 0;
  double lost_gpu_seconds = 0;    // Over all queues: work thrown away by evictions,
  double useful_gpu_seconds = 0;  // and work done by tasks that finished.
  double goodput = 0;             // useful GPU-seconds / (GPUs x makespan).
  int passes = 0;
  int failed_workloads = 0;
};

using ScenarioProgress = std::function<void(size_t done, size_t total)>;

// The task shapes the scheduler expects: every task of every workload of the scenario.
std::vector<sched::PodShape> typicalShapes(const Scenario& scenario);

core::Result<ScenarioResult> runScenario(const Scenario& scenario,
                                         const ScenarioProgress& progress = {});

// Writes tenants.csv, events.csv and summary.json into `dir`.
core::Status writeScenarioOutputs(const ScenarioResult& result, const std::string& dir);

}  // namespace tessera::sim
