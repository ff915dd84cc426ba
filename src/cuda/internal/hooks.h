// Internal to libtessera-cuda.so: the exported hooks, with the driver's ABI (cuda.h's types and
// argument order). Defined in interposer.cc (init, contexts, cuGetProcAddress), memory_hooks.cc
// and launch_hooks.cc; listed in kHooks.
#pragma once

#include <cstddef>

#include "cuda/driver_api.h"
#include "cuda/internal/interposer.h"

namespace tessera::cuda {

// The names are the driver's ABI, not ours to choose.
// NOLINTBEGIN(readability-identifier-naming)
TESSERA_CUDA_EXPORT CUresult cuInit(unsigned flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                                              cuuint64_t flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                                 cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* status) noexcept;

TESSERA_CUDA_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch,
                                                std::size_t width_bytes, std::size_t height,
                                                unsigned element_bytes) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes,
                                               unsigned flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes,
                                             CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes,
                                                  CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes,
                                                     CUmemoryPool pool, CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes,
                                                          CUmemoryPool pool,
                                                          CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemGetInfo_v2(std::size_t* free_bytes,
                                             std::size_t* total_bytes) noexcept;
TESSERA_CUDA_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) noexcept;
TESSERA_CUDA_EXPORT CUresult cuArrayCreate_v2(CUarray* array,
                                              const CudaArrayDescriptor* desc) noexcept;
TESSERA_CUDA_EXPORT CUresult cuArray3DCreate_v2(CUarray* array,
                                                const CudaArray3dDescriptor* desc) noexcept;
TESSERA_CUDA_EXPORT CUresult cuArrayDestroy(CUarray array) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* array,
                                                    const CudaArray3dDescriptor* desc,
                                                    unsigned levels) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                                         const CUmemAllocationPropPrefix* prop,
                                         unsigned long long flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemMap(CUdeviceptr address, std::size_t size, std::size_t offset,
                                      CUmemGenericAllocationHandle handle,
                                      unsigned long long flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemUnmap(CUdeviceptr address, std::size_t size) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                         void* address) noexcept;
TESSERA_CUDA_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) noexcept;

TESSERA_CUDA_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned grid_x, unsigned grid_y,
                                            unsigned grid_z, unsigned block_x, unsigned block_y,
                                            unsigned block_z, unsigned shared_bytes,
                                            CUstream stream, void** params, void** extra) noexcept;
TESSERA_CUDA_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned grid_x, unsigned grid_y,
                                                 unsigned grid_z, unsigned block_x,
                                                 unsigned block_y, unsigned block_z,
                                                 unsigned shared_bytes, CUstream stream,
                                                 void** params, void** extra) noexcept;
TESSERA_CUDA_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f,
                                              void** params, void** extra) noexcept;
TESSERA_CUDA_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                   void** params, void** extra) noexcept;
TESSERA_CUDA_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned grid_x,
                                                       unsigned grid_y, unsigned grid_z,
                                                       unsigned block_x, unsigned block_y,
                                                       unsigned block_z, unsigned shared_bytes,
                                                       CUstream stream, void** params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned grid_x,
                                                            unsigned grid_y, unsigned grid_z,
                                                            unsigned block_x, unsigned block_y,
                                                            unsigned block_z, unsigned shared_bytes,
                                                            CUstream stream,
                                                            void** params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream) noexcept;

TESSERA_CUDA_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph,
                                                    const CUgraphNode* dependencies,
                                                    std::size_t dependency_count,
                                                    CudaMemAllocNodeParams* params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph,
                                                   const CUgraphNode* dependencies,
                                                   std::size_t dependency_count,
                                                   CUdeviceptr dptr) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph,
                                            const CUgraphNode* dependencies,
                                            std::size_t dependency_count,
                                            CUgraphNodeParams* params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph,
                                               const CUgraphNode* dependencies,
                                               const CUgraphEdgeData* edge_data,
                                               std::size_t dependency_count,
                                               CUgraphNodeParams* params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph,
                                                CUgraphNode* error_node, char* log,
                                                std::size_t log_size) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph,
                                                   CUgraphNode* error_node, char* log,
                                                   std::size_t log_size) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                         unsigned long long flags) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphInstantiateWithParams(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphDestroy(CUgraph graph) noexcept;
TESSERA_CUDA_EXPORT CUresult cuGraphDestroyNode(CUgraphNode node) noexcept;

TESSERA_CUDA_EXPORT CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned flags,
                                            CUdevice device) noexcept;
TESSERA_CUDA_EXPORT CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params,
                                            int param_count, unsigned flags,
                                            CUdevice device) noexcept;
TESSERA_CUDA_EXPORT CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params,
                                            unsigned flags, CUdevice device) noexcept;
TESSERA_CUDA_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) noexcept;
// NOLINTEND(readability-identifier-naming)

}  // namespace tessera::cuda
