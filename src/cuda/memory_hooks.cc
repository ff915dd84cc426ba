// The allocation hooks: every device allocation the interposer sees is charged to the ledger
// before the driver is asked, at its requested size (pitch x height for pitched memory, the
// computed size for arrays), and given back when it is freed. Without a cap they only forward.
//
// Not charged: the context itself and what the driver or libraries allocate behind the
// application's back, host memory, IPC-imported and external memory, and cuMemMap of handles from
// elsewhere. The async frees give bytes back when the free is queued, and the driver's pools may
// keep freed memory reserved for reuse; cuMemRelease gives back on release, though a handle's
// memory lives until its last mapping goes. docs/agent.md lists these limits.
#include <algorithm>

#include "cuda/internal/hooks.h"
#include "cuda/internal/interposer.h"
#include "cuda/memory_ledger.h"

namespace tessera::cuda {
namespace {

using internal::Hook;
using internal::kMissingInDriver;
using internal::process;

// Runs allocate(key), the real allocation that sets the new allocation's key, with bytes
// reserved; keeps the reservation only if it succeeds. undo(key) frees what allocate made.
template <typename Allocate, typename Undo>
CUresult charged(MemoryLedger& ledger, AllocationKind kind, std::uint64_t bytes, Allocate allocate,
                 Undo undo) {
  if (!ledger.tryReserve(bytes)) {
    return kCudaErrorOutOfMemory;
  }
  std::uint64_t key = 0;
  const CUresult result = allocate(key);
  if (result != kCudaSuccess) {
    ledger.release(bytes);
    return result;
  }
  if (!ledger.track(kind, key, bytes)) {
    undo(key);
    ledger.release(bytes);
    return kCudaErrorOutOfMemory;
  }
  return result;
}

// Runs free() for key, giving its bytes back if it succeeds. The key is forgotten before the
// driver frees it, so the address cannot be handed out again while still in the ledger.
template <typename Free>
CUresult uncharged(MemoryLedger* ledger, AllocationKind kind, std::uint64_t key, Free free) {
  const auto bytes = ledger != nullptr ? ledger->untrack(kind, key) : std::nullopt;
  const CUresult result = free();
  // A free the driver refused leaves the allocation live: it is tracked again (and if even that
  // fails, released rather than leaked from the ledger).
  if (bytes && !(result != kCudaSuccess && ledger->track(kind, key, *bytes))) {
    ledger->release(*bytes);
  }
  return result;
}

template <typename T>
std::uint64_t key(T handle) {
  return reinterpret_cast<std::uint64_t>(handle);
}

using FreeFn = CUresult (*)(CUdeviceptr);

// The device pointer allocations: cuMemAlloc_v2 and the like, with alloc(dptr) the real call.
template <typename Alloc>
CUresult allocatePointer(CUdeviceptr* dptr, std::uint64_t bytes, Alloc alloc) {
  const internal::Process& p = process();
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || dptr == nullptr) {
    return alloc(dptr);
  }
  const auto free = p.real<FreeFn>(Hook::kCuMemFreeV2);
  return charged(
      *p.ledger, AllocationKind::kPointer, bytes,
      [&](std::uint64_t& k) {
        const CUresult r = alloc(dptr);
        k = *dptr;
        return r;
      },
      [&](std::uint64_t k) {
        if (free != nullptr) {
          free(k);
        }
      });
}

template <typename Fn>
Fn realOf(Hook hook) {
  return process().real<Fn>(hook);
}

}  // namespace

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) noexcept {
  const auto real = realOf<CUresult (*)(CUdeviceptr*, std::size_t)>(Hook::kCuMemAllocV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes); });
}

CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned flags) noexcept {
  const auto real =
      realOf<CUresult (*)(CUdeviceptr*, std::size_t, unsigned)>(Hook::kCuMemAllocManaged);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes, flags); });
}

// Pitched memory is charged pitch x height, which is known only once the driver chose the
// pitch: width x height is reserved before the call (so an allocation that cannot fit never
// reaches the driver), and the padding after it, undoing the allocation if that does not fit.
CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width_bytes,
                            std::size_t height, unsigned element_bytes) noexcept {
  const internal::Process& p = process();
  using Fn = CUresult (*)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t, unsigned);
  const auto real = p.real<Fn>(Hook::kCuMemAllocPitchV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || dptr == nullptr || pitch == nullptr) {
    return real(dptr, pitch, width_bytes, height, element_bytes);
  }
  std::uint64_t lower_bound = 0;
  if (__builtin_mul_overflow(width_bytes, height, &lower_bound)) {
    return kCudaErrorOutOfMemory;
  }
  MemoryLedger& ledger = *p.ledger;
  if (!ledger.tryReserve(lower_bound)) {
    return kCudaErrorOutOfMemory;
  }
  const CUresult result = real(dptr, pitch, width_bytes, height, element_bytes);
  if (result != kCudaSuccess) {
    ledger.release(lower_bound);
    return result;
  }
  const std::uint64_t bytes = std::uint64_t{*pitch} * height;
  std::uint64_t reserved = lower_bound;
  const auto undo = [&] {
    if (const auto free = p.real<FreeFn>(Hook::kCuMemFreeV2); free != nullptr) {
      free(*dptr);
    }
    ledger.release(reserved);
    return kCudaErrorOutOfMemory;
  };
  if (bytes > reserved) {
    if (!ledger.tryReserve(bytes - reserved)) {
      return undo();
    }
  } else {
    ledger.release(reserved - bytes);
  }
  reserved = bytes;
  if (!ledger.track(AllocationKind::kPointer, *dptr, bytes)) {
    return undo();
  }
  return kCudaSuccess;
}

CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) noexcept {
  const auto real =
      realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(Hook::kCuMemAllocAsync);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes, stream); });
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) noexcept {
  const auto real =
      realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(Hook::kCuMemAllocAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes, stream); });
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                 CUstream stream) noexcept {
  const auto real = realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream)>(
      Hook::kCuMemAllocFromPoolAsync);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes, pool, stream); });
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                      CUstream stream) noexcept {
  const auto real = realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream)>(
      Hook::kCuMemAllocFromPoolAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePointer(dptr, bytes, [&](CUdeviceptr* d) { return real(d, bytes, pool, stream); });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<FreeFn>(Hook::kCuMemFreeV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kPointer, dptr, [&] { return real(dptr); });
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUdeviceptr, CUstream)>(Hook::kCuMemFreeAsync);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kPointer, dptr,
                   [&] { return real(dptr, stream); });
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUdeviceptr, CUstream)>(Hook::kCuMemFreeAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kPointer, dptr,
                   [&] { return real(dptr, stream); });
}

// With a cap, the process sees a device of the cap's size: total = cap (or less, if the device
// is smaller), free = what is left of it (or less, if the device has less free).
CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(std::size_t*, std::size_t*)>(Hook::kCuMemGetInfoV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(free_bytes, total_bytes);
  if (result != kCudaSuccess || p.ledger == nullptr || free_bytes == nullptr ||
      total_bytes == nullptr) {
    return result;
  }
  const std::uint64_t total = std::min<std::uint64_t>(p.ledger->capBytes(), *total_bytes);
  const std::uint64_t used = p.ledger->usedBytes();
  *total_bytes = total;
  *free_bytes = std::min<std::uint64_t>(*free_bytes, total > used ? total - used : 0);
  return result;
}

CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice device) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(std::size_t*, CUdevice)>(Hook::kCuDeviceTotalMemV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(bytes, device);
  if (result == kCudaSuccess && p.ledger != nullptr && bytes != nullptr) {
    *bytes = std::min<std::uint64_t>(*bytes, p.ledger->capBytes());
  }
  return result;
}

namespace {

// Arrays and mipmapped arrays: size computed from the descriptor (nullopt: it does not fit in 64
// bits, which no device has), then charged like pointers under their handle.
template <typename Handle, typename Alloc, typename Destroy>
CUresult allocateHandle(Handle* handle, std::optional<std::uint64_t> bytes, AllocationKind kind,
                        Alloc alloc, Destroy destroy) {
  const internal::Process& p = process();
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || handle == nullptr) {
    return alloc();
  }
  if (!bytes) {
    return kCudaErrorOutOfMemory;
  }
  return charged(
      *p.ledger, kind, *bytes,
      [&](std::uint64_t& k) {
        const CUresult r = alloc();
        k = key(*handle);
        return r;
      },
      [&](std::uint64_t) {
        if (destroy != nullptr) {
          destroy(*handle);
        }
      });
}

}  // namespace

CUresult cuArrayCreate_v2(CUarray* array, const CudaArrayDescriptor* desc) noexcept {
  const internal::Process& p = process();
  const auto real =
      p.real<CUresult (*)(CUarray*, const CudaArrayDescriptor*)>(Hook::kCuArrayCreateV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (desc == nullptr) {
    return real(array, desc);
  }
  return allocateHandle(
      array, arrayBytes(*desc), AllocationKind::kArray, [&] { return real(array, desc); },
      p.real<CUresult (*)(CUarray)>(Hook::kCuArrayDestroy));
}

CUresult cuArray3DCreate_v2(CUarray* array, const CudaArray3dDescriptor* desc) noexcept {
  const internal::Process& p = process();
  const auto real =
      p.real<CUresult (*)(CUarray*, const CudaArray3dDescriptor*)>(Hook::kCuArray3DCreateV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (desc == nullptr) {
    return real(array, desc);
  }
  return allocateHandle(
      array, array3DBytes(*desc), AllocationKind::kArray, [&] { return real(array, desc); },
      p.real<CUresult (*)(CUarray)>(Hook::kCuArrayDestroy));
}

CUresult cuArrayDestroy(CUarray array) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUarray)>(Hook::kCuArrayDestroy);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kArray, key(array), [&] { return real(array); });
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray* array, const CudaArray3dDescriptor* desc,
                                unsigned levels) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUmipmappedArray*, const CudaArray3dDescriptor*, unsigned)>(
      Hook::kCuMipmappedArrayCreate);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (desc == nullptr) {
    return real(array, desc, levels);
  }
  return allocateHandle(
      array, mipmappedArrayBytes(*desc, levels), AllocationKind::kMipmappedArray,
      [&] { return real(array, desc, levels); },
      p.real<CUresult (*)(CUmipmappedArray)>(Hook::kCuMipmappedArrayDestroy));
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray array) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUmipmappedArray)>(Hook::kCuMipmappedArrayDestroy);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kMipmappedArray, key(array),
                   [&] { return real(array); });
}

// Virtual memory management: physical memory made on a device is charged when it is created
// (cuMemCreate's size is already a multiple of the granularity); host-located memory is not.
CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                     const CUmemAllocationPropPrefix* prop, unsigned long long flags) noexcept {
  const internal::Process& p = process();
  using Fn = CUresult (*)(CUmemGenericAllocationHandle*, std::size_t,
                          const CUmemAllocationPropPrefix*, unsigned long long);
  const auto real = p.real<Fn>(Hook::kCuMemCreate);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || handle == nullptr || prop == nullptr ||
      prop->location_type != kCuMemLocationTypeDevice) {
    return real(handle, bytes, prop, flags);
  }
  const auto release = p.real<CUresult (*)(CUmemGenericAllocationHandle)>(Hook::kCuMemRelease);
  return charged(
      *p.ledger, AllocationKind::kHandle, bytes,
      [&](std::uint64_t& k) {
        const CUresult r = real(handle, bytes, prop, flags);
        k = *handle;
        return r;
      },
      [&](std::uint64_t k) {
        if (release != nullptr) {
          release(k);
        }
      });
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUmemGenericAllocationHandle)>(Hook::kCuMemRelease);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return uncharged(p.ledger.get(), AllocationKind::kHandle, handle, [&] { return real(handle); });
}

}  // namespace tessera::cuda
