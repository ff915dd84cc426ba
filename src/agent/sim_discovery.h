// Simulated GPUs from a node profile (model/node_profiles.h), so that development, CI and demos
// run the agent without GPUs. Everything a real node reports is there and stable: the same node
// name and profile give the same UUIDs, PCI bus ids and topology on every machine and run.
//
//   SimDiscovery sim(*model::findNodeProfile("dgx-h100"), "node-1", catalogue);
//   core::Result<NodeGpus> gpus = sim.discover();   // 8 x "NVIDIA H100 80GB HBM3", NVLink
#pragma once

#include <string>

#include "agent/gpu_discovery.h"
#include "model/gpu_catalogue.h"
#include "model/node_profiles.h"

namespace tessera::agent {

class SimDiscovery : public GpuDiscovery {
 public:
  // `mig_on`: the GPUs to show with MIG mode on (each must be the profile's and offer MIG).
  SimDiscovery(model::NodeProfile profile, std::string node_name,
               const model::GpuCatalogue& catalogue, std::vector<int> mig_on = {});

  std::string describe() const override;
  core::Result<NodeGpus> discover() override;

 private:
  model::NodeProfile profile_;
  std::string node_;
  const model::GpuCatalogue& catalogue_;
  std::vector<int> mig_on_;
};

// A stable fake GPU UUID ("GPU-" and 8-4-4-4-12 hex digits) for GPU `index` of node `node`.
std::string simGpuUuid(const std::string& node, int index);

// The product name NVML reports for a catalogue model ("H100-80GB" -> "NVIDIA H100 80GB HBM3").
std::string productNameOf(const std::string& model);

}  // namespace tessera::agent
