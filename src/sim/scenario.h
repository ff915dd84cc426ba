// Scenarios for `tessera sim scenario`: a cluster, a queue tree and workloads arriving over time,
// read from JSON.
//
//   {
//     "cluster": {"nodes": [{"profile": "dgx-h100", "count": 4},
//                           {"name": "x", "cpuMilli": 64000, "memoryMiB": 262144,
//                            "gpus": 8, "model": "A100-80GB", "count": 1}]},
//     "queues": [{"name": "org", "children": [
//         {"name": "a", "quota": {"gpu": 16}, "limit": {"gpu": 48}, "overQuotaWeight": 1,
//          "priority": 100, "maxUnsavedGpuTime": 3600}]}],
//     "workloads": [{"at": 0, "queue": "a", "name": "a-train", "tasks": 40, "minAvailable": 1,
//                    "gpu": {"count": 1}, "duration": 7200, "priority": 50,
//                    "preemptible": true}],
//     "options": {"policy": "tessera", "fairShare": true, "minRuntime": 0,
//                 "maxEvictionsPerPass": 64, "gracePeriod": 30, "usageHalfLife": 86400,
//                 "usageK": 1, "maxUnsavedGpuTime": 3600, "reclaimPatience": 0}
//   }
//
// Or, in place of "queues", tenants as the server keeps them (sched/tenant_queues.h), with the
// same fields as its API, so that `tessera sim scenario --through-api` can run the scenario
// through a real server and compare:
//   "tenants": [{"name": "team-1", "quota": {"gpu": 8}, "limit": {"gpu": 16}, "weight": 1,
//                "priority": 100, "trust_group": "lab",
//                "queues": [{"name": "research", "quota": {"gpu": 2}, "weight": 1}]}],
//   "workloads": [{"at": 0, "tenant": "team-1", "queue": "research", "name": "x", ...}]
// A workload then names its tenant and, optionally, a team queue ("default" if not), and its
// events name it "<tenant>/<name>", as the server does. Tenants may change while work runs,
// with the fields of the API's update (what is left out keeps its value; "trust_group": ""
// leaves the group), applied before the submissions of the same instant:
//   "tenantUpdates": [{"at": 3600, "tenant": "team-1", "quota": {"gpu": 2}, "trust_group": ""}]
//
// Nodes may carry labels ("labels": {"pool": "reserved", "zone": "a"}), workloads select them
// ("nodeSelector": {"pool": "reserved"}), and a tenant may have pools dedicated to it
// ("pools": ["reserved"]): as the server's nodes, workloads and `sys/pools` (docs/server.md).
//
// Amounts: "gpu" in GPUs (fractions allowed, kept in milli-GPU), "cpu" in cores or "cpuMilli",
// "memoryGiB" or "memoryMiB", and "gpu:<model>" for a per-model amount. Times in seconds.
// A workload may repeat: "repeat": {"count": 50, "every": 60} submits name-0 .. name-49.
// Every error names the file and the JSON path: "s.json: workloads[2].gpu.count: ...".
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"
#include "sched/queue_tree.h"
#include "sched/scheduler.h"
#include "sched/tenant_queues.h"
#include "sched/workload.h"

namespace tessera::sim {

struct ScenarioWorkload {
  sched::WorkloadSpec spec;  // spec.queue resolved; with tenants, spec.name is "tenant/name".
  // With tenants: the workload's tenant (its index + 1 is its TenantId), its name there, and its
  // fields as the API takes them (POST tenants/<tenant>/workloads/<name>).
  std::string tenant;
  std::string name;
  nlohmann::json body;
  core::Duration at{0};
  core::Duration duration{0};
  core::Duration grace_period{0};  // Time an evicted task takes to stop.
};

// A tenant of a scenario with tenants: its numbers, and the API bodies that create it and its
// team queues.
struct ScenarioTenant {
  std::string name;
  std::string trust_group;  // "": none.
  // Pools dedicated to it: only its tasks run on the nodes labelled pool=<name> ("pools").
  std::vector<std::string> pools;
  sched::GpuQueueNumbers numbers;
  nlohmann::json body;                                         // POST tenants/<name>
  std::vector<std::pair<std::string, nlohmann::json>> queues;  // POST tenants/<name>/queues/<q>
};

// A change of a tenant at a time (scenarios with tenants).
struct ScenarioTenantUpdate {
  core::Duration at{0};
  size_t tenant = 0;               // Index in Scenario::tenants.
  sched::GpuQueueNumbers numbers;  // All of them, after the change.
  std::string trust_group;         // After the change ("": none).
  nlohmann::json body;             // POST tenants/<name>, as given.
};

struct Scenario {
  model::GpuCatalogue catalogue;
  std::vector<model::Node> nodes;
  std::vector<sched::QueueSpec> queues;
  sched::ResourceSpace space;
  sched::SchedulerOptions options;
  core::Duration default_grace_period = std::chrono::seconds(30);
  std::vector<ScenarioWorkload> workloads;  // Sorted by arrival.
  // Non-empty: `queues` is the server's tree for these tenants, in this order (the root, then
  // each tenant's queue, default queue and team queues).
  std::vector<ScenarioTenant> tenants;
  std::vector<ScenarioTenantUpdate> tenant_updates;  // Sorted by time.
};

core::Result<Scenario> parseScenario(std::string_view json_text, const std::string& source);
core::Result<Scenario> readScenario(const std::string& path);

}  // namespace tessera::sim
