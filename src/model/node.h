// A GPU machine as the scheduler sees it: capacity only, no runtime state.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/units.h"
#include "model/gpu_catalogue.h"
#include "model/ids.h"

namespace tessera::model {

// The most GPUs one node may have; the scheduler keeps a node's GPU set in a 64-bit mask.
inline constexpr int kMaxGpusPerNode = 64;

// A GPU's MIG mode, as far as placement is concerned.
enum class MigMode : uint8_t {
  kAny,  // Simulated, or switched by its agent (managed MIG mode): takes MIG slices or other
         // work, whichever comes first while it is idle.
  kOff,  // A real GPU with MIG mode off: whole GPUs and shares only.
  kOn,   // A real GPU with MIG mode on: MIG slices only (CUDA sees its MIG devices, not it).
};

struct GpuDevice {
  GpuModelId model;
  core::MiB memory{0};  // 0 when the model's memory is unknown.
  MigMode mig = MigMode::kAny;
};

struct Node {
  std::string name;
  core::MilliCpu cpu{0};
  core::MiB memory{0};
  std::vector<GpuDevice> gpus;  // Position = GPU index on the node.
  int nvlink_domain = -1;       // GPUs of nodes in one domain share NVLink; -1 = none.
  // Labels (`pool`, `zone`, ...): workloads select nodes by them, and a pool (the nodes with one
  // `pool` label) may be dedicated to one tenant (docs/server.md, "Nodes join").
  std::map<std::string, std::string> labels;
};

// The label that names a node's pool.
inline constexpr std::string_view kPoolLabel = "pool";

// Checks a label as Kubernetes does: a key of at most 63 characters (letters, digits, '-', '_',
// '.', starting and ending with a letter or digit), optionally after a DNS prefix and '/' (at
// most 253 more), and a value of at most 63 such characters (or empty).
core::Status validateLabel(std::string_view key, std::string_view value);

// Checks capacities are non-negative, the GPU count is within `kMaxGpusPerNode`, and the
// labels are valid.
core::Status validateNode(const Node& node);

// A node of `count` identical GPUs of `model`, with the model's memory.
Node makeNode(std::string name, core::MilliCpu cpu, core::MiB memory, const GpuCatalogue& catalogue,
              GpuModelId model, int count);

}  // namespace tessera::model
