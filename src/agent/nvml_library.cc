#include "agent/nvml_library.h"

#include <dlfcn.h>

#include <type_traits>

namespace tessera::agent {

core::Result<std::shared_ptr<NvmlLibrary>> NvmlLibrary::open(const std::string& path) {
  dlerror();
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return core::failedPrecondition("nvml: cannot load " + path + ": " +
                                    (why != nullptr ? why : "unknown error") +
                                    " (is the NVIDIA driver installed?)");
  }
  auto lib = std::shared_ptr<NvmlLibrary>(new NvmlLibrary(handle));
  std::string missing;
  auto need = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (fn == nullptr) {
      missing += (missing.empty() ? "" : ", ") + std::string(name);
    }
  };
  auto want = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
  };
  need(lib->init, "nvmlInit_v2");
  need(lib->shutdown, "nvmlShutdown");
  need(lib->error_string, "nvmlErrorString");
  need(lib->driver_version, "nvmlSystemGetDriverVersion");
  need(lib->count, "nvmlDeviceGetCount_v2");
  need(lib->by_index, "nvmlDeviceGetHandleByIndex_v2");
  need(lib->uuid, "nvmlDeviceGetUUID");
  need(lib->name, "nvmlDeviceGetName");
  need(lib->memory, "nvmlDeviceGetMemoryInfo");
  if (!missing.empty()) {
    return core::failedPrecondition("nvml: " + path + " lacks " + missing +
                                    " (a driver older than NVML 11, or not NVML)");
  }
  want(lib->cuda_version, "nvmlSystemGetCudaDriverVersion_v2");
  want(lib->pci, "nvmlDeviceGetPciInfo_v3");
  want(lib->minor, "nvmlDeviceGetMinorNumber");
  want(lib->mig_mode, "nvmlDeviceGetMigMode");
  want(lib->max_mig, "nvmlDeviceGetMaxMigDeviceCount");
  want(lib->mig_by_index, "nvmlDeviceGetMigDeviceHandleByIndex");
  want(lib->gi_id, "nvmlDeviceGetGpuInstanceId");
  want(lib->ci_id, "nvmlDeviceGetComputeInstanceId");
  want(lib->common_ancestor, "nvmlDeviceGetTopologyCommonAncestor");
  want(lib->p2p, "nvmlDeviceGetP2PStatus");
  want(lib->processes, "nvmlDeviceGetComputeRunningProcesses_v3");
  want(lib->gi_profile, "nvmlDeviceGetGpuInstanceProfileInfo");
  want(lib->gi_list, "nvmlDeviceGetGpuInstances");
  want(lib->gi_create, "nvmlDeviceCreateGpuInstanceWithPlacement");
  want(lib->gi_info, "nvmlGpuInstanceGetInfo");
  want(lib->gi_destroy, "nvmlGpuInstanceDestroy");
  want(lib->ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo");
  want(lib->ci_create, "nvmlGpuInstanceCreateComputeInstance");
  want(lib->ci_list, "nvmlGpuInstanceGetComputeInstances");
  want(lib->ci_destroy, "nvmlComputeInstanceDestroy");
  want(lib->set_mig_mode, "nvmlDeviceSetMigMode");
  return lib;
}

NvmlLibrary::~NvmlLibrary() { ::dlclose(handle_); }

std::string NvmlLibrary::explain(const char* call, NvmlReturn rc) const {
  const char* text = error_string(rc);
  return std::string(call) + ": " + (text != nullptr ? text : "unknown error") + " (" +
         std::to_string(rc) + ")";
}

core::Result<std::unique_ptr<NvmlSession>> NvmlSession::begin(const NvmlLibrary& lib) {
  if (NvmlReturn rc = lib.init(); rc != kNvmlSuccess) {
    return core::unavailable("nvml: " + lib.explain("nvmlInit_v2", rc));
  }
  return std::unique_ptr<NvmlSession>(new NvmlSession(lib));
}

}  // namespace tessera::agent
