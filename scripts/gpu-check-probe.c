/* gpu-check-probe: what scripts/gpu-check runs on a real GPU, under the CUDA interposer
 * (libtessera-cuda.so) the way the agent starts a time-sliced task. It uses the CUDA driver API
 * through dlopen("libcuda.so.1"), as the CUDA runtime does, and needs no CUDA headers.
 *
 *   gpu-check-probe memory PATH
 *       allocates 64 MiB chunks by one allocation path until the driver (or the interposer)
 *       refuses, and prints the total it got and what cuMemGetInfo reports. PATH is alloc
 *       (cuMemAlloc), pitch (cuMemAllocPitch), managed (cuMemAllocManaged), async
 *       (cuMemAllocAsync), pool (cuMemAllocFromPoolAsync from the device's default pool), vmm
 *       (cuMemCreate), array (cuArrayCreate, 2048 x 2048 float4), graph (a graph with one
 *       cuGraphAddMemAllocNode, instantiated and launched) or captured (cuMemAllocAsync on a
 *       stream being captured, the graph then instantiated and launched).
 *   gpu-check-probe compute SECONDS LAUNCH
 *       launches a busy kernel (embedded PTX: it spins for 2 ms of the SM clock) back to back for
 *       SECONDS by one launch path, and prints its kernel time: launches x one kernel's run time,
 *       the shortest its events measured (an event pair around a launch also times the wait a
 *       throttled launch spends in the interposer, before the kernel reaches the GPU). LAUNCH is
 *       kernel (cuLaunchKernel), ex (cuLaunchKernelEx) or graph (the launch captured into a
 *       graph, cuGraphLaunch).
 *   gpu-check-probe overhead
 *       the median nanoseconds per call of cuMemGetInfo, a cuMemAlloc + cuMemFree pair of 256
 *       bytes, and cuLaunchKernel of an empty kernel (batches of 512, synchronized between).
 *
 * Output: key=value lines. Exit status 0, or 2 with a line on stderr naming the call that
 * failed. It changes no setting of the GPU. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef void* CUevent;
typedef void* CUarray;
typedef void* CUgraph;
typedef void* CUgraphNode;
typedef void* CUgraphExec;
typedef void* CUmemoryPool;
typedef unsigned long long CUdeviceptr;

/* cuda.h's layouts, as far as used here. */
typedef struct {
  size_t width, height;
  int format;
  unsigned channels;
} ArrayDescriptor; /* CUDA_ARRAY_DESCRIPTOR */
typedef struct {
  int type, handle_types, location_type, location_id;
  void* win32;
  unsigned char compression, gpu_direct_rdma;
  unsigned short usage;
  unsigned char reserved[4];
} AllocationProp; /* CUmemAllocationProp: pinned memory on a device */
typedef struct {
  int alloc_type, handle_types, location_type, location_id;
  unsigned char pool_rest[72];
  const void* access;
  size_t access_count;
  size_t bytesize;
  CUdeviceptr dptr;
} AllocNodeParams; /* CUDA_MEM_ALLOC_NODE_PARAMS */
typedef struct {
  unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes;
  CUstream stream;
  void* attrs;
  unsigned attr_count;
} LaunchConfig; /* CUlaunchConfig */

enum { kChunk = 64 << 20, kMaxChunks = 1 << 14, kBatch = 512, kBatches = 101 };

/* spin(cycles): busy until %clock64 has advanced `cycles`. PTX ISA 7.0 for sm_70 and later: the
 * driver compiles it for the GPU at hand. */
static const char kPtx[] =
    ".version 7.0\n"
    ".target sm_70\n"
    ".address_size 64\n"
    ".visible .entry spin(.param .u64 cycles)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [cycles];\n"
    "  mov.u64 %rd2, %clock64;\n"
    "LOOP:\n"
    "  mov.u64 %rd3, %clock64;\n"
    "  sub.s64 %rd4, %rd3, %rd2;\n"
    "  setp.lt.u64 %p1, %rd4, %rd1;\n"
    "  @%p1 bra LOOP;\n"
    "  ret;\n"
    "}\n";

static void* lib;

static void* find(const char* name) {
  void* f = dlsym(lib, name);
  if (f == NULL) {
    fprintf(stderr, "gpu-check-probe: libcuda.so.1 has no %s\n", name);
    exit(2);
  }
  return f;
}

static void check(CUresult r, const char* call) {
  if (r != 0) {
    fprintf(stderr, "gpu-check-probe: %s failed: CUresult %d\n", call, r);
    exit(2);
  }
}

static double nowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define FN(ret, name, args) ret(*name) args
#define FIND(name, symbol) name = (void*)find(symbol)

static FN(CUresult, init, (unsigned));
static FN(CUresult, device_get, (CUdevice*, int));
static FN(CUresult, attribute, (int*, int, CUdevice));
static FN(CUresult, retain, (CUcontext*, CUdevice));
static FN(CUresult, set_current, (CUcontext));
static FN(CUresult, synchronize, (void));
static FN(CUresult, mem_alloc, (CUdeviceptr*, size_t));
static FN(CUresult, mem_pitch, (CUdeviceptr*, size_t*, size_t, size_t, unsigned));
static FN(CUresult, mem_managed, (CUdeviceptr*, size_t, unsigned));
static FN(CUresult, mem_async, (CUdeviceptr*, size_t, CUstream));
static FN(CUresult, mem_from_pool, (CUdeviceptr*, size_t, CUmemoryPool, CUstream));
static FN(CUresult, default_pool, (CUmemoryPool*, CUdevice));
static FN(CUresult, mem_create, (unsigned long long*, size_t, const AllocationProp*,
                                 unsigned long long));
static FN(CUresult, array_create, (CUarray*, const ArrayDescriptor*));
static FN(CUresult, mem_free, (CUdeviceptr));
static FN(CUresult, mem_info, (size_t*, size_t*));
static FN(CUresult, graph_create, (CUgraph*, unsigned));
static FN(CUresult, graph_alloc_node, (CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                       AllocNodeParams*));
static FN(CUresult, instantiate, (CUgraphExec*, CUgraph, unsigned long long));
static FN(CUresult, graph_launch, (CUgraphExec, CUstream));
static FN(CUresult, stream_create, (CUstream*, unsigned));
static FN(CUresult, begin_capture, (CUstream, int));
static FN(CUresult, end_capture, (CUstream, CUgraph*));
static FN(CUresult, load, (CUmodule*, const void*));
static FN(CUresult, function, (CUfunction*, CUmodule, const char*));
static FN(CUresult, launch, (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**));
static FN(CUresult, launch_ex, (const LaunchConfig*, CUfunction, void**, void**));
static FN(CUresult, event_create, (CUevent*, unsigned));
static FN(CUresult, event_record, (CUevent, CUstream));
static FN(CUresult, event_sync, (CUevent));
static FN(CUresult, elapsed, (float*, CUevent, CUevent));

static CUdevice dev;

static void setUp(void) {
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "gpu-check-probe: cannot load libcuda.so.1: %s\n", dlerror());
    exit(2);
  }
  FIND(init, "cuInit");
  FIND(device_get, "cuDeviceGet");
  FIND(attribute, "cuDeviceGetAttribute");
  FIND(retain, "cuDevicePrimaryCtxRetain");
  FIND(set_current, "cuCtxSetCurrent");
  FIND(synchronize, "cuCtxSynchronize");
  FIND(mem_alloc, "cuMemAlloc_v2");
  FIND(mem_pitch, "cuMemAllocPitch_v2");
  FIND(mem_managed, "cuMemAllocManaged");
  FIND(mem_async, "cuMemAllocAsync");
  FIND(mem_from_pool, "cuMemAllocFromPoolAsync");
  FIND(default_pool, "cuDeviceGetDefaultMemPool");
  FIND(mem_create, "cuMemCreate");
  FIND(array_create, "cuArrayCreate_v2");
  FIND(mem_free, "cuMemFree_v2");
  FIND(mem_info, "cuMemGetInfo_v2");
  FIND(graph_create, "cuGraphCreate");
  FIND(graph_alloc_node, "cuGraphAddMemAllocNode");
  FIND(instantiate, "cuGraphInstantiateWithFlags");
  FIND(graph_launch, "cuGraphLaunch");
  FIND(stream_create, "cuStreamCreate");
  FIND(begin_capture, "cuStreamBeginCapture_v2");
  FIND(end_capture, "cuStreamEndCapture");
  FIND(load, "cuModuleLoadData");
  FIND(function, "cuModuleGetFunction");
  FIND(launch, "cuLaunchKernel");
  FIND(launch_ex, "cuLaunchKernelEx");
  FIND(event_create, "cuEventCreate");
  FIND(event_record, "cuEventRecord");
  FIND(event_sync, "cuEventSynchronize");
  FIND(elapsed, "cuEventElapsedTime");
  CUcontext ctx = NULL;
  check(init(0), "cuInit");
  check(device_get(&dev, 0), "cuDeviceGet");
  check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(set_current(ctx), "cuCtxSetCurrent");
}

/* One chunk by `path`; 0 when it succeeded. */
static CUresult allocateChunk(const char* path, CUstream stream) {
  CUdeviceptr p = 0;
  if (strcmp(path, "alloc") == 0) {
    return mem_alloc(&p, kChunk);
  }
  if (strcmp(path, "pitch") == 0) { /* 1024 rows of 64 KiB: a pitch every GPU takes as is. */
    size_t pitch = 0;
    return mem_pitch(&p, &pitch, 64 << 10, kChunk / (64 << 10), 16);
  }
  if (strcmp(path, "managed") == 0) {
    return mem_managed(&p, kChunk, 1 /* CU_MEM_ATTACH_GLOBAL */);
  }
  if (strcmp(path, "async") == 0) {
    CUresult r = mem_async(&p, kChunk, stream);
    return r != 0 ? r : synchronize();
  }
  if (strcmp(path, "pool") == 0) {
    CUmemoryPool pool = NULL;
    check(default_pool(&pool, dev), "cuDeviceGetDefaultMemPool");
    CUresult r = mem_from_pool(&p, kChunk, pool, stream);
    return r != 0 ? r : synchronize();
  }
  if (strcmp(path, "vmm") == 0) {
    AllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = 1; /* CU_MEM_ALLOCATION_TYPE_PINNED */
    prop.location_type = 1; /* CU_MEM_LOCATION_TYPE_DEVICE */
    prop.location_id = dev;
    unsigned long long handle = 0;
    return mem_create(&handle, kChunk, &prop, 0);
  }
  if (strcmp(path, "array") == 0) {
    const ArrayDescriptor desc = {2048, 2048, 0x20 /* FLOAT */, 4};
    CUarray array = NULL;
    return array_create(&array, &desc);
  }
  if (strcmp(path, "graph") == 0 || strcmp(path, "captured") == 0) {
    CUgraph graph = NULL;
    CUresult r = 0;
    if (strcmp(path, "graph") == 0) {
      check(graph_create(&graph, 0), "cuGraphCreate");
      AllocNodeParams params;
      memset(&params, 0, sizeof params);
      params.alloc_type = 1;
      params.location_type = 1;
      params.location_id = dev;
      params.bytesize = kChunk;
      CUgraphNode node = NULL;
      r = graph_alloc_node(&node, graph, NULL, 0, &params);
    } else {
      check(begin_capture(stream, 0 /* CU_STREAM_CAPTURE_MODE_GLOBAL */),
            "cuStreamBeginCapture_v2");
      r = mem_async(&p, kChunk, stream);
      const CUresult ended = end_capture(stream, &graph);
      r = r != 0 ? r : ended;
    }
    if (r != 0) {
      return r;
    }
    CUgraphExec exec = NULL;
    r = instantiate(&exec, graph, 0);
    if (r == 0) {
      r = graph_launch(exec, stream);
    }
    return r != 0 ? r : synchronize();
  }
  fprintf(stderr, "gpu-check-probe: unknown allocation path %s\n", path);
  exit(2);
}

static int memory(const char* path) {
  CUstream stream = NULL;
  check(stream_create(&stream, 0), "cuStreamCreate");
  int n = 0;
  CUresult refused = 0;
  while (n < kMaxChunks && (refused = allocateChunk(path, stream)) == 0) {
    ++n;
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  check(mem_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  printf("path=%s\nallocated_bytes=%lld\nrefused_with=%d\n", path, (long long)n * kChunk, refused);
  printf("meminfo_free=%zu\nmeminfo_total=%zu\n", free_bytes, total_bytes);
  return 0; /* The process's end gives the memory back. */
}

static CUfunction spinKernel(void) {
  CUmodule module = NULL;
  CUfunction spin = NULL;
  check(load(&module, kPtx), "cuModuleLoadData");
  check(function(&spin, module, "spin"), "cuModuleGetFunction");
  return spin;
}

static int compute(double seconds, const char* how) {
  int clock_khz = 0;
  check(attribute(&clock_khz, 13 /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */, dev),
        "cuDeviceGetAttribute(CLOCK_RATE)");
  CUfunction spin = spinKernel();
  unsigned long long cycles = (unsigned long long)clock_khz * 2; /* 2 ms */
  void* params[] = {&cycles};
  CUstream stream = NULL;
  check(stream_create(&stream, 0), "cuStreamCreate");
  CUgraphExec exec = NULL;
  const int graph = strcmp(how, "graph") == 0;
  const int ex = strcmp(how, "ex") == 0;
  if (!graph && !ex && strcmp(how, "kernel") != 0) {
    fprintf(stderr, "gpu-check-probe: unknown launch path %s\n", how);
    return 2;
  }
  if (graph) {
    CUgraph g = NULL;
    check(begin_capture(stream, 0), "cuStreamBeginCapture_v2");
    check(launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), "cuLaunchKernel (captured)");
    check(end_capture(stream, &g), "cuStreamEndCapture");
    check(instantiate(&exec, g, 0), "cuGraphInstantiateWithFlags");
  }
  const LaunchConfig config = {1, 1, 1, 1, 1, 1, 0, stream, NULL, 0};
  CUevent start = NULL;
  CUevent stop = NULL;
  check(event_create(&start, 0), "cuEventCreate");
  check(event_create(&stop, 0), "cuEventCreate");
  double shortest_ms = 1e9;
  long launches = 0;
  const double begin = nowMs();
  while (nowMs() - begin < seconds * 1e3) {
    check(event_record(start, stream), "cuEventRecord");
    if (graph) {
      check(graph_launch(exec, stream), "cuGraphLaunch");
    } else if (ex) {
      check(launch_ex(&config, spin, params, NULL), "cuLaunchKernelEx");
    } else {
      check(launch(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL), "cuLaunchKernel");
    }
    check(event_record(stop, stream), "cuEventRecord");
    check(event_sync(stop), "cuEventSynchronize");
    float ms = 0;
    check(elapsed(&ms, start, stop), "cuEventElapsedTime");
    shortest_ms = ms < shortest_ms ? ms : shortest_ms;
    ++launches;
  }
  const double wall_ms = nowMs() - begin;
  printf("launch=%s\nkernel_ms=%.1f\nwall_ms=%.1f\nlaunches=%ld\nkernel_run_ms=%.3f\n", how,
         (double)launches * shortest_ms, wall_ms, launches, shortest_ms);
  return 0;
}

static int compareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a;
  const double y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The median over kBatches of the nanoseconds per call of a batch of kBatch calls. */
static double median(double* ns) {
  qsort(ns, kBatches, sizeof ns[0], compareDoubles);
  return ns[kBatches / 2];
}

static int overhead(void) {
  CUfunction spin = spinKernel();
  unsigned long long zero = 0;
  void* params[] = {&zero};
  static double ns[kBatches];
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  for (int b = 0; b < kBatches; ++b) {
    const double t = nowMs();
    for (int i = 0; i < kBatch; ++i) {
      check(mem_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
    }
    ns[b] = (nowMs() - t) * 1e6 / kBatch;
  }
  printf("mem_get_info_ns=%.1f\n", median(ns));
  for (int b = 0; b < kBatches; ++b) {
    const double t = nowMs();
    for (int i = 0; i < kBatch; ++i) {
      CUdeviceptr p = 0;
      check(mem_alloc(&p, 256), "cuMemAlloc_v2");
      check(mem_free(p), "cuMemFree_v2");
    }
    ns[b] = (nowMs() - t) * 1e6 / kBatch;
  }
  printf("alloc_free_ns=%.1f\n", median(ns));
  for (int b = 0; b < kBatches; ++b) {
    const double t = nowMs();
    for (int i = 0; i < kBatch; ++i) {
      check(launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
    }
    ns[b] = (nowMs() - t) * 1e6 / kBatch;
    check(synchronize(), "cuCtxSynchronize");
  }
  printf("launch_ns=%.1f\n", median(ns));
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "memory") == 0 && argc == 3) {
    setUp();
    return memory(argv[2]);
  }
  if (strcmp(mode, "compute") == 0 && argc == 4) {
    setUp();
    return compute(atof(argv[2]), argv[3]);
  }
  if (strcmp(mode, "overhead") == 0 && argc == 2) {
    setUp();
    return overhead();
  }
  fprintf(stderr,
          "usage: gpu-check-probe memory PATH | compute SECONDS kernel|ex|graph | overhead\n");
  return 2;
}
