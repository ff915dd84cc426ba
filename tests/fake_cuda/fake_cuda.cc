// A fake libcuda.so.1 for the CUDA interposer's tests (src/cuda/interposer_test.cc). It exports
// the driver functions the interposer wraps or calls, with the driver's ABI, and simulates one
// device:
//
//   FAKE_CUDA_TOTAL_MIB     device memory in MiB (default 1024). Allocations past it fail with
//                           kCudaErrorOutOfMemory, as the device would.
//   FAKE_CUDA_KERNEL_US     run time of a kernel launched without parameters (default 100).
//   FAKE_CUDA_PROC_ADDRESS  "internal": cuGetProcAddress answers with addresses that are not
//                           the exported functions (a driver may hand out internal entry
//                           points); otherwise with the exported functions.
//
// Work runs in order on one engine thread per process (all streams share it): a kernel "runs"
// by sleeping its duration, from its first parameter (an unsigned count of microseconds, the
// way a real kernel gets its arguments) or, for cuGraphLaunch, the graph handle's value in
// microseconds. Events complete and take their timestamp when the engine reaches them, so
// cuEventElapsedTime around a kernel measures its real run time; cuEventSynchronize and the
// synchronize calls block until then. At most 1024 items wait in the queue; a launch past that
// blocks, as a full command buffer does. Kernels in different processes do not contend: each
// process has its own simulated device.
//
// cuGetProcAddress(_v2) resolves (name, cudaVersion, flags) the way the driver does: the newest
// ABI introduced at or before cudaVersion, the _ptsz variant for the per-thread-stream flag.
// cuCtxCreate gives _v2 from 3.2 and _v4 from 13.0; cuMemAlloc gives the 32-bit cuMemAlloc of
// CUDA 2.x below 3.2 and _v2 from it.
//
// Stream-ordered allocations come from memory pools, as on a device: the device's default pool
// (cuMemAllocAsync) or one made with cuMemPoolCreate. A pool keeps freed memory reserved (and so
// held on the device) for its next allocations, one byte reused for one byte asked (no
// fragmentation), and lets it go at cuCtxSynchronize, cuStreamSynchronize and cuEventSynchronize
// down to its release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, default 0), at
// cuMemPoolTrimTo, or when destroyed. live_bytes counts what pools hold reserved.
//
// Graphs hold allocation nodes (cuGraphAddMemAllocNode, or cuMemAllocAsync on a stream being
// captured with cuStreamBeginCapture_v2), each with an address from its creation and no memory,
// and kernels launched on a stream being captured, which run when the graph does.
// A launch of an executable graph (cuGraphInstantiateWithFlags) backs each node from the
// device's graph memory pool, then gives back what the graph frees (its free nodes, and
// cuMemFreeAsync on the capturing stream), its own nodes' or another graph's; the others stay
// allocated until cuMemFree(Async) or a launch of a graph that frees them.
// The graph pool keeps what it was given back until cuDeviceGraphMemTrim
// (cuDeviceGetGraphMemAttribute: USED and RESERVED_MEM_CURRENT). cuGraphLaunch of any other
// handle runs a kernel of the handle's value in microseconds, as before.
//
// For scripts/gpu-check-probe.c: cuDeviceGetAttribute says the SM clock runs at 1 MHz (so a
// kernel's cycle count is its microseconds), and cuModuleLoadData / cuModuleGetFunction accept
// any module and name.
//
// Every call but cuInit, cuDriverGetVersion and cuGetProcAddress(_v2) returns
// kCudaErrorNotInitialized before cuInit. The extra export fakeCudaStats reports what reached
// the fake (src/cuda/testing/fake_cuda_stats.h). Nothing here calls an exported function: they
// are thin wrappers over internal ones, so a preloaded interposer never sees the fake's own calls.
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/driver_api.h"
#include "cuda/testing/fake_cuda_stats.h"
#include "fake_cuda_exports.h"

using namespace tessera::cuda;  // NOLINT(google-build-using-namespace): the driver's names.
using tessera::cuda::testing::FakeCudaStats;

namespace {

constexpr std::size_t kQueueDepth = 1024;

std::int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::uint64_t envNumber(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct FakeEvent {
  bool recorded = false;
  bool complete = true;
  std::uint64_t record = 0;  // Which cuEventRecord the engine must reach to complete it.
  std::int64_t timestamp_ns = 0;
};

struct Work {
  FakeEvent* event = nullptr;  // Null: a kernel.
  std::uint64_t record = 0;
  std::int64_t duration_ns = 0;
};

struct FakePool {
  std::uint64_t reserved = 0;  // Held on the device: used + kept for reuse.
  std::uint64_t used = 0;
  std::uint64_t release_threshold = 0;
};

struct FakeGraphNode {
  std::uint64_t bytes = 0;
  bool allocated = false;  // Backed by a launch and not freed since.
};

struct FakeGraph {
  std::vector<CUdeviceptr> nodes;
  std::vector<std::int64_t> kernels;  // Captured launches' run times.
  std::vector<CUdeviceptr> frees;     // The nodes its free nodes free, any graph's.
};

struct FakeExec {
  std::vector<CUdeviceptr> nodes;
  std::vector<std::int64_t> kernels;
  std::vector<CUdeviceptr> frees;
};

struct Device {
  std::mutex mu;
  std::condition_variable changed;  // Any change below; waiters re-check.
  bool initialized = false;
  const std::uint64_t total_bytes = envNumber("FAKE_CUDA_TOTAL_MIB", 1024) << 20;
  const std::int64_t default_kernel_ns =
      static_cast<std::int64_t>(envNumber("FAKE_CUDA_KERNEL_US", 100)) * 1000;
  const bool internal_proc_address = [] {
    const char* v = std::getenv("FAKE_CUDA_PROC_ADDRESS");
    return v != nullptr && std::strcmp(v, "internal") == 0;
  }();
  std::uint64_t next_handle = 0x7f0000000000;
  std::unordered_map<std::uint64_t, std::uint64_t> live;  // Handle or address -> bytes.
  struct Pooled {
    FakePool* pool;
    std::uint64_t bytes;
  };
  std::unordered_map<std::uint64_t, Pooled> pooled;  // Address -> stream-ordered allocation.
  FakePool default_pool;
  std::unordered_set<FakePool*> pools{&default_pool};          // Every pool not destroyed.
  std::unordered_map<CUdeviceptr, FakeGraphNode> graph_nodes;  // Never forgotten.
  std::unordered_set<FakeGraph*> graphs;
  std::unordered_set<FakeExec*> execs;
  std::unordered_map<CUstream, FakeGraph*> capturing;
  FakePool graph_pool;  // reserved and used; no release threshold.
  struct VmmHandle {
    int holds = 1;  // Made, plus retained, less released.
    int mappings = 0;
  };
  std::unordered_map<std::uint64_t, VmmHandle> vmm;       // cuMemCreate handles.
  std::unordered_map<CUdeviceptr, std::uint64_t> mapped;  // Mapped address -> handle.
  std::deque<Work> queue;
  std::uint64_t submitted = 0;
  std::uint64_t completed = 0;
  std::uint64_t records = 0;
  bool engine_started = false;
  FakeCudaStats stats{};
};

Device& device() {
  static Device* d = new Device();  // Never destroyed: the engine thread outlives main.
  return *d;
}

// Thread-locals here are initial-exec, as a driver's must be for a static binary to dlopen it
// (the default model goes through __tls_get_addr, which there is a loader copy never set up).
__attribute__((tls_model("initial-exec"))) thread_local CUcontext t_current = nullptr;

void engine() {
  Device& d = device();
  std::unique_lock lock(d.mu);
  for (;;) {
    d.changed.wait(lock, [&] { return !d.queue.empty(); });
    const Work work = d.queue.front();
    if (work.event != nullptr) {
      if (work.event->record == work.record) {
        work.event->complete = true;
        work.event->timestamp_ns = monotonicNs();
      }
    } else {
      lock.unlock();
      const std::int64_t start = monotonicNs();
      const std::int64_t until = start + work.duration_ns;
      timespec ts{static_cast<time_t>(until / 1'000'000'000),
                  static_cast<long>(until % 1'000'000'000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) != 0) {
      }
      const std::int64_t end = monotonicNs();
      lock.lock();
      ++d.stats.kernels;
      d.stats.kernel_ns += end - start;
      if (d.stats.first_kernel_start_ns == 0) {
        d.stats.first_kernel_start_ns = start;
      }
      d.stats.last_kernel_end_ns = end;
    }
    d.queue.pop_front();
    ++d.completed;
    d.changed.notify_all();
  }
}

// Queues work behind everything submitted so far, waiting while the queue is full.
void submit(Device& d, std::unique_lock<std::mutex>& lock, const Work& work) {
  d.changed.wait(lock, [&] { return d.queue.size() < kQueueDepth; });
  if (!d.engine_started) {
    d.engine_started = true;
    std::thread(engine).detach();
  }
  d.queue.push_back(work);
  ++d.submitted;
  d.changed.notify_all();
}

// Waits for everything submitted before the call.
void drain(Device& d, std::unique_lock<std::mutex>& lock) {
  const std::uint64_t target = d.submitted;
  d.changed.wait(lock, [&] { return d.completed >= target; });
}

// Locks the device; a call that needs cuInit first checks `ready`.
struct Call {
  Device& d = device();
  std::unique_lock<std::mutex> lock{d.mu};
  bool ready() const { return d.initialized; }
};

CUresult allocate(Device& d, std::uint64_t bytes, unsigned long long& handle) {
  ++d.stats.alloc_calls;
  if (bytes == 0) {
    return kCudaErrorInvalidValue;
  }
  if (bytes > d.total_bytes - d.stats.live_bytes) {
    return kCudaErrorOutOfMemory;
  }
  handle = d.next_handle;
  d.next_handle += (bytes + 0xffff) & ~std::uint64_t{0xffff};
  d.live[handle] = bytes;
  d.stats.live_bytes += bytes;
  d.stats.peak_live_bytes = std::max(d.stats.peak_live_bytes, d.stats.live_bytes);
  return kCudaSuccess;
}

// `bytes` of the pool in use: from what it keeps if that is enough, else the pool grows.
CUresult poolTake(Device& d, FakePool& pool, std::uint64_t bytes) {
  const std::uint64_t kept = pool.reserved - pool.used;
  if (bytes > kept) {
    const std::uint64_t grow = bytes - kept;
    if (grow > d.total_bytes - d.stats.live_bytes) {
      return kCudaErrorOutOfMemory;
    }
    pool.reserved += grow;
    d.stats.live_bytes += grow;
    d.stats.peak_live_bytes = std::max(d.stats.peak_live_bytes, d.stats.live_bytes);
  }
  pool.used += bytes;
  return kCudaSuccess;
}

// A stream-ordered allocation, taken from its pool.
CUresult poolAllocate(Device& d, FakePool& pool, std::uint64_t bytes, CUdeviceptr& address) {
  ++d.stats.alloc_calls;
  if (bytes == 0) {
    return kCudaErrorInvalidValue;
  }
  if (const CUresult r = poolTake(d, pool, bytes); r != kCudaSuccess) {
    return r;
  }
  address = d.next_handle;
  d.next_handle += (bytes + 0xffff) & ~std::uint64_t{0xffff};
  d.pooled[address] = Device::Pooled{&pool, bytes};
  return kCudaSuccess;
}

// The pool lets go of what it keeps beyond max(keep, what is in use).
void poolRelease(Device& d, FakePool& pool, std::uint64_t keep) {
  const std::uint64_t target = std::max(keep, pool.used);
  if (pool.reserved > target) {
    d.stats.live_bytes -= pool.reserved - target;
    pool.reserved = target;
  }
}

void synchronizePools(Device& d) {
  for (FakePool* pool : d.pools) {
    poolRelease(d, *pool, pool->release_threshold);
  }
}

CUresult release(Device& d, std::uint64_t handle) {
  const auto it = d.live.find(handle);
  if (const auto node = d.graph_nodes.find(handle);
      it == d.live.end() && node != d.graph_nodes.end()) {
    if (!node->second.allocated) {
      return kCudaErrorInvalidValue;
    }
    node->second.allocated = false;  // Back to the graph pool, which keeps it.
    d.graph_pool.used -= node->second.bytes;
    return kCudaSuccess;
  }
  if (it == d.live.end()) {
    const auto pooled = d.pooled.find(handle);  // Back to its pool, which keeps it.
    if (pooled == d.pooled.end()) {
      return kCudaErrorInvalidValue;
    }
    pooled->second.pool->used -= pooled->second.bytes;
    d.pooled.erase(pooled);
    return kCudaSuccess;
  }
  d.stats.live_bytes -= it->second;
  d.live.erase(it);
  return kCudaSuccess;
}

FakePool* findPool(Device& d, CUmemoryPool pool) {
  auto* p = reinterpret_cast<FakePool*>(pool);
  return d.pools.count(p) != 0 ? p : nullptr;
}

std::int64_t kernelNs(const Device& d, void** params) {
  return params != nullptr && params[0] != nullptr
             ? std::int64_t{*static_cast<const unsigned*>(params[0])} * 1000
             : d.default_kernel_ns;
}

CUresult launch(std::int64_t duration_ns) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (t_current == nullptr) {
    return kCudaErrorInvalidContext;
  }
  submit(c.d, c.lock, Work{nullptr, 0, duration_ns});
  return kCudaSuccess;
}

std::uint64_t arrayBytes(std::size_t w, std::size_t h, std::size_t depth, CUarray_format format,
                         unsigned channels) {
  const std::uint64_t element =
      format == kCuAdFormatUnsignedInt8 || format == kCuAdFormatSignedInt8 ? 1
      : format == kCuAdFormatUnsignedInt16 || format == kCuAdFormatSignedInt16 ||
              format == kCuAdFormatHalf
          ? 2
          : 4;
  return std::uint64_t{w == 0 ? 1 : w} * (h == 0 ? 1 : h) * (depth == 0 ? 1 : depth) * element *
         channels;
}

// The implementations. Each exported function below calls exactly one of these.

CUresult fakeInit(unsigned) {
  Call c;
  c.d.initialized = true;
  return kCudaSuccess;
}

CUresult fakeDriverGetVersion(int* version) {
  *version = 13000;
  return kCudaSuccess;
}

CUresult fakeDeviceGet(CUdevice* device, int ordinal) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (ordinal != 0) {
    return kCudaErrorInvalidValue;
  }
  *device = 0;
  return kCudaSuccess;
}

CUresult fakeDeviceGetCount(int* count) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *count = 1;
  return kCudaSuccess;
}

CUresult fakeDeviceTotalMem(std::size_t* bytes, CUdevice) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *bytes = c.d.total_bytes;
  return kCudaSuccess;
}

CUresult fakePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *ctx = reinterpret_cast<CUcontext>(0x1000);
  return kCudaSuccess;
}

CUresult fakePrimaryCtxRelease(CUdevice) {
  Call c;
  return c.ready() ? kCudaSuccess : kCudaErrorNotInitialized;
}

CUresult createContext(CUcontext* ctx, std::uint64_t FakeCudaStats::*counter) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  ++(c.d.stats.*counter);
  *ctx = reinterpret_cast<CUcontext>(c.d.next_handle += 0x10000);
  t_current = *ctx;
  return kCudaSuccess;
}

CUresult fakeCtxCreate_v2(CUcontext* ctx, unsigned, CUdevice) {
  return createContext(ctx, &FakeCudaStats::ctx_create_v2_calls);
}

CUresult fakeCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam*, int, unsigned, CUdevice) {
  return createContext(ctx, &FakeCudaStats::ctx_create_v3_calls);
}

CUresult fakeCtxCreate_v4(CUcontext* ctx, CUctxCreateParams*, unsigned, CUdevice) {
  return createContext(ctx, &FakeCudaStats::ctx_create_v4_calls);
}

CUresult fakeCtxDestroy(CUcontext ctx) {
  Call c;
  if (t_current == ctx) {
    t_current = nullptr;
  }
  return c.ready() ? kCudaSuccess : kCudaErrorNotInitialized;
}

CUresult fakeCtxSetCurrent(CUcontext ctx) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  t_current = ctx;
  return kCudaSuccess;
}

CUresult fakeCtxGetCurrent(CUcontext* ctx) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *ctx = t_current;
  return kCudaSuccess;
}

CUresult fakeCtxSynchronize() {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  drain(c.d, c.lock);
  synchronizePools(c.d);
  return kCudaSuccess;
}

CUresult fakeMemAllocV1(unsigned* dptr, unsigned bytes) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  ++c.d.stats.mem_alloc_v1_calls;
  unsigned long long handle = 0;
  const CUresult r = allocate(c.d, bytes, handle);
  if (r == kCudaSuccess) {
    *dptr = static_cast<unsigned>(handle);  // A 32-bit address: what this ABI could hold.
  }
  return r;
}

CUresult fakeMemAlloc(CUdeviceptr* dptr, std::size_t bytes) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  return allocate(c.d, bytes, *dptr);
}

CUresult fakeMemAllocPitch(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                           std::size_t height, unsigned) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *pitch = (width + 511) / 512 * 512;
  return allocate(c.d, std::uint64_t{*pitch} * height, *dptr);
}

CUresult fakeMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned) {
  return fakeMemAlloc(dptr, bytes);
}

// A node of `graph` at a new address, with no memory yet.
CUresult addGraphNode(Device& d, FakeGraph& graph, std::uint64_t bytes, CUdeviceptr& address) {
  if (bytes == 0) {
    return kCudaErrorInvalidValue;
  }
  address = d.next_handle;
  d.next_handle += (bytes + 0xffff) & ~std::uint64_t{0xffff};
  d.graph_nodes[address] = FakeGraphNode{bytes};
  graph.nodes.push_back(address);
  return kCudaSuccess;
}

CUresult fakeMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream stream) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (const auto capture = c.d.capturing.find(stream); capture != c.d.capturing.end()) {
    return addGraphNode(c.d, *capture->second, bytes, *dptr);
  }
  return poolAllocate(c.d, c.d.default_pool, bytes, *dptr);
}

CUresult fakeMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                   CUstream) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakePool* p = findPool(c.d, pool);
  return p == nullptr ? kCudaErrorInvalidValue : poolAllocate(c.d, *p, bytes, *dptr);
}

CUresult fakeDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *pool = reinterpret_cast<CUmemoryPool>(&c.d.default_pool);
  return kCudaSuccess;
}

CUresult fakeMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps*) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  auto* p = new FakePool();
  c.d.pools.insert(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return kCudaSuccess;
}

// Destroying a pool that still has allocations is not modelled: refused.
CUresult fakeMemPoolDestroy(CUmemoryPool pool) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakePool* p = findPool(c.d, pool);
  if (p == nullptr || p == &c.d.default_pool || p->used != 0) {
    return kCudaErrorInvalidValue;
  }
  poolRelease(c.d, *p, 0);
  c.d.pools.erase(p);
  delete p;
  return kCudaSuccess;
}

CUresult fakeMemPoolTrimTo(CUmemoryPool pool, std::size_t keep) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakePool* p = findPool(c.d, pool);
  if (p == nullptr) {
    return kCudaErrorInvalidValue;
  }
  poolRelease(c.d, *p, keep);
  return kCudaSuccess;
}

// CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (4), RESERVED_MEM_CURRENT (5), USED_MEM_CURRENT (7).
CUresult fakeMemPoolSetAttribute(CUmemoryPool pool, int attribute, void* value) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakePool* p = findPool(c.d, pool);
  if (p == nullptr || value == nullptr || attribute != 4) {
    return kCudaErrorInvalidValue;
  }
  p->release_threshold = *static_cast<const cuuint64_t*>(value);
  return kCudaSuccess;
}

CUresult fakeMemPoolGetAttribute(CUmemoryPool pool, int attribute, void* value) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakePool* p = findPool(c.d, pool);
  if (p == nullptr || value == nullptr) {
    return kCudaErrorInvalidValue;
  }
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attribute) {
    case 4:
      *out = p->release_threshold;
      return kCudaSuccess;
    case 5:
      *out = p->reserved;
      return kCudaSuccess;
    case 7:
      *out = p->used;
      return kCudaSuccess;
    default:
      return kCudaErrorInvalidValue;
  }
}

// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE (17) only: the pool of a stream-ordered allocation, null for
// others.
CUresult fakePointerGetAttribute(void* data, int attribute, CUdeviceptr ptr) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (data == nullptr || attribute != 17) {
    return kCudaErrorInvalidValue;
  }
  const auto it = c.d.pooled.find(ptr);
  if (it == c.d.pooled.end() && c.d.live.count(ptr) == 0) {
    return kCudaErrorInvalidValue;
  }
  *static_cast<CUmemoryPool*>(data) =
      it == c.d.pooled.end() ? nullptr : reinterpret_cast<CUmemoryPool>(it->second.pool);
  return kCudaSuccess;
}

CUresult fakeMemFree(CUdeviceptr dptr) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  return release(c.d, dptr);
}

CUresult fakeMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  {
    Call c;
    if (!c.ready()) {
      return kCudaErrorNotInitialized;
    }
    if (const auto capture = c.d.capturing.find(stream); capture != c.d.capturing.end()) {
      // A free node of the graph being captured.
      if (c.d.graph_nodes.count(dptr) == 0) {
        return kCudaErrorInvalidValue;
      }
      capture->second->frees.push_back(dptr);
      return kCudaSuccess;
    }
  }
  return fakeMemFree(dptr);
}

CUresult fakeGraphCreate(CUgraph* graph, unsigned) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  auto* g = new FakeGraph();
  c.d.graphs.insert(g);
  *graph = reinterpret_cast<CUgraph>(g);
  return kCudaSuccess;
}

FakeGraph* findGraph(Device& d, CUgraph graph) {
  auto* g = reinterpret_cast<FakeGraph*>(graph);
  return d.graphs.count(g) != 0 ? g : nullptr;
}

CUresult fakeGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*, std::size_t,
                                  CudaMemAllocNodeParams* params) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakeGraph* g = findGraph(c.d, graph);
  if (g == nullptr || params == nullptr || node == nullptr) {
    return kCudaErrorInvalidValue;
  }
  const CUresult r = addGraphNode(c.d, *g, params->bytesize, params->dptr);
  *node = reinterpret_cast<CUgraphNode>(params->dptr);
  return r;
}

CUresult fakeGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*, std::size_t,
                                 CUdeviceptr dptr) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakeGraph* g = findGraph(c.d, graph);
  if (g == nullptr || c.d.graph_nodes.count(dptr) == 0 || node == nullptr) {
    return kCudaErrorInvalidValue;
  }
  g->frees.push_back(dptr);
  *node = reinterpret_cast<CUgraphNode>(dptr + 1);
  return kCudaSuccess;
}

// A node's handle is its address (an allocation node), or its address + 1 (a free node).
CUresult fakeGraphNodeGetType(CUgraphNode node, int* type) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto handle = reinterpret_cast<CUdeviceptr>(node);
  if (type == nullptr) {
    return kCudaErrorInvalidValue;
  }
  if (c.d.graph_nodes.count(handle) != 0) {
    *type = kCuGraphNodeTypeMemAlloc;
  } else if (c.d.graph_nodes.count(handle - 1) != 0) {
    *type = kCuGraphNodeTypeMemFree;
  } else {
    return kCudaErrorInvalidValue;
  }
  return kCudaSuccess;
}

CUresult fakeGraphMemAllocNodeGetParams(CUgraphNode node, CudaMemAllocNodeParams* params) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto address = reinterpret_cast<CUdeviceptr>(node);
  const auto it = c.d.graph_nodes.find(address);
  if (it == c.d.graph_nodes.end() || params == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *params = CudaMemAllocNodeParams{};
  params->location_type = kCuMemLocationTypeDevice;
  params->bytesize = it->second.bytes;
  params->dptr = address;
  return kCudaSuccess;
}

CUresult fakeGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* dptr) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto address = reinterpret_cast<CUdeviceptr>(node) - 1;
  if (c.d.graph_nodes.count(address) == 0 || dptr == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *dptr = address;
  return kCudaSuccess;
}

// Removes the node from the graph that has it (executables made before keep theirs).
CUresult fakeGraphDestroyNode(CUgraphNode node) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto handle = reinterpret_cast<CUdeviceptr>(node);
  for (FakeGraph* g : c.d.graphs) {
    if (auto it = std::find(g->nodes.begin(), g->nodes.end(), handle); it != g->nodes.end()) {
      g->nodes.erase(it);
      return kCudaSuccess;
    }
    if (auto it = std::find(g->frees.begin(), g->frees.end(), handle - 1); it != g->frees.end()) {
      g->frees.erase(it);
      return kCudaSuccess;
    }
  }
  return kCudaErrorInvalidValue;
}

CUresult fakeGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakeGraph* g = findGraph(c.d, graph);
  if (g == nullptr || exec == nullptr) {
    return kCudaErrorInvalidValue;
  }
  auto* e = new FakeExec{g->nodes, g->kernels, g->frees};
  c.d.execs.insert(e);
  *exec = reinterpret_cast<CUgraphExec>(e);
  return kCudaSuccess;
}

CUresult fakeGraphExecDestroy(CUgraphExec exec) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  auto* e = reinterpret_cast<FakeExec*>(exec);
  if (c.d.execs.erase(e) == 0) {
    return kCudaErrorInvalidValue;
  }
  delete e;
  return kCudaSuccess;
}

CUresult fakeGraphDestroy(CUgraph graph) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  FakeGraph* g = findGraph(c.d, graph);
  if (g == nullptr) {
    return kCudaErrorInvalidValue;
  }
  c.d.graphs.erase(g);
  delete g;
  return kCudaSuccess;
}

CUresult fakeDeviceGraphMemTrim(CUdevice) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  poolRelease(c.d, c.d.graph_pool, 0);
  return kCudaSuccess;
}

// CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT (0) and RESERVED_MEM_CURRENT (2).
CUresult fakeDeviceGetGraphMemAttribute(CUdevice, int attribute, void* value) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (value == nullptr || (attribute != 0 && attribute != 2)) {
    return kCudaErrorInvalidValue;
  }
  *static_cast<cuuint64_t*>(value) = attribute == 0 ? c.d.graph_pool.used : c.d.graph_pool.reserved;
  return kCudaSuccess;
}

CUresult fakeStreamBeginCapture(CUstream stream, CUstreamCaptureMode) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (c.d.capturing.count(stream) != 0) {
    return kCudaErrorInvalidValue;
  }
  auto* g = new FakeGraph();
  c.d.graphs.insert(g);
  c.d.capturing[stream] = g;
  return kCudaSuccess;
}

CUresult fakeStreamEndCapture(CUstream stream, CUgraph* graph) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto it = c.d.capturing.find(stream);
  if (it == c.d.capturing.end() || graph == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *graph = reinterpret_cast<CUgraph>(it->second);
  c.d.capturing.erase(it);
  return kCudaSuccess;
}

CUresult fakeStreamGetCaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                  CUgraph* graph, const CUgraphNode** dependencies,
                                  std::size_t* dependency_count) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (status == nullptr) {
    return kCudaErrorInvalidValue;
  }
  const auto it = c.d.capturing.find(stream);
  *status = it != c.d.capturing.end() ? 1 : kCuStreamCaptureStatusNone;
  if (id != nullptr) {
    *id = it != c.d.capturing.end() ? reinterpret_cast<std::uintptr_t>(it->second) : 0;
  }
  if (graph != nullptr) {
    *graph = it != c.d.capturing.end() ? reinterpret_cast<CUgraph>(it->second) : nullptr;
  }
  if (dependencies != nullptr) {
    *dependencies = nullptr;
  }
  if (dependency_count != nullptr) {
    *dependency_count = 0;
  }
  return kCudaSuccess;
}

CUresult fakeCtxGetDevice(CUdevice* device) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (device == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *device = 0;
  return kCudaSuccess;
}

CUresult fakeMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *total_bytes = c.d.total_bytes;
  *free_bytes = c.d.total_bytes - c.d.stats.live_bytes;
  return kCudaSuccess;
}

CUresult fakeArrayCreate(CUarray* array, const CudaArrayDescriptor* desc) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  unsigned long long handle = 0;
  const CUresult r = allocate(
      c.d, arrayBytes(desc->Width, desc->Height, 1, desc->Format, desc->NumChannels), handle);
  *array = reinterpret_cast<CUarray>(handle);
  return r;
}

CUresult fakeArray3DCreate(CUarray* array, const CudaArray3dDescriptor* desc) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  unsigned long long handle = 0;
  const CUresult r = allocate(
      c.d, arrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels),
      handle);
  *array = reinterpret_cast<CUarray>(handle);
  return r;
}

CUresult fakeArrayDestroy(CUarray array) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  return release(c.d, reinterpret_cast<std::uint64_t>(array));
}

CUresult fakeMipmappedArrayCreate(CUmipmappedArray* array, const CudaArray3dDescriptor* desc,
                                  unsigned levels) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  // The fake's own bookkeeping only: twice the first level bounds any chain of halving levels.
  const std::uint64_t first =
      arrayBytes(desc->Width, desc->Height, desc->Depth, desc->Format, desc->NumChannels);
  unsigned long long handle = 0;
  const CUresult r = allocate(c.d, levels > 1 ? 2 * first : first, handle);
  *array = reinterpret_cast<CUmipmappedArray>(handle);
  return r;
}

CUresult fakeMipmappedArrayDestroy(CUmipmappedArray array) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  return release(c.d, reinterpret_cast<std::uint64_t>(array));
}

// cuMemCreate's memory lives while its handle is held or mapped, as on a device.
CUresult fakeMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                       const CUmemAllocationPropPrefix* prop, unsigned long long) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (prop->location_type != kCuMemLocationTypeDevice) {
    *handle = c.d.next_handle += 0x10000;  // Host memory: not the device's.
    c.d.vmm[*handle] = Device::VmmHandle{};
    return kCudaSuccess;
  }
  const CUresult r = allocate(c.d, bytes, *handle);
  if (r == kCudaSuccess) {
    c.d.vmm[*handle] = Device::VmmHandle{};
  }
  return r;
}

void vmmDropIfUnused(Device& d, std::uint64_t handle) {
  const auto it = d.vmm.find(handle);
  if (it != d.vmm.end() && it->second.holds == 0 && it->second.mappings == 0) {
    release(d, handle);  // Host handles are not in the table; that is fine too.
    d.vmm.erase(it);
  }
}

CUresult fakeMemRelease(CUmemGenericAllocationHandle handle) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto it = c.d.vmm.find(handle);
  if (it == c.d.vmm.end() || it->second.holds == 0) {
    return kCudaErrorInvalidValue;
  }
  --it->second.holds;
  vmmDropIfUnused(c.d, handle);
  return kCudaSuccess;
}

CUresult fakeMemAddressReserve(CUdeviceptr* address, std::size_t size, std::size_t, CUdeviceptr,
                               unsigned long long) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  if (address == nullptr || size == 0) {
    return kCudaErrorInvalidValue;
  }
  *address = c.d.next_handle;
  c.d.next_handle += (size + 0xffff) & ~std::uint64_t{0xffff};
  return kCudaSuccess;
}

CUresult fakeMemAddressFree(CUdeviceptr, std::size_t) {
  Call c;
  return c.ready() ? kCudaSuccess : kCudaErrorNotInitialized;
}

CUresult fakeMemMap(CUdeviceptr address, std::size_t, std::size_t,
                    CUmemGenericAllocationHandle handle, unsigned long long) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto it = c.d.vmm.find(handle);
  if (it == c.d.vmm.end() || c.d.mapped.count(address) != 0) {
    return kCudaErrorInvalidValue;
  }
  ++it->second.mappings;
  c.d.mapped[address] = handle;
  return kCudaSuccess;
}

// Unmaps the mappings that start in [address, address + size).
CUresult fakeMemUnmap(CUdeviceptr address, std::size_t size) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  std::vector<CUdeviceptr> gone;
  for (const auto& [at, handle] : c.d.mapped) {
    if (at >= address && at - address < size) {
      gone.push_back(at);
    }
  }
  if (gone.empty()) {
    return kCudaErrorInvalidValue;
  }
  for (const CUdeviceptr at : gone) {
    const std::uint64_t handle = c.d.mapped[at];
    c.d.mapped.erase(at);
    --c.d.vmm[handle].mappings;
    vmmDropIfUnused(c.d, handle);
  }
  return kCudaSuccess;
}

// The handle of the mapping that starts at `address`, held once more.
CUresult fakeMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* address) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto it = c.d.mapped.find(reinterpret_cast<CUdeviceptr>(address));
  if (handle == nullptr || it == c.d.mapped.end()) {
    return kCudaErrorInvalidValue;
  }
  ++c.d.vmm[it->second].holds;
  *handle = it->second;
  return kCudaSuccess;
}

// A launch on a stream being captured becomes a kernel node of the graph captured.
CUresult launchOrCapture(CUstream stream, std::int64_t duration_ns) {
  {
    Call c;
    if (!c.ready()) {
      return kCudaErrorNotInitialized;
    }
    if (const auto it = c.d.capturing.find(stream); it != c.d.capturing.end()) {
      it->second->kernels.push_back(duration_ns);
      return kCudaSuccess;
    }
  }
  return launch(duration_ns);
}

CUresult fakeLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream stream, void** params, void**) {
  return launchOrCapture(stream, kernelNs(device(), params));
}

CUresult fakeLaunchKernelEx(const CUlaunchConfig* config, CUfunction, void** params, void**) {
  return launchOrCapture(config != nullptr ? config->hStream : nullptr, kernelNs(device(), params));
}

CUresult fakeLaunchCooperativeKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, unsigned, CUstream, void** params) {
  return launch(kernelNs(device(), params));
}

CUresult fakeGraphLaunch(CUgraphExec graph, CUstream) {
  bool registered = false;
  std::vector<std::int64_t> kernels;
  {
    Call c;
    if (!c.ready()) {
      return kCudaErrorNotInitialized;
    }
    auto* e = reinterpret_cast<FakeExec*>(graph);
    if (c.d.execs.count(e) != 0) {  // Back each node, and give back what the graph frees.
      for (const CUdeviceptr address : e->nodes) {
        FakeGraphNode& node = c.d.graph_nodes[address];
        if (!node.allocated) {
          if (const CUresult r = poolTake(c.d, c.d.graph_pool, node.bytes); r != kCudaSuccess) {
            return r;
          }
          node.allocated = true;
        }
      }
      for (const CUdeviceptr address : e->frees) {
        FakeGraphNode& node = c.d.graph_nodes[address];
        if (node.allocated) {
          node.allocated = false;
          c.d.graph_pool.used -= node.bytes;
        }
      }
      kernels = e->kernels;
      registered = true;
    }
  }
  if (registered) {
    for (const std::int64_t ns : kernels) {
      if (const CUresult r = launch(ns); r != kCudaSuccess) {
        return r;
      }
    }
    return kCudaSuccess;
  }
  return launch(static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(graph)) * 1000);
}

CUresult fakeStreamCreate(CUstream* stream, unsigned) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *stream = reinterpret_cast<CUstream>(c.d.next_handle += 0x10000);
  return kCudaSuccess;
}

CUresult fakeStreamSynchronize(CUstream) { return fakeCtxSynchronize(); }

CUresult fakeStreamIsCapturing(CUstream stream, CUstreamCaptureStatus* status) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *status = c.d.capturing.count(stream) != 0 ? 1 : kCuStreamCaptureStatusNone;
  return kCudaSuccess;
}

CUresult fakeThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  __attribute__((tls_model("initial-exec"))) thread_local CUstreamCaptureMode t_mode = 0;
  std::swap(t_mode, *mode);
  return kCudaSuccess;
}

CUresult fakeEventCreate(CUevent* event, unsigned) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  *event = reinterpret_cast<CUevent>(new FakeEvent());
  return kCudaSuccess;
}

CUresult fakeEventDestroy(CUevent) {
  // Queued work may still point at the event: the fake keeps it (a test's worth of leak).
  return kCudaSuccess;
}

CUresult fakeEventRecord(CUevent event, CUstream) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  auto* e = reinterpret_cast<FakeEvent*>(event);
  e->recorded = true;
  e->complete = false;
  e->record = ++c.d.records;
  submit(c.d, c.lock, Work{e, e->record, 0});
  return kCudaSuccess;
}

CUresult fakeEventQuery(CUevent event) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  return reinterpret_cast<FakeEvent*>(event)->complete ? kCudaSuccess : kCudaErrorNotReady;
}

CUresult fakeEventSynchronize(CUevent event) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  auto* e = reinterpret_cast<FakeEvent*>(event);
  c.d.changed.wait(c.lock, [&] { return e->complete; });
  synchronizePools(c.d);
  return kCudaSuccess;
}

CUresult fakeEventElapsedTime(float* ms, CUevent start, CUevent end) {
  Call c;
  if (!c.ready()) {
    return kCudaErrorNotInitialized;
  }
  const auto* s = reinterpret_cast<FakeEvent*>(start);
  const auto* e = reinterpret_cast<FakeEvent*>(end);
  if (!s->recorded || !e->recorded) {
    return kCudaErrorInvalidHandle;
  }
  if (!s->complete || !e->complete) {
    return kCudaErrorNotReady;
  }
  *ms = static_cast<float>(static_cast<double>(e->timestamp_ns - s->timestamp_ns) / 1e6);
  return kCudaSuccess;
}

CUresult fakeGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* status);

CUresult fakeGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  return fakeGetProcAddress_v2(symbol, pfn, cuda_version, flags, nullptr);
}

}  // namespace

// The exported driver API.

FAKE_EXPORT CUresult cuInit(unsigned flags) { return fakeInit(flags); }
FAKE_EXPORT CUresult cuDriverGetVersion(int* v) { return fakeDriverGetVersion(v); }
FAKE_EXPORT CUresult cuDeviceGet(CUdevice* d, int ordinal) { return fakeDeviceGet(d, ordinal); }
FAKE_EXPORT CUresult cuDeviceGetCount(int* n) { return fakeDeviceGetCount(n); }
FAKE_EXPORT CUresult cuDeviceTotalMem_v2(std::size_t* b, CUdevice d) {
  return fakeDeviceTotalMem(b, d);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  return fakePrimaryCtxRetain(c, d);
}
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { return fakePrimaryCtxRelease(d); }
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* c, unsigned f, CUdevice d) {
  return fakeCtxCreate_v2(c, f, d);
}
FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext* c, CUexecAffinityParam* p, int n, unsigned f,
                                    CUdevice d) {
  return fakeCtxCreate_v3(c, p, n, f, d);
}
FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext* c, CUctxCreateParams* p, unsigned f, CUdevice d) {
  return fakeCtxCreate_v4(c, p, f, d);
}
FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return fakeCtxDestroy(c); }
FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext c) { return fakeCtxSetCurrent(c); }
FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* c) { return fakeCtxGetCurrent(c); }
FAKE_EXPORT CUresult cuCtxSynchronize() { return fakeCtxSynchronize(); }

FAKE_EXPORT CUresult cuMemAlloc(unsigned* p, unsigned b) { return fakeMemAllocV1(p, b); }
FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* p, std::size_t b) { return fakeMemAlloc(p, b); }
FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* p, std::size_t* pitch, std::size_t w,
                                        std::size_t h, unsigned e) {
  return fakeMemAllocPitch(p, pitch, w, h, e);
}
FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* p, std::size_t b, unsigned f) {
  return fakeMemAllocManaged(p, b, f);
}
FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* p, std::size_t b, CUstream s) {
  return fakeMemAllocAsync(p, b, s);
}
FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* p, std::size_t b, CUstream s) {
  return fakeMemAllocAsync(p, b, s);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* p, std::size_t b, CUmemoryPool pool,
                                             CUstream s) {
  return fakeMemAllocFromPoolAsync(p, b, pool, s);
}
FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* p, std::size_t b, CUmemoryPool pool,
                                                  CUstream s) {
  return fakeMemAllocFromPoolAsync(p, b, pool, s);
}
FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr p) { return fakeMemFree(p); }
FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return fakeMemFreeAsync(p, s); }
FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  return fakeMemFreeAsync(p, s);
}
FAKE_EXPORT CUresult cuMemGetInfo_v2(std::size_t* f, std::size_t* t) {
  return fakeMemGetInfo(f, t);
}
FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* a, const CudaArrayDescriptor* d) {
  return fakeArrayCreate(a, d);
}
FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* a, const CudaArray3dDescriptor* d) {
  return fakeArray3DCreate(a, d);
}
FAKE_EXPORT CUresult cuArrayDestroy(CUarray a) { return fakeArrayDestroy(a); }
FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* a, const CudaArray3dDescriptor* d,
                                            unsigned levels) {
  return fakeMipmappedArrayCreate(a, d, levels);
}
FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray a) {
  return fakeMipmappedArrayDestroy(a);
}
FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* h, std::size_t b,
                                 const CUmemAllocationPropPrefix* p, unsigned long long f) {
  return fakeMemCreate(h, b, p, f);
}
FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return fakeMemRelease(h); }
FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* p, std::size_t size, std::size_t alignment,
                                         CUdeviceptr addr, unsigned long long flags) {
  return fakeMemAddressReserve(p, size, alignment, addr, flags);
}
FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr p, std::size_t size) {
  return fakeMemAddressFree(p, size);
}
FAKE_EXPORT CUresult cuMemMap(CUdeviceptr p, std::size_t size, std::size_t offset,
                              CUmemGenericAllocationHandle h, unsigned long long flags) {
  return fakeMemMap(p, size, offset, h, flags);
}
FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr p, std::size_t size) { return fakeMemUnmap(p, size); }
FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  return fakeMemRetainAllocationHandle(h, addr);
}

FAKE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                    unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s,
                                    void** p, void** e) {
  return fakeLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                         unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                         CUstream s, void** p, void** e) {
  return fakeLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** p, void** e) {
  return fakeLaunchKernelEx(c, f, p, e);
}
FAKE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** p,
                                           void** e) {
  return fakeLaunchKernelEx(c, f, p, e);
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                               unsigned bx, unsigned by, unsigned bz, unsigned shm,
                                               CUstream s, void** p) {
  return fakeLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, p);
}
FAKE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                    unsigned gz, unsigned bx, unsigned by,
                                                    unsigned bz, unsigned shm, CUstream s,
                                                    void** p) {
  return fakeLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, p);
}
FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* p, CUdevice d) {
  return fakeDeviceGetDefaultMemPool(p, d);
}
FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* p, CUdevice d) {
  return fakeDeviceGetDefaultMemPool(p, d);
}
FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* p, const CUmemPoolProps* props) {
  return fakeMemPoolCreate(p, props);
}
FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool p) { return fakeMemPoolDestroy(p); }
FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool p, std::size_t keep) {
  return fakeMemPoolTrimTo(p, keep);
}
FAKE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool p, int a, void* v) {
  return fakeMemPoolSetAttribute(p, a, v);
}
FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool p, int a, void* v) {
  return fakeMemPoolGetAttribute(p, a, v);
}
FAKE_EXPORT CUresult cuPointerGetAttribute(void* data, int a, CUdeviceptr p) {
  return fakePointerGetAttribute(data, a, p);
}
FAKE_EXPORT CUresult cuGraphCreate(CUgraph* g, unsigned f) { return fakeGraphCreate(g, f); }
FAKE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* n, CUgraph g, const CUgraphNode* d,
                                            std::size_t nd, CudaMemAllocNodeParams* p) {
  return fakeGraphAddMemAllocNode(n, g, d, nd, p);
}
FAKE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* n, CUgraph g, const CUgraphNode* d,
                                           std::size_t nd, CUdeviceptr p) {
  return fakeGraphAddMemFreeNode(n, g, d, nd, p);
}
FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long f) {
  return fakeGraphInstantiateWithFlags(e, g, f);
}
FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { return fakeGraphExecDestroy(e); }
FAKE_EXPORT CUresult cuGraphDestroy(CUgraph g) { return fakeGraphDestroy(g); }
FAKE_EXPORT CUresult cuGraphDestroyNode(CUgraphNode n) { return fakeGraphDestroyNode(n); }
FAKE_EXPORT CUresult cuGraphNodeGetType(CUgraphNode n, int* t) {
  return fakeGraphNodeGetType(n, t);
}
FAKE_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode n, CudaMemAllocNodeParams* p) {
  return fakeGraphMemAllocNodeGetParams(n, p);
}
FAKE_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode n, CUdeviceptr* d) {
  return fakeGraphMemFreeNodeGetParams(n, d);
}
FAKE_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice d) { return fakeDeviceGraphMemTrim(d); }
FAKE_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice d, int a, void* v) {
  return fakeDeviceGetGraphMemAttribute(d, a, v);
}
FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m) {
  return fakeStreamBeginCapture(s, m);
}
FAKE_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  return fakeStreamEndCapture(s, g);
}
FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* st,
                                               cuuint64_t* id, CUgraph* g, const CUgraphNode** d,
                                               std::size_t* n) {
  return fakeStreamGetCaptureInfo(s, st, id, g, d, n);
}
FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* d) { return fakeCtxGetDevice(d); }
FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec g, CUstream s) { return fakeGraphLaunch(g, s); }
FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec g, CUstream s) { return fakeGraphLaunch(g, s); }

FAKE_EXPORT CUresult cuStreamCreate(CUstream* s, unsigned f) { return fakeStreamCreate(s, f); }
FAKE_EXPORT CUresult cuStreamSynchronize(CUstream s) { return fakeStreamSynchronize(s); }
FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* st) {
  return fakeStreamIsCapturing(s, st);
}
FAKE_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* m) {
  return fakeThreadExchangeStreamCaptureMode(m);
}
FAKE_EXPORT CUresult cuDeviceGetAttribute(int* value, int attribute, CUdevice) {
  if (value == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *value = attribute == 13 ? 1000 : 0;  // CU_DEVICE_ATTRIBUTE_CLOCK_RATE, in kHz.
  return kCudaSuccess;
}
FAKE_EXPORT CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) {
    return kCudaErrorInvalidValue;
  }
  static int one_module;
  *module = reinterpret_cast<CUmodule>(&one_module);
  return kCudaSuccess;
}
FAKE_EXPORT CUresult cuModuleGetFunction(CUfunction* f, CUmodule, const char* name) {
  if (f == nullptr || name == nullptr) {
    return kCudaErrorInvalidValue;
  }
  static int one_function;
  *f = reinterpret_cast<CUfunction>(&one_function);
  return kCudaSuccess;
}
FAKE_EXPORT CUresult cuEventCreate(CUevent* e, unsigned f) { return fakeEventCreate(e, f); }
FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent e) { return fakeEventDestroy(e); }
FAKE_EXPORT CUresult cuEventRecord(CUevent e, CUstream s) { return fakeEventRecord(e, s); }
FAKE_EXPORT CUresult cuEventRecord_ptsz(CUevent e, CUstream s) { return fakeEventRecord(e, s); }
FAKE_EXPORT CUresult cuEventQuery(CUevent e) { return fakeEventQuery(e); }
FAKE_EXPORT CUresult cuEventSynchronize(CUevent e) { return fakeEventSynchronize(e); }
FAKE_EXPORT CUresult cuEventElapsedTime(float* ms, CUevent s, CUevent e) {
  return fakeEventElapsedTime(ms, s, e);
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int version,
                                      cuuint64_t flags) {
  return fakeGetProcAddress(symbol, pfn, version, flags);
}
FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                         cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  return fakeGetProcAddress_v2(symbol, pfn, version, flags, status);
}

FAKE_EXPORT void fakeCudaStats(FakeCudaStats* out) {
  Call c;
  *out = c.d.stats;
}

namespace {

// cuGetProcAddress's table: base name, the cudaVersion that introduced this ABI, whether it is
// the per-thread-stream variant, the exported function and the internal one.
struct Entry {
  const char* base;
  int since;
  bool per_thread;
  void* exported;
  void* internal;
};

template <typename Fn>
void* fn(Fn f) {
  return reinterpret_cast<void*>(f);
}

const Entry kEntries[] = {
    {"cuInit", 2000, false, fn(&cuInit), fn(&fakeInit)},
    {"cuDriverGetVersion", 2020, false, fn(&cuDriverGetVersion), fn(&fakeDriverGetVersion)},
    {"cuDeviceGet", 2000, false, fn(&cuDeviceGet), fn(&fakeDeviceGet)},
    {"cuDeviceGetCount", 2000, false, fn(&cuDeviceGetCount), fn(&fakeDeviceGetCount)},
    {"cuDeviceTotalMem", 3020, false, fn(&cuDeviceTotalMem_v2), fn(&fakeDeviceTotalMem)},
    {"cuDevicePrimaryCtxRetain", 7000, false, fn(&cuDevicePrimaryCtxRetain),
     fn(&fakePrimaryCtxRetain)},
    {"cuDevicePrimaryCtxRelease", 11000, false, fn(&cuDevicePrimaryCtxRelease_v2),
     fn(&fakePrimaryCtxRelease)},
    {"cuCtxCreate", 3020, false, fn(&cuCtxCreate_v2), fn(&fakeCtxCreate_v2)},
    {"cuCtxCreate", 13000, false, fn(&cuCtxCreate_v4), fn(&fakeCtxCreate_v4)},
    {"cuCtxDestroy", 4000, false, fn(&cuCtxDestroy_v2), fn(&fakeCtxDestroy)},
    {"cuCtxSetCurrent", 4000, false, fn(&cuCtxSetCurrent), fn(&fakeCtxSetCurrent)},
    {"cuCtxGetCurrent", 4000, false, fn(&cuCtxGetCurrent), fn(&fakeCtxGetCurrent)},
    {"cuCtxSynchronize", 2000, false, fn(&cuCtxSynchronize), fn(&fakeCtxSynchronize)},
    {"cuMemAlloc", 2000, false, fn(&cuMemAlloc), fn(&fakeMemAllocV1)},
    {"cuMemAlloc", 3020, false, fn(&cuMemAlloc_v2), fn(&fakeMemAlloc)},
    {"cuMemAllocPitch", 3020, false, fn(&cuMemAllocPitch_v2), fn(&fakeMemAllocPitch)},
    {"cuMemAllocManaged", 6000, false, fn(&cuMemAllocManaged), fn(&fakeMemAllocManaged)},
    {"cuMemAllocAsync", 11020, false, fn(&cuMemAllocAsync), fn(&fakeMemAllocAsync)},
    {"cuMemAllocAsync", 11020, true, fn(&cuMemAllocAsync_ptsz), fn(&fakeMemAllocAsync)},
    {"cuMemAllocFromPoolAsync", 11020, false, fn(&cuMemAllocFromPoolAsync),
     fn(&fakeMemAllocFromPoolAsync)},
    {"cuMemAllocFromPoolAsync", 11020, true, fn(&cuMemAllocFromPoolAsync_ptsz),
     fn(&fakeMemAllocFromPoolAsync)},
    {"cuMemFree", 3020, false, fn(&cuMemFree_v2), fn(&fakeMemFree)},
    {"cuMemFreeAsync", 11020, false, fn(&cuMemFreeAsync), fn(&fakeMemFreeAsync)},
    {"cuMemFreeAsync", 11020, true, fn(&cuMemFreeAsync_ptsz), fn(&fakeMemFreeAsync)},
    {"cuMemGetInfo", 3020, false, fn(&cuMemGetInfo_v2), fn(&fakeMemGetInfo)},
    {"cuArrayCreate", 3020, false, fn(&cuArrayCreate_v2), fn(&fakeArrayCreate)},
    {"cuArray3DCreate", 3020, false, fn(&cuArray3DCreate_v2), fn(&fakeArray3DCreate)},
    {"cuArrayDestroy", 2000, false, fn(&cuArrayDestroy), fn(&fakeArrayDestroy)},
    {"cuMipmappedArrayCreate", 5000, false, fn(&cuMipmappedArrayCreate),
     fn(&fakeMipmappedArrayCreate)},
    {"cuMipmappedArrayDestroy", 5000, false, fn(&cuMipmappedArrayDestroy),
     fn(&fakeMipmappedArrayDestroy)},
    {"cuMemCreate", 10020, false, fn(&cuMemCreate), fn(&fakeMemCreate)},
    {"cuMemRelease", 10020, false, fn(&cuMemRelease), fn(&fakeMemRelease)},
    {"cuMemAddressReserve", 10020, false, fn(&cuMemAddressReserve), fn(&fakeMemAddressReserve)},
    {"cuMemAddressFree", 10020, false, fn(&cuMemAddressFree), fn(&fakeMemAddressFree)},
    {"cuMemMap", 10020, false, fn(&cuMemMap), fn(&fakeMemMap)},
    {"cuMemUnmap", 10020, false, fn(&cuMemUnmap), fn(&fakeMemUnmap)},
    {"cuMemRetainAllocationHandle", 11000, false, fn(&cuMemRetainAllocationHandle),
     fn(&fakeMemRetainAllocationHandle)},
    {"cuDeviceGetDefaultMemPool", 11020, false, fn(&cuDeviceGetDefaultMemPool),
     fn(&fakeDeviceGetDefaultMemPool)},
    {"cuDeviceGetMemPool", 11020, false, fn(&cuDeviceGetMemPool), fn(&fakeDeviceGetDefaultMemPool)},
    {"cuMemPoolCreate", 11020, false, fn(&cuMemPoolCreate), fn(&fakeMemPoolCreate)},
    {"cuMemPoolDestroy", 11020, false, fn(&cuMemPoolDestroy), fn(&fakeMemPoolDestroy)},
    {"cuMemPoolTrimTo", 11020, false, fn(&cuMemPoolTrimTo), fn(&fakeMemPoolTrimTo)},
    {"cuMemPoolSetAttribute", 11020, false, fn(&cuMemPoolSetAttribute),
     fn(&fakeMemPoolSetAttribute)},
    {"cuMemPoolGetAttribute", 11020, false, fn(&cuMemPoolGetAttribute),
     fn(&fakeMemPoolGetAttribute)},
    {"cuPointerGetAttribute", 4000, false, fn(&cuPointerGetAttribute),
     fn(&fakePointerGetAttribute)},
    {"cuLaunchKernel", 4000, false, fn(&cuLaunchKernel), fn(&fakeLaunchKernel)},
    {"cuLaunchKernel", 7000, true, fn(&cuLaunchKernel_ptsz), fn(&fakeLaunchKernel)},
    {"cuLaunchKernelEx", 11060, false, fn(&cuLaunchKernelEx), fn(&fakeLaunchKernelEx)},
    {"cuLaunchKernelEx", 11060, true, fn(&cuLaunchKernelEx_ptsz), fn(&fakeLaunchKernelEx)},
    {"cuLaunchCooperativeKernel", 9000, false, fn(&cuLaunchCooperativeKernel),
     fn(&fakeLaunchCooperativeKernel)},
    {"cuLaunchCooperativeKernel", 9000, true, fn(&cuLaunchCooperativeKernel_ptsz),
     fn(&fakeLaunchCooperativeKernel)},
    {"cuGraphCreate", 10000, false, fn(&cuGraphCreate), fn(&fakeGraphCreate)},
    {"cuGraphAddMemAllocNode", 11040, false, fn(&cuGraphAddMemAllocNode),
     fn(&fakeGraphAddMemAllocNode)},
    {"cuGraphAddMemFreeNode", 11040, false, fn(&cuGraphAddMemFreeNode),
     fn(&fakeGraphAddMemFreeNode)},
    {"cuGraphInstantiateWithFlags", 11040, false, fn(&cuGraphInstantiateWithFlags),
     fn(&fakeGraphInstantiateWithFlags)},
    {"cuGraphExecDestroy", 10000, false, fn(&cuGraphExecDestroy), fn(&fakeGraphExecDestroy)},
    {"cuGraphDestroy", 10000, false, fn(&cuGraphDestroy), fn(&fakeGraphDestroy)},
    {"cuGraphDestroyNode", 10000, false, fn(&cuGraphDestroyNode), fn(&fakeGraphDestroyNode)},
    {"cuGraphNodeGetType", 10000, false, fn(&cuGraphNodeGetType), fn(&fakeGraphNodeGetType)},
    {"cuGraphMemAllocNodeGetParams", 11040, false, fn(&cuGraphMemAllocNodeGetParams),
     fn(&fakeGraphMemAllocNodeGetParams)},
    {"cuGraphMemFreeNodeGetParams", 11040, false, fn(&cuGraphMemFreeNodeGetParams),
     fn(&fakeGraphMemFreeNodeGetParams)},
    {"cuDeviceGraphMemTrim", 11040, false, fn(&cuDeviceGraphMemTrim), fn(&fakeDeviceGraphMemTrim)},
    {"cuDeviceGetGraphMemAttribute", 11040, false, fn(&cuDeviceGetGraphMemAttribute),
     fn(&fakeDeviceGetGraphMemAttribute)},
    {"cuStreamBeginCapture", 10010, false, fn(&cuStreamBeginCapture_v2),
     fn(&fakeStreamBeginCapture)},
    {"cuStreamEndCapture", 10000, false, fn(&cuStreamEndCapture), fn(&fakeStreamEndCapture)},
    {"cuStreamGetCaptureInfo", 11030, false, fn(&cuStreamGetCaptureInfo_v2),
     fn(&fakeStreamGetCaptureInfo)},
    {"cuCtxGetDevice", 2000, false, fn(&cuCtxGetDevice), fn(&fakeCtxGetDevice)},
    {"cuGraphLaunch", 10000, false, fn(&cuGraphLaunch), fn(&fakeGraphLaunch)},
    {"cuGraphLaunch", 10000, true, fn(&cuGraphLaunch_ptsz), fn(&fakeGraphLaunch)},
    {"cuStreamCreate", 2000, false, fn(&cuStreamCreate), fn(&fakeStreamCreate)},
    {"cuStreamSynchronize", 2000, false, fn(&cuStreamSynchronize), fn(&fakeStreamSynchronize)},
    {"cuStreamIsCapturing", 10000, false, fn(&cuStreamIsCapturing), fn(&fakeStreamIsCapturing)},
    {"cuThreadExchangeStreamCaptureMode", 10010, false, fn(&cuThreadExchangeStreamCaptureMode),
     fn(&fakeThreadExchangeStreamCaptureMode)},
    {"cuEventCreate", 2000, false, fn(&cuEventCreate), fn(&fakeEventCreate)},
    {"cuEventDestroy", 4000, false, fn(&cuEventDestroy_v2), fn(&fakeEventDestroy)},
    {"cuEventRecord", 2000, false, fn(&cuEventRecord), fn(&fakeEventRecord)},
    {"cuEventRecord", 7000, true, fn(&cuEventRecord_ptsz), fn(&fakeEventRecord)},
    {"cuEventQuery", 2000, false, fn(&cuEventQuery), fn(&fakeEventQuery)},
    {"cuEventSynchronize", 2000, false, fn(&cuEventSynchronize), fn(&fakeEventSynchronize)},
    {"cuEventElapsedTime", 2000, false, fn(&cuEventElapsedTime), fn(&fakeEventElapsedTime)},
    {"cuGetProcAddress", 11030, false, fn(&cuGetProcAddress), fn(&fakeGetProcAddress)},
    {"cuGetProcAddress", 12000, false, fn(&cuGetProcAddress_v2), fn(&fakeGetProcAddress_v2)},
};

CUresult fakeGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                               CUdriverProcAddressQueryResult* status) {
  CUdriverProcAddressQueryResult ignored = 0;
  status = status != nullptr ? status : &ignored;
  if (symbol == nullptr || pfn == nullptr) {
    return kCudaErrorInvalidValue;
  }
  *pfn = nullptr;
  bool known = false;
  bool has_per_thread = false;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.base, symbol) == 0) {
      known = true;
      has_per_thread |= e.per_thread;
    }
  }
  const bool per_thread = (flags & kCuGetProcAddressPerThreadDefaultStream) != 0 && has_per_thread;
  const Entry* best = nullptr;
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.base, symbol) == 0 && e.per_thread == per_thread && e.since <= cuda_version &&
        (best == nullptr || e.since > best->since)) {
      best = &e;
    }
  }
  if (best == nullptr) {
    *status = known ? kCuGetProcAddressVersionNotSufficient : kCuGetProcAddressSymbolNotFound;
    return kCudaErrorNotFound;
  }
  *pfn = device().internal_proc_address ? best->internal : best->exported;
  *status = kCuGetProcAddressSuccess;
  return kCudaSuccess;
}

}  // namespace
