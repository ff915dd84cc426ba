// The agent's side of the node protocol's JSON (docs/agent.md, "The node protocol"): a task the
// server assigns becomes a `TaskAssignment` the runtime can start, and a `TaskReport` becomes
// the JSON the server reads.
//
//   auto a = assignmentFromJson(task_json, gpus, {.device_dir = "/dev"});
//   json r = reportToJson(report);
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "agent/agent.h"
#include "agent/gpu_discovery.h"
#include "core/status.h"

namespace tessera::agent {

struct AssignmentOptions {
  // Where the GPUs' device nodes are: GPU i's is <device_dir>/nvidia<minor> (its index when the
  // minor is unknown), and a task may open only its own (plus nvidiactl and nvidia-uvm when
  // they exist there). "" : the GPUs have no device nodes (simulated): a task may open none.
  std::string device_dir = "/dev";
  // SIGTERM to SIGKILL when the task is stopped, unless the task says (grace_ms: the
  // workload's gracePeriod).
  std::chrono::milliseconds grace{10000};
  // libtessera-cuda.so, preloaded into tasks on a time-sliced share of a GPU to hold them to
  // its memory and compute ("" : none). Without it such a task is refused when
  // `require_interposer` (a node with real GPUs: its limits would hold nothing), and runs with
  // the limits' variables alone otherwise (simulated GPUs).
  std::string interposer;
  bool require_interposer = false;
  // Processes and threads each task may have at once (the pids cgroup); 0: no limit.
  int64_t pids_max = 0;
};

// One entry of a heartbeat answer's "tasks". GPU indexes become the node's UUIDs (an index the
// node does not have is an error: the server and the agent disagree about the node). A task
// without a command runs `sleep <duration_s>` (or `sleep infinity`), as on simulated nodes.
// The user is left empty (the caller maps the tenant to one).
core::Result<TaskAssignment> assignmentFromJson(const nlohmann::json& task, const NodeGpus& gpus,
                                                const AssignmentOptions& options);

nlohmann::json reportToJson(const TaskReport& report);

}  // namespace tessera::agent
