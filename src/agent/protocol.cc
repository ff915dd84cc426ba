#include "agent/protocol.h"

#include <filesystem>

#include "core/json_node.h"

namespace tessera::agent {

using nlohmann::json;

core::Result<TaskAssignment> assignmentFromJson(const json& task, const NodeGpus& gpus,
                                                const AssignmentOptions& options) {
  const std::string source = "assigned task";
  const core::JsonNode n(task, "", source);
  if (!task.is_object()) {
    return n.error("expected an object");
  }
  for (const char* required : {"task", "generation", "tenant", "workload", "index"}) {
    if (!n.has(required)) {
      return n.error(std::string("missing '") + required + "'");
    }
  }
  TaskAssignment a;
  TaskSpec& spec = a.spec;
  TESSERA_ASSIGN_OR_RETURN(spec.id, n.child("task").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t generation, n.child("generation").integer(0, UINT32_MAX));
  a.generation = static_cast<uint32_t>(generation);
  a.grace = options.grace;
  if (n.has("grace_ms")) {
    TESSERA_ASSIGN_OR_RETURN(const int64_t grace, n.child("grace_ms").integer(0, 3600000));
    a.grace = std::chrono::milliseconds(grace);
  }
  TESSERA_ASSIGN_OR_RETURN(spec.tenant, n.child("tenant").str());
  TESSERA_ASSIGN_OR_RETURN(spec.workload, n.child("workload").str());
  TESSERA_ASSIGN_OR_RETURN(const int64_t index, n.child("index").integer(0, INT32_MAX));
  spec.index = static_cast<int>(index);
  try {
    if (n.has("command")) {
      spec.command = task.at("command").get<std::vector<std::string>>();
    }
    if (n.has("env")) {
      spec.env = task.at("env").get<std::map<std::string, std::string>>();
    }
  } catch (const json::exception& e) {
    return n.error(std::string("command or env: ") + e.what());
  }
  if (n.has("credentials_error")) {
    // The server could not resolve what the task needs (its secrets): it must not start.
    TESSERA_ASSIGN_OR_RETURN(const std::string why, n.child("credentials_error").str());
    return core::failedPrecondition("task " + spec.id + ": " + why.substr(0, 1024));
  }
  if (n.has("credentials")) {
    const json& files = task.at("credentials");
    if (!files.is_object() || files.size() > 64) {
      return n.error("credentials: expected an object of at most 64 files");
    }
    for (const auto& [name, content] : files.items()) {
      if (!content.is_string()) {
        return n.error("credentials: '" + name + "' is not a string");
      }
      a.credentials[name] = content.get<std::string>();
    }
  }
  if (spec.command.empty()) {
    const int64_t duration = task.value("duration_s", int64_t{0});
    spec.command = {"sleep", duration > 0 ? std::to_string(duration) : "infinity"};
  }
  if (n.has("mig_profile")) {
    return core::failedPrecondition("task " + spec.id +
                                    ": MIG slices are not run by agents yet (docs/agent.md)");
  }
  std::vector<int> indexes;
  if (n.has("gpus")) {
    try {
      indexes = task.at("gpus").get<std::vector<int>>();
    } catch (const json::exception& e) {
      return n.error(std::string("gpus: ") + e.what());
    }
  }
  const int64_t milli = task.value("milli_per_gpu", int64_t{1000});
  const bool shared = milli > 0 && milli < 1000;
  const std::string isolation = task.value("isolation", "hardware");
  const int64_t gpu_memory = task.value("gpu_memory_mib", int64_t{0});
  GpuPinning& pin = spec.gpus;
  for (int i : indexes) {
    if (i < 0 || static_cast<size_t>(i) >= gpus.gpus.size()) {
      return core::failedPrecondition("task " + spec.id + ": GPU " + std::to_string(i) +
                                      " is not on this node (it has " +
                                      std::to_string(gpus.gpus.size()) + ")");
    }
    const Gpu& g = gpus.gpus[static_cast<size_t>(i)];
    pin.uuids.push_back(g.uuid);
    if (!options.device_dir.empty()) {
      spec.device_nodes.push_back(options.device_dir + "/nvidia" +
                                  std::to_string(g.minor >= 0 ? g.minor : g.index));
    }
    if (shared) {
      pin.memory_limit_mib = gpu_memory > 0 ? gpu_memory : g.memory_mib * milli / 1000;
    }
  }
  if (!indexes.empty()) {
    // A share of a GPU: an MPS client capped to its share of the SMs and memory (the agent
    // starts the daemon, MpsRuntime), unless it asked for no isolation: time slicing, where
    // only the interposer's variables say what it should keep to.
    pin.mode = !shared               ? GpuPinning::Mode::kWhole
               : isolation == "none" ? GpuPinning::Mode::kFractional
                                     : GpuPinning::Mode::kMps;
    pin.compute_share_percent = static_cast<int>(std::clamp<int64_t>(milli / 10, 1, 100));
    if (pin.mode == GpuPinning::Mode::kMps) {
      pin.mps_thread_percentage = pin.compute_share_percent;
      pin.mps_memory_limit_mib = pin.memory_limit_mib;
    }
    if (!options.device_dir.empty()) {
      // What every CUDA process opens besides its GPUs.
      for (const char* shared : {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}) {
        const std::string path = options.device_dir + "/" + shared;
        std::error_code ec;
        if (std::filesystem::exists(path, ec)) {
          spec.device_nodes.push_back(path);
        }
      }
    }
  }
  spec.limits.cpu_milli = task.value("cpu_milli", int64_t{0});
  spec.limits.memory_mib = task.value("memory_mib", int64_t{0});
  spec.limits.restrict_devices = true;
  return a;
}

json reportToJson(const TaskReport& report) {
  json r = {{"task", report.id}, {"generation", report.generation}};
  switch (report.state) {
    case TaskReport::State::kRunning:
      r["state"] = "running";
      break;
    case TaskReport::State::kExited:
      r["state"] = "exited";
      r["exit_code"] = report.exit.exit_code;
      r["signal"] = report.exit.signal;
      r["oom_killed"] = report.exit.oom_killed;
      r["stopped"] = report.exit.stopped;
      r["run_time_ms"] = report.exit.run_time.count();
      break;
    case TaskReport::State::kFailedToStart:
      r["state"] = "failed_to_start";
      r["error"] = report.error;
      break;
  }
  return r;
}

}  // namespace tessera::agent
