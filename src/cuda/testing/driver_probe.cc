// tessera_cuda_probe: a program that uses the CUDA driver API the way a CUDA runtime does, for
// the interposer test to run under LD_PRELOAD=libtessera-cuda.so against the fake libcuda.so.1.
// It opens libcuda.so.1 with dlopen and finds every function one of three ways (--resolve):
//
//   dlsym        dlsym(handle, "cuMemAlloc_v2"), the exported ABI names (default)
//   procaddress  cuGetProcAddress_v2("cuMemAlloc", cudaVersion 12040, ...), itself found with
//                dlsym, as the CUDA 12 runtime does
//   global       dlsym(RTLD_DEFAULT, ...) after opening the driver RTLD_GLOBAL: what a program
//                linked with -lcuda gets
//
// and runs one scenario, printing what it saw as key=value lines for the test to check:
//
//   init                      cuInit and one allocation
//   memory  --cap BYTES       fill the cap, one byte past it, free and refill, cuMemGetInfo,
//                             pitched, managed, async and cuMemCreate allocations
//   vmm     --cap BYTES       cuMemCreate memory that is mapped when its handle is released, and
//                             held by cuMemRetainAllocationHandle after its mapping goes
//   graphs  --cap BYTES       graph memory: an allocation node past the cap; a graph's memory
//                             while its executable lives, after it, and left allocated by a
//                             launch; a captured cuMemAllocAsync and free
//   arrays  --cap BYTES       1D/2D/3D and mipmapped arrays against the cap
//   contexts --cap BYTES      half the cap in the primary context, the rest in a context that
//                             "another library" made through a handle of its own, then one byte
//                             past it in each
//   hold    --cap BYTES       allocate the cap and exit without freeing it
//   pools   --cap BYTES       stream-ordered allocations whose pools keep freed memory: a pool
//                             that keeps all of it, then a plain allocation that needs it; reuse
//                             within the cap; the application's own trim; the default pool
//                             before a synchronize; a destroyed pool
//   threads --threads N --chunk BYTES [--path alloc|pitch|managed|async|pool|vmm|array|mipmap|
//                             graph]
//                             N threads allocate chunks until refused, at once, by one path
//                             (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged, cuMemAllocAsync,
//                             cuMemAllocFromPoolAsync, cuMemCreate, cuArrayCreate,
//                             cuMipmappedArrayCreate, or a graph allocation node launched)
//   kernels --seconds S --kernel-us D [--launch kernel|ex|cooperative|graph|ptsz]
//           [--report-ms W] [--stop-file PATH]
//                             launches back to back for S seconds, then reports kernel time;
//                             with W, also each W ms window's share of the GPU as it goes
//                             (window=<share>), and ends early once PATH exists (looked for
//                             at the end of each window)
//   abi                       what cuGetProcAddress gives for several (name, cudaVersion, flags)
//   overhead --calls N        N calls each of cuMemGetInfo, cuMemAlloc + cuMemFree (256 bytes)
//                             and cuLaunchKernel (a 0 us kernel), in 101 batches: the median
//                             batch's nanoseconds per call (bench/cuda_overhead.sh runs it with
//                             and without the interposer)
//
// Exit status 0 unless setting up failed (driver missing, a function not found).
#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver_api.h"
#include "cuda/testing/fake_cuda_stats.h"

namespace tessera::cuda::testing {
namespace {

std::int64_t monotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "tessera_cuda_probe: %s\n", why.c_str());
  std::exit(2);
}

void print(const char* key, long long value) { std::printf("%s=%lld\n", key, value); }
void print(const char* key, const std::string& value) {
  std::printf("%s=%s\n", key, value.c_str());
}

struct Options {
  std::string scenario;
  std::string resolve = "dlsym";
  std::string launch = "kernel";
  std::string path = "alloc";
  unsigned long long cap = 0;
  unsigned long long chunk = 1 << 20;
  int threads = 4;
  double seconds = 1;
  unsigned kernel_us = 1000;
  long long calls = 1'000'000;
  int report_ms = 0;
  std::string stop_file;
};

Options parse(int argc, char** argv) {
  if (argc < 2) {
    fail("usage: tessera_cuda_probe SCENARIO [--option value]...");
  }
  Options o;
  o.scenario = argv[1];
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--resolve") {
      o.resolve = value;
    } else if (flag == "--launch") {
      o.launch = value;
    } else if (flag == "--path") {
      o.path = value;
    } else if (flag == "--cap") {
      o.cap = std::strtoull(value, nullptr, 10);
    } else if (flag == "--chunk") {
      o.chunk = std::strtoull(value, nullptr, 10);
    } else if (flag == "--threads") {
      o.threads = std::atoi(value);
    } else if (flag == "--seconds") {
      o.seconds = std::atof(value);
    } else if (flag == "--calls") {
      o.calls = std::atoll(value);
    } else if (flag == "--kernel-us") {
      o.kernel_us = static_cast<unsigned>(std::atoi(value));
    } else if (flag == "--report-ms") {
      o.report_ms = std::atoi(value);
    } else if (flag == "--stop-file") {
      o.stop_file = value;
    } else {
      fail("unknown option " + flag);
    }
  }
  return o;
}

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
constexpr int kCudaVersion = 12040;

// The driver API, found the way --resolve says.
struct Api {
  void* library = nullptr;
  std::string resolve;
  GetProcAddressFn get_proc_address = nullptr;

  // exported: the ABI name ("cuMemAlloc_v2"); base: what cuGetProcAddress is asked for.
  template <typename Fn>
  Fn find(const char* exported, const char* base, cuuint64_t flags = 0) const {
    void* f = nullptr;
    if (resolve == "procaddress") {
      CUdriverProcAddressQueryResult status = 0;
      if (get_proc_address(base, &f, kCudaVersion, flags, &status) != kCudaSuccess) {
        f = nullptr;
      }
    } else {
      f = dlsym(resolve == "global" ? RTLD_DEFAULT : library, exported);
    }
    if (f == nullptr) {
      fail(std::string("cannot find ") + exported);
    }
    return reinterpret_cast<Fn>(f);
  }

  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*device_total_mem)(std::size_t*, CUdevice) = nullptr;
  CUresult (*mem_alloc_pitch)(CUdeviceptr*, std::size_t*, std::size_t, std::size_t,
                              unsigned) = nullptr;
  CUresult (*mem_alloc_managed)(CUdeviceptr*, std::size_t, unsigned) = nullptr;
  CUresult (*mem_alloc_async)(CUdeviceptr*, std::size_t, CUstream) = nullptr;
  CUresult (*mem_alloc_from_pool)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream) = nullptr;
  CUresult (*mem_free_async)(CUdeviceptr, CUstream) = nullptr;
  CUresult (*mem_create)(CUmemGenericAllocationHandle*, std::size_t,
                         const CUmemAllocationPropPrefix*, unsigned long long) = nullptr;
  CUresult (*mem_release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*array_create)(CUarray*, const CudaArrayDescriptor*) = nullptr;
  CUresult (*array3d_create)(CUarray*, const CudaArray3dDescriptor*) = nullptr;
  CUresult (*array_destroy)(CUarray) = nullptr;
  CUresult (*mipmapped_create)(CUmipmappedArray*, const CudaArray3dDescriptor*, unsigned) = nullptr;
  CUresult (*mipmapped_destroy)(CUmipmappedArray) = nullptr;
  CUresult (*default_mem_pool)(CUmemoryPool*, CUdevice) = nullptr;
  CUresult (*mem_pool_create)(CUmemoryPool*, const CUmemPoolProps*) = nullptr;
  CUresult (*mem_pool_destroy)(CUmemoryPool) = nullptr;
  CUresult (*mem_pool_trim_to)(CUmemoryPool, std::size_t) = nullptr;
  CUresult (*mem_pool_set_attribute)(CUmemoryPool, int, void*) = nullptr;
  CUresult (*mem_pool_get_attribute)(CUmemoryPool, int, void*) = nullptr;
  CUresult (*address_reserve)(CUdeviceptr*, std::size_t, std::size_t, CUdeviceptr,
                              unsigned long long) = nullptr;
  CUresult (*mem_map)(CUdeviceptr, std::size_t, std::size_t, CUmemGenericAllocationHandle,
                      unsigned long long) = nullptr;
  CUresult (*mem_unmap)(CUdeviceptr, std::size_t) = nullptr;
  CUresult (*retain_handle)(CUmemGenericAllocationHandle*, void*) = nullptr;
  CUresult (*graph_create)(CUgraph*, unsigned) = nullptr;
  CUresult (*graph_add_alloc)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t,
                              CudaMemAllocNodeParams*) = nullptr;
  CUresult (*graph_add_free)(CUgraphNode*, CUgraph, const CUgraphNode*, std::size_t,
                             CUdeviceptr) = nullptr;
  CUresult (*graph_destroy_node)(CUgraphNode) = nullptr;
  CUresult (*graph_instantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*graph_exec_destroy)(CUgraphExec) = nullptr;
  CUresult (*graph_destroy)(CUgraph) = nullptr;
  CUresult (*graph_launch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*graph_mem_attribute)(CUdevice, int, void*) = nullptr;
  CUresult (*graph_mem_trim)(CUdevice) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*begin_capture)(CUstream, CUstreamCaptureMode) = nullptr;
  CUresult (*end_capture)(CUstream, CUgraph*) = nullptr;
  void (*stats)(FakeCudaStats*) = nullptr;
};

Api openApi(const std::string& resolve) {
  Api api;
  api.resolve = resolve;
  api.library = dlopen("libcuda.so.1", RTLD_NOW | (resolve == "global" ? RTLD_GLOBAL : RTLD_LOCAL));
  if (api.library == nullptr) {
    fail(std::string("dlopen libcuda.so.1: ") + dlerror());
  }
  api.get_proc_address =
      reinterpret_cast<GetProcAddressFn>(dlsym(api.library, "cuGetProcAddress_v2"));
  if (resolve == "procaddress" && api.get_proc_address == nullptr) {
    fail("no cuGetProcAddress_v2");
  }
  api.init = api.find<decltype(api.init)>("cuInit", "cuInit");
  api.device_get = api.find<decltype(api.device_get)>("cuDeviceGet", "cuDeviceGet");
  api.primary_ctx_retain = api.find<decltype(api.primary_ctx_retain)>("cuDevicePrimaryCtxRetain",
                                                                      "cuDevicePrimaryCtxRetain");
  api.ctx_set_current =
      api.find<decltype(api.ctx_set_current)>("cuCtxSetCurrent", "cuCtxSetCurrent");
  api.ctx_synchronize =
      api.find<decltype(api.ctx_synchronize)>("cuCtxSynchronize", "cuCtxSynchronize");
  api.mem_alloc = api.find<decltype(api.mem_alloc)>("cuMemAlloc_v2", "cuMemAlloc");
  api.mem_free = api.find<decltype(api.mem_free)>("cuMemFree_v2", "cuMemFree");
  api.mem_get_info = api.find<decltype(api.mem_get_info)>("cuMemGetInfo_v2", "cuMemGetInfo");
  api.device_total_mem =
      api.find<decltype(api.device_total_mem)>("cuDeviceTotalMem_v2", "cuDeviceTotalMem");
  api.mem_alloc_pitch =
      api.find<decltype(api.mem_alloc_pitch)>("cuMemAllocPitch_v2", "cuMemAllocPitch");
  api.mem_alloc_managed =
      api.find<decltype(api.mem_alloc_managed)>("cuMemAllocManaged", "cuMemAllocManaged");
  api.mem_alloc_async =
      api.find<decltype(api.mem_alloc_async)>("cuMemAllocAsync", "cuMemAllocAsync");
  api.mem_free_async = api.find<decltype(api.mem_free_async)>("cuMemFreeAsync", "cuMemFreeAsync");
  api.mem_alloc_from_pool = api.find<decltype(api.mem_alloc_from_pool)>("cuMemAllocFromPoolAsync",
                                                                        "cuMemAllocFromPoolAsync");
  api.mem_create = api.find<decltype(api.mem_create)>("cuMemCreate", "cuMemCreate");
  api.mem_release = api.find<decltype(api.mem_release)>("cuMemRelease", "cuMemRelease");
  api.array_create = api.find<decltype(api.array_create)>("cuArrayCreate_v2", "cuArrayCreate");
  api.array3d_create =
      api.find<decltype(api.array3d_create)>("cuArray3DCreate_v2", "cuArray3DCreate");
  api.array_destroy = api.find<decltype(api.array_destroy)>("cuArrayDestroy", "cuArrayDestroy");
  api.mipmapped_create =
      api.find<decltype(api.mipmapped_create)>("cuMipmappedArrayCreate", "cuMipmappedArrayCreate");
  api.mipmapped_destroy = api.find<decltype(api.mipmapped_destroy)>("cuMipmappedArrayDestroy",
                                                                    "cuMipmappedArrayDestroy");
  api.default_mem_pool = api.find<decltype(api.default_mem_pool)>("cuDeviceGetDefaultMemPool",
                                                                  "cuDeviceGetDefaultMemPool");
  api.mem_pool_create =
      api.find<decltype(api.mem_pool_create)>("cuMemPoolCreate", "cuMemPoolCreate");
  api.mem_pool_destroy =
      api.find<decltype(api.mem_pool_destroy)>("cuMemPoolDestroy", "cuMemPoolDestroy");
  api.mem_pool_trim_to =
      api.find<decltype(api.mem_pool_trim_to)>("cuMemPoolTrimTo", "cuMemPoolTrimTo");
  api.mem_pool_set_attribute = api.find<decltype(api.mem_pool_set_attribute)>(
      "cuMemPoolSetAttribute", "cuMemPoolSetAttribute");
  api.mem_pool_get_attribute = api.find<decltype(api.mem_pool_get_attribute)>(
      "cuMemPoolGetAttribute", "cuMemPoolGetAttribute");
  api.address_reserve =
      api.find<decltype(api.address_reserve)>("cuMemAddressReserve", "cuMemAddressReserve");
  api.mem_map = api.find<decltype(api.mem_map)>("cuMemMap", "cuMemMap");
  api.mem_unmap = api.find<decltype(api.mem_unmap)>("cuMemUnmap", "cuMemUnmap");
  api.retain_handle = api.find<decltype(api.retain_handle)>("cuMemRetainAllocationHandle",
                                                            "cuMemRetainAllocationHandle");
  api.graph_create = api.find<decltype(api.graph_create)>("cuGraphCreate", "cuGraphCreate");
  api.graph_add_alloc =
      api.find<decltype(api.graph_add_alloc)>("cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode");
  api.graph_add_free =
      api.find<decltype(api.graph_add_free)>("cuGraphAddMemFreeNode", "cuGraphAddMemFreeNode");
  api.graph_destroy_node =
      api.find<decltype(api.graph_destroy_node)>("cuGraphDestroyNode", "cuGraphDestroyNode");
  api.graph_instantiate = api.find<decltype(api.graph_instantiate)>("cuGraphInstantiateWithFlags",
                                                                    "cuGraphInstantiateWithFlags");
  api.graph_exec_destroy =
      api.find<decltype(api.graph_exec_destroy)>("cuGraphExecDestroy", "cuGraphExecDestroy");
  api.graph_destroy = api.find<decltype(api.graph_destroy)>("cuGraphDestroy", "cuGraphDestroy");
  api.graph_launch = api.find<decltype(api.graph_launch)>("cuGraphLaunch", "cuGraphLaunch");
  api.graph_mem_attribute = api.find<decltype(api.graph_mem_attribute)>(
      "cuDeviceGetGraphMemAttribute", "cuDeviceGetGraphMemAttribute");
  api.graph_mem_trim =
      api.find<decltype(api.graph_mem_trim)>("cuDeviceGraphMemTrim", "cuDeviceGraphMemTrim");
  api.stream_create = api.find<decltype(api.stream_create)>("cuStreamCreate", "cuStreamCreate");
  api.begin_capture =
      api.find<decltype(api.begin_capture)>("cuStreamBeginCapture_v2", "cuStreamBeginCapture");
  api.end_capture = api.find<decltype(api.end_capture)>("cuStreamEndCapture", "cuStreamEndCapture");
  api.stats = reinterpret_cast<decltype(api.stats)>(dlsym(api.library, "fakeCudaStats"));
  if (api.stats == nullptr) {
    fail("libcuda.so.1 is not the fake (no fakeCudaStats)");
  }
  return api;
}

FakeCudaStats stats(const Api& api) {
  FakeCudaStats s{};
  api.stats(&s);
  return s;
}

void setUp(const Api& api) {
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  if (api.init(0) != kCudaSuccess || api.device_get(&device, 0) != kCudaSuccess ||
      api.primary_ctx_retain(&ctx, device) != kCudaSuccess ||
      api.ctx_set_current(ctx) != kCudaSuccess) {
    fail("cannot set up a context");
  }
}

// Used device memory as the application sees it: total - free from cuMemGetInfo.
long long used(const Api& api) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  api.mem_get_info(&free_bytes, &total_bytes);
  return static_cast<long long>(total_bytes - free_bytes);
}

void scenarioInit(const Api& api) {
  print("init", api.init(0));
  CUdeviceptr p = 0;
  print("alloc", api.mem_alloc(&p, 1));
  CUcontext ctx = nullptr;
  print("primary_ctx", api.primary_ctx_retain(&ctx, 0));
}

void scenarioMemory(const Api& api, unsigned long long cap) {
  setUp(api);
  const unsigned long long quarter = cap / 4;
  std::vector<CUdeviceptr> chunks(4);
  int fill = kCudaSuccess;
  for (CUdeviceptr& c : chunks) {
    fill = fill != kCudaSuccess ? fill : api.mem_alloc(&c, quarter);
  }
  // A cap that is not a multiple of 4 bytes: the rest, to reach it exactly.
  CUdeviceptr rest = 0;
  if (cap % 4 != 0 && fill == kCudaSuccess) {
    fill = api.mem_alloc(&rest, cap % 4);
  }
  print("fill", fill);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  print("info", api.mem_get_info(&free_bytes, &total_bytes));
  print("info_total", static_cast<long long>(total_bytes));
  print("info_free_full", static_cast<long long>(free_bytes));
  std::size_t device_total = 0;
  api.device_total_mem(&device_total, 0);
  print("device_total", static_cast<long long>(device_total));

  const std::uint64_t calls_before = stats(api).alloc_calls;
  CUdeviceptr extra = 0;
  print("one_past", api.mem_alloc(&extra, 1));
  print("one_past_reached_driver", static_cast<long long>(stats(api).alloc_calls - calls_before));

  print("free", api.mem_free(chunks[0]));
  api.mem_get_info(&free_bytes, &total_bytes);
  print("info_free_after_free", static_cast<long long>(free_bytes));
  print("refill", api.mem_alloc(&chunks[0], quarter));
  print("one_past_again", api.mem_alloc(&extra, 1));
  for (CUdeviceptr c : chunks) {
    api.mem_free(c);
  }
  if (rest != 0) {
    api.mem_free(rest);
  }
  print("used_after_free_all", used(api));

  // Pitched: charged pitch x height, the pitch the driver chose (the fake rounds to 512).
  CUdeviceptr pitched = 0;
  std::size_t pitch = 0;
  print("pitch_alloc", api.mem_alloc_pitch(&pitched, &pitch, 1000, 16, 4));
  print("pitch", static_cast<long long>(pitch));
  print("used_after_pitch", used(api));
  CUdeviceptr remainder = 0;
  print("pitch_remainder", api.mem_alloc(&remainder, cap - pitch * 16));
  print("pitch_one_past", api.mem_alloc(&extra, 1));
  api.mem_free(remainder);
  api.mem_free(pitched);

  // Managed and stream-ordered allocations share the cap; freeing asynchronously gives back.
  CUdeviceptr managed = 0;
  CUdeviceptr async = 0;
  print("managed", api.mem_alloc_managed(&managed, cap / 2, 1));
  print("async", api.mem_alloc_async(&async, cap - cap / 2, nullptr));
  print("async_one_past", api.mem_alloc_async(&extra, 1, nullptr));
  print("free_async", api.mem_free_async(async, nullptr));
  print("async_again", api.mem_alloc_async(&async, cap - cap / 2, nullptr));
  api.mem_free_async(async, nullptr);
  api.mem_free(managed);

  // Physical memory for virtual address ranges: device memory counts, host memory does not.
  CUmemAllocationPropPrefix device_prop{1, 0, kCuMemLocationTypeDevice, 0};
  CUmemAllocationPropPrefix host_prop{1, 0, 2, 0};  // CU_MEM_LOCATION_TYPE_HOST.
  CUmemGenericAllocationHandle handle = 0;
  CUmemGenericAllocationHandle more = 0;
  CUmemGenericAllocationHandle host = 0;
  print("mem_create", api.mem_create(&handle, cap, &device_prop, 0));
  print("mem_create_one_past", api.mem_create(&more, 1, &device_prop, 0));
  print("mem_create_host", api.mem_create(&host, 1 << 20, &host_prop, 0));
  print("mem_release", api.mem_release(handle));
  api.mem_release(host);
  print("used_at_end", used(api));
  print("fake_live_at_end", static_cast<long long>(stats(api).live_bytes));
}

void scenarioContexts(const Api& api, unsigned long long cap) {
  setUp(api);
  CUdeviceptr mine = 0;
  print("primary_half", api.mem_alloc(&mine, cap / 2));
  // Another library in the process: its own handle on the driver, its own context.
  void* other = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  using CtxCreate = CUresult (*)(CUcontext*, unsigned, CUdevice);
  using CtxSetCurrent = CUresult (*)(CUcontext);
  using MemAlloc = CUresult (*)(CUdeviceptr*, std::size_t);
  const auto ctx_create = reinterpret_cast<CtxCreate>(dlsym(other, "cuCtxCreate_v2"));
  const auto set_current = reinterpret_cast<CtxSetCurrent>(dlsym(other, "cuCtxSetCurrent"));
  const auto mem_alloc = reinterpret_cast<MemAlloc>(dlsym(other, "cuMemAlloc_v2"));
  if (other == nullptr || ctx_create == nullptr || set_current == nullptr || mem_alloc == nullptr) {
    fail(
        "a second handle on libcuda.so.1 finds no cuCtxCreate_v2, cuCtxSetCurrent or "
        "cuMemAlloc_v2");
  }
  CUcontext theirs = nullptr;
  print("other_ctx", ctx_create(&theirs, 0, 0));
  set_current(theirs);
  CUdeviceptr rest = 0;
  CUdeviceptr extra = 0;
  print("other_rest", mem_alloc(&rest, cap - cap / 2));
  print("other_one_past", mem_alloc(&extra, 1));
  print("used_both", used(api));
  setUp(api);  // Back in the primary context.
  print("primary_one_past", api.mem_alloc(&extra, 1));
}

void scenarioHold(const Api& api, unsigned long long cap) {
  setUp(api);
  CUdeviceptr all = 0;
  print("hold", api.mem_alloc(&all, cap));
  std::fflush(stdout);
  std::_Exit(0);  // Holding it: the process's end gives it back.
}

// What a pool holds on the device, in use and kept (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT).
long long reserved(const Api& api, CUmemoryPool pool) {
  cuuint64_t bytes = 0;
  if (api.mem_pool_get_attribute(pool, 5, &bytes) != kCudaSuccess) {
    fail("cuMemPoolGetAttribute(RESERVED_MEM_CURRENT) failed");
  }
  return static_cast<long long>(bytes);
}

void scenarioPools(const Api& api, unsigned long long cap) {
  setUp(api);
  CUmemoryPool pool = nullptr;
  CUmemoryPool default_pool = nullptr;
  if (api.mem_pool_create(&pool, nullptr) != kCudaSuccess ||
      api.default_mem_pool(&default_pool, 0) != kCudaSuccess) {
    fail("cannot make a memory pool");
  }
  cuuint64_t keep_all = ~cuuint64_t{0};
  api.mem_pool_set_attribute(pool, 4, &keep_all);  // CU_MEMPOOL_ATTR_RELEASE_THRESHOLD.

  // A pool that keeps what is freed: still held on the device, still charged.
  CUdeviceptr a = 0;
  print("pool_alloc", api.mem_alloc_from_pool(&a, cap / 4 * 3, pool, nullptr));
  print("pool_free", api.mem_free_async(a, nullptr));
  api.ctx_synchronize();
  print("kept_after_free", reserved(api, pool));
  print("used_after_free", used(api));
  // A plain allocation that needs that memory: the pool must let it go first.
  CUdeviceptr b = 0;
  print("plain_after_pool", api.mem_alloc(&b, cap / 2));
  print("kept_after_plain", reserved(api, pool));
  api.mem_free(b);

  // Reuse within the cap keeps the pool's memory.
  print("reuse_first", api.mem_alloc_from_pool(&a, cap / 4, pool, nullptr));
  api.mem_free_async(a, nullptr);
  api.ctx_synchronize();
  print("reuse_again", api.mem_alloc_from_pool(&a, cap / 4, pool, nullptr));
  print("kept_on_reuse", reserved(api, pool));
  print("used_on_reuse", used(api));
  api.mem_free_async(a, nullptr);
  api.ctx_synchronize();
  // The application trims the pool itself: cuMemGetInfo sees the memory come back.
  print("used_before_app_trim", used(api));
  api.mem_pool_trim_to(pool, 0);
  print("used_after_app_trim", used(api));

  // The default pool (release threshold 0) keeps a free until a synchronize.
  CUdeviceptr d = 0;
  print("default_alloc", api.mem_alloc_async(&d, cap, nullptr));
  api.mem_free_async(d, nullptr);
  print("default_kept", reserved(api, default_pool));
  print("plain_after_default", api.mem_alloc(&b, cap));
  api.mem_free(b);

  // A destroyed pool takes what it kept with it.
  print("before_destroy", api.mem_alloc_from_pool(&a, cap / 2, pool, nullptr));
  api.mem_free_async(a, nullptr);
  api.ctx_synchronize();
  print("used_before_destroy", used(api));
  print("destroy", api.mem_pool_destroy(pool));
  print("used_after_destroy", used(api));
  print("fake_peak", static_cast<long long>(stats(api).peak_live_bytes));
  print("fake_live_at_end", static_cast<long long>(stats(api).live_bytes));
}

void scenarioVmm(const Api& api) {
  setUp(api);
  const unsigned long long mib = 1 << 20;
  const CUmemAllocationPropPrefix device{1, 0, kCuMemLocationTypeDevice, 0};
  // Released while mapped: the memory lives until the mapping goes.
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  print("create", api.mem_create(&h, 48 * mib, &device, 0));
  api.address_reserve(&va, 48 * mib, 0, 0, 0);
  print("map", api.mem_map(va, 48 * mib, 0, h, 0));
  print("release_mapped", api.mem_release(h));
  print("used_while_mapped", used(api));
  CUdeviceptr plain = 0;
  print("plain_while_mapped", api.mem_alloc(&plain, 32 * mib));
  print("unmap", api.mem_unmap(va, 48 * mib));
  print("used_after_unmap", used(api));
  print("plain_after_unmap", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);
  // Held again through its address: the memory lives until that hold is released too.
  print("create2", api.mem_create(&h, 40 * mib, &device, 0));
  api.address_reserve(&va, 40 * mib, 0, 0, 0);
  api.mem_map(va, 40 * mib, 0, h, 0);
  CUmemGenericAllocationHandle again = 0;
  print("retain", api.retain_handle(&again, reinterpret_cast<void*>(va)));
  print("same_handle", again == h ? 1 : 0);
  api.mem_release(h);
  api.mem_unmap(va, 40 * mib);
  print("used_while_retained", used(api));
  print("plain_while_retained", api.mem_alloc(&plain, 32 * mib));
  print("last_release", api.mem_release(again));
  print("used_after_last_release", used(api));
  print("plain_after_last_release", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);
  print("fake_peak", static_cast<long long>(stats(api).peak_live_bytes));
  print("fake_live_at_end", static_cast<long long>(stats(api).live_bytes));
}

// What the device's graph memory pool holds (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT).
long long graphReserved(const Api& api) {
  cuuint64_t bytes = 0;
  api.graph_mem_attribute(0, 2, &bytes);
  return static_cast<long long>(bytes);
}

// A graph with one allocation node of `bytes` on device 0; the node's address in `address`.
CUresult graphWithNode(const Api& api, unsigned long long bytes, CUgraph& graph,
                       CUdeviceptr& address) {
  if (api.graph_create(&graph, 0) != kCudaSuccess) {
    fail("cuGraphCreate failed");
  }
  CudaMemAllocNodeParams params{};
  params.location_type = kCuMemLocationTypeDevice;
  params.bytesize = bytes;
  CUgraphNode node = nullptr;
  const CUresult r = api.graph_add_alloc(&node, graph, nullptr, 0, &params);
  address = params.dptr;
  return r;
}

void scenarioGraphs(const Api& api, unsigned long long cap) {
  setUp(api);
  const unsigned long long mib = 1 << 20;
  // An allocation node is charged when made: one that cannot fit is refused then.
  CUgraph g = nullptr;
  CUdeviceptr a = 0;
  print("node", graphWithNode(api, 48 * mib, g, a));
  CUgraph too_big = nullptr;
  CUdeviceptr b = 0;
  print("node_past_cap", graphWithNode(api, 32 * mib, too_big, b));
  api.graph_destroy(too_big);
  // Instantiated, the graph destroyed (the usual way): the executable may run any time.
  CUgraphExec e = nullptr;
  print("instantiate", api.graph_instantiate(&e, g, 0));
  api.graph_destroy(g);
  print("used_before_launch", used(api));
  print("launch", api.graph_launch(e, nullptr));
  print("graph_reserved_after_launch", graphReserved(api));
  CUdeviceptr plain = 0;
  print("plain_while_exec", api.mem_alloc(&plain, 32 * mib));
  print("free_outside", api.mem_free_async(a, nullptr));
  print("plain_after_free_outside", api.mem_alloc(&plain, 32 * mib));
  // The executable gone, its memory is the graph pool's to keep: trimmed when needed.
  api.graph_exec_destroy(e);
  print("used_after_exec_destroy", used(api));
  print("plain_after_exec_destroy", api.mem_alloc(&plain, 32 * mib));
  print("graph_reserved_after_plain", graphReserved(api));
  api.mem_free(plain);

  // A launch that leaves its allocation allocated: charged until it is freed.
  CUgraph g2 = nullptr;
  print("node2", graphWithNode(api, 40 * mib, g2, a));
  api.graph_instantiate(&e, g2, 0);
  api.graph_launch(e, nullptr);
  api.graph_exec_destroy(e);
  api.graph_destroy(g2);
  print("used_left_allocated", used(api));
  print("plain_while_left_allocated", api.mem_alloc(&plain, 32 * mib));
  api.mem_free_async(a, nullptr);
  print("plain_after_left_freed", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);

  // Freed by another graph: allocated from a launch of its own until that graph runs, even with
  // its own graph gone (and the graph pool settled against the driver meanwhile).
  CUgraph g3 = nullptr;
  print("node3", graphWithNode(api, 40 * mib, g3, a));
  CUgraph frees = nullptr;
  api.graph_create(&frees, 0);
  CUgraphNode free_node = nullptr;
  print("free_elsewhere", api.graph_add_free(&free_node, frees, nullptr, 0, a));
  api.graph_instantiate(&e, g3, 0);
  api.graph_launch(e, nullptr);
  api.graph_exec_destroy(e);
  api.graph_destroy(g3);
  print("plain_while_freed_elsewhere_pending", api.mem_alloc(&plain, 32 * mib));
  CUgraphExec frees_exec = nullptr;
  api.graph_instantiate(&frees_exec, frees, 0);
  api.graph_launch(frees_exec, nullptr);
  print("plain_after_freed_elsewhere", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);
  api.graph_exec_destroy(frees_exec);
  api.graph_destroy(frees);

  // A free node removed (cuGraphDestroyNode): a launch leaves the memory allocated after all.
  CUgraph g4 = nullptr;
  print("node4", graphWithNode(api, 40 * mib, g4, a));
  print("free_own", api.graph_add_free(&free_node, g4, nullptr, 0, a));
  print("free_node_destroyed", api.graph_destroy_node(free_node));
  api.graph_instantiate(&e, g4, 0);
  api.graph_launch(e, nullptr);
  api.graph_exec_destroy(e);
  api.graph_destroy(g4);
  print("plain_while_free_node_gone", api.mem_alloc(&plain, 32 * mib));
  api.mem_free_async(a, nullptr);
  // An allocation node removed before any executable: its charge goes with it.
  CUgraph g5 = nullptr;
  CUgraphNode alloc_node = nullptr;
  api.graph_create(&g5, 0);
  CudaMemAllocNodeParams params{};
  params.location_type = kCuMemLocationTypeDevice;
  params.bytesize = 48 * mib;
  print("node5", api.graph_add_alloc(&alloc_node, g5, nullptr, 0, &params));
  print("alloc_node_destroyed", api.graph_destroy_node(alloc_node));
  print("plain_after_alloc_node_gone", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);
  api.graph_destroy(g5);

  // Captured: cuMemAllocAsync and cuMemFreeAsync on a stream being captured are graph nodes.
  CUstream s = nullptr;
  api.stream_create(&s, 0);
  print("begin_capture", api.begin_capture(s, 0));
  print("captured_alloc", api.mem_alloc_async(&a, 40 * mib, s));
  print("captured_free", api.mem_free_async(a, s));
  CUgraph captured = nullptr;
  print("end_capture", api.end_capture(s, &captured));
  api.graph_instantiate(&e, captured, 0);
  api.graph_destroy(captured);
  print("captured_launch", api.graph_launch(e, s));
  print("used_captured", used(api));
  print("plain_while_captured_exec", api.mem_alloc(&plain, 32 * mib));
  api.graph_exec_destroy(e);
  print("plain_after_captured_exec", api.mem_alloc(&plain, 32 * mib));
  api.mem_free(plain);
  print("used_at_end", used(api));
  print("fake_peak", static_cast<long long>(stats(api).peak_live_bytes));
  (void)cap;
}

void scenarioArrays(const Api& api, unsigned long long cap) {
  setUp(api);
  // A 2D float4 array of cap/2 bytes: 16 bytes per element.
  const std::size_t width = 1024;
  const std::size_t height = cap / 2 / 16 / width;
  const CudaArrayDescriptor half{width, height, kCuAdFormatFloat, 4};
  CUarray a = nullptr;
  CUarray b = nullptr;
  CUarray c = nullptr;
  print("array_a", api.array_create(&a, &half));
  print("used_after_a", used(api));
  print("array_b", api.array_create(&b, &half));
  const CudaArrayDescriptor one_byte{1, 0, kCuAdFormatUnsignedInt8, 1};
  print("array_one_past", api.array_create(&c, &one_byte));
  print("destroy_a", api.array_destroy(a));
  // 3D: 64 x 64 x depth, half floats with 2 channels (4 bytes an element) = cap/2 again.
  const CudaArray3dDescriptor cube{64, 64, cap / 2 / (64ull * 64 * 4), kCuAdFormatHalf, 2, 0};
  print("array3d", api.array3d_create(&a, &cube));
  print("used_after_3d", used(api));
  print("array3d_one_past", api.array_create(&c, &one_byte));
  api.array_destroy(a);
  api.array_destroy(b);
  print("used_after_destroy", used(api));
  // Mipmapped: 64 x 64 floats, 7 levels: 4 x (4096 + 1024 + 256 + 64 + 16 + 4 + 1) bytes.
  const CudaArray3dDescriptor mip{64, 64, 0, kCuAdFormatFloat, 1, 0};
  CUmipmappedArray m = nullptr;
  print("mipmapped", api.mipmapped_create(&m, &mip, 7));
  print("used_after_mipmapped", used(api));
  print("mipmapped_destroy", api.mipmapped_destroy(m));
  print("used_at_end", used(api));
}

// One allocation of `chunk` bytes by `path`, and how to give it back.
struct Held {
  std::uint64_t handle = 0;  // A CUdeviceptr, CUmemGenericAllocationHandle or CUarray.
  CUgraph graph = nullptr;   // --path graph: the graph and its executable.
  CUgraphExec exec = nullptr;
};

CUresult allocateBy(const Api& api, const std::string& path, unsigned long long chunk, Held& h) {
  CUdeviceptr p = 0;
  CUresult r = kCudaErrorInvalidValue;
  if (path == "alloc") {
    r = api.mem_alloc(&p, chunk);
  } else if (path == "pitch") {  // 16 rows of chunk/16 bytes: the fake's pitch is 512-aligned.
    std::size_t pitch = 0;
    r = api.mem_alloc_pitch(&p, &pitch, chunk / 16, 16, 4);
  } else if (path == "managed") {
    r = api.mem_alloc_managed(&p, chunk, 1);
  } else if (path == "async") {
    r = api.mem_alloc_async(&p, chunk, nullptr);
  } else if (path == "pool") {
    CUmemoryPool pool = nullptr;
    api.default_mem_pool(&pool, 0);
    r = api.mem_alloc_from_pool(&p, chunk, pool, nullptr);
  } else if (path == "vmm") {
    const CUmemAllocationPropPrefix device{1, 0, kCuMemLocationTypeDevice, 0};
    CUmemGenericAllocationHandle handle = 0;
    r = api.mem_create(&handle, chunk, &device, 0);
    h.handle = handle;
    return r;
  } else if (path == "mipmap") {  // One level of 512 x 512 floats: 1 MiB.
    const CudaArray3dDescriptor level{512, chunk / 512 / 4, 0, kCuAdFormatFloat, 1, 0};
    CUmipmappedArray m = nullptr;
    r = api.mipmapped_create(&m, &level, 1);
    h.handle = reinterpret_cast<std::uintptr_t>(m);
    return r;
  } else if (path == "graph") {  // A graph allocation node, instantiated and launched.
    CUdeviceptr address = 0;
    r = graphWithNode(api, chunk, h.graph, address);
    h.handle = address;
    if (r != kCudaSuccess) {
      api.graph_destroy(h.graph);
      h.graph = nullptr;
      return r;
    }
    if (api.graph_instantiate(&h.exec, h.graph, 0) != kCudaSuccess ||
        api.graph_launch(h.exec, nullptr) != kCudaSuccess) {
      fail("cannot instantiate or launch a graph");
    }
    return r;
  } else if (path == "array") {  // A 1D array of bytes.
    const CudaArrayDescriptor bytes{chunk, 0, kCuAdFormatUnsignedInt8, 1};
    CUarray a = nullptr;
    r = api.array_create(&a, &bytes);
    h.handle = reinterpret_cast<std::uintptr_t>(a);
    return r;
  } else {
    fail("unknown --path " + path);
  }
  h.handle = p;
  return r;
}

void release(const Api& api, const std::string& path, const Held& h) {
  if (path == "async" || path == "pool") {
    api.mem_free_async(h.handle, nullptr);
  } else if (path == "vmm") {
    api.mem_release(h.handle);
  } else if (path == "array") {
    api.array_destroy(reinterpret_cast<CUarray>(static_cast<std::uintptr_t>(h.handle)));
  } else if (path == "mipmap") {
    api.mipmapped_destroy(
        reinterpret_cast<CUmipmappedArray>(static_cast<std::uintptr_t>(h.handle)));
  } else if (path == "graph") {
    api.mem_free_async(h.handle, nullptr);
    api.graph_exec_destroy(h.exec);
    api.graph_destroy(h.graph);
  } else {
    api.mem_free(h.handle);
  }
}

void scenarioThreads(const Api& api, int threads, unsigned long long chunk,
                     const std::string& path) {
  setUp(api);
  std::atomic<long long> allocated{0};
  std::atomic<int> refused{0};
  std::atomic<bool> go{false};
  std::vector<std::vector<Held>> mine(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      while (!go.load()) {
      }
      for (;;) {
        Held h;
        const CUresult r = allocateBy(api, path, chunk, h);
        if (r != kCudaSuccess) {
          refused += r == kCudaErrorOutOfMemory ? 1 : 0;
          return;
        }
        allocated += static_cast<long long>(chunk);
        mine[t].push_back(h);
      }
    });
  }
  go = true;
  for (std::thread& w : workers) {
    w.join();
  }
  print("allocated", allocated.load());
  print("refused_out_of_memory", refused.load());
  print("fake_peak", static_cast<long long>(stats(api).peak_live_bytes));
  for (auto& list : mine) {
    for (const Held& h : list) {
      release(api, path, h);
    }
  }
  api.ctx_synchronize();  // The default pool lets stream-ordered frees go,
  api.graph_mem_trim(0);  // and the graph pool what graphs gave back.
  print("used_after_free", used(api));
  print("fake_live_after_free", static_cast<long long>(stats(api).live_bytes));
}

void scenarioKernels(const Api& api, const Options& o) {
  setUp(api);
  CUfunction fn = nullptr;  // The fake runs any function: the duration is its parameter.
  unsigned us = o.kernel_us;
  void* params[] = {&us};
  auto launch_kernel =
      api.find<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**)>("cuLaunchKernel",
                                                                 "cuLaunchKernel");
  auto launch_ptsz = api.find<decltype(launch_kernel)>("cuLaunchKernel_ptsz", "cuLaunchKernel",
                                                       kCuGetProcAddressPerThreadDefaultStream);
  auto launch_ex = api.find<CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**)>(
      "cuLaunchKernelEx", "cuLaunchKernelEx");
  auto launch_cooperative =
      api.find<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**)>("cuLaunchCooperativeKernel",
                                                         "cuLaunchCooperativeKernel");
  auto graph_launch =
      api.find<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch", "cuGraphLaunch");
  const CUlaunchConfig config{1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, 0};
  // The fake reads a graph's run time in microseconds from its handle.
  const auto graph = reinterpret_cast<CUgraphExec>(  // NOLINT(performance-no-int-to-ptr)
      static_cast<std::uintptr_t>(us));

  const std::int64_t start = monotonicNs();
  const std::int64_t deadline = start + static_cast<std::int64_t>(o.seconds * 1e9);
  long long launches = 0;
  const std::int64_t window_ns = static_cast<std::int64_t>(o.report_ms) * 1'000'000;
  std::int64_t window_start = start;
  std::int64_t window_kernel_ns = stats(api).kernel_ns;
  while (monotonicNs() < deadline) {
    if (window_ns > 0 && monotonicNs() - window_start >= window_ns) {
      const std::int64_t now = monotonicNs();
      const std::int64_t kernel_ns = stats(api).kernel_ns;
      std::printf("window=%.3f\n", static_cast<double>(kernel_ns - window_kernel_ns) /
                                       static_cast<double>(now - window_start));
      std::fflush(stdout);
      window_start = now;
      window_kernel_ns = kernel_ns;
      if (!o.stop_file.empty() && ::access(o.stop_file.c_str(), F_OK) == 0) {
        break;
      }
    }
    CUresult r = kCudaSuccess;
    if (o.launch == "ex") {
      r = launch_ex(&config, fn, params, nullptr);
    } else if (o.launch == "cooperative") {
      r = launch_cooperative(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params);
    } else if (o.launch == "graph") {
      r = graph_launch(graph, nullptr);
    } else if (o.launch == "ptsz") {
      r = launch_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    } else {
      r = launch_kernel(fn, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr);
    }
    if (r != kCudaSuccess) {
      fail("launch failed: " + std::to_string(r));
    }
    ++launches;
  }
  const std::int64_t stopped = monotonicNs();
  api.ctx_synchronize();
  const FakeCudaStats s = stats(api);
  print("launches", launches);
  print("kernels", static_cast<long long>(s.kernels));
  print("kernel_ns", s.kernel_ns);
  print("loop_start_ns", start);
  print("loop_end_ns", stopped);
  print("first_kernel_start_ns", s.first_kernel_start_ns);
  print("last_kernel_end_ns", s.last_kernel_end_ns);
}

void scenarioOverhead(const Api& api, const Options& o) {
  setUp(api);
  constexpr int kBatches = 101;
  const long long per_batch = std::max(1LL, o.calls / kBatches);
  // Nanoseconds per call of the median batch of `n` calls (a batch a page fault or a preemption
  // slowed does not count); `between` runs untimed after each batch.
  const auto median_ns = [&](long long n, auto&& call, auto&& between) {
    std::vector<double> batches;
    for (int b = 0; b < kBatches; ++b) {
      const std::int64_t start = monotonicNs();
      for (long long i = 0; i < n; ++i) {
        call();
      }
      batches.push_back(static_cast<double>(monotonicNs() - start) / static_cast<double>(n));
      between();
    }
    std::sort(batches.begin(), batches.end());
    return batches[kBatches / 2];
  };
  const auto nothing = [] {};
  const auto show = [](const char* key, double ns) { std::printf("%s=%.1f\n", key, ns); };
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  show("mem_get_info_ns", median_ns(
                              per_batch,
                              [&] {
                                if (api.mem_get_info(&free_bytes, &total_bytes) != kCudaSuccess) {
                                  fail("cuMemGetInfo failed");
                                }
                              },
                              nothing));
  show("alloc_free_ns",
       median_ns(
           per_batch,
           [&] {
             CUdeviceptr p = 0;
             if (api.mem_alloc(&p, 256) != kCudaSuccess || api.mem_free(p) != kCudaSuccess) {
               fail("cuMemAlloc or cuMemFree failed");
             }
           },
           nothing));
  auto launch_kernel =
      api.find<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**)>("cuLaunchKernel",
                                                                 "cuLaunchKernel");
  unsigned us = 0;
  void* params[] = {&us};
  // Launches in batches the fake's queue (1,024 deep) holds, drained between batches: the
  // call's own cost, not the fake GPU's (it sleeps for each kernel, however short).
  constexpr long long kLaunchesPerBatch = 512;
  show("launch_ns", median_ns(
                        kLaunchesPerBatch,
                        [&] {
                          if (launch_kernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, params,
                                            nullptr) != kCudaSuccess) {
                            fail("cuLaunchKernel failed");
                          }
                        },
                        [&] { api.ctx_synchronize(); }));
  print("calls_per_batch", per_batch);
  print("launches_per_batch", kLaunchesPerBatch);
}

// "<library file>:<symbol>" for a function pointer, as dladdr names it ("?" if the address is
// not exactly an exported symbol).
std::string whereIs(void* f) {
  Dl_info info{};
  if (f == nullptr || dladdr(f, &info) == 0) {
    return "none";
  }
  std::string file = info.dli_fname != nullptr ? info.dli_fname : "?";
  file = file.substr(file.rfind('/') + 1);
  const bool exact = info.dli_saddr == f && info.dli_sname != nullptr;
  return file + ":" + (exact ? info.dli_sname : "?");
}

void scenarioAbi(const Api& api) {
  setUp(api);
  struct Query {
    const char* key;
    const char* base;
    int version;
    cuuint64_t flags;
  };
  const Query queries[] = {
      {"cuCtxCreate@12040", "cuCtxCreate", 12040, 0},
      {"cuCtxCreate@13000", "cuCtxCreate", 13000, 0},
      {"cuMemAlloc@3010", "cuMemAlloc", 3010, 0},
      {"cuMemAlloc@12040", "cuMemAlloc", 12040, 0},
      {"cuLaunchKernel@12040", "cuLaunchKernel", 12040, 0},
      {"cuLaunchKernel@12040/ptsz", "cuLaunchKernel", 12040,
       kCuGetProcAddressPerThreadDefaultStream},
      {"cuMemGetInfo@12040/ptsz", "cuMemGetInfo", 12040, kCuGetProcAddressPerThreadDefaultStream},
      {"cuGetProcAddress@12040", "cuGetProcAddress", 12040, 0},
      {"cuGetProcAddress@11080", "cuGetProcAddress", 11080, 0},
      {"cuDeviceGet@12040", "cuDeviceGet", 12040, 0},
  };
  for (const Query& q : queries) {
    void* f = nullptr;
    CUdriverProcAddressQueryResult status = -1;
    const CUresult r = api.get_proc_address(q.base, &f, q.version, q.flags, &status);
    print(q.key, r == kCudaSuccess ? whereIs(f) : "error " + std::to_string(r));
  }
  // Call the two cuCtxCreate ABIs through what cuGetProcAddress gave: each reaches its own.
  void* v2 = nullptr;
  void* v4 = nullptr;
  api.get_proc_address("cuCtxCreate", &v2, 12040, 0, nullptr);
  api.get_proc_address("cuCtxCreate", &v4, 13000, 0, nullptr);
  CUcontext ctx = nullptr;
  print("call_v2", reinterpret_cast<CUresult (*)(CUcontext*, unsigned, CUdevice)>(v2)(&ctx, 0, 0));
  print("call_v4",
        reinterpret_cast<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>(v4)(
            &ctx, nullptr, 0, 0));
  const FakeCudaStats s = stats(api);
  print("fake_ctx_create_v2", static_cast<long long>(s.ctx_create_v2_calls));
  print("fake_ctx_create_v4", static_cast<long long>(s.ctx_create_v4_calls));
  // dlsym(RTLD_NEXT) from here must still mean "after this program": the first dlsym after it is
  // the interposer's, the same one RTLD_DEFAULT finds (see also first_rtld_next_dlsym in main).
  print("rtld_next_dlsym", whereIs(dlsym(RTLD_NEXT, "dlsym")));
  print("rtld_default_dlsym", whereIs(dlsym(RTLD_DEFAULT, "dlsym")));
  print("handle_cuInit", whereIs(dlsym(api.library, "cuInit")));
  print("handle_cuDeviceGet", whereIs(dlsym(api.library, "cuDeviceGet")));
}

}  // namespace
}  // namespace tessera::cuda::testing

int main(int argc, char** argv) {
  using namespace tessera::cuda::testing;  // NOLINT(google-build-using-namespace)
  // Before anything else looks a symbol up: the interposer has not found the real dlsym yet.
  void* const first_rtld_next_dlsym = dlsym(RTLD_NEXT, "dlsym");
  const Options o = parse(argc, argv);
  const Api api = openApi(o.resolve);
  if (o.scenario == "init") {
    scenarioInit(api);
  } else if (o.scenario == "memory") {
    scenarioMemory(api, o.cap);
  } else if (o.scenario == "contexts") {
    scenarioContexts(api, o.cap);
  } else if (o.scenario == "hold") {
    scenarioHold(api, o.cap);
  } else if (o.scenario == "vmm") {
    scenarioVmm(api);
  } else if (o.scenario == "graphs") {
    scenarioGraphs(api, o.cap);
  } else if (o.scenario == "pools") {
    scenarioPools(api, o.cap);
  } else if (o.scenario == "arrays") {
    scenarioArrays(api, o.cap);
  } else if (o.scenario == "threads") {
    scenarioThreads(api, o.threads, o.chunk, o.path);
  } else if (o.scenario == "kernels") {
    scenarioKernels(api, o);
  } else if (o.scenario == "overhead") {
    scenarioOverhead(api, o);
  } else if (o.scenario == "abi") {
    print("first_rtld_next_dlsym", whereIs(first_rtld_next_dlsym));
    scenarioAbi(api);
  } else {
    fail("unknown scenario " + o.scenario);
  }
  return 0;
}
