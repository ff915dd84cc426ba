// GPU discovery through NVML, loaded at run time with dlopen("libnvidia-ml.so.1"): no NVIDIA
// header or library is needed to build, and a machine without the driver gets a clear error,
// never a crash.
//
//   NvmlDiscovery nvml;                          // or
//   NvmlDiscovery("/opt/nvidia/libnvidia-ml.so.1") core::Result<NodeGpus> gpus = nvml.discover();
//
// Required functions (the agent refuses without them): nvmlInit_v2, nvmlShutdown,
// nvmlErrorString, nvmlSystemGetDriverVersion, nvmlDeviceGetCount_v2,
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo.
// The others (PCI, minor number, CUDA version, MIG, topology, NVLink) are optional: an old driver
// without them, or a call that answers NOT_SUPPORTED, leaves the field unknown and adds a warning.
// Names are the versioned ones nvml.h maps its API to (docs: ../shared/reference §6).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/gpu_discovery.h"

namespace tessera::agent {

class NvmlLibrary;

class NvmlDiscovery : public GpuDiscovery {
 public:
  explicit NvmlDiscovery(std::string library = "libnvidia-ml.so.1");
  ~NvmlDiscovery() override;

  std::string describe() const override;
  // Loads the library on first use (and keeps it), then nvmlInit_v2 ... nvmlShutdown.
  core::Result<NodeGpus> discover() override;

 private:
  std::string library_;
  std::shared_ptr<NvmlLibrary> lib_;
};

}  // namespace tessera::agent
