// A task's own view of its node (docs/agent.md "Tenant isolation"). An agent running as root
// starts each task that is not a container (runc gives those the same) in namespaces of its own:
//   - a PID namespace: the task sees its own processes only, never the agent, the shims (whose
//     command line is the agent's) or another task. Its first process is a small init of the
//     agent's (pid 1, the agent's user, hidden from the task by hidepid=2) that reaps orphans
//     and ends the task with its command: when the command exits, the kernel kills everything
//     else in the namespace;
//   - a mount namespace (propagation from the node in, never out) with
//       /proc        a fresh procfs of the task's PID namespace (hidepid=2);
//       /tmp         the task's own folder (<work_dir>/.tmp/<task>, on disk), removed with it;
//       /dev/shm     a tmpfs of its own, as big as its memory limit, charged to its memory
//                    cgroup and gone with its namespace (MPS clients keep the node's: they meet
//                    their control daemon there);
//       /etc/passwd, /etc/group   root, nobody and the task's own user and group only;
//       /etc/ld.so.preload, /etc/tessera/cuda/   for a task on a time-sliced share: the CUDA
//                    interposer, loaded into every program whatever its environment says, and
//                    its caps (read-only, root's: the task can neither unset nor raise them);
//       its cgroups  each hierarchy (from where it is mounted) shows the task's group only;
//     and what it needs from under /tmp or /dev/shm (its folder, credentials, devices, the
//     interposer) bound back at the same paths;
//   - an IPC namespace (no System V IPC shared with other tasks), except for MPS clients.
// Everything is prepared before fork (`planSandbox`); the forked child only makes system calls
// (`enterSandbox`, `runTaskInit` are async-signal-safe).
#pragma once

#include <sys/types.h>

#include <array>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::agent {

// What a task's view is made of, prepared before fork.
struct SandboxPlan {
  // A path of the node's that the task needs and that a private /tmp or /dev/shm would cover:
  // bound back at the same place.
  struct Keep {
    std::string path;  // Absolute, as on the node.
    std::string root;  // "/tmp" or "/dev/shm".
    std::string rel;   // `path` below `root`, without a leading '/'.
    bool dir = true;
  };
  static constexpr size_t kMaxKeeps = 32;
  static constexpr size_t kMaxCgroups = 16;

  std::string tmp_dir;      // Bound at /tmp.
  bool private_shm = true;  // A tmpfs at /dev/shm and an IPC namespace of its own.
  std::string shm_options;  // The tmpfs's mount options ("mode=1777,size=...k").
  std::string passwd;       // The task's /etc/passwd and /etc/group.
  std::string group;
  std::string preload;        // Its /etc/ld.so.preload, and
  std::string cuda_caps_dir;  // the folder of its kCudaCapsFile; both "" (the node's) but on a
                              // share.
  // On a share, where the node's driver is known: the driver, bound at kDriverInView, and the
  // stand-in (kDriverStandIn), bound over each of the driver's files (all "" otherwise).
  std::string cuda_driver;
  std::string cuda_stand_in;
  std::vector<std::string> cuda_driver_files;
  std::vector<Keep> keeps;
  // The task's own groups, one per hierarchy, and for each the folder below which the task
  // sees that group alone (where the hierarchy is mounted: TaskCgroup::view_roots) and the
  // group's path there.
  std::vector<std::string> cgroup_dirs;
  std::vector<std::string> cgroup_roots;
  std::vector<std::string> cgroup_paths;
};

struct SandboxInput {
  std::string tmp_dir;  // The task's /tmp (made by the caller).
  std::string user;     // The task's Unix user ("" : the agent's own).
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;                      // Its folder.
  int64_t memory_limit_mib = 0;          // 0: none (then /dev/shm gets half the machine's memory).
  bool mps_client = false;               // Keeps the node's /dev/shm and IPC namespace.
  std::vector<std::string> keep;         // Paths the task needs (folders or files).
  std::vector<std::string> cgroup_dirs;  // TaskCgroup::dirs
  std::vector<std::string> cgroup_view_roots;  // TaskCgroup::view_roots
  // A time-sliced share: the CUDA interposer's path and the caps it reads (cuda/config.h's
  // "NAME=value" lines). The interposer goes first in the task's /etc/ld.so.preload, before
  // whatever the node's lists.
  std::string cuda_interposer;
  std::string cuda_caps_dir;  // The agent's folder holding the caps file (kCudaCapsFile's name).
  // The node's libcuda.so.1 (findNodeDriver), "" if unknown: with it, the task's view shows
  // the stand-in beside the interposer (kDriverStandIn) wherever the driver's files are, and
  // the stand-in is what /etc/ld.so.preload names.
  std::string cuda_driver;
};

// Where the CUDA interposer reads a task's caps: cuda/config.h's kCapsFile (the cuda layer
// includes nothing of ours, so the path is written twice). The folder is bound, not the file:
// the agent replaces the file whole (a rename) when a burst starts or ends, and a bind of the
// file would keep showing the old one. On a node whose agent gives tasks a view, the agent makes
// the folder and /etc/ld.so.preload, if missing, as mount points at start
// (prepareCudaMountPoints).
inline constexpr const char* kCudaCapsDir = "/etc/tessera/cuda";
inline constexpr const char* kCudaCapsFile = "/etc/tessera/cuda/caps";
// The interposer built to stand in for libcuda.so.1 in a task's view (src/cuda/CMakeLists.txt),
// found beside libtessera-cuda.so, and the path it needs the real driver by (its NEEDED entry,
// TESSERA_CUDA_DRIVER_IN_VIEW there), where the agent binds the driver for it.
inline constexpr const char* kDriverStandIn = "libtessera-cuda-driver.so";
inline constexpr const char* kDriverInView = "/usr/lib/tessera/driver/libcuda.so.1";

// The folders a libcuda.so.1 is found in by the loader or by convention (NVIDIA's images and
// driver installers, the CUDA forward-compatibility package), relative to a root.
inline constexpr const char* kDriverFolders[] = {"usr/lib/x86_64-linux-gnu",
                                                 "lib/x86_64-linux-gnu",
                                                 "usr/lib/aarch64-linux-gnu",
                                                 "lib/aarch64-linux-gnu",
                                                 "usr/lib64",
                                                 "lib64",
                                                 "usr/lib",
                                                 "lib",
                                                 "usr/local/nvidia/lib64",
                                                 "usr/local/nvidia/lib",
                                                 "usr/local/cuda/compat"};

// The node's CUDA driver library: `flag` itself if it is a path (INVALID_ARGUMENT if it is not a
// readable file), the first libcuda.so.1 of kDriverFolders for "auto" ("" if there is none),
// "" for "none". The result is the file itself, every link resolved.
core::Result<std::string> findNodeDriver(const std::string& flag);

// The stand-in beside `interposer`, "" if it is not there.
std::string driverStandIn(const std::string& interposer);

// An LD_PRELOAD value with `interposer` named as `stand_in` instead: one file for the variable
// and /etc/ld.so.preload, so that no program loads two.
std::string preloadWithStandIn(std::string preload, const std::string& interposer,
                               const std::string& stand_in);

// The files a task's view shows the stand-in at, for `driver` (a resolved path): it, and every
// other libcuda.so* file in its folder, resolved (each once).
std::vector<std::string> driverFilesBeside(const std::string& driver);

// Makes kCudaCapsDir (a folder) and /etc/ld.so.preload (empty) where they are missing, which
// changes nothing on the node, so that a task's view can bind its own over them; with `driver`,
// also kDriverInView (an empty file in a folder of its own, which no loader searches). Root only.
core::Status prepareCudaMountPoints(bool driver);

// The plan for a task; an error names what cannot be carried into the view (too many paths).
core::Result<SandboxPlan> planSandbox(const SandboxInput& in);

// The steps `enterSandbox` reports when one fails (with errno), for the start error.
enum SandboxStep : int {
  kSandboxNamespaces = 1,
  kSandboxPropagation,
  kSandboxOpen,
  kSandboxStage,
  kSandboxTmp,
  kSandboxShm,
  kSandboxKeep,
  kSandboxCgroups,
  kSandboxProc,
  kSandboxCuda,
};
const char* sandboxStepName(int step);

// In the task's first process, root, after it joined its cgroups and before it forks the
// command: new mount (and IPC) namespaces with the view above. The caller made the PID
// namespace (the process is its pid 1). Returns 0, or errno with `*step` saying where it
// failed. Async-signal-safe.
int enterSandbox(const SandboxPlan& plan, int* step);

// The task's init from then on: reaps every process that ends in the namespace, and once the
// command `cmd` has, writes its wait status (an int) to `status_fd` and exits, which ends
// whatever else runs in the namespace. Async-signal-safe; never returns.
[[noreturn]] void runTaskInit(pid_t cmd, int status_fd);

// Whether this process may give tasks such namespaces here (root, and a kernel and container
// that allow them): a forked child tries once. OK or why not.
core::Status probeSandbox();

}  // namespace tessera::agent
