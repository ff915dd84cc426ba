/* gpu-check-probe: what scripts/gpu-check runs on a real GPU, under the CUDA interposer
 * (libtessera-cuda.so) the way the agent starts a time-sliced task. It uses the CUDA driver API
 * through dlopen("libcuda.so.1"), as the CUDA runtime does, and needs no CUDA headers:
 *
 *   1. allocates 64 MiB chunks until the driver (or the interposer) refuses, and prints the
 *      total it got and what cuMemGetInfo reports;
 *   2. frees them, then launches a busy kernel (embedded PTX: it spins for a given number of
 *      clock cycles) back to back for SECONDS, and prints its kernel time against the wall
 *      time: launches x one kernel's run time, the shortest its events measured (an event pair
 *      around a launch also times the wait a throttled launch spends in the interposer, before
 *      the kernel reaches the GPU).
 *
 *   gpu-check-probe SECONDS
 *
 * Output: key=value lines (allocated_bytes, meminfo_free, meminfo_total, kernel_ms, wall_ms,
 * launches). Exit status 0, or 2 with a line on stderr naming the call that failed.
 * It changes no setting of the GPU. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;

enum { kChunk = 64 << 20, kMaxChunks = 1 << 16 };

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

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 5.0;
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "gpu-check-probe: cannot load libcuda.so.1: %s\n", dlerror());
    return 2;
  }
  CUresult (*init)(unsigned) = (CUresult(*)(unsigned))find("cuInit");
  CUresult (*device_get)(CUdevice*, int) = (CUresult(*)(CUdevice*, int))find("cuDeviceGet");
  CUresult (*attribute)(int*, int, CUdevice) =
      (CUresult(*)(int*, int, CUdevice))find("cuDeviceGetAttribute");
  CUresult (*retain)(CUcontext*, CUdevice) =
      (CUresult(*)(CUcontext*, CUdevice))find("cuDevicePrimaryCtxRetain");
  CUresult (*set_current)(CUcontext) = (CUresult(*)(CUcontext))find("cuCtxSetCurrent");
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) =
      (CUresult(*)(CUdeviceptr*, size_t))find("cuMemAlloc_v2");
  CUresult (*mem_free)(CUdeviceptr) = (CUresult(*)(CUdeviceptr))find("cuMemFree_v2");
  CUresult (*mem_info)(size_t*, size_t*) = (CUresult(*)(size_t*, size_t*))find("cuMemGetInfo_v2");
  CUresult (*load)(CUmodule*, const void*) = (CUresult(*)(CUmodule*, const void*))find(
      "cuModuleLoadData");
  CUresult (*function)(CUfunction*, CUmodule, const char*) =
      (CUresult(*)(CUfunction*, CUmodule, const char*))find("cuModuleGetFunction");
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void**, void**) =
      (CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   unsigned, CUstream, void**, void**))find("cuLaunchKernel");
  CUresult (*event_create)(CUevent*, unsigned) =
      (CUresult(*)(CUevent*, unsigned))find("cuEventCreate");
  CUresult (*event_record)(CUevent, CUstream) =
      (CUresult(*)(CUevent, CUstream))find("cuEventRecord");
  CUresult (*event_sync)(CUevent) = (CUresult(*)(CUevent))find("cuEventSynchronize");
  CUresult (*elapsed)(float*, CUevent, CUevent) =
      (CUresult(*)(float*, CUevent, CUevent))find("cuEventElapsedTime");

  CUdevice dev = 0;
  CUcontext ctx = NULL;
  check(init(0), "cuInit");
  check(device_get(&dev, 0), "cuDeviceGet");
  check(retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(set_current(ctx), "cuCtxSetCurrent");

  /* 1. Memory: chunks until refused. */
  static CUdeviceptr chunks[kMaxChunks];
  int n = 0;
  while (n < kMaxChunks && mem_alloc(&chunks[n], kChunk) == 0) {
    ++n;
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  check(mem_info(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
  printf("allocated_bytes=%lld\n", (long long)n * kChunk);
  printf("meminfo_free=%zu\nmeminfo_total=%zu\n", free_bytes, total_bytes);
  for (int i = 0; i < n; ++i) {
    check(mem_free(chunks[i]), "cuMemFree_v2");
  }

  /* 2. Compute: 2 ms kernels (cycles from the SM clock), back to back, each timed by events. */
  int clock_khz = 0;
  check(attribute(&clock_khz, 13 /* CU_DEVICE_ATTRIBUTE_CLOCK_RATE */, dev),
        "cuDeviceGetAttribute(CLOCK_RATE)");
  CUmodule module = NULL;
  CUfunction spin = NULL;
  check(load(&module, kPtx), "cuModuleLoadData");
  check(function(&spin, module, "spin"), "cuModuleGetFunction");
  unsigned long long cycles = (unsigned long long)clock_khz * 2; /* 2 ms */
  void* params[] = {&cycles};
  CUevent start = NULL;
  CUevent stop = NULL;
  check(event_create(&start, 0), "cuEventCreate");
  check(event_create(&stop, 0), "cuEventCreate");
  double shortest_ms = 1e9;
  long launches = 0;
  const double begin = nowMs();
  while (nowMs() - begin < seconds * 1e3) {
    check(event_record(start, NULL), "cuEventRecord");
    check(launch(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL), "cuLaunchKernel");
    check(event_record(stop, NULL), "cuEventRecord");
    check(event_sync(stop), "cuEventSynchronize");
    float ms = 0;
    check(elapsed(&ms, start, stop), "cuEventElapsedTime");
    shortest_ms = ms < shortest_ms ? ms : shortest_ms;
    ++launches;
  }
  const double wall_ms = nowMs() - begin;
  printf("kernel_ms=%.1f\nwall_ms=%.1f\nlaunches=%ld\nkernel_run_ms=%.3f\n",
         (double)launches * shortest_ms, wall_ms, launches, shortest_ms);
  return 0;
}
