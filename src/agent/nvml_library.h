// NVML loaded at run time: the ABI of the calls the agent makes (as nvml.h, NVML_API_VERSION 13,
// declares them; no NVIDIA header is needed) and `NvmlLibrary`, which dlopens the library and
// resolves them. Internal to the agent: discovery (nvml_discovery.h) and MIG layouts
// (mig_manager.h) use it.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"

namespace tessera::agent {

// nvmlReturn_t and the codes the agent tells apart.
using NvmlReturn = int;
inline constexpr NvmlReturn kNvmlSuccess = 0;
inline constexpr NvmlReturn kNvmlNotSupported = 3;
inline constexpr NvmlReturn kNvmlNotFound = 6;
inline constexpr NvmlReturn kNvmlInsufficientSize = 7;
inline constexpr NvmlReturn kNvmlInUse = 19;

// nvmlDevice_t, nvmlGpuInstance_t, nvmlComputeInstance_t: one pointer each, passed by value.
struct NvmlDeviceSt;
struct NvmlDevice {
  NvmlDeviceSt* handle;
};
struct NvmlGpuInstanceSt;
struct NvmlGpuInstance {
  NvmlGpuInstanceSt* handle;
};
struct NvmlComputeInstanceSt;
struct NvmlComputeInstance {
  NvmlComputeInstanceSt* handle;
};
struct NvmlMemory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct NvmlPciInfo {  // nvmlPciInfo_t
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
struct NvmlGpuInstancePlacement {  // nvmlGpuInstancePlacement_t, in memory slices
  unsigned int start, size;
};
struct NvmlGpuInstanceProfileInfo {  // nvmlGpuInstanceProfileInfo_t
  unsigned int id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
      decoderCount, encoderCount, jpegCount, ofaCount;
  unsigned long long memorySizeMB;
};
struct NvmlGpuInstanceInfo {  // nvmlGpuInstanceInfo_t
  NvmlDevice device;
  unsigned int id, profileId;
  NvmlGpuInstancePlacement placement;
};
struct NvmlComputeInstanceProfileInfo {  // nvmlComputeInstanceProfileInfo_t
  unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount,
      sharedDecoderCount, sharedEncoderCount, sharedJpegCount, sharedOfaCount;
};
struct NvmlProcessInfo {  // nvmlProcessInfo_t (the _v3 calls)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

// The loaded library and its functions. Required ones are always set; optional ones are
// nullptr when the library lacks them (an old driver).
class NvmlLibrary {
 public:
  // Loads `path` ("libnvidia-ml.so.1", or a path) and resolves the functions. Errors: cannot
  // load (with dlerror), or required functions missing (named).
  static core::Result<std::shared_ptr<NvmlLibrary>> open(const std::string& path);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // "nvmlDeviceGetUUID: GPU is lost (15)".
  std::string explain(const char* call, NvmlReturn rc) const;

  // Required.
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  NvmlReturn (*count)(unsigned*) = nullptr;
  NvmlReturn (*by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  // Optional: discovery.
  NvmlReturn (*cuda_version)(int*) = nullptr;
  NvmlReturn (*pci)(NvmlDevice, NvmlPciInfo*) = nullptr;
  NvmlReturn (*minor)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*mig_mode)(NvmlDevice, unsigned*, unsigned*) = nullptr;
  NvmlReturn (*max_mig)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*mig_by_index)(NvmlDevice, unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*gi_id)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*ci_id)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*common_ancestor)(NvmlDevice, NvmlDevice, int*) = nullptr;
  NvmlReturn (*p2p)(NvmlDevice, NvmlDevice, int, int*) = nullptr;
  // Optional: MIG layouts (all or none are needed; `hasMigManagement()`).
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;
  NvmlReturn (*gi_profile)(NvmlDevice, unsigned, NvmlGpuInstanceProfileInfo*) = nullptr;
  NvmlReturn (*gi_list)(NvmlDevice, unsigned, NvmlGpuInstance*, unsigned*) = nullptr;
  NvmlReturn (*gi_create)(NvmlDevice, unsigned, const NvmlGpuInstancePlacement*,
                          NvmlGpuInstance*) = nullptr;
  NvmlReturn (*gi_info)(NvmlGpuInstance, NvmlGpuInstanceInfo*) = nullptr;
  NvmlReturn (*gi_destroy)(NvmlGpuInstance) = nullptr;
  NvmlReturn (*ci_profile)(NvmlGpuInstance, unsigned, unsigned,
                           NvmlComputeInstanceProfileInfo*) = nullptr;
  NvmlReturn (*ci_create)(NvmlGpuInstance, unsigned, NvmlComputeInstance*) = nullptr;
  NvmlReturn (*ci_list)(NvmlGpuInstance, unsigned, NvmlComputeInstance*, unsigned*) = nullptr;
  NvmlReturn (*ci_destroy)(NvmlComputeInstance) = nullptr;
  // Optional: turning MIG mode on and off (needs root; resets the GPU).
  NvmlReturn (*set_mig_mode)(NvmlDevice, unsigned, NvmlReturn*) = nullptr;

  bool hasMigManagement() const {
    return processes != nullptr && gi_profile != nullptr && gi_list != nullptr &&
           gi_create != nullptr && gi_info != nullptr && gi_destroy != nullptr &&
           ci_profile != nullptr && ci_create != nullptr && ci_list != nullptr &&
           ci_destroy != nullptr;
  }

 private:
  explicit NvmlLibrary(void* handle) : handle_(handle) {}
  void* handle_;
};

// NVML initialized for a scope: nvmlInit_v2 when it begins, nvmlShutdown when it goes.
class NvmlSession {
 public:
  // Fails with NVML's reason ("nvml: nvmlInit_v2: Driver Not Loaded (9)").
  static core::Result<std::unique_ptr<NvmlSession>> begin(const NvmlLibrary& lib);
  ~NvmlSession() { lib_.shutdown(); }
  NvmlSession(const NvmlSession&) = delete;
  NvmlSession& operator=(const NvmlSession&) = delete;

 private:
  explicit NvmlSession(const NvmlLibrary& lib) : lib_(lib) {}
  const NvmlLibrary& lib_;
};

}  // namespace tessera::agent
