// The agent's configuration (HCL or JSON) and how it chooses its GPU discovery:
//
//   node_name = "gpu-01"                 # default: the host name
//   node_mode = "shared"                 # or single-tenant, development (see NodeMode)
//   gpus {
//     backend          = "nvml"          # nvml (default) or sim
//     nvml_library     = "libnvidia-ml.so.1"
//     profile          = "dgx-h100"      # sim: a built-in profile, or one of profile_file's
//     profile_file     = "/etc/tessera/profiles.hcl"
//     fallback_profile = ""              # nvml failing: refuse (""), or simulate this profile
//     sim_mig          = [6, 7]          # sim: GPUs shown with MIG mode on (MIG slices go there)
//     mig_mode         = "fixed"         # or "managed": the agent turns MIG mode on and off
//                                        # itself, on an idle GPU, as the work placed there needs
//   }
//   container {                          # tasks with an image (docs/agent.md "Containers")
//     runtime = "runc"                   # or crun (cgroup v2 machines)
//     path    = "/usr/sbin/runc"         # default: looked up in PATH
//     cdi_dir = "/etc/cdi"               # CDI specs (JSON, YAML) describing the GPUs
//     cdi_dynamic_dir = "/var/run/cdi"   # and those a tool writes at run time
//     user_namespace = true              # root inside a container is its tenant's user outside
//     image_cache_max_mib = 200000       # unused layers go, oldest use first, past it (0: no cap)
//   }
//   registry "registry.internal:5000" {  # per registry, as image references name it
//     ca_file = "/etc/tessera/registry-ca.pem"
//     mirror  = ["https://mirror.internal"]  # tried first, anonymously
//   }
//
// So a GPU machine runs with NVML and refuses to start without it unless told otherwise, and a
// laptop or CI runs `backend = "sim"`.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "agent/container.h"
#include "agent/gpu_discovery.h"
#include "core/status.h"
#include "model/gpu_catalogue.h"

namespace tessera::agent {

struct GpuConfig {
  std::string backend = "nvml";
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string profile;
  std::string profile_file;
  std::string fallback_profile;
  std::vector<int> sim_mig;  // Simulated GPUs with MIG mode on (by index).
  // "fixed": MIG mode is the operator's (nvidia-smi -mig); "managed": the agent switches it
  // (NVML resets the GPU: only while no process uses it), and the scheduler may place MIG slices
  // or other work on any idle MIG-capable GPU of the node.
  std::string mig_mode = "fixed";
};

// What the operator says the node is for (docs/agent.md "Tenant isolation").
enum class NodeMode {
  // Any tenant's tasks: each runs as its tenant's own Unix user, or, where the agent cannot
  // switch users, the tasks of one tenant at a time (agent/tenant_guard.h).
  kShared,
  // One tenant's node (or tenants that trust each other): no refusals, even without users.
  kSingleTenant,
  // A developer's machine (`tessera dev`): no refusals, even without users.
  kDevelopment,
};

// "shared", "single-tenant", "development"; an unknown name is an error naming the choices.
core::Result<NodeMode> parseNodeMode(const std::string& name);
std::string_view nodeModeName(NodeMode mode);

struct AgentConfig {
  std::string node_name;  // "" : the host name.
  NodeMode node_mode = NodeMode::kShared;
  GpuConfig gpus;
  ContainerOptions container;  // Its `dir` is the runtime's (<work_dir>/containers).
};

// Reads and checks a config file; errors name the file and the field.
core::Result<AgentConfig> readAgentConfig(const std::string& path);

// Checks the choices that do not need a file: backend, and a profile where one is needed.
core::Status validateGpuConfig(const GpuConfig& config);

// Discovers the node's GPUs as configured. When NVML fails and a fallback profile is set, the
// failure is one line in `log` and the simulated profile answers instead; without one, the
// failure is the error. Simulated UUIDs derive from `node_name`.
core::Result<NodeGpus> discoverGpus(const GpuConfig& config, const std::string& node_name,
                                    const model::GpuCatalogue& catalogue,
                                    std::vector<std::string>* log);

// The host name, for a node without a configured name.
std::string hostName();

// "<node>-<8 hex digits of work_dir's hash>": the name of one agent's things on its machine (its
// tasks' cgroup folder, its credential tmpfs folder). Two agents of one node name on one machine
// (tests, dev servers) never share them, and an agent restarted with its work dir finds its own.
std::string agentInstance(const std::string& node, const std::string& work_dir);

}  // namespace tessera::agent
