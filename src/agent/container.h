// Tasks as OCI containers (docs/agent.md "Containers"): the runtime bundle of a task whose spec
// names an image, run by an OCI runtime (`runc`, or `crun` on a cgroup v2 machine) in the
// foreground, so that `runc run` takes the place of the task's command under its shim and
// everything ProcessRuntime does for a process (cgroups, logs, stop and grace, fencing,
// adoption) holds for the container too.
//
// Under <dir>:
//   images/      the layer cache (agent/oci_image.h);
//   bundles/<id> a task's bundle: config.json, rootfs (an overlay of the image's layers over
//                upper/ and work/), `layers` (the layers it uses, for the cache's collection);
//   state/       the runtime's own state (its --root).
// The container gets: the image's filesystem (read-only when the spec says), its own pid, ipc,
// uts and mount namespaces (the node's network), the task's user (process.user), /dev/shm of the
// spec's size, /tmp as a tmpfs, the task's credentials folder read-only at the same path, its
// GPUs' device nodes only (from a CDI spec in `cdi_dir` when one describes them, else the
// task's device nodes; simulated GPUs: a read-only file /dev/nvidiaN holding the GPU's UUID), and
// the cgroup `cgroupName(id)` inside the task's own groups.
//
//   Containers c({.dir = work_dir + "/containers"});
//   TESSERA_ASSIGN_OR_RETURN(std::vector<std::string> argv, c.prepare(spec, env, uid, gid));
//   // fork, join the task's cgroups, exec argv; when it has ended:
//   c.cleanup(spec.id);
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "agent/oci_image.h"
#include "core/status.h"

namespace tessera::agent {

struct TaskSpec;

// CDI specs (the Container Device Interface's format, which `nvidia-ctk cdi generate` writes):
// device name (a GPU's UUID, as the agent matches them) -> {"edits": its containerEdits,
// "common": its spec's}.
struct CdiDevices {
  std::map<std::string, nlohmann::json> devices;
};
// Reads the nvidia.com/gpu specs (*.json, *.yaml, *.yml) of `dirs`; files that cannot be read,
// are not specs, or (when the agent is root) are not root's alone are skipped, each with a line
// in `problems` (when given).
CdiDevices readCdi(const std::vector<std::string>& dirs, std::vector<std::string>* problems);
// Applies CDI containerEdits to an OCI config: device nodes (with their cgroup rule), mounts,
// environment ("KEY=value" into `env`), hooks. `done` keeps what was applied, so an edit two
// devices share is applied once.
core::Status applyCdiEdits(const nlohmann::json& edits, nlohmann::json& config,
                           std::vector<std::string>& env, std::set<std::string>& done);

struct ContainerOptions {
  std::string runtime = "runc";  // "runc" or "crun" (same command line).
  std::string runtime_path;      // "" : `runtime` looked up in PATH.
  std::string dir;               // Bundles, state and the image cache (created).
  // CDI specs (JSON or YAML) of kind nvidia.com/gpu: the operator's, then those a tool writes
  // at run time (the CDI spec's two default folders; later ones win for a device name).
  std::string cdi_dir = "/etc/cdi";
  std::string cdi_dir_dynamic = "/var/run/cdi";
  // Containers in a user namespace of their own: root inside is the task's user outside (its
  // tenant's), mapped alone, so nothing of the node's is root's inside. Files of the image that
  // root owns show as nobody's inside (readable, not writable), as under rootless runtimes.
  bool user_namespace = false;
  // Cached layers no task uses are removed once unused this long (0: at once), and the least
  // recently used first while the cache holds more than image_cache_max_mib (0: no cap).
  std::chrono::seconds keep_unused{3600};
  int64_t image_cache_max_mib = 0;
  // A pull that fails for a cause that may pass is tried again this many times, `pull_backoff`
  // after the first failure and doubling (AgentOptions::pull_retries, docs/agent.md).
  int pull_retries = 5;
  std::chrono::seconds pull_backoff{10};
  RegistryOptions registries;  // CA files and mirrors by registry (agent/registry.h).
};

class Containers {
 public:
  explicit Containers(ContainerOptions options);

  // The runtime bundle of `spec` (which names an image), for a process with environment `env`
  // ("KEY=value", the task's as ProcessRuntime makes it) running as uid/gid. Returns the
  // command line that runs it in the foreground. Fails with a reason a user can act on (image
  // missing, not an OCI layout, digest mismatch, registry reference, no runtime).
  core::Result<std::vector<std::string>> prepare(const TaskSpec& spec,
                                                 const std::vector<std::string>& env, uid_t uid,
                                                 gid_t gid);
  // Whether `spec`'s image comes from a registry (a download that may take minutes).
  static bool pullsFromRegistry(const TaskSpec& spec);
  // Brings `spec`'s image into the cache (with its pull secret), without making a bundle: the
  // agent does this off its loop, then prepare() finds the layers here (and still asks the
  // registry for the manifest with the task's credentials).
  core::Status pull(const TaskSpec& spec);
  // Removes whatever is left of the container of task `id` (its runtime state, which kills its
  // processes, the rootfs mount and the bundle), then cached layers nobody uses (trimCache). Safe
  // to call for a task that never was a container (nothing happens).
  void cleanup(const std::string& id);
  // The container's cgroup, relative to the runtime's own (the task's) groups.
  static std::string cgroupName(const std::string& id) { return "ctr-" + id; }
  // Cached layers no bundle uses go once unused for keep_unused, or sooner, least recently used
  // first, while the cache is over its cap.
  void trimCache();
  // Whether the runtime is there (the agent's start-up line).
  core::Result<std::string> runtimePath() const;

 private:
  ContainerOptions options_;
  ImageCache images_;
  std::mutex mu_;  // Between taking an image's layers and naming them in a bundle.
};

}  // namespace tessera::agent
