// The few CUDA driver API types, codes and structures the interposer (and its tests) use, with
// the ABI of cuda.h on 64-bit Linux. Declared here so that nothing of ours needs the CUDA
// headers: a CUresult is an int-sized enum, handles are opaque pointers, CUdeviceptr is 64 bits.
// Only the prefix of a structure that the interposer reads is declared where the rest does not
// matter (CUmemAllocationProp); the others are complete. Types keep cuda.h's names; constants
// are cuda.h's in kPascalCase (CUDA_ERROR_OUT_OF_MEMORY is kCudaErrorOutOfMemory), as the agent
// does for NVML.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::cuda {

using CUresult = int;
inline constexpr CUresult kCudaSuccess = 0;
inline constexpr CUresult kCudaErrorInvalidValue = 1;
inline constexpr CUresult kCudaErrorOutOfMemory = 2;
inline constexpr CUresult kCudaErrorNotInitialized = 3;
inline constexpr CUresult kCudaErrorInvalidContext = 201;
inline constexpr CUresult kCudaErrorInvalidHandle = 400;
inline constexpr CUresult kCudaErrorNotFound = 500;
inline constexpr CUresult kCudaErrorNotReady = 600;
inline constexpr CUresult kCudaErrorNotSupported = 801;

using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2
using CUdevice = int;
using CUmemGenericAllocationHandle = unsigned long long;
using cuuint64_t = std::uint64_t;
struct CUctx_st;
using CUcontext = CUctx_st*;
struct CUstream_st;
using CUstream = CUstream_st*;
struct CUevent_st;
using CUevent = CUevent_st*;
struct CUfunc_st;
using CUfunction = CUfunc_st*;
struct CUarray_st;
using CUarray = CUarray_st*;
struct CUmipmappedArray_st;
using CUmipmappedArray = CUmipmappedArray_st*;
struct CUmemPoolHandle_st;
using CUmemoryPool = CUmemPoolHandle_st*;
struct CUmemPoolProps_st;
using CUmemPoolProps = CUmemPoolProps_st;
struct CUgraphExec_st;
using CUgraphExec = CUgraphExec_st*;
struct CUgraph_st;
using CUgraph = CUgraph_st*;
struct CUgraphNode_st;
using CUgraphNode = CUgraphNode_st*;
struct CUgraphEdgeData_st;
using CUgraphEdgeData = CUgraphEdgeData_st;
struct CUDA_GRAPH_INSTANTIATE_PARAMS_st;
using CUDA_GRAPH_INSTANTIATE_PARAMS = CUDA_GRAPH_INSTANTIATE_PARAMS_st;
struct CUmod_st;
using CUmodule = CUmod_st*;
struct CUexecAffinityParam;
struct CUctxCreateParams;
struct CUlaunchAttribute;

// The implicit streams a CUstream argument may name (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD).
inline constexpr std::uintptr_t kCuStreamLegacy = 0x1;
inline constexpr std::uintptr_t kCuStreamPerThread = 0x2;

// CUdriverProcAddress_flags and CUdriverProcAddressQueryResult.
inline constexpr cuuint64_t kCuGetProcAddressPerThreadDefaultStream = 1u << 1;
using CUdriverProcAddressQueryResult = int;
inline constexpr CUdriverProcAddressQueryResult kCuGetProcAddressSuccess = 0;
inline constexpr CUdriverProcAddressQueryResult kCuGetProcAddressSymbolNotFound = 1;
inline constexpr CUdriverProcAddressQueryResult kCuGetProcAddressVersionNotSufficient = 2;

// CUstreamCaptureStatus and CUstreamCaptureMode.
using CUstreamCaptureStatus = int;
inline constexpr CUstreamCaptureStatus kCuStreamCaptureStatusNone = 0;
using CUstreamCaptureMode = int;
inline constexpr CUstreamCaptureMode kCuStreamCaptureModeRelaxed = 2;

// CUarray_format values with a fixed element size (see arrayBytes in memory_ledger.h).
using CUarray_format = int;
inline constexpr CUarray_format kCuAdFormatUnsignedInt8 = 0x01;
inline constexpr CUarray_format kCuAdFormatUnsignedInt16 = 0x02;
inline constexpr CUarray_format kCuAdFormatUnsignedInt32 = 0x03;
inline constexpr CUarray_format kCuAdFormatSignedInt8 = 0x08;
inline constexpr CUarray_format kCuAdFormatSignedInt16 = 0x09;
inline constexpr CUarray_format kCuAdFormatSignedInt32 = 0x0a;
inline constexpr CUarray_format kCuAdFormatHalf = 0x10;
inline constexpr CUarray_format kCuAdFormatFloat = 0x20;
inline constexpr CUarray_format kCuAdFormatBc1Unorm = 0x91;  // ... through 0x9e: BC1..BC7.
inline constexpr CUarray_format kCuAdFormatBc7UnormSrgb = 0x9e;
inline constexpr CUarray_format kCuAdFormatNv12 = 0xb0;
inline constexpr CUarray_format kCuAdFormatUnormInt8x1 = 0xc0;   // ... through 0xcb: the
inline constexpr CUarray_format kCuAdFormatSnormInt16x4 = 0xcb;  // normalized X1/X2/X4 ones.

inline constexpr unsigned kCudaArray3dLayered = 0x01;
inline constexpr unsigned kCudaArray3dCubemap = 0x04;

struct CudaArrayDescriptor {  // CUDA_ARRAY_DESCRIPTOR_v2
  std::size_t Width;
  std::size_t Height;
  CUarray_format Format;
  unsigned NumChannels;
};

struct CudaArray3dDescriptor {  // CUDA_ARRAY3D_DESCRIPTOR_v2
  std::size_t Width;
  std::size_t Height;
  std::size_t Depth;
  CUarray_format Format;
  unsigned NumChannels;
  unsigned Flags;
};

// CUmemAllocationProp up to its location, which says whether cuMemCreate makes device memory.
inline constexpr int kCuMemLocationTypeDevice = 0x1;
struct CUmemAllocationPropPrefix {
  int type;                    // CUmemAllocationType
  int requested_handle_types;  // CUmemAllocationHandleType
  int location_type;           // CUmemLocation::type
  int location_id;             // CUmemLocation::id
};

// CUDA_MEM_ALLOC_NODE_PARAMS (v1 and v2 alike): its pool's properties, of which the hooks read
// where the memory lives, then the size asked for and the address the driver gives back.
struct CudaMemAllocNodeParams {
  int pool_alloc_type;    // CUmemPoolProps::allocType
  int pool_handle_types;  // CUmemPoolProps::handleTypes
  int location_type;      // CUmemPoolProps::location.type
  int location_id;        // CUmemPoolProps::location.id
  unsigned char pool_rest[72];
  const void* access_descs;
  std::size_t access_desc_count;
  std::size_t bytesize;
  CUdeviceptr dptr;
};

// CUgraphNodeParams: the node's type, then its parameters (a union), then reserved bytes.
inline constexpr int kCuGraphNodeTypeMemAlloc = 10;
inline constexpr int kCuGraphNodeTypeMemFree = 11;
struct CUgraphNodeParams {
  int type;
  int reserved0[3];
  union {
    long long reserved1[29];
    CudaMemAllocNodeParams alloc;
    CUdeviceptr free_dptr;  // CUDA_MEM_FREE_NODE_PARAMS
  };
  long long reserved2;
};

struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};

}  // namespace tessera::cuda
