// Compiled where the CUDA toolkit's headers are (tests/fake_cuda/CMakeLists.txt): every function
// the fake libcuda.so.1 exports has the ABI cudaTypedefs.h gives its name, so that what the
// interposer's tests drive through it is what a real driver would be given. It emits no code.
#define __CUDA_API_VERSION_INTERNAL 1  // NOLINT(bugprone-reserved-identifier): all ABIs
#include <cuda.h>
#include <cudaTypedefs.h>

#define FAKE_EXPORT
#include "cuda/internal/abi_same.h"
#include "fake_cuda_exports.h"

namespace {

using tessera::cuda::abi::FnAbiSame;
namespace fake = tessera::cuda::fake;

// Each export against the PFN type of the ABI its name stands for (cuMemAlloc: CUDA 2.0's 32-bit
// one; the _v2 names: the version that introduced them).
#define FAKE_EXPORTS(X)                                                              \
  X(cuInit, PFN_cuInit_v2000)                                                        \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                                \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                              \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                                    \
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)                                 \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)                    \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)              \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020)                                           \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v11040)                                          \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)                                          \
  X(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)                                         \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                      \
  X(cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                                      \
  X(cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                                    \
  X(cuMemAlloc, PFN_cuMemAlloc_v2000)                                                \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                             \
  X(cuMemAllocPitch_v2, PFN_cuMemAllocPitch_v3020)                                   \
  X(cuMemAllocManaged, PFN_cuMemAllocManaged_v6000)                                  \
  X(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                                     \
  X(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz)                           \
  X(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020)                     \
  X(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz)           \
  X(cuMemFree_v2, PFN_cuMemFree_v3020)                                               \
  X(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                                       \
  X(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz)                             \
  X(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)                                         \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v3020)                                       \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020)                                   \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000)                                        \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)                        \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)                      \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                             \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                           \
  X(cuMemAddressReserve, PFN_cuMemAddressReserve_v10020)                             \
  X(cuMemAddressFree, PFN_cuMemAddressFree_v10020)                                   \
  X(cuMemMap, PFN_cuMemMap_v10020)                                                   \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                               \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)             \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                        \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)                              \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                                   \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz)                         \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000)                  \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel_v9000_ptsz)        \
  X(cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020)                 \
  X(cuDeviceGetMemPool, PFN_cuDeviceGetMemPool_v11020)                               \
  X(cuMemPoolCreate, PFN_cuMemPoolCreate_v11020)                                     \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020)                                   \
  X(cuMemPoolTrimTo, PFN_cuMemPoolTrimTo_v11020)                                     \
  X(cuMemPoolSetAttribute, PFN_cuMemPoolSetAttribute_v11020)                         \
  X(cuMemPoolGetAttribute, PFN_cuMemPoolGetAttribute_v11020)                         \
  X(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000)                          \
  X(cuGraphCreate, PFN_cuGraphCreate_v10000)                                         \
  X(cuGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode_v11040)                       \
  X(cuGraphAddMemFreeNode, PFN_cuGraphAddMemFreeNode_v11040)                         \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)             \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)                               \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                                       \
  X(cuGraphDestroyNode, PFN_cuGraphDestroyNode_v10000)                               \
  X(cuGraphNodeGetType, PFN_cuGraphNodeGetType_v10000)                               \
  X(cuGraphMemAllocNodeGetParams, PFN_cuGraphMemAllocNodeGetParams_v11040)           \
  X(cuGraphMemFreeNodeGetParams, PFN_cuGraphMemFreeNodeGetParams_v11040)             \
  X(cuDeviceGraphMemTrim, PFN_cuDeviceGraphMemTrim_v11040)                           \
  X(cuDeviceGetGraphMemAttribute, PFN_cuDeviceGetGraphMemAttribute_v11040)           \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)                        \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)                               \
  X(cuStreamGetCaptureInfo_v2, PFN_cuStreamGetCaptureInfo_v11030)                    \
  X(cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                                        \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                                         \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz)                               \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                                        \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                              \
  X(cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)                             \
  X(cuThreadExchangeStreamCaptureMode, PFN_cuThreadExchangeStreamCaptureMode_v10010) \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                            \
  X(cuModuleLoadData, PFN_cuModuleLoadData_v2000)                                    \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)                              \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                          \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)                                     \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                          \
  X(cuEventRecord_ptsz, PFN_cuEventRecord_v7000_ptsz)                                \
  X(cuEventQuery, PFN_cuEventQuery_v2000)                                            \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                                \
  X(cuEventElapsedTime, PFN_cuEventElapsedTime_v2000)                                \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                                   \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)
#define FAKE_CHECK(name, pfn)                                 \
  static_assert(FnAbiSame<decltype(&fake::name), pfn>::value, \
                "the fake's " #name " does not have the driver's ABI (cudaTypedefs.h: " #pfn ")");
FAKE_EXPORTS(FAKE_CHECK)
#undef FAKE_CHECK
#undef FAKE_EXPORTS

}  // namespace
