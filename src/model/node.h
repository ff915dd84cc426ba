// A GPU machine as the scheduler sees it: capacity only, no runtime state.
#pragma once

#include <string>
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
  kAny,  // Simulated: takes MIG slices or other work, whichever comes first while it is idle.
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
};

// Checks capacities are non-negative and the GPU count is within `kMaxGpusPerNode`.
core::Status validateNode(const Node& node);

// A node of `count` identical GPUs of `model`, with the model's memory.
Node makeNode(std::string name, core::MilliCpu cpu, core::MiB memory, const GpuCatalogue& catalogue,
              GpuModelId model, int count);

}  // namespace tessera::model
