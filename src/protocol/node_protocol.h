// The node protocol (docs/agent.md, "The node protocol"), once: the messages the server and its
// agents exchange, as types, and the one JSON codec both sides use. A layer of its own below
// src/server and src/agent, so neither writes the other's JSON by hand.
//
//   server: json task = toJson(AssignedTask{...});           // an entry of a heartbeat answer
//           auto report = reportFromJson(agent_json["reports"][i], "reports[0]", source);
//   agent:  auto task = assignedTaskFromJson(answer["tasks"][i]);
//           json report = toJson(TaskReport{...});
//
// Decoding checks every field's type and range and names the field in its error; unknown fields
// of a task are ignored (a newer server may send more), unknown fields of a report are refused.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::protocol {

// A folder mounted in a task's container (a Kubernetes pod's secret, configMap or emptyDir
// volume; docs/agent.md "Volumes"): `files` (relative path -> content, written by the agent
// into the task's credentials folder and bound read-only at `path`), or an empty tmpfs of at most
// `size_mib` (0: no limit but the task's memory) when `tmpfs`.
struct TaskVolume {
  std::string path;                          // Absolute, in the container (isMountPath).
  std::map<std::string, std::string> files;  // By isVolumeFilePath.
  bool tmpfs = false;
  int64_t size_mib = 0;
  bool operator==(const TaskVolume&) const = default;
};

// One task as the server hands it to its node's agent (an entry of a heartbeat answer's
// "tasks").
struct AssignedTask {
  std::string id;  // "<tenant>.<workload>.<index>": unique on the node, a plain file name.
  uint32_t generation = 0;
  std::string tenant;
  std::string workload;
  int index = 0;
  std::vector<std::string> command;  // Empty: none given (the agent runs a placeholder).
  std::map<std::string, std::string> env;
  // A container's image reference ("" : a plain process), its /dev/shm size in MiB (0: the
  // runtime's default) and whether its root filesystem is read-only.
  std::string image;
  int64_t shm_mib = 0;
  bool read_only_rootfs = false;
  std::vector<int> gpus;       // Device indexes on the node.
  int64_t milli_per_gpu = 0;   // 1000: whole GPUs (0 when it has none).
  std::string isolation;       // hardware, process (MPS when shared) or none (time slicing).
  int64_t gpu_memory_mib = 0;  // Per GPU, its share's cap when shared; 0: the share's part.
  // A time-sliced share's burst limit: the most of the GPU it may use while the GPU has time no
  // share is guaranteed (milli, > milli_per_gpu); 0: none.
  int64_t milli_limit_per_gpu = 0;
  int mig_profile = -1;  // Catalogue profile index when the task has a MIG slice,
  int mig_start = -1;    // and the slice it starts at on its GPU.
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int64_t duration_s = 0;    // The workload's `duration` (for the placeholder), 0: none.
  int64_t grace_ms = 30000;  // SIGTERM to SIGKILL when the agent stops it.
  // Files for the task's credentials folder (identity token, secrets.json), by name.
  std::map<std::string, std::string> credentials;
  // Set: the server could not resolve what the task needs; the agent must not start it.
  std::string credentials_error;
  // A registry image's pull secret, for the image's registry only (docs/agent.md "Images from
  // registries"): the agent keeps it in memory for the pull, never in a file or the task's view.
  std::string pull_username;
  std::string pull_password;
  // Rendezvous (docs/agent.md "Distributed training"): how many tasks the workload has, each
  // one's node address in index order ("" for a task not placed when this one started), the
  // ports allocated to this task on its node by name, and task 0's "master" port (0: none).
  int task_count = 1;
  std::vector<std::string> hosts;
  std::map<std::string, int> ports;
  int master_port = 0;
  std::vector<TaskVolume> volumes;  // Its container's (none for a plain process).
};

// Whether `path` may be a volume's mount point: absolute, at most 1,024 bytes, without empty,
// "." or ".." components, and outside what the runtime mounts (/proc, /sys, /dev but /dev/shm).
bool isMountPath(std::string_view path);
// Whether `path` may name a file in a volume: relative, at most 253 bytes, components of
// [-._a-zA-Z0-9] none of which is "." or starts with "..".
bool isVolumeFilePath(std::string_view path);

// Whether `name` may name a port ("master", "http"): 1 to 32 of [a-z0-9_-], starting with a
// letter. Its variable is TESSERA_PORT_<NAME> (upper case, '-' as '_').
bool isPortName(std::string_view name);

// What an agent says happened to one of its tasks.
struct TaskReport {
  // kStarting: not running yet, with what it waits for (`progress`).
  enum class State { kRunning, kExited, kFailedToStart, kStarting };
  std::string task;
  uint32_t generation = 0;
  State state = State::kRunning;
  int exit_code = -1;  // kExited: >= 0 when it exited, else `signal` ended it.
  int signal = 0;
  bool oom_killed = false;
  bool stopped = false;  // The agent stopped it (evicted, cancelled, fenced).
  int64_t run_time_ms = 0;
  std::string error;     // kFailedToStart (at most 1 KiB is kept).
  std::string progress;  // kStarting: "pulling image (312 MB of 1.2 GB)" (at most 256 bytes).
};

nlohmann::json toJson(const AssignedTask& task);
// `where` names the task in errors ("tasks[2]"), `source` the message ("heartbeat answer").
core::Result<AssignedTask> assignedTaskFromJson(const nlohmann::json& json,
                                                const std::string& where,
                                                const std::string& source);

nlohmann::json toJson(const TaskReport& report);
core::Result<TaskReport> reportFromJson(const nlohmann::json& json, const std::string& where,
                                        const std::string& source);

}  // namespace tessera::protocol
