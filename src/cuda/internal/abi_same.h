// Internal to the CUDA interposer's checks against the toolkit's headers (abi_check.cc here and
// in tests/fake_cuda): whether a function of ours has the ABI of one of cuda.h's. Include after
// cuda.h (with __CUDA_API_VERSION_INTERNAL, for every ABI) and cudaTypedefs.h.
//
// Two functions have one ABI when they take the same number of arguments, each the same type, an
// integer or enum of the same size (a CUresult is cuda.h's enum and our int), or a pointer to a
// type that has the driver's layout (checked field by field here) or is the same opaque handle,
// and return the same way. A difference in noexcept is none.
#pragma once

#ifndef CUDA_VERSION
#error "include cuda.h before cuda/internal/abi_same.h"
#endif

#include <cstddef>
#include <type_traits>

#include "cuda/driver_api.h"

namespace tessera::cuda::abi {

namespace ours = tessera::cuda;

template <class A, class B>
struct Corresponds : std::false_type {};  // Ours A stands for the driver's B (by name below).

template <class T>
inline constexpr bool kIntegerLike = std::is_integral_v<T> || std::is_enum_v<T>;

template <class A, class B>
constexpr bool abiSame() {
  if constexpr (std::is_same_v<A, B>) {
    return true;
  } else if constexpr (std::is_pointer_v<A> && std::is_pointer_v<B>) {
    using PA = std::remove_pointer_t<A>;
    using PB = std::remove_pointer_t<B>;
    return std::is_const_v<PA> == std::is_const_v<PB> &&
           abiSame<std::remove_const_t<PA>, std::remove_const_t<PB>>();
  } else if constexpr (kIntegerLike<A> && kIntegerLike<B>) {
    return sizeof(A) == sizeof(B);  // A CUresult is cuda.h's enum and our int.
  } else {
    return Corresponds<A, B>::value;
  }
}

template <class... A>
struct Args {};

template <class A, class B>
struct ArgsAbiSame : std::false_type {};
template <class... A, class... B>
struct ArgsAbiSame<Args<A...>, Args<B...>> {
  static constexpr bool value = [] {
    if constexpr (sizeof...(A) != sizeof...(B)) {
      return false;
    } else {
      return (abiSame<A, B>() && ...);
    }
  }();
};

template <class Ours, class Theirs>
struct FnAbiSame : std::false_type {};
template <class R1, class... A1, bool kNoexcept, class R2, class... A2>
struct FnAbiSame<R1 (*)(A1...) noexcept(kNoexcept), R2 (*)(A2...)>
    : std::bool_constant<abiSame<R1, R2>() && ArgsAbiSame<Args<A1...>, Args<A2...>>::value> {};

// Opaque handles: only their pointers cross the boundary.
#define TESSERA_OPAQUE(name) \
  template <>                \
  struct Corresponds<ours::name, ::name> : std::true_type {};
TESSERA_OPAQUE(CUctx_st)
TESSERA_OPAQUE(CUstream_st)
TESSERA_OPAQUE(CUevent_st)
TESSERA_OPAQUE(CUfunc_st)
TESSERA_OPAQUE(CUarray_st)
TESSERA_OPAQUE(CUmipmappedArray_st)
TESSERA_OPAQUE(CUmemPoolHandle_st)
TESSERA_OPAQUE(CUgraphExec_st)
TESSERA_OPAQUE(CUmod_st)
TESSERA_OPAQUE(CUlaunchAttribute)    // Ours never reads one.
TESSERA_OPAQUE(CUexecAffinityParam)  // Passed through.
TESSERA_OPAQUE(CUctxCreateParams)    // Passed through.
TESSERA_OPAQUE(CUmemPoolProps_st)    // Passed through.
TESSERA_OPAQUE(CUgraph_st)
TESSERA_OPAQUE(CUgraphNode_st)
TESSERA_OPAQUE(CUgraphEdgeData_st)                // Passed through.
TESSERA_OPAQUE(CUDA_GRAPH_INSTANTIATE_PARAMS_st)  // Passed through.
#undef TESSERA_OPAQUE

// Structures the hooks read: the same fields at the same offsets (ours may be a prefix).
#define TESSERA_SAME_FIELD(a, fa, b, fb)                                                    \
  static_assert(                                                                            \
      offsetof(ours::a, fa) == offsetof(::b, fb) && sizeof(ours::a::fa) == sizeof(::b::fb), \
      #a "::" #fa " is not where cuda.h's " #b "::" #fb " is");
#define TESSERA_SAME_STRUCT(a, b)                                                   \
  static_assert(sizeof(ours::a) == sizeof(::b) && alignof(ours::a) == alignof(::b), \
                #a " does not have the size of cuda.h's " #b);                      \
  template <>                                                                       \
  struct Corresponds<ours::a, ::b> : std::true_type {};

TESSERA_SAME_FIELD(CudaArrayDescriptor, Width, CUDA_ARRAY_DESCRIPTOR_v2, Width)
TESSERA_SAME_FIELD(CudaArrayDescriptor, Height, CUDA_ARRAY_DESCRIPTOR_v2, Height)
TESSERA_SAME_FIELD(CudaArrayDescriptor, Format, CUDA_ARRAY_DESCRIPTOR_v2, Format)
TESSERA_SAME_FIELD(CudaArrayDescriptor, NumChannels, CUDA_ARRAY_DESCRIPTOR_v2, NumChannels)
TESSERA_SAME_STRUCT(CudaArrayDescriptor, CUDA_ARRAY_DESCRIPTOR_v2)

TESSERA_SAME_FIELD(CudaArray3dDescriptor, Width, CUDA_ARRAY3D_DESCRIPTOR_v2, Width)
TESSERA_SAME_FIELD(CudaArray3dDescriptor, Height, CUDA_ARRAY3D_DESCRIPTOR_v2, Height)
TESSERA_SAME_FIELD(CudaArray3dDescriptor, Depth, CUDA_ARRAY3D_DESCRIPTOR_v2, Depth)
TESSERA_SAME_FIELD(CudaArray3dDescriptor, Format, CUDA_ARRAY3D_DESCRIPTOR_v2, Format)
TESSERA_SAME_FIELD(CudaArray3dDescriptor, NumChannels, CUDA_ARRAY3D_DESCRIPTOR_v2, NumChannels)
TESSERA_SAME_FIELD(CudaArray3dDescriptor, Flags, CUDA_ARRAY3D_DESCRIPTOR_v2, Flags)
TESSERA_SAME_STRUCT(CudaArray3dDescriptor, CUDA_ARRAY3D_DESCRIPTOR_v2)

TESSERA_SAME_FIELD(CUlaunchConfig, gridDimX, CUlaunchConfig, gridDimX)
TESSERA_SAME_FIELD(CUlaunchConfig, gridDimY, CUlaunchConfig, gridDimY)
TESSERA_SAME_FIELD(CUlaunchConfig, gridDimZ, CUlaunchConfig, gridDimZ)
TESSERA_SAME_FIELD(CUlaunchConfig, blockDimX, CUlaunchConfig, blockDimX)
TESSERA_SAME_FIELD(CUlaunchConfig, blockDimY, CUlaunchConfig, blockDimY)
TESSERA_SAME_FIELD(CUlaunchConfig, blockDimZ, CUlaunchConfig, blockDimZ)
TESSERA_SAME_FIELD(CUlaunchConfig, sharedMemBytes, CUlaunchConfig, sharedMemBytes)
TESSERA_SAME_FIELD(CUlaunchConfig, hStream, CUlaunchConfig, hStream)
TESSERA_SAME_FIELD(CUlaunchConfig, attrs, CUlaunchConfig, attrs)
TESSERA_SAME_FIELD(CUlaunchConfig, numAttrs, CUlaunchConfig, numAttrs)
TESSERA_SAME_STRUCT(CUlaunchConfig, CUlaunchConfig)

// Ours is the prefix the hook reads: the allocation's type and where it lives.
TESSERA_SAME_FIELD(CUmemAllocationPropPrefix, type, CUmemAllocationProp, type)
TESSERA_SAME_FIELD(CUmemAllocationPropPrefix, requested_handle_types, CUmemAllocationProp,
                   requestedHandleTypes)
static_assert(offsetof(ours::CUmemAllocationPropPrefix, location_type) ==
                      offsetof(::CUmemAllocationProp, location) + offsetof(::CUmemLocation, type) &&
                  offsetof(ours::CUmemAllocationPropPrefix, location_id) ==
                      offsetof(::CUmemAllocationProp, location) + offsetof(::CUmemLocation, id),
              "CUmemAllocationPropPrefix's location is not where cuda.h's is");
static_assert(sizeof(ours::CUmemAllocationPropPrefix) <= sizeof(::CUmemAllocationProp));
template <>
struct Corresponds<ours::CUmemAllocationPropPrefix, ::CUmemAllocationProp> : std::true_type {};
// An allocation node's parameters: the pool's location (inside its CUmemPoolProps), then the size
// and the address. v1 and v2 have one layout.
static_assert(offsetof(ours::CudaMemAllocNodeParams, location_type) ==
                      offsetof(::CUDA_MEM_ALLOC_NODE_PARAMS_v1, poolProps) +
                          offsetof(::CUmemPoolProps, location) + offsetof(::CUmemLocation, type) &&
                  offsetof(ours::CudaMemAllocNodeParams, location_id) ==
                      offsetof(::CUDA_MEM_ALLOC_NODE_PARAMS_v1, poolProps) +
                          offsetof(::CUmemPoolProps, location) + offsetof(::CUmemLocation, id),
              "CudaMemAllocNodeParams's location is not where cuda.h's is");
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, access_descs, CUDA_MEM_ALLOC_NODE_PARAMS_v1, accessDescs)
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, access_desc_count, CUDA_MEM_ALLOC_NODE_PARAMS_v1,
                   accessDescCount)
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, bytesize, CUDA_MEM_ALLOC_NODE_PARAMS_v1, bytesize)
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, dptr, CUDA_MEM_ALLOC_NODE_PARAMS_v1, dptr)
TESSERA_SAME_STRUCT(CudaMemAllocNodeParams, CUDA_MEM_ALLOC_NODE_PARAMS_v1_st)
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, bytesize, CUDA_MEM_ALLOC_NODE_PARAMS_v2, bytesize)
TESSERA_SAME_FIELD(CudaMemAllocNodeParams, dptr, CUDA_MEM_ALLOC_NODE_PARAMS_v2, dptr)
static_assert(sizeof(ours::CudaMemAllocNodeParams) == sizeof(::CUDA_MEM_ALLOC_NODE_PARAMS_v2));

TESSERA_SAME_FIELD(CUgraphNodeParams, type, CUgraphNodeParams, type)
TESSERA_SAME_FIELD(CUgraphNodeParams, alloc, CUgraphNodeParams, alloc)
TESSERA_SAME_FIELD(CUgraphNodeParams, reserved2, CUgraphNodeParams, reserved2)
static_assert(offsetof(ours::CUgraphNodeParams, free_dptr) ==
                  offsetof(::CUgraphNodeParams, free) + offsetof(::CUDA_MEM_FREE_NODE_PARAMS, dptr),
              "CUgraphNodeParams's free node address is not where cuda.h's is");
TESSERA_SAME_STRUCT(CUgraphNodeParams, CUgraphNodeParams_st)
#undef TESSERA_SAME_FIELD
#undef TESSERA_SAME_STRUCT

}  // namespace tessera::cuda::abi
