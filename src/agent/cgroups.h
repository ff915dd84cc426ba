// Per-task control groups: CPU, memory and process-count limits, and which device nodes a task
// may open.
// Works with whichever hierarchy the machine has:
//   - v1 (a mount per controller: cpu, memory, devices under /sys/fs/cgroup/<controller>):
//     cpu.cfs_quota_us, memory.limit_in_bytes, pids.max, devices.deny/devices.allow; OOM kills
//     counted in memory.oom_control's oom_kill;
//   - v2 (one unified hierarchy): cpu.max, memory.max (memory.swap.max 0), pids.max, OOM kills in
//     memory.events, and the devices rule as an eBPF program attached to the task's group
//     (agent/device_filter.h); where that cannot be loaded, `devicesEnforced()` is false and
//     `describe()` says why.
// Task groups live under the agent's own group of each controller (from /proc/self/cgroup), in
// a folder of their own (`tessera` by default), so a machine's other services are not touched.
//
//   TESSERA_ASSIGN_OR_RETURN(Cgroups cg, Cgroups::detect());
//   TESSERA_ASSIGN_OR_RETURN(TaskCgroup g, cg.create("t-42", {.cpu_milli = 2000,
//                                                             .memory_mib = 4096}));
//   // in the forked child, before exec: g.joinPaths() each get "0" written to them
//   g.oomKills();  g.pids();  cg.remove(g);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::agent {

// A character device a task may open: "c MAJOR:MINOR rwm" in v1's terms.
struct DeviceRule {
  unsigned major = 0;
  unsigned minor = 0;
};

struct CgroupLimits {
  int64_t cpu_milli = 0;   // 0: no CPU limit.
  int64_t memory_mib = 0;  // 0: no memory limit.
  int64_t pids_max = 0;    // Processes and threads at once (the pids controller); 0: no limit.
  // When set, the task may open only these character devices (and the harmless ones every
  // process needs: null, zero, full, random, urandom, tty, pts). Empty with `restrict_devices`
  // false: no device rule.
  bool restrict_devices = false;
  std::vector<DeviceRule> devices;
};

// One task's groups, one per controller in use.
struct TaskCgroup {
  std::string name;
  std::vector<std::string> dirs;  // The group directories, one per hierarchy.
  // For each of `dirs`, where its hierarchy is mounted (/sys/fs/cgroup/memory on v1,
  // /sys/fs/cgroup on v2): in the task's view of the node (agent/sandbox.h) the whole hierarchy
  // shows its own group alone, at the path /proc/self/cgroup names.
  std::vector<std::string> view_roots;
  std::string memory_dir;  // Where the OOM count is read.
  int version = 1;

  // The files a process writes "0" to so that it joins every group (async-signal-safe to use
  // from a forked child: plain open/write on these paths).
  std::vector<std::string> joinPaths() const;
  // OOM kills in the memory group so far (0 if unknown).
  int64_t oomKills() const;
  // The processes in the groups now.
  std::vector<pid_t> pids() const;
};

class Cgroups {
 public:
  // Finds the hierarchy under `root` and the agent's own groups (from `self_cgroup`). Task
  // groups go in `folder` under the agent's groups ("tessera/<node>-<hash>", agentInstance(), so
  // several agents can share a machine). Fails if neither v1 nor v2 is usable.
  static core::Result<Cgroups> detect(const std::string& folder = "tessera",
                                      const std::string& root = "/sys/fs/cgroup",
                                      const std::string& self_cgroup = "/proc/self/cgroup");

  int version() const { return version_; }
  bool devicesEnforced() const {
    return version_ == 1 ? !devices_parent_.empty() : v2_devices_.isOk();
  }
  // "cgroup v1 (cpu, memory, devices)", for the agent's start-up line.
  std::string describe() const;

  // Creates the task's groups and writes its limits. `name` must be a plain file name. A group
  // left over from an earlier run of the same name is removed first, its processes killed.
  core::Result<TaskCgroup> create(const std::string& name, const CgroupLimits& limits) const;
  // The groups of `name` as they are (a task an earlier agent started, being adopted): nothing
  // is written or killed. Empty `dirs` when there are none.
  TaskCgroup existing(const std::string& name) const;
  // Kills what is left in the groups (SIGKILL) and removes them. Idempotent.
  core::Status remove(const TaskCgroup& group) const;
  // Kills every process in the groups (SIGKILL) and waits until they are empty (up to 5 s).
  static core::Status killAll(const TaskCgroup& group);

 private:
  int version_ = 1;
  // v1: the parent folder of task groups in each controller ("" when the controller is
  // missing); v2: unified_parent_.
  std::string cpu_parent_;
  std::string memory_parent_;
  std::string devices_parent_;
  std::string pids_parent_;
  std::string unified_parent_;
  std::string root_;                      // Where the hierarchies are mounted (/sys/fs/cgroup).
  std::string self_dir_;                  // v2: the agent's own group.
  std::set<std::string> v2_controllers_;  // v2: what the agent's group offers (cpu, memory, ...).
  core::Status v2_devices_;               // v2: whether device filters can be loaded, or why not.
  std::string folder_;                    // Task groups' folder under the agent's own groups.

  // The mount folder of the hierarchy a task group's parent folder is in.
  std::string hierarchyOf(const std::string& parent) const;
};

}  // namespace tessera::agent
