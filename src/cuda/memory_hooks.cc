// The allocation hooks: every device allocation the interposer sees is charged to the ledger
// before the driver is asked, at its requested size (pitch x height for pitched memory, the
// computed size for arrays), and given back when it is freed. Without a cap they only forward.
//
// Stream-ordered allocations (cuMemAllocAsync, cuMemAllocFromPoolAsync) come from pools that keep
// freed memory reserved for reuse, so their frees give the bytes to the pool, still charged. When
// an allocation would pass the cap while pools keep memory, the hooks ask the driver how much each
// pool really still holds (it lets memory go at synchronizes, down to the pool's release
// threshold), and if that is not enough, trim the pools, before they refuse: the cap holds for
// what the process has on the device, and freed memory never causes a false refusal.
//
// Graph memory nodes (cuGraphAddMemAllocNode, cuGraphAddNode, cuMemAllocAsync on a stream being
// captured) are charged when made and stay charged while their graph can run (MemoryLedger says
// how long); the device's graph memory pool is settled and trimmed like a pool.
//
// Not charged: the context itself and what the driver or libraries allocate behind the
// application's back, host memory, IPC-imported and external memory, and cuMemMap of handles from
// elsewhere. docs/agent.md lists these limits.
#include <algorithm>

#include "cuda/internal/hooks.h"
#include "cuda/internal/interposer.h"
#include "cuda/memory_ledger.h"

namespace tessera::cuda {
namespace {

using internal::Helper;
using internal::Hook;
using internal::kMissingInDriver;
using internal::process;

std::uint64_t poolKey(CUmemoryPool pool) { return reinterpret_cast<std::uint64_t>(pool); }

// A device's graph memory pool, in the ledger's pool keys (which are otherwise CUmemoryPool
// values, addresses below 2^63).
constexpr std::uint64_t kGraphPoolFlag = std::uint64_t{1} << 63;
std::uint64_t graphPoolKey(CUdevice device) {
  return kGraphPoolFlag | static_cast<std::uint32_t>(device);
}

// As for a pool, for the graph memory pool of a device: what it caches is reserved less used.
void settleGraphPool(const internal::Process& p, std::uint64_t pool, bool trim) {
  const auto get =
      p.helper<internal::DeviceGetGraphMemAttributeFn>(Helper::kCuDeviceGetGraphMemAttribute);
  const auto trim_device = p.helper<internal::DeviceGraphMemTrimFn>(Helper::kCuDeviceGraphMemTrim);
  if (get == nullptr) {
    return;
  }
  const auto device = static_cast<CUdevice>(pool & 0xffffffffu);
  if (trim && trim_device != nullptr) {
    trim_device(device);
  }
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::uint64_t generation = p.ledger->poolGeneration();
    cuuint64_t reserved = 0;
    cuuint64_t used = 0;
    if (get(device, internal::kCuGraphMemAttrReservedMemCurrent, &reserved) != kCudaSuccess ||
        get(device, internal::kCuGraphMemAttrUsedMemCurrent, &used) != kCudaSuccess ||
        p.ledger->settleGraphPool(pool, reserved > used ? reserved - used : 0, generation)) {
      break;
    }
  }
}

// Asks the driver how much each pool that the ledger says keeps freed memory still holds, after
// trimming it to its live allocations if `trim`. A reading that an allocation or free in the same
// moment may have missed is taken again (three times at most; the ledger keeps the higher count).
void settlePools(const internal::Process& p, bool trim) {
  const auto get = p.helper<internal::MemPoolGetAttributeFn>(Helper::kCuMemPoolGetAttribute);
  const auto trim_to = p.helper<internal::MemPoolTrimToFn>(Helper::kCuMemPoolTrimTo);
  if (get == nullptr) {
    return;
  }
  MemoryLedger& ledger = *p.ledger;
  for (const std::uint64_t pool : ledger.retainingPools()) {
    if ((pool & kGraphPoolFlag) != 0) {
      settleGraphPool(p, pool, trim);
      continue;
    }
    auto* const handle = reinterpret_cast<CUmemoryPool>(pool);
    if (trim && trim_to != nullptr) {
      trim_to(handle, 0);
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      const std::uint64_t generation = ledger.poolGeneration();
      cuuint64_t reserved = 0;
      if (get(handle, internal::kCuMempoolAttrReservedMemCurrent, &reserved) != kCudaSuccess ||
          ledger.settlePool(pool, reserved, generation)) {
        break;
      }
    }
  }
}

// Reserves bytes for an allocation. At the cap, while pools keep freed memory, first learns what
// they really hold, then trims them, before refusing.
bool reserve(const internal::Process& p, std::uint64_t bytes) {
  MemoryLedger& ledger = *p.ledger;
  if (ledger.tryReserve(bytes)) {
    return true;
  }
  for (const bool trim : {false, true}) {
    if (ledger.retainedBytes() == 0) {
      return false;
    }
    settlePools(p, trim);
    if (ledger.tryReserve(bytes)) {
      return true;
    }
  }
  return false;
}

// Runs allocate(key), the real allocation that sets the new allocation's key, with bytes
// reserved; keeps the reservation only if it succeeds and track(key) records it. undo(key) frees
// what allocate made when it cannot be recorded.
template <typename Allocate, typename Track, typename Undo>
CUresult charged(const internal::Process& p, std::uint64_t bytes, Allocate allocate, Track track,
                 Undo undo) {
  MemoryLedger& ledger = *p.ledger;
  if (!reserve(p, bytes)) {
    return kCudaErrorOutOfMemory;
  }
  std::uint64_t key = 0;
  const CUresult result = allocate(key);
  if (result != kCudaSuccess) {
    ledger.release(bytes);
    return result;
  }
  if (!track(key)) {
    undo(key);
    ledger.release(bytes);
    return kCudaErrorOutOfMemory;
  }
  return result;
}

// charged()'s track for the plain kinds.
auto tracker(MemoryLedger& ledger, AllocationKind kind, std::uint64_t bytes) {
  return [&ledger, kind, bytes](std::uint64_t key) { return ledger.track(kind, key, bytes); };
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
      p, bytes,
      [&](std::uint64_t& k) {
        const CUresult r = alloc(dptr);
        k = *dptr;
        return r;
      },
      tracker(*p.ledger, AllocationKind::kPointer, bytes),
      [&](std::uint64_t k) {
        if (free != nullptr) {
          free(k);
        }
      });
}

// The graph that `stream` is being captured into, or null. The _ptsz hooks' stream 0 is the
// thread's default stream, CU_STREAM_PER_THREAD to the non-_ptsz query.
CUgraph capturingGraph(const internal::Process& p, CUstream stream, bool per_thread) {
  const auto info = p.helper<internal::StreamGetCaptureInfoV2Fn>(Helper::kCuStreamGetCaptureInfoV2);
  if (info == nullptr) {
    return nullptr;
  }
  if (per_thread && stream == nullptr) {
    stream = reinterpret_cast<CUstream>(kCuStreamPerThread);  // NOLINT(performance-no-int-to-ptr)
  }
  CUstreamCaptureStatus status = kCuStreamCaptureStatusNone;
  CUgraph graph = nullptr;
  if (info(stream, &status, nullptr, &graph, nullptr, nullptr) != kCudaSuccess ||
      status != internal::kCuStreamCaptureStatusActive) {
    return nullptr;
  }
  return graph;
}

CUdevice currentDevice(const internal::Process& p) {
  CUdevice device = 0;
  if (const auto get = p.helper<internal::CtxGetDeviceFn>(Helper::kCuCtxGetDevice);
      get == nullptr || get(&device) != kCudaSuccess) {
    device = 0;
  }
  return device;
}

// A stream-ordered allocation from `pool`, or from the current pool of the stream's device if
// pool is null (the driver says which). Tracked as pooled; as a plain pointer only if the driver
// cannot say which pool it came from. Made while the stream is captured, it is a node of the graph
// captured, backed when the graph runs: tracked as graph memory.
template <typename Alloc>
CUresult allocatePooled(CUdeviceptr* dptr, std::uint64_t bytes, CUmemoryPool pool, CUstream stream,
                        bool per_thread, Alloc alloc) {
  const internal::Process& p = process();
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || dptr == nullptr) {
    return alloc(dptr);
  }
  MemoryLedger& ledger = *p.ledger;
  if (!reserve(p, bytes)) {
    return kCudaErrorOutOfMemory;
  }
  const CUresult result = alloc(dptr);
  if (result != kCudaSuccess) {
    ledger.release(bytes);
    return result;
  }
  if (const CUgraph graph = capturingGraph(p, stream, per_thread); graph != nullptr) {
    if (ledger.trackGraphNode(reinterpret_cast<std::uint64_t>(graph), *dptr,
                              graphPoolKey(currentDevice(p)), bytes)) {
      return result;
    }
    // No host memory to track it: refused, though the driver made the node, which stays in
    // the graph uncharged (a captured allocation cannot be taken back).
    ledger.release(bytes);
    return kCudaErrorOutOfMemory;
  }
  if (pool == nullptr) {
    if (const auto get = p.helper<internal::PointerGetAttributeFn>(Helper::kCuPointerGetAttribute);
        get == nullptr ||
        get(&pool, internal::kCuPointerAttributeMempoolHandle, *dptr) != kCudaSuccess) {
      pool = nullptr;
    }
  }
  if (pool != nullptr ? ledger.trackPooled(poolKey(pool), *dptr, bytes)
                      : ledger.track(AllocationKind::kPointer, *dptr, bytes)) {
    return result;
  }
  if (const auto free = p.real<FreeFn>(Hook::kCuMemFreeV2); free != nullptr) {
    free(*dptr);
  }
  ledger.release(bytes);
  return kCudaErrorOutOfMemory;
}

// Frees a device pointer with free(): a plain allocation gives its bytes back, a pooled one gives
// them to its pool. The memory of a graph node is freed in its graph if the free is captured
// (`stream` is being captured), otherwise now. cuMemFree has no stream (`stream_given` false).
template <typename Free>
CUresult freePointer(const internal::Process& p, CUdeviceptr dptr, bool stream_given,
                     CUstream stream, bool per_thread, Free free) {
  MemoryLedger* const ledger = p.ledger.get();
  if (ledger == nullptr) {
    return free();
  }
  if (const auto bytes = ledger->untrack(AllocationKind::kPointer, dptr)) {
    const CUresult result = free();
    if (!(result != kCudaSuccess && ledger->track(AllocationKind::kPointer, dptr, *bytes))) {
      ledger->release(*bytes);
    }
    return result;
  }
  const auto pooled = ledger->untrackPooled(dptr);
  if (!pooled && ledger->hasGraphNodes() && ledger->isGraphAddress(dptr)) {
    const CUgraph captured = stream_given ? capturingGraph(p, stream, per_thread) : nullptr;
    const CUresult result = free();
    if (result == kCudaSuccess) {
      if (captured != nullptr) {
        ledger->freedInGraph(reinterpret_cast<std::uint64_t>(captured), dptr);
      } else {
        ledger->graphAddressFreed(dptr);
      }
    }
    return result;
  }
  const CUresult result = free();
  if (!pooled) {
    return result;
  }
  if (result == kCudaSuccess) {
    ledger->retain(pooled->pool, pooled->bytes);
  } else if (!ledger->trackPooled(pooled->pool, dptr, pooled->bytes)) {
    ledger->release(pooled->bytes);
  }
  return result;
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
  if (!reserve(p, lower_bound)) {
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
    if (!reserve(p, bytes - reserved)) {
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
  return allocatePooled(dptr, bytes, nullptr, stream, false,
                        [&](CUdeviceptr* d) { return real(d, bytes, stream); });
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) noexcept {
  const auto real =
      realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUstream)>(Hook::kCuMemAllocAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePooled(dptr, bytes, nullptr, stream, true,
                        [&](CUdeviceptr* d) { return real(d, bytes, stream); });
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                 CUstream stream) noexcept {
  const auto real = realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream)>(
      Hook::kCuMemAllocFromPoolAsync);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePooled(dptr, bytes, pool, stream, false,
                        [&](CUdeviceptr* d) { return real(d, bytes, pool, stream); });
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                      CUstream stream) noexcept {
  const auto real = realOf<CUresult (*)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream)>(
      Hook::kCuMemAllocFromPoolAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return allocatePooled(dptr, bytes, pool, stream, true,
                        [&](CUdeviceptr* d) { return real(d, bytes, pool, stream); });
}

CUresult cuMemFree_v2(CUdeviceptr dptr) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<FreeFn>(Hook::kCuMemFreeV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return freePointer(p, dptr, false, nullptr, false, [&] { return real(dptr); });
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUdeviceptr, CUstream)>(Hook::kCuMemFreeAsync);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return freePointer(p, dptr, true, stream, false, [&] { return real(dptr, stream); });
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUdeviceptr, CUstream)>(Hook::kCuMemFreeAsyncPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return freePointer(p, dptr, true, stream, true, [&] { return real(dptr, stream); });
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
  if (p.ledger->retainedBytes() > 0) {
    settlePools(p, /*trim=*/false);
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
      p, *bytes,
      [&](std::uint64_t& k) {
        const CUresult r = alloc();
        k = key(*handle);
        return r;
      },
      tracker(*p.ledger, kind, *bytes),
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
// (cuMemCreate's size is already a multiple of the granularity); host-located memory is not. It
// stays charged while its handle is held or it is mapped anywhere (MemoryLedger::trackHandle).
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
      p, bytes,
      [&](std::uint64_t& k) {
        const CUresult r = real(handle, bytes, prop, flags);
        k = *handle;
        return r;
      },
      [&](std::uint64_t k) { return p.ledger->trackHandle(k, bytes); },
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
  if (p.ledger == nullptr) {
    return real(handle);
  }
  const MemoryLedger::HandleRelease released = p.ledger->beginRelease(handle);
  const CUresult result = real(handle);
  if (result != kCudaSuccess) {
    p.ledger->undoRelease(handle, released);
  } else if (released.freed) {
    p.ledger->release(released.bytes);
  }
  return result;
}

CUresult cuMemMap(CUdeviceptr address, std::size_t size, std::size_t offset,
                  CUmemGenericAllocationHandle handle, unsigned long long flags) noexcept {
  const internal::Process& p = process();
  using Fn = CUresult (*)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                          unsigned long long);
  const auto real = p.real<Fn>(Hook::kCuMemMap);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(address, size, offset, handle, flags);
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->handleMapped(handle, address, size);
  }
  return result;
}

CUresult cuMemUnmap(CUdeviceptr address, std::size_t size) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUdeviceptr, std::size_t)>(Hook::kCuMemUnmap);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(address, size);
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->rangeUnmapped(address, size);
  }
  return result;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUmemGenericAllocationHandle*, void*)>(
      Hook::kCuMemRetainAllocationHandle);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(handle, address);
  if (result == kCudaSuccess && p.ledger != nullptr && handle != nullptr) {
    p.ledger->handleRetained(*handle);
  }
  return result;
}

// A destroyed pool's kept memory goes with it (its live allocations' memory when they are freed).
CUresult cuMemPoolDestroy(CUmemoryPool pool) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUmemoryPool)>(Hook::kCuMemPoolDestroy);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(pool);
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->forgetPool(poolKey(pool));
  }
  return result;
}

// Graph memory: an allocation node is charged when it is made (its graph may run at any time
// after), under its graph's device graph pool; see MemoryLedger for how long.
namespace {

template <typename Add>
CUresult addAllocNode(CUgraph graph, CudaMemAllocNodeParams* params, Add add) {
  const internal::Process& p = process();
  if (!p.valid) {
    return kCudaErrorOutOfMemory;
  }
  if (p.ledger == nullptr || params == nullptr ||
      params->location_type != kCuMemLocationTypeDevice) {
    return add();
  }
  const std::uint64_t bytes = params->bytesize;
  return charged(
      p, bytes,
      [&](std::uint64_t& k) {
        const CUresult r = add();
        k = params->dptr;
        return r;
      },
      [&](std::uint64_t k) {
        return p.ledger->trackGraphNode(reinterpret_cast<std::uint64_t>(graph), k,
                                        graphPoolKey(params->location_id), bytes);
      },
      [](std::uint64_t) {});  // A node that cannot be tracked stays in its graph, uncharged.
}

template <typename Add>
CUresult addFreeNode(CUgraph graph, CUdeviceptr dptr, Add add) {
  const internal::Process& p = process();
  const CUresult result = add();
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->freedInGraph(reinterpret_cast<std::uint64_t>(graph), dptr);
  }
  return result;
}

// cuGraphAddNode and _v2: allocation and free nodes as above, any other kind passed through.
template <typename Add>
CUresult addNode(CUgraph graph, CUgraphNodeParams* params, Add add) {
  if (params == nullptr) {
    return add();
  }
  if (params->type == kCuGraphNodeTypeMemAlloc) {
    return addAllocNode(graph, &params->alloc, add);
  }
  if (params->type == kCuGraphNodeTypeMemFree) {
    return addFreeNode(graph, params->free_dptr, add);
  }
  return add();
}

template <typename Instantiate>
CUresult instantiated(CUgraphExec* exec, CUgraph graph, Instantiate instantiate) {
  const internal::Process& p = process();
  const CUresult result = instantiate();
  if (result == kCudaSuccess && p.ledger != nullptr && exec != nullptr) {
    p.ledger->graphInstantiated(reinterpret_cast<std::uint64_t>(graph),
                                reinterpret_cast<std::uint64_t>(*exec));
  }
  return result;
}

}  // namespace

CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                                std::size_t dependency_count,
                                CudaMemAllocNodeParams* params) noexcept {
  using Fn =
      CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t, CudaMemAllocNodeParams*);
  const auto real = realOf<Fn>(Hook::kCuGraphAddMemAllocNode);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return addAllocNode(graph, params,
                      [&] { return real(node, graph, dependencies, dependency_count, params); });
}

CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                               std::size_t dependency_count, CUdeviceptr dptr) noexcept {
  using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t, CUdeviceptr);
  const auto real = realOf<Fn>(Hook::kCuGraphAddMemFreeNode);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return addFreeNode(graph, dptr,
                     [&] { return real(node, graph, dependencies, dependency_count, dptr); });
}

CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                        std::size_t dependency_count, CUgraphNodeParams* params) noexcept {
  using Fn =
      CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t, CUgraphNodeParams*);
  const auto real = realOf<Fn>(Hook::kCuGraphAddNode);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return addNode(graph, params,
                 [&] { return real(node, graph, dependencies, dependency_count, params); });
}

CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* dependencies,
                           const CUgraphEdgeData* edge_data, std::size_t dependency_count,
                           CUgraphNodeParams* params) noexcept {
  using Fn = CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                          std::size_t, CUgraphNodeParams*);
  const auto real = realOf<Fn>(Hook::kCuGraphAddNodeV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return addNode(graph, params, [&] {
    return real(node, graph, dependencies, edge_data, dependency_count, params);
  });
}

CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                            std::size_t log_size) noexcept {
  using Fn = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, std::size_t);
  const auto real = realOf<Fn>(Hook::kCuGraphInstantiate);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return instantiated(exec, graph, [&] { return real(exec, graph, error_node, log, log_size); });
}

CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                               std::size_t log_size) noexcept {
  using Fn = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, std::size_t);
  const auto real = realOf<Fn>(Hook::kCuGraphInstantiateV2);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return instantiated(exec, graph, [&] { return real(exec, graph, error_node, log, log_size); });
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                     unsigned long long flags) noexcept {
  using Fn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  const auto real = realOf<Fn>(Hook::kCuGraphInstantiateWithFlags);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return instantiated(exec, graph, [&] { return real(exec, graph, flags); });
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  using Fn = CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
  const auto real = realOf<Fn>(Hook::kCuGraphInstantiateWithParams);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return instantiated(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) noexcept {
  using Fn = CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);
  const auto real = realOf<Fn>(Hook::kCuGraphInstantiateWithParamsPtsz);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  return instantiated(exec, graph, [&] { return real(exec, graph, params); });
}

CUresult cuGraphExecDestroy(CUgraphExec exec) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUgraphExec)>(Hook::kCuGraphExecDestroy);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(exec);
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->execDestroyed(reinterpret_cast<std::uint64_t>(exec));
  }
  return result;
}

// What a node is must be asked before it is gone: an allocation or free node's address.
CUresult cuGraphDestroyNode(CUgraphNode node) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUgraphNode)>(Hook::kCuGraphDestroyNode);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  if (p.ledger == nullptr || !p.ledger->hasGraphNodes()) {
    return real(node);
  }
  int type = -1;
  CUdeviceptr address = 0;
  if (const auto get_type = p.helper<internal::GraphNodeGetTypeFn>(Helper::kCuGraphNodeGetType);
      get_type != nullptr && get_type(node, &type) == kCudaSuccess) {
    if (const auto get =
            p.helper<internal::GraphMemAllocNodeGetParamsFn>(Helper::kCuGraphMemAllocNodeGetParams);
        type == kCuGraphNodeTypeMemAlloc && get != nullptr) {
      CudaMemAllocNodeParams params{};
      if (get(node, &params) == kCudaSuccess) {
        address = params.dptr;
      }
    } else if (const auto get_free = p.helper<internal::GraphMemFreeNodeGetParamsFn>(
                   Helper::kCuGraphMemFreeNodeGetParams);
               type == kCuGraphNodeTypeMemFree && get_free != nullptr) {
      (void)get_free(node, &address);
    }
  }
  const CUresult result = real(node);
  if (result == kCudaSuccess && address != 0) {
    p.ledger->graphNodeDestroyed(address, type == kCuGraphNodeTypeMemFree);
  }
  return result;
}

CUresult cuGraphDestroy(CUgraph graph) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUgraph)>(Hook::kCuGraphDestroy);
  if (real == nullptr) {
    return kMissingInDriver;
  }
  const CUresult result = real(graph);
  if (result == kCudaSuccess && p.ledger != nullptr) {
    p.ledger->graphDestroyed(reinterpret_cast<std::uint64_t>(graph));
  }
  return result;
}

}  // namespace tessera::cuda
