// Compiled only where the CUDA toolkit's headers are (every machine of this project has CUDA 13 in
// /usr/local/cuda; elsewhere the vendored declarations of driver_api.h stand alone): the compiler
// checks every hook against the driver's own declarations. Each hook must have the ABI of
// cudaTypedefs.h's PFN_<base>_v<version>[_ptsz], the function pointer type cuGetProcAddress (both
// versions) returns for the name and CUDA version kHooks gives it, and so also that of the name
// dlsym finds. It emits no code.
//
// The hooks are seen here with C++ linkage (TESSERA_CUDA_EXPORT empty), so that they are not the
// same functions as cuda.h's C declarations of the same names, and are compared by ABI
// (cuda/internal/abi_same.h).
#define __CUDA_API_VERSION_INTERNAL 1  // NOLINT(bugprone-reserved-identifier): all ABIs
#include <cuda.h>
#include <cudaTypedefs.h>

#define TESSERA_CUDA_EXPORT
#include "cuda/internal/abi_same.h"
#include "cuda/internal/hooks.h"
#include "cuda/internal/interposer.h"

namespace {

using tessera::cuda::abi::FnAbiSame;
namespace ours = tessera::cuda;

// The codes and constants the interposer returns or compares.
static_assert(ours::kCudaSuccess == CUDA_SUCCESS);
static_assert(ours::kCudaErrorInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(ours::kCudaErrorOutOfMemory == CUDA_ERROR_OUT_OF_MEMORY);
static_assert(ours::kCudaErrorNotInitialized == CUDA_ERROR_NOT_INITIALIZED);
static_assert(ours::kCudaErrorInvalidContext == CUDA_ERROR_INVALID_CONTEXT);
static_assert(ours::kCudaErrorInvalidHandle == CUDA_ERROR_INVALID_HANDLE);
static_assert(ours::kCudaErrorNotFound == CUDA_ERROR_NOT_FOUND);
static_assert(ours::kCudaErrorNotReady == CUDA_ERROR_NOT_READY);
static_assert(ours::kCudaErrorNotSupported == CUDA_ERROR_NOT_SUPPORTED);
static_assert(ours::kCuGetProcAddressPerThreadDefaultStream ==
              CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
static_assert(ours::kCuGetProcAddressSuccess == CU_GET_PROC_ADDRESS_SUCCESS);
static_assert(ours::kCuGetProcAddressSymbolNotFound == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
static_assert(ours::kCuGetProcAddressVersionNotSufficient ==
              CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
static_assert(ours::kCuStreamCaptureStatusNone == CU_STREAM_CAPTURE_STATUS_NONE);
static_assert(ours::kCuStreamCaptureModeRelaxed == CU_STREAM_CAPTURE_MODE_RELAXED);
static_assert(ours::kCuMemLocationTypeDevice == CU_MEM_LOCATION_TYPE_DEVICE);
static_assert(ours::kCudaArray3dLayered == CUDA_ARRAY3D_LAYERED);
static_assert(ours::kCudaArray3dCubemap == CUDA_ARRAY3D_CUBEMAP);

// Every hook, in kHooks order, against the PFN type of kHooks' base name and first version (the
// _ptsz variants against the _ptsz PFN). The cuCtxCreate ABIs, which kHooks leaves out of
// cuGetProcAddress, against the PFN of the version that introduced each.
#define TESSERA_HOOKS(X)                                                             \
  X(cuInit, PFN_cuInit_v2000)                                                        \
  X(cuGetProcAddress, PFN_cuGetProcAddress_v11030)                                   \
  X(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)                                \
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
  X(cuDeviceTotalMem_v2, PFN_cuDeviceTotalMem_v3020)                                 \
  X(cuArrayCreate_v2, PFN_cuArrayCreate_v3020)                                       \
  X(cuArray3DCreate_v2, PFN_cuArray3DCreate_v3020)                                   \
  X(cuArrayDestroy, PFN_cuArrayDestroy_v2000)                                        \
  X(cuMipmappedArrayCreate, PFN_cuMipmappedArrayCreate_v5000)                        \
  X(cuMipmappedArrayDestroy, PFN_cuMipmappedArrayDestroy_v5000)                      \
  X(cuMemCreate, PFN_cuMemCreate_v10020)                                             \
  X(cuMemRelease, PFN_cuMemRelease_v10020)                                           \
  X(cuMemMap, PFN_cuMemMap_v10020)                                                   \
  X(cuMemUnmap, PFN_cuMemUnmap_v10020)                                               \
  X(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000)             \
  X(cuMemPoolDestroy, PFN_cuMemPoolDestroy_v11020)                                   \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                        \
  X(cuLaunchKernel_ptsz, PFN_cuLaunchKernel_v7000_ptsz)                              \
  X(cuLaunchKernelEx, PFN_cuLaunchKernelEx_v11060)                                   \
  X(cuLaunchKernelEx_ptsz, PFN_cuLaunchKernelEx_v11060_ptsz)                         \
  X(cuLaunchCooperativeKernel, PFN_cuLaunchCooperativeKernel_v9000)                  \
  X(cuLaunchCooperativeKernel_ptsz, PFN_cuLaunchCooperativeKernel_v9000_ptsz)        \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                                         \
  X(cuGraphLaunch_ptsz, PFN_cuGraphLaunch_v10000_ptsz)                               \
  X(cuGraphAddMemAllocNode, PFN_cuGraphAddMemAllocNode_v11040)                       \
  X(cuGraphAddMemFreeNode, PFN_cuGraphAddMemFreeNode_v11040)                         \
  X(cuGraphAddNode, PFN_cuGraphAddNode_v12020)                                       \
  X(cuGraphAddNode_v2, PFN_cuGraphAddNode_v12030)                                    \
  X(cuGraphInstantiate, PFN_cuGraphInstantiate_v10000)                               \
  X(cuGraphInstantiate_v2, PFN_cuGraphInstantiate_v11000)                            \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)             \
  X(cuGraphInstantiateWithParams, PFN_cuGraphInstantiateWithParams_v12000)           \
  X(cuGraphInstantiateWithParams_ptsz, PFN_cuGraphInstantiateWithParams_v12000_ptsz) \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)                               \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                                       \
  X(cuGraphDestroyNode, PFN_cuGraphDestroyNode_v10000)                               \
  X(cuCtxCreate_v2, PFN_cuCtxCreate_v3020)                                           \
  X(cuCtxCreate_v3, PFN_cuCtxCreate_v11040)                                          \
  X(cuCtxCreate_v4, PFN_cuCtxCreate_v12050)                                          \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)
#define TESSERA_CHECK(hook, pfn)                              \
  static_assert(FnAbiSame<decltype(&ours::hook), pfn>::value, \
                #hook " does not have the driver's ABI (cudaTypedefs.h: " #pfn ")");
TESSERA_HOOKS(TESSERA_CHECK)
#define TESSERA_COUNT(hook, pfn) +1
static_assert(0 TESSERA_HOOKS(TESSERA_COUNT) == tessera::cuda::internal::kHookCount,
              "a hook in kHooks is not checked against cuda.h here");
#undef TESSERA_COUNT
#undef TESSERA_CHECK
#undef TESSERA_HOOKS

// The helpers the memory hooks call, and the attributes they ask for.
namespace internal = tessera::cuda::internal;
static_assert(FnAbiSame<internal::PointerGetAttributeFn, PFN_cuPointerGetAttribute_v4000>::value);
static_assert(FnAbiSame<internal::MemPoolGetAttributeFn, PFN_cuMemPoolGetAttribute_v11020>::value);
static_assert(FnAbiSame<internal::MemPoolTrimToFn, PFN_cuMemPoolTrimTo_v11020>::value);
static_assert(FnAbiSame<internal::CtxGetDeviceFn, PFN_cuCtxGetDevice_v2000>::value);
static_assert(
    FnAbiSame<internal::StreamGetCaptureInfoV2Fn, PFN_cuStreamGetCaptureInfo_v11030>::value);
static_assert(FnAbiSame<internal::DeviceGetGraphMemAttributeFn,
                        PFN_cuDeviceGetGraphMemAttribute_v11040>::value);
static_assert(FnAbiSame<internal::DeviceGraphMemTrimFn, PFN_cuDeviceGraphMemTrim_v11040>::value);
static_assert(FnAbiSame<internal::GraphNodeGetTypeFn, PFN_cuGraphNodeGetType_v10000>::value);
static_assert(FnAbiSame<internal::GraphMemAllocNodeGetParamsFn,
                        PFN_cuGraphMemAllocNodeGetParams_v11040>::value);
static_assert(FnAbiSame<internal::GraphMemFreeNodeGetParamsFn,
                        PFN_cuGraphMemFreeNodeGetParams_v11040>::value);
static_assert(internal::kCuPointerAttributeMempoolHandle == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE);
static_assert(internal::kCuGraphMemAttrUsedMemCurrent == CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);
static_assert(internal::kCuGraphMemAttrReservedMemCurrent ==
              CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT);
static_assert(internal::kCuStreamCaptureStatusActive == CU_STREAM_CAPTURE_STATUS_ACTIVE);
static_assert(ours::kCuGraphNodeTypeMemAlloc == CU_GRAPH_NODE_TYPE_MEM_ALLOC);
static_assert(ours::kCuGraphNodeTypeMemFree == CU_GRAPH_NODE_TYPE_MEM_FREE);
static_assert(internal::kCuMempoolAttrReservedMemCurrent == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);

}  // namespace
