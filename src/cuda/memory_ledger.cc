#include "cuda/memory_ledger.h"

#include <algorithm>
#include <new>

namespace tessera::cuda {
namespace {

std::optional<std::uint64_t> multiply(std::uint64_t a, std::uint64_t b) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    return std::nullopt;
  }
  return product;
}

std::optional<std::uint64_t> multiply(std::optional<std::uint64_t> a, std::uint64_t b) {
  return a ? multiply(*a, b) : std::nullopt;
}

std::uint64_t atLeastOne(std::size_t n) { return n == 0 ? 1 : n; }

// Bytes per element of the normalized formats kCuAdFormatUnormInt8x1 (0xc0) .. SNORM_INT16X4
// (0xcb): unsigned then signed, each 8X1 8X2 8X4 16X1 16X2 16X4.
constexpr std::uint64_t kNormalizedBytes[] = {1, 2, 4, 2, 4, 8};

// Bytes of one layer of width x height elements.
std::optional<std::uint64_t> layerBytes(CUarray_format format, unsigned channels,
                                        std::uint64_t width, std::uint64_t height) {
  switch (format) {
    case kCuAdFormatUnsignedInt8:
    case kCuAdFormatSignedInt8:
      return multiply(multiply(width, height), channels);
    case kCuAdFormatUnsignedInt16:
    case kCuAdFormatSignedInt16:
    case kCuAdFormatHalf:
      return multiply(multiply(multiply(width, height), channels), 2);
    case kCuAdFormatUnsignedInt32:
    case kCuAdFormatSignedInt32:
    case kCuAdFormatFloat:
      return multiply(multiply(multiply(width, height), channels), 4);
    case kCuAdFormatNv12: {  // A full-size luma plane and a half-size chroma plane.
      const auto pixels = multiply(multiply(width, height), 3);
      return pixels ? std::optional<std::uint64_t>((*pixels + 1) / 2) : std::nullopt;
    }
    default:
      break;
  }
  if (format >= kCuAdFormatUnormInt8x1 && format <= kCuAdFormatSnormInt16x4) {
    return multiply(multiply(width, height), kNormalizedBytes[(format - 0xc0) % 6]);
  }
  if (format >= kCuAdFormatBc1Unorm && format <= kCuAdFormatBc7UnormSrgb) {
    // BC1 (0x91, 0x92) and BC4 (0x97, 0x98) take 8 bytes per 4x4 block, the others 16.
    const bool half = format <= 0x92 || format == 0x97 || format == 0x98;
    return multiply(multiply((width + 3) / 4, (height + 3) / 4), half ? 8 : 16);
  }
  return multiply(multiply(width, height), 16);
}

}  // namespace

std::uint64_t MemoryLedger::usedBytes() const {
  return used_bytes_.load(std::memory_order_acquire);
}

bool MemoryLedger::tryReserve(std::uint64_t bytes) {
  std::uint64_t used = used_bytes_.load(std::memory_order_relaxed);
  do {
    if (used > cap_bytes_ || bytes > cap_bytes_ - used) {
      return false;
    }
  } while (!used_bytes_.compare_exchange_weak(used, used + bytes, std::memory_order_acq_rel,
                                              std::memory_order_relaxed));
  return true;
}

void MemoryLedger::release(std::uint64_t bytes) {
  std::uint64_t used = used_bytes_.load(std::memory_order_relaxed);
  while (!used_bytes_.compare_exchange_weak(used, used - std::min(bytes, used),
                                            std::memory_order_acq_rel, std::memory_order_relaxed)) {
  }
}

bool MemoryLedger::track(AllocationKind kind, std::uint64_t key, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  try {
    auto [it, inserted] = live_[static_cast<int>(kind)].try_emplace(key, bytes);
    if (!inserted) {
      release(it->second);
      it->second = bytes;
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

std::optional<std::uint64_t> MemoryLedger::untrack(AllocationKind kind, std::uint64_t key) {
  std::lock_guard lock(mu_);
  auto& table = live_[static_cast<int>(kind)];
  const auto it = table.find(key);
  if (it == table.end()) {
    return std::nullopt;
  }
  const std::uint64_t bytes = it->second;
  table.erase(it);
  return bytes;
}

bool MemoryLedger::trackPooled(std::uint64_t pool, std::uint64_t key, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  try {
    PoolState& state = pools_[pool];
    auto [it, inserted] = pooled_.try_emplace(key, Pooled{pool, bytes});
    if (!inserted) {  // Freed unseen: the earlier allocation's memory went back to its pool.
      pools_[it->second.pool].live -= it->second.bytes;
      retainLocked(it->second.pool, it->second.bytes);
      it->second = Pooled{pool, bytes};
    }
    state.live += bytes;
  } catch (const std::bad_alloc&) {
    return false;
  }
  ++pool_generation_;
  return true;
}

std::optional<MemoryLedger::Pooled> MemoryLedger::untrackPooled(std::uint64_t key) {
  std::lock_guard lock(mu_);
  const auto it = pooled_.find(key);
  if (it == pooled_.end()) {
    return std::nullopt;
  }
  const Pooled allocation = it->second;
  pooled_.erase(it);
  pools_[allocation.pool].live -= allocation.bytes;
  ++pool_generation_;
  return allocation;
}

void MemoryLedger::retain(std::uint64_t pool, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  retainLocked(pool, bytes);
  ++pool_generation_;
}

void MemoryLedger::retainLocked(std::uint64_t pool, std::uint64_t bytes) {
  const auto it = pools_.find(pool);
  if (it == pools_.end() || it->second.destroyed) {  // Nothing keeps the bytes.
    release(bytes);
    if (it != pools_.end() && it->second.live == 0) {
      pools_.erase(it);
    }
    return;
  }
  it->second.retained += bytes;
  retained_bytes_ += bytes;
}

// What the pool retains drops to `kept` (never rises).
void MemoryLedger::lowerRetainedLocked(PoolState& state, std::uint64_t kept) {
  if (kept < state.retained) {
    const std::uint64_t freed = state.retained - kept;
    state.retained = kept;
    retained_bytes_ -= freed;
    release(freed);
  }
}

std::uint64_t MemoryLedger::retainedBytes() const {
  std::lock_guard lock(mu_);
  return retained_bytes_.load(std::memory_order_acquire);
}

std::vector<std::uint64_t> MemoryLedger::retainingPools() const {
  std::lock_guard lock(mu_);
  std::vector<std::uint64_t> pools;
  for (const auto& [pool, state] : pools_) {
    if (state.retained > 0) {
      pools.push_back(pool);
    }
  }
  return pools;
}

std::uint64_t MemoryLedger::poolGeneration() const {
  std::lock_guard lock(mu_);
  return pool_generation_;
}

bool MemoryLedger::settlePool(std::uint64_t pool, std::uint64_t reserved,
                              std::uint64_t generation) {
  std::lock_guard lock(mu_);
  if (generation != pool_generation_) {
    return false;
  }
  const auto it = pools_.find(pool);
  if (it == pools_.end()) {
    return true;
  }
  PoolState& state = it->second;
  lowerRetainedLocked(state, reserved > state.live ? reserved - state.live : 0);
  return true;
}

void MemoryLedger::forgetPool(std::uint64_t pool) {
  std::lock_guard lock(mu_);
  const auto it = pools_.find(pool);
  if (it == pools_.end()) {
    return;
  }
  retained_bytes_ -= it->second.retained;
  release(it->second.retained);
  it->second.retained = 0;
  it->second.destroyed = true;
  if (it->second.live == 0) {
    pools_.erase(it);
  }
  ++pool_generation_;
}

bool MemoryLedger::trackGraphNode(std::uint64_t graph, std::uint64_t address, std::uint64_t pool,
                                  std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  try {
    GraphState& state = graphs_[graph];
    pools_[pool];
    if (const auto old = nodes_.find(address); old != nodes_.end()) {
      // The address was handed out again: the earlier node's memory was freed unseen.
      if (old->second.graph == 0) {
        retainLocked(old->second.pool, old->second.bytes);
      } else {
        release(old->second.bytes);
      }
      nodes_.erase(old);
    }
    state.addresses.push_back(address);
    nodes_.emplace(address, GraphNode{graph, pool, bytes});
  } catch (const std::bad_alloc&) {
    return false;
  }
  graph_nodes_.store(nodes_.size(), std::memory_order_release);
  ++pool_generation_;
  return true;
}

void MemoryLedger::freedInGraph(std::uint64_t graph, std::uint64_t address) {
  std::lock_guard lock(mu_);
  const auto it = nodes_.find(address);
  if (it == nodes_.end()) {
    return;
  }
  if (it->second.graph == graph) {
    it->second.freed_in_graph = true;
    return;
  }
  try {
    graphs_[graph].frees.push_back(address);
  } catch (const std::bad_alloc&) {
    // Untracked, the free is never seen: the memory stays charged until freed otherwise.
  }
}

void MemoryLedger::graphInstantiated(std::uint64_t graph, std::uint64_t exec) {
  std::lock_guard lock(mu_);
  const auto it = graphs_.find(graph);
  if (it == graphs_.end()) {
    return;  // No memory nodes.
  }
  try {
    execs_[exec] = graph;
    ++it->second.execs;
  } catch (const std::bad_alloc&) {
  }
}

void MemoryLedger::graphLaunched(std::uint64_t exec) {
  std::lock_guard lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end()) {
    return;
  }
  const GraphState& state = graphs_[it->second];
  for (const std::uint64_t address : state.addresses) {
    if (const auto node = nodes_.find(address);
        node != nodes_.end() && !node->second.freed_in_graph) {
      node->second.outstanding = true;
    }
  }
  for (const std::uint64_t address : state.frees) {
    if (const auto node = nodes_.find(address); node != nodes_.end() && node->second.outstanding) {
      nodeFreedLocked(node);
    }
  }
  ++pool_generation_;
}

bool MemoryLedger::graphAddressFreed(std::uint64_t address) {
  std::lock_guard lock(mu_);
  const auto it = nodes_.find(address);
  if (it == nodes_.end()) {
    return false;
  }
  nodeFreedLocked(it);
  ++pool_generation_;
  return true;
}

void MemoryLedger::nodeFreedLocked(std::unordered_map<std::uint64_t, GraphNode>::iterator node) {
  node->second.outstanding = false;
  if (node->second.graph == 0) {  // Its graph is gone: the memory goes to the graph pool.
    retainLocked(node->second.pool, node->second.bytes);
    nodes_.erase(node);
    graph_nodes_.store(nodes_.size(), std::memory_order_release);
  }
}

bool MemoryLedger::isGraphAddress(std::uint64_t address) const {
  std::lock_guard lock(mu_);
  return nodes_.count(address) != 0;
}

void MemoryLedger::graphDestroyed(std::uint64_t graph) {
  std::lock_guard lock(mu_);
  const auto it = graphs_.find(graph);
  if (it == graphs_.end()) {
    return;
  }
  it->second.destroyed = true;
  if (it->second.execs == 0) {
    graphGoneLocked(graph);
  }
}

void MemoryLedger::graphNodeDestroyed(std::uint64_t address, bool free_node) {
  std::lock_guard lock(mu_);
  const auto node = nodes_.find(address);
  if (node == nodes_.end()) {
    return;
  }
  if (free_node) {
    node->second.freed_in_graph = false;
    for (auto& [graph, state] : graphs_) {
      std::erase(state.frees, address);
    }
    return;
  }
  const auto graph = graphs_.find(node->second.graph);
  if (graph == graphs_.end() || graph->second.execs > 0) {
    return;
  }
  std::erase(graph->second.addresses, address);
  if (node->second.outstanding) {
    node->second.graph = 0;
  } else {
    retainLocked(node->second.pool, node->second.bytes);
    nodes_.erase(node);
    graph_nodes_.store(nodes_.size(), std::memory_order_release);
  }
  ++pool_generation_;
}

void MemoryLedger::execDestroyed(std::uint64_t exec) {
  std::lock_guard lock(mu_);
  const auto it = execs_.find(exec);
  if (it == execs_.end()) {
    return;
  }
  const std::uint64_t graph = it->second;
  execs_.erase(it);
  GraphState& state = graphs_[graph];
  if (--state.execs == 0 && state.destroyed) {
    graphGoneLocked(graph);
  }
}

// Neither the graph nor an executable of it is left: nodes that a launch left allocated stay
// charged until freed; the others' memory is the graph pool's to keep.
void MemoryLedger::graphGoneLocked(std::uint64_t graph) {
  const auto it = graphs_.find(graph);
  for (const std::uint64_t address : it->second.addresses) {
    const auto node = nodes_.find(address);
    if (node == nodes_.end() || node->second.graph != graph) {
      continue;
    }
    if (node->second.outstanding) {
      node->second.graph = 0;
    } else {
      retainLocked(node->second.pool, node->second.bytes);
      nodes_.erase(node);
    }
  }
  graphs_.erase(it);
  graph_nodes_.store(nodes_.size(), std::memory_order_release);
  ++pool_generation_;
}

bool MemoryLedger::settleGraphPool(std::uint64_t pool, std::uint64_t cached,
                                   std::uint64_t generation) {
  std::lock_guard lock(mu_);
  if (generation != pool_generation_) {
    return false;
  }
  if (const auto it = pools_.find(pool); it != pools_.end()) {
    lowerRetainedLocked(it->second, cached);
  }
  return true;
}

bool MemoryLedger::trackHandle(std::uint64_t handle, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  try {
    const auto [it, inserted] = handles_.try_emplace(handle, HandleState{bytes});
    if (!inserted) {  // The driver gave the handle out again: the earlier one went unseen.
      release(it->second.bytes);
      it->second = HandleState{bytes};
    }
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

void MemoryLedger::handleRetained(std::uint64_t handle) {
  std::lock_guard lock(mu_);
  if (const auto it = handles_.find(handle); it != handles_.end()) {
    ++it->second.holds;
  }
}

void MemoryLedger::handleMapped(std::uint64_t handle, std::uint64_t address, std::uint64_t size) {
  std::lock_guard lock(mu_);
  const auto it = handles_.find(handle);
  if (it == handles_.end()) {
    return;
  }
  try {
    mappings_[address] = Mapping{size, handle};
    ++it->second.mappings;
  } catch (const std::bad_alloc&) {
  }
}

void MemoryLedger::rangeUnmapped(std::uint64_t address, std::uint64_t size) {
  std::lock_guard lock(mu_);
  const std::uint64_t end = address + size < address ? UINT64_MAX : address + size;
  for (auto it = mappings_.lower_bound(address); it != mappings_.end() && it->first < end;) {
    const auto handle = handles_.find(it->second.handle);
    it = mappings_.erase(it);
    if (handle != handles_.end() && --handle->second.mappings == 0 && handle->second.holds == 0) {
      release(handle->second.bytes);
      handles_.erase(handle);
    }
  }
}

MemoryLedger::HandleRelease MemoryLedger::beginRelease(std::uint64_t handle) {
  std::lock_guard lock(mu_);
  const auto it = handles_.find(handle);
  if (it == handles_.end() || it->second.holds == 0) {
    return {};
  }
  HandleRelease r{true, false, it->second.bytes};
  if (--it->second.holds == 0 && it->second.mappings == 0) {
    r.freed = true;
    handles_.erase(it);
  }
  return r;
}

void MemoryLedger::undoRelease(std::uint64_t handle, const HandleRelease& r) {
  if (!r.tracked) {
    return;
  }
  std::lock_guard lock(mu_);
  if (r.freed) {
    try {
      handles_.try_emplace(handle, HandleState{r.bytes});
    } catch (const std::bad_alloc&) {
      release(r.bytes);  // Not leaked from the ledger, at worst under-held.
    }
    return;
  }
  if (const auto it = handles_.find(handle); it != handles_.end()) {
    ++it->second.holds;
  }
}

std::optional<std::uint64_t> arrayBytes(const CudaArrayDescriptor& desc) {
  return layerBytes(desc.Format, desc.NumChannels, atLeastOne(desc.Width), atLeastOne(desc.Height));
}

std::optional<std::uint64_t> array3DBytes(const CudaArray3dDescriptor& desc) {
  return multiply(
      layerBytes(desc.Format, desc.NumChannels, atLeastOne(desc.Width), atLeastOne(desc.Height)),
      atLeastOne(desc.Depth));
}

std::optional<std::uint64_t> mipmappedArrayBytes(const CudaArray3dDescriptor& desc,
                                                 unsigned levels) {
  const bool depth_is_layers = (desc.Flags & (kCudaArray3dLayered | kCudaArray3dCubemap)) != 0;
  CudaArray3dDescriptor level = desc;
  std::uint64_t total = 0;
  // A level past the 64th would have every extent at 1; the driver refuses such counts anyway.
  for (unsigned l = 0; l < std::max(levels, 1u) && l < 64; ++l) {
    const auto bytes = array3DBytes(level);
    if (!bytes || __builtin_add_overflow(total, *bytes, &total)) {
      return std::nullopt;
    }
    level.Width = std::max<std::size_t>(level.Width / 2, 1);
    level.Height = level.Height == 0 ? 0 : std::max<std::size_t>(level.Height / 2, 1);
    if (!depth_is_layers) {
      level.Depth = level.Depth == 0 ? 0 : std::max<std::size_t>(level.Depth / 2, 1);
    }
  }
  return total;
}

}  // namespace tessera::cuda
