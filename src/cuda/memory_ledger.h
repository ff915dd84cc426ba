// Exact device-memory accounting against a cap, for the interposer's allocation hooks. A hook
// reserves the bytes before it calls the real allocator, so the sum of live allocations never
// passes the cap, even for a moment and even with many threads allocating at once:
//
//   if (!ledger.tryReserve(bytes)) return kCudaErrorOutOfMemory;   // driver not called
//   if (real(&ptr, bytes) != kCudaSuccess) { ledger.release(bytes); return ...; }
//   ledger.track(AllocationKind::kPointer, ptr, bytes);
//
// and a free hook untracks first (so that the driver handing the same address to another thread
// cannot mix the two up), frees, then releases. Thread-safe: one mutex guards the total and the
// tables; no call blocks on anything else while holding it.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "cuda/driver_api.h"

namespace tessera::cuda {

// What a tracked key is: each kind has its own key space (a CUdeviceptr and a CUarray may have
// the same value).
enum class AllocationKind { kPointer, kArray, kMipmappedArray, kHandle, kCount };

class MemoryLedger {
 public:
  explicit MemoryLedger(std::uint64_t cap_bytes) : cap_bytes_(cap_bytes) {}
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  std::uint64_t capBytes() const { return cap_bytes_; }
  std::uint64_t usedBytes() const;

  // Adds bytes to the total if it stays at or under the cap; otherwise changes nothing.
  [[nodiscard]] bool tryReserve(std::uint64_t bytes);
  void release(std::uint64_t bytes);

  // Records that key holds bytes already reserved. A key tracked twice means the first
  // allocation was freed by a path the interposer does not see: its bytes are released. False
  // only when the host is out of memory (the caller undoes the allocation).
  [[nodiscard]] bool track(AllocationKind kind, std::uint64_t key, std::uint64_t bytes);

  // Forgets key and returns its bytes, which stay reserved until release(); nullopt if the key
  // is not tracked (allocated before a cap applied, or not by a hooked call).
  std::optional<std::uint64_t> untrack(AllocationKind kind, std::uint64_t key);

 private:
  const std::uint64_t cap_bytes_;
  mutable std::mutex mu_;
  std::uint64_t used_bytes_ = 0;  // Guarded by mu_.
  std::unordered_map<std::uint64_t, std::uint64_t>
      live_[static_cast<int>(AllocationKind::kCount)];  // Guarded by mu_.
};

// The bytes an array holds as requested: width x height x depth (a zero height or depth counts
// as 1) x the element size. Element sizes are exact for the plain formats (size x NumChannels),
// the normalized X1/X2/X4 ones, NV12 (1.5 bytes per pixel) and the BC block formats (8 or 16
// bytes per 4x4 block); any other format is charged 16 bytes per element, the most any known
// format takes. nullopt if the size does not fit in 64 bits.
std::optional<std::uint64_t> arrayBytes(const CudaArrayDescriptor& desc);
std::optional<std::uint64_t> array3DBytes(const CudaArray3dDescriptor& desc);

// The sum over levels of array3DBytes, each level halving width, height and (unless layered or a
// cubemap, whose depth counts layers) depth, down to 1.
std::optional<std::uint64_t> mipmappedArrayBytes(const CudaArray3dDescriptor& desc,
                                                 unsigned levels);

}  // namespace tessera::cuda
