// The agent's configuration (HCL or JSON) and how it chooses its GPU discovery:
//
//   node_name = "gpu-01"                 # default: the host name
//   gpus {
//     backend          = "nvml"          # nvml (default) or sim
//     nvml_library     = "libnvidia-ml.so.1"
//     profile          = "dgx-h100"      # sim: a built-in profile, or one of profile_file's
//     profile_file     = "/etc/tessera/profiles.hcl"
//     fallback_profile = ""              # nvml failing: refuse (""), or simulate this profile
//   }
//
// So a GPU machine runs with NVML and refuses to start without it unless told otherwise, and a
// laptop or CI runs `backend = "sim"`.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
};

struct AgentConfig {
  std::string node_name;  // "" : the host name.
  GpuConfig gpus;
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

}  // namespace tessera::agent
