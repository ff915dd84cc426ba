// Running tasks on the node. `Runtime` is the driver interface; `ProcessRuntime` (the first
// driver) runs each task as a plain process tree:
//   - its own session and process group, so the whole tree is signalled at once;
//   - under the task's Unix user when one is given (the tenant's own, by the agent's mapping);
//   - in its own working directory <work_dir>/<id>/, stdout and stderr appended to
//     stdout.log and stderr.log there (what `tessera logs` serves);
//   - in its own cgroups (agent/cgroups.h) for CPU and memory limits and device nodes;
//   - with an environment that pins its GPUs (gpuEnvironment) and names it (TESSERA_TASK, ...).
// Each task runs under a shim, a small process (a fork of the agent, not in the task's cgroup)
// that waits for it, keeps its exit status in <work_dir>/<id>/exit, and stops it when the
// agent's lease file runs out, so a task never outlives an agent that died or lost the server
// for longer than the fencing period.
// A task whose spec names an image runs as an OCI container (agent/container.h): the runtime's
// `run` takes the command's place under the same shim, so all of the above holds for it too.
// A task ends when its first process exits; what is left of its tree is killed then. With
// `sandbox`, it also runs in namespaces of its own (agent/sandbox.h): it sees its own processes
// and files only, its /tmp and /dev/shm are its own and go with it. Stopping
// (preemption, cancel) sends SIGTERM to the group, then SIGKILL to the group and everything
// left in its cgroups after the grace period. Exits are reported with exit code or signal,
// whether the kernel OOM-killed it, and the run time.
//
//   ProcessRuntime rt({.work_dir = "/var/lib/tessera/tasks", .cgroups = &cg},
//                     [](const std::string& id, const TaskExit& e) { report(id, e); });
//   TESSERA_RETURN_IF_ERROR(rt.start(spec));
//   rt.stop(spec.id, std::chrono::seconds(30));
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/cgroups.h"
#include "agent/container.h"
#include "core/status.h"

namespace tessera::agent {

// How a task uses its GPUs, and so which variables pin them.
struct GpuPinning {
  enum class Mode { kNone, kWhole, kMig, kMps, kFractional };
  Mode mode = Mode::kNone;
  std::vector<std::string> uuids;  // GPU UUIDs, or MIG device UUIDs for kMig.
  // kMps: the control daemon's pipe directory and the client's limits.
  std::string mps_pipe_directory;
  int mps_thread_percentage = 100;
  int64_t mps_memory_limit_mib = 0;  // 0: none.
  // kFractional: the interposer's limits, and its path once it exists ("" : not preloaded).
  int64_t memory_limit_mib = 0;
  int compute_share_percent = 100;  // Its guarantee.
  // The most it may use while the GPU has time no share is guaranteed (a burst limit); at most
  // compute_share_percent: none. The caps file then says what it may use now (BurstShares).
  int compute_limit_percent = 0;
  std::string interposer;
  // The folder of its caps file (the runtime's, read-only to the task), bound at kCudaCapsDir in
  // its view; "" : none made.
  std::string caps_dir;
};

// The variables that pin a task to its GPUs. A task without GPUs gets CUDA_VISIBLE_DEVICES=""
// (CUDA then sees none), never the node's.
std::map<std::string, std::string> gpuEnvironment(const GpuPinning& pin);

// A time-sliced share's caps as the CUDA interposer reads them from the read-only file a task's
// view has (agent/sandbox.h kCudaCapsFile): gpuEnvironment's TESSERA_CUDA_* variables as
// "NAME=value" lines, with TESSERA_CUDA_COMPUTE_SHARE=`share_now` (0: its guarantee) and, where
// it has a burst limit, TESSERA_CUDA_COMPUTE_GUARANTEE. "" unless the pin is fractional with an
// interposer.
std::string cudaCapsText(const GpuPinning& pin, int share_now = 0);

// Time-sliced shares of one GPU: each one's guarantee and burst limit (percent of GPU time).
struct BurstSharer {
  std::string task;
  int guarantee = 0;
  int limit = 0;  // At most guarantee: none.
};
// What each may use now: its guarantee, plus the GPU's time that no share is guaranteed, split
// among those with a higher limit in proportion to their guarantees, none past its limit (what
// one cannot take goes to the others).
std::map<std::string, int> burstShares(const std::vector<BurstSharer>& sharers);

// A task run from an image as an OCI container (agent/container.h); `image` "" : a process.
struct ContainerSpec {
  std::string image;    // model::ImageRef syntax.
  int64_t shm_mib = 0;  // /dev/shm; 0: 64 MiB.
  bool read_only_rootfs = false;
  // Simulated GPUs (no device nodes): a path in the container (/dev/nvidiaN) and the file's
  // content (the GPU's UUID), standing in for each device node.
  std::vector<std::pair<std::string, std::string>> simulated_devices;
  // A registry image: the task's pull secret for its registry (kept in memory only), and who
  // hears of the download's progress (bytes so far, in all).
  RegistryCredentials pull_credentials;
  std::function<void(int64_t, int64_t)> pull_progress;
  const std::atomic<bool>* pull_cancel = nullptr;  // Set: the download stops.
  // Folders mounted in it: `source` (a folder on the node) bound read-only at `path`, or, with
  // no source, an empty tmpfs of at most `size_mib` (0: bounded by the task's memory only; at
  // /dev/shm it replaces the default one).
  struct Volume {
    std::string path;
    std::string source;
    int64_t size_mib = 0;
  };
  std::vector<Volume> volumes;
};

// Where a task of a multi-task workload finds its peers (docs/agent.md "Distributed training"):
// the agent puts it in the task's environment and a hostfile in its folder.
struct Rendezvous {
  int task_count = 1;
  std::vector<std::string> hosts;    // Node addresses by task index ("" : not placed).
  std::map<std::string, int> ports;  // This task's, by name.
  int master_port = 0;               // Task 0's "master" port; 0: none.
  int slots = 1;                     // GPUs of each task (at least 1), for the hostfile.
};

struct TaskSpec {
  std::string id;  // Unique on the node, a plain file name: its folder and cgroup names.
  std::string tenant;
  std::string workload;
  int index = 0;                           // The task's index in its workload.
  std::vector<std::string> command;        // argv; argv[0] is looked up in PATH.
  std::map<std::string, std::string> env;  // The workload's own variables.
  GpuPinning gpus;                         // Added after `env`: it cannot be overridden.
  CgroupLimits limits;                     // CPU, memory, device nodes.
  std::vector<std::string> device_nodes;   // Paths of the device nodes it may open.
  std::string user;                        // Unix user to run as; "": the agent's.
  std::string tag;  // Opaque to the runtime: kept with the task, given back by adopt().
  ContainerSpec container;
  Rendezvous rendezvous;
  // The folder of its credential files (agent/credentials.h; "" : none): carried into its view
  // when it has one of its own, and removed by its shim when it ends after the agent is gone.
  std::string credentials_dir;
};

// The variables a task gets from its rendezvous: TESSERA_TASK_COUNT and TESSERA_PORT_<NAME>
// always; for a workload of several tasks also WORLD_SIZE, RANK, NODE_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, TESSERA_HOSTS and TESSERA_HOSTFILE (`dir`/hostfile).
std::map<std::string, std::string> rendezvousEnvironment(const TaskSpec& spec,
                                                         const std::string& dir);
// The hostfile in DeepSpeed's and MPI's form: "<host> slots=<GPUs>" per placed task.
std::string hostfileText(const Rendezvous& r);

struct TaskExit {
  int exit_code = -1;       // >= 0 when it exited.
  int signal = 0;           // > 0 when a signal ended it.
  bool oom_killed = false;  // The kernel killed it for its memory limit.
  bool stopped = false;     // stop() was called for it.
  std::chrono::milliseconds run_time{0};

  // "exited 0", "killed by signal 9 (out of memory)", "stopped (signal 15)".
  std::string describe() const;
};

class Runtime {
 public:
  using OnExit = std::function<void(const std::string& id, const TaskExit& exit)>;
  virtual ~Runtime() = default;
  // Starts the task; returns once its process runs the command, or with why it could not.
  virtual core::Status start(const TaskSpec& spec) = 0;
  // SIGTERM to the task's processes now, SIGKILL after `grace`. Unknown or ended: not found.
  virtual core::Status stop(const std::string& id, std::chrono::milliseconds grace) = 0;
  // Tasks started and not yet ended.
  virtual std::vector<std::string> running() const = 0;
  // Whether the task needs a download before start() (a registry image), which pull() does off
  // the agent's loop: start() would otherwise hold the loop, and its heartbeats, for minutes.
  virtual bool needsPull(const TaskSpec&) const { return false; }
  virtual core::Status pull(const TaskSpec&) { return core::Status::ok(); }
};

struct ProcessRuntimeOptions {
  std::string work_dir;                               // Task folders go here (created if missing).
  const Cgroups* cgroups = nullptr;                   // null: no limits (the agent warns at start).
  std::string path = "/usr/local/bin:/usr/bin:/bin";  // PATH of tasks.
  // The agent's lease: a file holding a CLOCK_MONOTONIC deadline in nanoseconds (writeLease).
  // Each task's shim stops its task (SIGTERM, SIGKILL after `fence_grace`) once the deadline
  // has passed or the file cannot be read, even if the agent is gone. "" : no such fencing.
  std::string lease_file;
  std::chrono::milliseconds fence_grace{2000};
  // Tasks with an image: the OCI runtime and where bundles, its state and the layer cache go
  // ("" dir: <work_dir>/containers).
  ContainerOptions container;
  // Each task that is not a container in namespaces of its own, with its own /proc, /tmp,
  // /dev/shm, /etc/passwd and cgroups (agent/sandbox.h; root only: probeSandbox says whether
  // the machine allows it). Its /tmp is <work_dir>/.tmp/<id>, removed when it ends.
  bool sandbox = false;
  // The node's libcuda.so.1 (findNodeDriver; "" : not known). With a sandbox, a time-sliced
  // task's view shows the interposer's stand-in in its place (agent/sandbox.h).
  std::string cuda_driver;
};

// Writes `lease_file` (whole, through a rename): tasks may run until CLOCK_MONOTONIC reaches now
// + `valid_for`.
core::Status writeLease(const std::string& lease_file, std::chrono::milliseconds valid_for);

// A task found by ProcessRuntime::adopt: still running (now watched by this runtime), or ended
// while no agent watched it.
struct AdoptedTask {
  std::string id;
  std::string tag;
  std::optional<TaskExit> ended;
};

class ProcessRuntime : public Runtime {
 public:
  // `on_exit` runs on the runtime's own thread, once per task that ended.
  ProcessRuntime(ProcessRuntimeOptions options, OnExit on_exit);
  ~ProcessRuntime() override;  // Kills every task still running.
  ProcessRuntime(const ProcessRuntime&) = delete;
  ProcessRuntime& operator=(const ProcessRuntime&) = delete;

  core::Status start(const TaskSpec& spec) override;
  core::Status stop(const std::string& id, std::chrono::milliseconds grace) override;
  std::vector<std::string> running() const override;
  bool needsPull(const TaskSpec& spec) const override;
  core::Status pull(const TaskSpec& spec) override;

  // Takes over the tasks an earlier runtime (an agent that was restarted or died) started in the
  // same work_dir: those whose shim still runs are watched as if started here (their exits are
  // reported through OnExit); those that ended meanwhile are returned with their exit status
  // and cleaned up. Call before starting anything.
  std::vector<AdoptedTask> adopt();
  // From now on the destructor leaves running tasks to their shims (an agent restarting: the
  // next one adopts them; if none does in time, the lease runs out and the shims stop them).
  void detach();
  // The task's folder (its stdout.log and stderr.log are there).
  std::string taskDir(const std::string& id) const;
  // The pid of a running task's first process (tests, diagnostics).
  std::optional<pid_t> pidOf(const std::string& id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::agent
