#include "agent/protocol.h"

#include <filesystem>

#include "protocol/node_protocol.h"

namespace tessera::agent {

using nlohmann::json;

core::Result<TaskAssignment> assignmentFromJson(const json& task, const NodeGpus& gpus,
                                                const AssignmentOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(const protocol::AssignedTask t,
                           protocol::assignedTaskFromJson(task, "", "assigned task"));
  TaskAssignment a;
  TaskSpec& spec = a.spec;
  spec.id = t.id;
  a.generation = t.generation;
  a.grace = t.grace_ms >= 0 ? std::chrono::milliseconds(t.grace_ms) : options.grace;
  spec.tenant = t.tenant;
  spec.workload = t.workload;
  spec.index = t.index;
  spec.command = t.command;
  spec.env = t.env;
  if (!t.credentials_error.empty()) {
    // The server could not resolve what the task needs (its secrets): it must not start.
    return core::failedPrecondition("task " + spec.id + ": " + t.credentials_error);
  }
  a.credentials = t.credentials;
  a.volumes = t.volumes;
  if (!t.volumes.empty() && t.image.empty()) {
    a.invalid = "volumes are mounted in containers, and this task has no image";
  }
  spec.rendezvous.task_count = t.task_count;
  spec.rendezvous.hosts = t.hosts;
  spec.rendezvous.ports = t.ports;
  spec.rendezvous.master_port = t.master_port;
  spec.rendezvous.slots = std::max<int>(1, static_cast<int>(t.gpus.size()));
  spec.container.image = t.image;
  spec.container.shm_mib = t.shm_mib;
  spec.container.read_only_rootfs = t.read_only_rootfs;
  spec.container.pull_credentials = {t.pull_username, t.pull_password};
  // A container without a command runs its image's entrypoint.
  if (spec.command.empty() && spec.container.image.empty()) {
    spec.command = {"sleep", t.duration_s > 0 ? std::to_string(t.duration_s) : "infinity"};
  }
  const bool mig = t.mig_profile >= 0;
  if (mig) {
    if (t.gpus.size() != 1 || t.mig_start < 0) {
      return core::invalidArgument("task " + spec.id +
                                   ": a MIG slice needs one GPU and its start slice");
    }
    a.mig.gpu = t.gpus[0];
    a.mig.instance = {t.mig_profile, t.mig_start};
  }
  const std::vector<int>& indexes = t.gpus;
  const int64_t milli = t.milli_per_gpu;
  const bool shared = !mig && milli > 0 && milli < 1000;
  const std::string& isolation = t.isolation;
  const int64_t gpu_memory = t.gpu_memory_mib;
  GpuPinning& pin = spec.gpus;
  for (int i : indexes) {
    if (i < 0 || static_cast<size_t>(i) >= gpus.gpus.size()) {
      return core::failedPrecondition("task " + spec.id + ": GPU " + std::to_string(i) +
                                      " is not on this node (it has " +
                                      std::to_string(gpus.gpus.size()) + ")");
    }
    const Gpu& g = gpus.gpus[static_cast<size_t>(i)];
    pin.uuids.push_back(g.uuid);
    const std::string node = "nvidia" + std::to_string(g.minor >= 0 ? g.minor : g.index);
    if (!options.device_dir.empty()) {
      spec.device_nodes.push_back(options.device_dir + "/" + node);
    } else if (!spec.container.image.empty()) {
      // A simulated GPU in a container: a stand-in file where its device node would be.
      spec.container.simulated_devices.emplace_back("/dev/" + node, g.uuid);
    }
    if (shared) {
      pin.memory_limit_mib = gpu_memory > 0 ? gpu_memory : g.memory_mib * milli / 1000;
    }
  }
  if (!indexes.empty()) {
    // A share of a GPU: an MPS client capped to its share of the SMs and memory (the agent
    // starts the daemon, MpsRuntime), unless it asked for no isolation: time slicing, where
    // only the interposer's variables say what it should keep to.
    pin.mode = mig                   ? GpuPinning::Mode::kMig
               : !shared             ? GpuPinning::Mode::kWhole
               : isolation == "none" ? GpuPinning::Mode::kFractional
                                     : GpuPinning::Mode::kMps;
    if (mig) {
      // Its MIG device's UUID, and the capability nodes of its instance (nvidia-caps), once the
      // agent made the instance (Agent::prepareMig).
      pin.uuids.clear();
    }
    pin.compute_share_percent = static_cast<int>(std::clamp<int64_t>(milli / 10, 1, 100));
    if (t.milli_limit_per_gpu > milli && shared && isolation == "none") {
      pin.compute_limit_percent =
          static_cast<int>(std::clamp<int64_t>(t.milli_limit_per_gpu / 10, 1, 100));
    }
    if (pin.mode == GpuPinning::Mode::kMps) {
      pin.mps_thread_percentage = pin.compute_share_percent;
      pin.mps_memory_limit_mib = pin.memory_limit_mib;
    }
    if (pin.mode == GpuPinning::Mode::kFractional) {
      if (options.interposer.empty() && options.require_interposer) {
        return core::failedPrecondition(
            "task " + spec.id +
            ": a time-sliced GPU share needs the CUDA interposer (libtessera-cuda.so) to hold "
            "it to its memory and compute, and this agent has none (tessera agent run "
            "--cuda-interposer PATH)");
      }
      pin.interposer = options.interposer;
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
  spec.limits.cpu_milli = t.cpu_milli;
  spec.limits.memory_mib = t.memory_mib;
  spec.limits.pids_max = options.pids_max;
  spec.limits.restrict_devices = true;
  return a;
}

json reportToJson(const TaskReport& report) {
  protocol::TaskReport r;
  r.task = report.id;
  r.generation = report.generation;
  switch (report.state) {
    case TaskReport::State::kRunning:
      r.state = protocol::TaskReport::State::kRunning;
      break;
    case TaskReport::State::kExited:
      r.state = protocol::TaskReport::State::kExited;
      r.exit_code = report.exit.exit_code;
      r.signal = report.exit.signal;
      r.oom_killed = report.exit.oom_killed;
      r.stopped = report.exit.stopped;
      r.run_time_ms = report.exit.run_time.count();
      break;
    case TaskReport::State::kFailedToStart:
      r.state = protocol::TaskReport::State::kFailedToStart;
      r.error = report.error;
      break;
    case TaskReport::State::kStarting:
      r.state = protocol::TaskReport::State::kStarting;
      r.progress = report.progress;
      break;
  }
  return protocol::toJson(r);
}

}  // namespace tessera::agent
