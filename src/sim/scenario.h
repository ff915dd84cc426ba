// Scenarios for `tessera sim scenario`: a cluster, a queue tree and workloads arriving over time,
// read from JSON.
//
//   {
//     "cluster": {"nodes": [{"profile": "dgx-h100", "count": 4},
//                           {"name": "x", "cpuMilli": 64000, "memoryMiB": 262144,
//                            "gpus": 8, "model": "A100-80GB", "count": 1}]},
//     "queues": [{"name": "org", "children": [
//         {"name": "a", "quota": {"gpu": 16}, "limit": {"gpu": 48}, "overQuotaWeight": 1,
//          "priority": 100}]}],
//     "workloads": [{"at": 0, "queue": "a", "name": "a-train", "tasks": 40, "minAvailable": 1,
//                    "gpu": {"count": 1}, "duration": 7200, "priority": 50,
//                    "preemptible": true}],
//     "options": {"policy": "tessera", "fairShare": true, "minRuntime": 0,
//                 "maxEvictionsPerPass": 64, "gracePeriod": 30, "usageHalfLife": 86400,
//                 "usageK": 1}
//   }
//
// Amounts: "gpu" in GPUs (fractions allowed, kept in milli-GPU), "cpu" in cores or "cpuMilli",
// "memoryGiB" or "memoryMiB", and "gpu:<model>" for a per-model amount. Times in seconds.
// A workload may repeat: "repeat": {"count": 50, "every": 60} submits name-0 .. name-49.
// Every error names the file and the JSON path: "s.json: workloads[2].gpu.count: ...".
#pragma once

#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "sched/queue_tree.h"
#include "sched/scheduler.h"
#include "sched/workload.h"

namespace tessera::sim {

struct ScenarioWorkload {
  sched::WorkloadSpec spec;  // spec.queue resolved.
  core::Duration at{0};
  core::Duration duration{0};
  core::Duration checkpoint_every{0};  // 0: a preempted task restarts from zero.
  core::Duration grace_period{0};      // Time an evicted task takes to stop.
};

struct Scenario {
  model::GpuCatalogue catalogue;
  std::vector<model::Node> nodes;
  std::vector<sched::QueueSpec> queues;
  sched::ResourceSpace space;
  sched::SchedulerOptions options;
  core::Duration default_grace_period = std::chrono::seconds(30);
  std::vector<ScenarioWorkload> workloads;  // Sorted by arrival.
};

core::Result<Scenario> parseScenario(std::string_view json_text, const std::string& source);
core::Result<Scenario> readScenario(const std::string& path);

}  // namespace tessera::sim
