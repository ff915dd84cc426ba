// Exact device-memory accounting against a cap, for the interposer's allocation hooks. A hook
// reserves the bytes before it calls the real allocator, so the sum of live allocations never
// passes the cap, even for a moment and even with many threads allocating at once:
//
//   if (!ledger.tryReserve(bytes)) return kCudaErrorOutOfMemory;   // driver not called
//   if (real(&ptr, bytes) != kCudaSuccess) { ledger.release(bytes); return ...; }
//   ledger.track(AllocationKind::kPointer, ptr, bytes);
//
// and a free hook untracks first (so that the driver handing the same address to another thread
// cannot mix the two up), frees, then releases. Thread-safe: the total is an atomic (reserving
// and releasing take no lock); one mutex guards the tables, and no call blocks on anything else
// while holding it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "cuda/driver_api.h"

namespace tessera::cuda {

// What a tracked key is: each kind has its own key space (a CUdeviceptr and a CUarray may have
// the same value).
enum class AllocationKind { kPointer, kArray, kMipmappedArray, kCount };

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

  // Stream-ordered allocations come from a pool (a CUmemoryPool, as a number) that keeps freed
  // memory reserved for reuse until the driver lets it go: at a synchronize, down to the pool's
  // release threshold, or when the pool is trimmed or destroyed. So a pooled allocation's bytes
  // stay charged after its free, as bytes the pool retains, until settlePool() learns from the
  // driver that the pool holds less.
  struct Pooled {
    std::uint64_t pool;
    std::uint64_t bytes;
  };
  // As track(), for an allocation from pool.
  [[nodiscard]] bool trackPooled(std::uint64_t pool, std::uint64_t key, std::uint64_t bytes);
  // As untrack(), for a pooled key: its pool and bytes, which stay reserved until the caller
  // either gives them back to the pool (retain, once the driver has the free) or tracks the key
  // again (the free failed).
  std::optional<Pooled> untrackPooled(std::uint64_t key);
  void retain(std::uint64_t pool, std::uint64_t bytes);

  // Bytes charged for memory that pools keep for reuse, and the pools that keep some.
  std::uint64_t retainedBytes() const;
  std::vector<std::uint64_t> retainingPools() const;

  // Changes with every pooled track, untrack and retain: a reading of the driver taken before a
  // change may not count it.
  std::uint64_t poolGeneration() const;
  // The driver says pool holds reserved bytes, in use and kept. What the pool retains drops to
  // what that leaves beside its live allocations (it never rises: an allocation is charged what it
  // asked for, not the driver's rounding). Ignored, returning false, if any pooled allocation or
  // free happened since `generation` was read, before the reading.
  bool settlePool(std::uint64_t pool, std::uint64_t reserved, std::uint64_t generation);
  // The pool is gone, and with it the memory it kept: its retained bytes are given back.
  void forgetPool(std::uint64_t pool);

  // Graph memory: an allocation node of a graph (cuGraphAddMemAllocNode, or cuMemAllocAsync on a
  // stream being captured), at `address`, backed from the device's graph memory pool (`pool`)
  // when the graph runs. Its bytes are charged from its creation for as long as its graph or an
  // executable graph made from it lives, since any launch may back it. After that, a node whose
  // memory a launch left allocated (its graph has no free for it, and it was not freed since)
  // stays charged until it is freed; the rest is memory the graph pool may keep, charged as that
  // pool's retained bytes until settleGraphPool() learns that the pool keeps less.
  [[nodiscard]] bool trackGraphNode(std::uint64_t graph, std::uint64_t address, std::uint64_t pool,
                                    std::uint64_t bytes);
  // `graph` frees the node's memory when it runs (a free node, or a captured free). In the
  // node's own graph: no launch of it leaves the memory allocated. In another graph: a launch of
  // that one gives the memory back, if a launch left it allocated (until then it stays charged).
  void freedInGraph(std::uint64_t graph, std::uint64_t address);
  void graphInstantiated(std::uint64_t graph, std::uint64_t exec);
  void graphLaunched(std::uint64_t exec);
  // A graph node's memory freed outside any graph; false if the address is no graph node's.
  bool graphAddressFreed(std::uint64_t address);
  bool isGraphAddress(std::uint64_t address) const;
  void graphDestroyed(std::uint64_t graph);
  // A node removed from its graph (cuGraphDestroyNode). A free node no longer frees `address`
  // anywhere (executables made before keep theirs; counting them out only over-counts). An
  // allocation node whose graph has no executable leaves: its memory is the graph pool's if a
  // launch freed it, or stays charged until freed if a launch left it allocated; with an
  // executable, the node stays, charged, as that may run it.
  void graphNodeDestroyed(std::uint64_t address, bool free_node);
  void execDestroyed(std::uint64_t exec);
  // Whether any graph node is tracked: the launch hook's fast path.
  bool hasGraphNodes() const { return graph_nodes_.load(std::memory_order_acquire) > 0; }
  // The driver says the graph pool keeps `cached` bytes that no allocation uses (reserved less
  // used): what the pool retains drops to that. Ignored, returning false, after a change since
  // `generation`.
  bool settleGraphPool(std::uint64_t pool, std::uint64_t cached, std::uint64_t generation);

  // Physical memory made with cuMemCreate lives while its handle is held (made, or retained with
  // cuMemRetainAllocationHandle, more often than released) or mapped anywhere: its bytes stay
  // charged until both are over, since releasing a handle that is still mapped frees nothing.
  [[nodiscard]] bool trackHandle(std::uint64_t handle, std::uint64_t bytes);
  void handleRetained(std::uint64_t handle);
  void handleMapped(std::uint64_t handle, std::uint64_t address, std::uint64_t size);
  // The mappings that start in [address, address + size) are gone; memory that no handle holds
  // and no mapping keeps any more is given back.
  void rangeUnmapped(std::uint64_t address, std::uint64_t size);
  // A release, undone if the driver refuses it. `freed`: the memory goes with it (nothing else
  // held or mapped it), its bytes to be given back by the caller once the driver has it.
  struct HandleRelease {
    bool tracked = false;
    bool freed = false;
    std::uint64_t bytes = 0;
  };
  HandleRelease beginRelease(std::uint64_t handle);
  void undoRelease(std::uint64_t handle, const HandleRelease& release);

 private:
  struct PoolState {
    std::uint64_t live = 0;      // Bytes of its allocations that are not freed.
    std::uint64_t retained = 0;  // Bytes freed and, as far as the ledger knows, still kept.
    bool destroyed = false;      // Its allocations' frees give their bytes back.
  };
  struct GraphNode {
    std::uint64_t graph;  // 0 once its graph and executables are gone.
    std::uint64_t pool;
    std::uint64_t bytes;
    bool freed_in_graph = false;
    bool outstanding = false;  // A launch left it allocated, and it was not freed since.
  };
  struct HandleState {
    std::uint64_t bytes;
    int holds = 1;     // Made, plus retained, less released.
    int mappings = 0;  // Ranges it is mapped to.
  };
  struct Mapping {
    std::uint64_t size;
    std::uint64_t handle;
  };
  struct GraphState {
    bool destroyed = false;
    int execs = 0;
    std::vector<std::uint64_t> addresses;
    std::vector<std::uint64_t> frees;  // Other graphs' nodes it frees when it runs.
  };
  void retainLocked(std::uint64_t pool, std::uint64_t bytes);
  void lowerRetainedLocked(PoolState& state, std::uint64_t kept);
  void graphGoneLocked(std::uint64_t graph);
  // The node's memory freed (outside a graph, or by a launch of a graph that frees it).
  void nodeFreedLocked(std::unordered_map<std::uint64_t, GraphNode>::iterator node);

  const std::uint64_t cap_bytes_;
  mutable std::mutex mu_;
  // Includes what pools retain. Atomic, so that reserving and releasing take no lock.
  std::atomic<std::uint64_t> used_bytes_{0};
  std::unordered_map<std::uint64_t, std::uint64_t>
      live_[static_cast<int>(AllocationKind::kCount)];      // Guarded by mu_.
  std::unordered_map<std::uint64_t, Pooled> pooled_;        // Key -> allocation. Guarded by mu_.
  std::unordered_map<std::uint64_t, PoolState> pools_;      // Guarded by mu_.
  std::atomic<std::uint64_t> retained_bytes_{0};            // Written under mu_; read without.
  std::uint64_t pool_generation_ = 0;                       // Guarded by mu_.
  std::unordered_map<std::uint64_t, GraphNode> nodes_;      // Address -> node. Guarded by mu_.
  std::unordered_map<std::uint64_t, GraphState> graphs_;    // Guarded by mu_.
  std::unordered_map<std::uint64_t, std::uint64_t> execs_;  // Exec -> graph. Guarded by mu_.
  std::atomic<std::size_t> graph_nodes_{0};                 // nodes_.size(), written under mu_.
  std::unordered_map<std::uint64_t, HandleState> handles_;  // Guarded by mu_.
  std::map<std::uint64_t, Mapping> mappings_;               // Address -> mapping. Guarded by mu_.
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
