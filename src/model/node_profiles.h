// Named node shapes for simulations and for agents without real GPUs, built in (`dgx-h100`,
// `dgx-h200`, `a100-8x`, `a100-40gb-8x`, `l40s-4x`, `t4-2x`) or read from a profile file:
//
//   profile "lab-box" {
//     gpu_model  = "A100-40GB"   # a model of the GPU catalogue
//     gpus       = 4
//     cpu_cores  = 64            # hardware threads
//     memory_gib = 512
//     nvlink     = false         # whether NVLink (or NVSwitch) joins all its GPUs
//   }
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/gpu_catalogue.h"
#include "model/node.h"

namespace tessera::model {

struct NodeProfile {
  std::string name;
  std::string gpu_model;  // A catalogue model name.
  int gpus = 0;
  int64_t cpu_cores = 0;  // Hardware threads.
  int64_t memory_gib = 0;
  bool nvlink = false;  // All its GPUs in one NVLink domain.
};

// The built-in profiles, in documentation order.
const std::vector<NodeProfile>& builtinNodeProfiles();
// Their names, in the same order.
const std::vector<std::string>& nodeProfileNames();
// A built-in profile by name.
std::optional<NodeProfile> findNodeProfile(std::string_view name);

// Reads `profile "NAME" { ... }` blocks from an HCL or JSON file. Errors name the file and the
// profile; a GPU model must be in `catalogue`.
core::Result<std::vector<NodeProfile>> readNodeProfiles(const std::string& path,
                                                        const GpuCatalogue& catalogue);

// A node of `profile`. `nvlink_domain` is the node's own domain id (ignored without NVLink).
core::Result<Node> makeProfileNode(const NodeProfile& profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain);
// The same for a built-in profile by name.
core::Result<Node> makeProfileNode(std::string_view profile, std::string name,
                                   const GpuCatalogue& catalogue, int nvlink_domain);

}  // namespace tessera::model
