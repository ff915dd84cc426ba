// Internal to libtessera-cuda.so: the process-wide state the hooks share, the table of hooks and
// the real driver. interposer.cc loads them; memory_hooks.cc, launch_hooks.cc and
// dlsym_hook.cc hold the exported functions.
//
// There is one instance per process because the thing it wraps, the driver, is one per process;
// it is created on first use (never at load time: a preloaded library runs inside every process
// of a task, most of which never touch CUDA) and never destroyed (hooks may run on other threads
// while the process exits).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/config.h"
#include "cuda/driver_api.h"
#include "cuda/memory_ledger.h"

// abi_check.cc defines it empty first, to see the hooks as C++ functions beside cuda.h's.
#ifndef TESSERA_CUDA_EXPORT
#define TESSERA_CUDA_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace tessera::cuda::internal {

// Every entry point the interposer exports and wraps, in kHooks order.
enum class Hook : int {
  kCuInit,
  kCuGetProcAddress,
  kCuGetProcAddressV2,
  kCuMemAllocV2,
  kCuMemAllocPitchV2,
  kCuMemAllocManaged,
  kCuMemAllocAsync,
  kCuMemAllocAsyncPtsz,
  kCuMemAllocFromPoolAsync,
  kCuMemAllocFromPoolAsyncPtsz,
  kCuMemFreeV2,
  kCuMemFreeAsync,
  kCuMemFreeAsyncPtsz,
  kCuMemGetInfoV2,
  kCuDeviceTotalMemV2,
  kCuArrayCreateV2,
  kCuArray3DCreateV2,
  kCuArrayDestroy,
  kCuMipmappedArrayCreate,
  kCuMipmappedArrayDestroy,
  kCuMemCreate,
  kCuMemRelease,
  kCuMemMap,
  kCuMemUnmap,
  kCuMemRetainAllocationHandle,
  kCuMemPoolDestroy,
  kCuLaunchKernel,
  kCuLaunchKernelPtsz,
  kCuLaunchKernelEx,
  kCuLaunchKernelExPtsz,
  kCuLaunchCooperativeKernel,
  kCuLaunchCooperativeKernelPtsz,
  kCuGraphLaunch,
  kCuGraphLaunchPtsz,
  kCuGraphAddMemAllocNode,
  kCuGraphAddMemFreeNode,
  kCuGraphAddNode,
  kCuGraphAddNodeV2,
  kCuGraphInstantiate,
  kCuGraphInstantiateV2,
  kCuGraphInstantiateWithFlags,
  kCuGraphInstantiateWithParams,
  kCuGraphInstantiateWithParamsPtsz,
  kCuGraphExecDestroy,
  kCuGraphDestroy,
  kCuGraphDestroyNode,
  kCuCtxCreateV2,
  kCuCtxCreateV3,
  kCuCtxCreateV4,
  kCuDevicePrimaryCtxRetain,
  kCount
};
inline constexpr int kHookCount = static_cast<int>(Hook::kCount);

// Driver functions the interposer calls but does not wrap.
enum class Helper : int {
  kCuCtxGetCurrent,
  kCuEventCreate,
  kCuEventDestroyV2,
  kCuEventRecord,
  kCuEventQuery,
  kCuEventElapsedTime,
  kCuStreamIsCapturing,
  kCuThreadExchangeStreamCaptureMode,
  kCuPointerGetAttribute,
  kCuMemPoolGetAttribute,
  kCuMemPoolTrimTo,
  kCuCtxGetDevice,
  kCuStreamGetCaptureInfoV2,
  kCuDeviceGetGraphMemAttribute,
  kCuDeviceGraphMemTrim,
  kCuGraphNodeGetType,
  kCuGraphMemAllocNodeGetParams,
  kCuGraphMemFreeNodeGetParams,
  kCount
};
inline constexpr int kHelperCount = static_cast<int>(Helper::kCount);

// The ABIs of the helpers the memory hooks call (abi_check.cc checks them against cuda.h's).
using PointerGetAttributeFn = CUresult (*)(void* data, int attribute, CUdeviceptr ptr);
using MemPoolGetAttributeFn = CUresult (*)(CUmemoryPool pool, int attribute, void* value);
using MemPoolTrimToFn = CUresult (*)(CUmemoryPool pool, std::size_t min_bytes_to_keep);
using CtxGetDeviceFn = CUresult (*)(CUdevice* device);
using StreamGetCaptureInfoV2Fn = CUresult (*)(CUstream stream, CUstreamCaptureStatus* status,
                                              cuuint64_t* id, CUgraph* graph,
                                              const CUgraphNode** dependencies,
                                              std::size_t* dependency_count);
using DeviceGetGraphMemAttributeFn = CUresult (*)(CUdevice device, int attribute, void* value);
using DeviceGraphMemTrimFn = CUresult (*)(CUdevice device);
using GraphNodeGetTypeFn = CUresult (*)(CUgraphNode node, int* type);
using GraphMemAllocNodeGetParamsFn = CUresult (*)(CUgraphNode node,
                                                  CudaMemAllocNodeParams* params_out);
using GraphMemFreeNodeGetParamsFn = CUresult (*)(CUgraphNode node, CUdeviceptr* dptr_out);
inline constexpr int kCuPointerAttributeMempoolHandle = 17;
inline constexpr int kCuGraphMemAttrUsedMemCurrent = 0;
inline constexpr int kCuGraphMemAttrReservedMemCurrent = 2;
inline constexpr CUstreamCaptureStatus kCuStreamCaptureStatusActive = 1;
inline constexpr int kCuMempoolAttrReservedMemCurrent = 5;

struct HookInfo {
  const char* name;  // The exported ABI name: "cuMemAlloc_v2".
  void* hook;        // Ours.
  // For cuGetProcAddress when the driver answers with an address that is not one of its exported
  // functions: the base name a caller asks for and the cudaVersion range [since, until) in which
  // the driver gives this ABI for it (cudaTypedefs.h's PFN_<base>_v<since>), per_thread for the
  // _ptsz variants. base is null where the mapping is not certain (cuCtxCreate: the _v3 ABI is
  // PFN_cuCtxCreate_v11040, yet drivers differ on what the plain name gives a 12.x caller).
  const char* base;
  int since;
  int until;
  bool per_thread;
};
// A constant, though not constexpr: function addresses are filled in by the loader.
extern const HookInfo kHooks[kHookCount];  // NOLINT(readability-identifier-naming)

// The real driver: libcuda.so.1 opened RTLD_LOCAL, its functions found with the real dlsym.
struct Driver {
  void* handle = nullptr;
  void* base_address = nullptr;  // Where it is mapped, to tell its exported functions apart.
  void* real[kHookCount] = {};
  void* helper[kHelperCount] = {};
};

class LaunchLimiter;

// What the caps file was when it was last read: the agent replaces it whole (a rename), so a new
// inode or time says it changed.
struct CapsStamp {
  std::uint64_t inode = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t size = 0;
  bool operator==(const CapsStamp&) const = default;
};

// What the hooks share. Immutable after creation except for the ledger and limiter, which are
// thread-safe, and what refreshShare keeps of the caps file (under caps_mu).
struct Process {
  Settings settings;
  bool valid = true;  // False: the settings did not parse, and CUDA is refused (fail closed).
  std::unique_ptr<Driver> driver;          // Null if libcuda.so.1 could not be opened.
  std::unique_ptr<MemoryLedger> ledger;    // Null without a memory cap.
  std::unique_ptr<LaunchLimiter> limiter;  // Null without a compute share under 100.
  // The caps came from the agent's file with a guarantee (TESSERA_CUDA_COMPUTE_GUARANTEE): the
  // share may change while the process runs (a burst limit), and launches read the file again
  // when it changed, at most every kCapsRecheckNs (refreshShare).
  bool share_may_change = false;
  mutable std::mutex caps_mu;    // Held by the one thread that reads the file again.
  mutable CapsStamp caps_stamp;  // Guarded by caps_mu.
  mutable std::atomic<std::int64_t> caps_recheck_at_ns{0};

  template <typename Fn>
  Fn real(Hook hook) const {
    return driver ? reinterpret_cast<Fn>(driver->real[static_cast<int>(hook)]) : nullptr;
  }
  template <typename Fn>
  Fn helper(Helper h) const {
    return driver ? reinterpret_cast<Fn>(driver->helper[static_cast<int>(h)]) : nullptr;
  }
};

// The process's state, created (settings read, driver opened) by the first caller.
const Process& process();

// How often launches look whether the agent rewrote the caps file.
inline constexpr std::int64_t kCapsRecheckNs = 100'000'000;

// Where the share may change: if kCapsRecheckNs passed since the last look and the caps file
// changed, its share from now on (what does not parse, or a new memory cap, is ignored: the
// memory cap is the process's for its life). One thread looks at a time; the others go on.
void refreshShareSlow(const Process& p) noexcept;
inline void refreshShare(const Process& p) noexcept {
  if (p.share_may_change) {
    refreshShareSlow(p);
  }
}

// The C library's dlsym, not ours: the hooks never call the exported name.
using DlsymFn = void* (*)(void*, const char*) noexcept;
extern std::atomic<DlsymFn> g_real_dlsym;
DlsymFn resolveRealDlsym() noexcept;
inline DlsymFn realDlsym() noexcept {
  const DlsymFn f = g_real_dlsym.load(std::memory_order_acquire);
  return f != nullptr ? f : resolveRealDlsym();
}

// dlsym on a library handle (not RTLD_DEFAULT or RTLD_NEXT, whose answer depends on the caller):
// the real answer, or our hook when the real answer is the driver function the hook wraps.
void* dlsymForHandle(void* handle, const char* symbol) noexcept;

// What a cuGetProcAddress hook hands back for the driver's answer found (see interposer.cc).
void* procAddressFor(const char* symbol, void* found, int cuda_version, cuuint64_t flags);

// The result of a hook whose real function the driver lacks.
inline constexpr CUresult kMissingInDriver = kCudaErrorNotSupported;

}  // namespace tessera::cuda::internal
