// The driver functions the fake libcuda.so.1 (fake_cuda.cc) exports, declared with C linkage in a
// namespace of their own so that abi_check.cc can see them beside cuda.h's: there it defines
// FAKE_EXPORT empty, and checks each against cudaTypedefs.h's type for its name and version.
#pragma once

#include <cstddef>

#include "cuda/driver_api.h"

#ifndef FAKE_EXPORT
#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
#endif

namespace tessera::cuda::fake {

// The names are the driver's ABI.
// NOLINTBEGIN(readability-identifier-naming)
FAKE_EXPORT CUresult cuInit(unsigned);
FAKE_EXPORT CUresult cuDriverGetVersion(int*);
FAKE_EXPORT CUresult cuDeviceGet(CUdevice*, int);
FAKE_EXPORT CUresult cuDeviceGetCount(int*);
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t*, CUdevice);
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice);
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext*, unsigned, CUdevice);
FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice);
FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext);
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext);
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext*);
FAKE_EXPORT CUresult cuCtxSynchronize();
FAKE_EXPORT CUresult cuMemAlloc(unsigned*, unsigned);
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr*, std::size_t);
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr*, std::size_t*, std::size_t, std::size_t,
                                        unsigned);
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr*, std::size_t, unsigned);
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr*, std::size_t, CUstream);
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, std::size_t, CUstream);
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream);
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, std::size_t, CUmemoryPool,
                                                  CUstream);
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr);
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t*, std::size_t*);
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray*, const CudaArrayDescriptor*);
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray*, const CudaArray3dDescriptor*);
FAKE_EXPORT CUresult cuArrayDestroy(CUarray);
FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray*, const CudaArray3dDescriptor*,
                                            unsigned);
FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray);
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle*, std::size_t,
                                 const CUmemAllocationPropPrefix*, unsigned long long);
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle);
FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                                         unsigned long long);
FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr, std::size_t);
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                              unsigned long long);
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr, std::size_t);
FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle*, void*);
FAKE_EXPORT CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void**, void**);
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                         unsigned, unsigned, unsigned, CUstream, void**, void**);
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void**, void**);
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig*, CUfunction, void**, void**);
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, unsigned, unsigned, CUstream, void**);
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned,
                                                    unsigned, unsigned, unsigned, unsigned,
                                                    CUstream, void**);
FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool*, CUdevice);
FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool*, CUdevice);
FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool*, const CUmemPoolProps*);
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool);
FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool, std::size_t);
FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool, int, void*);
FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool, int, void*);
FAKE_EXPORT CUresult cuPointerGetAttribute(void*, int, CUdeviceptr);
FAKE_EXPORT CUresult cuGraphCreate(CUgraph*, unsigned);
FAKE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t,
                                            CudaMemAllocNodeParams*);
FAKE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t,
                                           CUdeviceptr);
FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec*, CUgraph, unsigned long long);
FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec);
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph);
FAKE_EXPORT CUresult cuGraphDestroyNode(CUgraphNode);
FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode, int*);
FAKE_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode, CudaMemAllocNodeParams*);
FAKE_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode, CUdeviceptr*);
FAKE_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice);
FAKE_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice, int, void*);
FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode);
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream, CUgraph*);
FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream, CUstreamCaptureStatus*, cuuint64_t*,
                                               CUgraph*, const CUgraphNode**, std::size_t*);
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice*);
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec, CUstream);
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec, CUstream);
FAKE_EXPORT CUresult cuStreamCreate(CUstream*, unsigned);
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream);
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus*);
FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode*);
FAKE_EXPORT CUresult cuDeviceGetAttribute(int*, int, CUdevice);
FAKE_EXPORT CUresult cuModuleLoadData(CUmodule*, const void*);
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*);
FAKE_EXPORT CUresult cuEventCreate(CUevent*, unsigned);
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent);
FAKE_EXPORT CUresult cuEventRecord(CUevent, CUstream);
FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent, CUstream);
FAKE_EXPORT CUresult cuEventQuery(CUevent);
FAKE_EXPORT CUresult cuEventSynchronize(CUevent);
FAKE_EXPORT CUresult cuEventElapsedTime(float*, CUevent, CUevent);
FAKE_EXPORT CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);
// NOLINTEND(readability-identifier-naming)

}  // namespace tessera::cuda::fake
