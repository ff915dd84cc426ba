// libtessera-cuda.so: the process-wide state, how hooks reach the application, and the hooks for
// initialisation and contexts. See docs/agent.md ("The CUDA interposer") for what it enforces.
//
// How an application gets our functions instead of the driver's, by the way it finds them:
//  - Linked against libcuda (or dlsym(RTLD_DEFAULT, ...)): LD_PRELOAD puts this library ahead
//    of libcuda in the global scope, so its cu* definitions win.
//  - dlopen("libcuda.so.1") + dlsym(handle, name), as the CUDA runtime does: a lookup in a handle
//    does not see preloaded libraries, so dlsym itself is exported (dlsym_hook.cc). When the real
//    answer is exactly the driver function one of our hooks wraps, the hook is returned instead.
//  - cuGetProcAddress(_v2) (the runtime's way since CUDA 11.3, found with dlsym as above): the
//    real driver resolves (name, cudaVersion, flags) to an ABI; if its answer is a function we
//    wrap, our hook for that very ABI goes back. So a caller built for an old CUDA gets the old
//    entry point it asked for, not our newest hook (HAMi-core #57). Only if the driver answers
//    with an address that is not one of its exported functions does a table of (base name,
//    cudaVersion range, per-thread) choose, for the ABIs where that mapping is certain.
//
// The settings come from the caps file the agent binds into a sandboxed task's view (kCapsFile),
// where it is and not empty, and from the environment otherwise (cuda/config.h).
//
// Bad settings fail closed: the one line saying what is wrong goes to stderr when CUDA is first
// touched, cuInit and context creation return kCudaErrorNotInitialized, allocations
// kCudaErrorOutOfMemory. A task whose limits cannot be read does not get an unlimited GPU.
#include "cuda/internal/interposer.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>

#include "cuda/internal/hooks.h"
#include "cuda/internal/launch_limiter.h"

namespace tessera::cuda::internal {
namespace {

constexpr int kForever = 1 << 30;

// In Helper order.
constexpr const char* kHelperNames[] = {"cuCtxGetCurrent",
                                        "cuEventCreate",
                                        "cuEventDestroy_v2",
                                        "cuEventRecord",
                                        "cuEventQuery",
                                        "cuEventElapsedTime",
                                        "cuStreamIsCapturing",
                                        "cuThreadExchangeStreamCaptureMode",
                                        "cuPointerGetAttribute",
                                        "cuMemPoolGetAttribute",
                                        "cuMemPoolTrimTo",
                                        "cuCtxGetDevice",
                                        "cuStreamGetCaptureInfo_v2",
                                        "cuDeviceGetGraphMemAttribute",
                                        "cuDeviceGraphMemTrim",
                                        "cuGraphNodeGetType",
                                        "cuGraphMemAllocNodeGetParams",
                                        "cuGraphMemFreeNodeGetParams"};
static_assert(std::size(kHelperNames) == kHelperCount,
              "a helper without a name, or a name too many");

// The helpers without which launches cannot be measured.
constexpr Helper kLimiterNeeds[] = {Helper::kCuCtxGetCurrent,  Helper::kCuEventCreate,
                                    Helper::kCuEventDestroyV2, Helper::kCuEventRecord,
                                    Helper::kCuEventQuery,     Helper::kCuEventElapsedTime};

// Set while this thread creates the process state: a dlsym from the driver's own initialisers
// then passes straight through instead of waiting for the state being created.
//
// Initial-exec: the variable sits in the static TLS block, at an offset fixed at load time.
// The default model would go through __tls_get_addr, which does not work where a static binary
// dlopens this library as its libcuda.so.1 (the loader's copy it would call was never set up).
// For the same reason nothing here uses libstdc++'s thread-locals (std::call_once).
__attribute__((tls_model("initial-exec"))) thread_local bool t_creating = false;

// The real driver. libtessera-cuda-driver.so, which stands in for libcuda.so.1 in a task's view,
// is built with the one path the agent binds the real driver at (and already has it loaded, as
// its NEEDED entry); the preloaded library finds it by its usual name.
#ifdef TESSERA_CUDA_DRIVER_LIBRARY
constexpr const char* kDriverLibrary = TESSERA_CUDA_DRIVER_LIBRARY;
#else
constexpr const char* kDriverLibrary = "libcuda.so.1";
#endif

std::unique_ptr<Driver> openDriver() {
  void* handle = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    return nullptr;
  }
  auto driver = std::make_unique<Driver>();
  driver->handle = handle;
  const DlsymFn lookup = realDlsym();
  for (int i = 0; i < kHookCount; ++i) {
    driver->real[i] = lookup(handle, kHooks[i].name);
  }
  for (int i = 0; i < kHelperCount; ++i) {
    driver->helper[i] = lookup(handle, kHelperNames[i]);
  }
  // libcuda.so.1 may be this interposer itself (libtessera-cuda-driver.so bound there, and this
  // copy preloaded under another name): its "driver" would then be its own hooks, and every call
  // would go round for ever. No driver then; CUDA fails, saying why.
  const int init = static_cast<int>(Hook::kCuInit);
  if (driver->real[init] != nullptr && driver->real[init] == kHooks[init].hook) {
    std::fprintf(stderr,
                 "tessera-cuda: %s is this interposer, not the driver; CUDA is refused (the real "
                 "driver must be reachable to pass calls on to)\n",
                 kDriverLibrary);
    return nullptr;
  }
  Dl_info info{};
  if (void* f = driver->real[init]; f != nullptr && dladdr(f, &info) != 0) {
    driver->base_address = info.dli_fbase;
  }
  return driver;
}

CapsStamp stampOf(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<std::int64_t>(st.st_size)};
}

// The caps file's text ("" if it is missing), and in *stamp what it was; an error names the file.
bool readCapsFile(std::string& text, CapsStamp* stamp, std::string& error) {
  text.clear();
  const int fd = ::open(kCapsFile, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) {
      return true;
    }
    error = std::string(kCapsFile) + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (stamp != nullptr && ::fstat(fd, &st) == 0) {
    *stamp = stampOf(st);
  }
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 || text.size() > 64 * 1024) {
      ::close(fd);
      error = std::string(kCapsFile) + ": " + (n < 0 ? std::strerror(errno) : "too long");
      return false;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

// The caps file the agent binds into a sandboxed task's view (kCapsFile) if it is there and not
// empty, whatever the environment says (*from_file then); otherwise the environment's variables.
SettingsResult readCaps(bool* from_file, CapsStamp* stamp) {
  std::string text;
  std::string error;
  *from_file = false;
  if (!readCapsFile(text, stamp, error)) {
    SettingsResult r;
    r.error = error;
    return r;
  }
  if (!text.empty()) {
    *from_file = true;
    return readSettingsFile(text, kCapsFile);
  }
  return readSettings([](const char* name) -> const char* { return std::getenv(name); });
}

Process* createProcess() {
  auto* p = new Process();
  // The driver is opened even with bad settings: our hooks must still be what dlsym and
  // cuGetProcAddress hand out, so that they can refuse.
  p->driver = openDriver();
  bool from_file = false;
  const SettingsResult read = readCaps(&from_file, &p->caps_stamp);
  if (!read.error.empty()) {
    std::fprintf(stderr, "tessera-cuda: %s; CUDA is refused (cuInit fails) until it is fixed\n",
                 read.error.c_str());
    p->valid = false;
    return p;
  }
  p->settings = read.settings;
  p->share_may_change = from_file && p->settings.compute_guarantee_percent > 0;
  if (p->settings.memory_limit_bytes) {
    p->ledger = std::make_unique<MemoryLedger>(*p->settings.memory_limit_bytes);
  }
  if ((p->settings.compute_share_percent < 100 || p->share_may_change) && p->driver != nullptr) {
    for (const Helper h : kLimiterNeeds) {
      if (p->driver->helper[static_cast<int>(h)] == nullptr) {
        std::fprintf(stderr,
                     "tessera-cuda: libcuda.so.1 has no %s; TESSERA_CUDA_COMPUTE_SHARE is not "
                     "enforced\n",
                     kHelperNames[static_cast<int>(h)]);
        return p;
      }
    }
    p->limiter = std::make_unique<LaunchLimiter>(*p->driver, p->settings.compute_share_percent,
                                                 p->settings.period_ns);
  }
  return p;
}

int hookIndex(const char* name) {
  for (int i = 0; i < kHookCount; ++i) {
    if (std::strcmp(kHooks[i].name, name) == 0) {
      return i;
    }
  }
  return -1;
}

// The table's choice for a caller that asks for base at cuda_version: the hook whose ABI the
// driver gives then, or -1.
int hookByVersion(const char* base, int cuda_version, bool per_thread) {
  bool base_has_per_thread = false;
  for (const HookInfo& h : kHooks) {
    base_has_per_thread |= h.base != nullptr && h.per_thread && std::strcmp(h.base, base) == 0;
  }
  // Functions without a stream argument have no _ptsz variant: the flag does not apply to them.
  per_thread = per_thread && base_has_per_thread;
  for (int i = 0; i < kHookCount; ++i) {
    const HookInfo& h = kHooks[i];
    if (h.base != nullptr && h.per_thread == per_thread && std::strcmp(h.base, base) == 0 &&
        cuda_version >= h.since && cuda_version < h.until) {
      return i;
    }
  }
  return -1;
}

bool baseIsWrapped(const char* base) {
  for (const HookInfo& h : kHooks) {
    if (h.base != nullptr && std::strcmp(h.base, base) == 0) {
      return true;
    }
  }
  return false;
}

std::atomic<bool> g_warned_unwrapped{false};

}  // namespace

// Addresses of functions are relocations, not code: this table is filled by the loader, and no
// constructor runs at load time.
const HookInfo kHooks[kHookCount] = {
    // NOLINT(readability-identifier-naming)
    {"cuInit", reinterpret_cast<void*>(&cuInit), "cuInit", 2000, kForever, false},
    {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress), "cuGetProcAddress", 11030,
     12000, false},
    {"cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2), "cuGetProcAddress",
     12000, kForever, false},
    {"cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2), "cuMemAlloc", 3020, kForever, false},
    {"cuMemAllocPitch_v2", reinterpret_cast<void*>(&cuMemAllocPitch_v2), "cuMemAllocPitch", 3020,
     kForever, false},
    {"cuMemAllocManaged", reinterpret_cast<void*>(&cuMemAllocManaged), "cuMemAllocManaged", 6000,
     kForever, false},
    {"cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync), "cuMemAllocAsync", 11020,
     kForever, false},
    {"cuMemAllocAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocAsync_ptsz), "cuMemAllocAsync",
     11020, kForever, true},
    {"cuMemAllocFromPoolAsync", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync),
     "cuMemAllocFromPoolAsync", 11020, kForever, false},
    {"cuMemAllocFromPoolAsync_ptsz", reinterpret_cast<void*>(&cuMemAllocFromPoolAsync_ptsz),
     "cuMemAllocFromPoolAsync", 11020, kForever, true},
    {"cuMemFree_v2", reinterpret_cast<void*>(&cuMemFree_v2), "cuMemFree", 3020, kForever, false},
    {"cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync), "cuMemFreeAsync", 11020, kForever,
     false},
    {"cuMemFreeAsync_ptsz", reinterpret_cast<void*>(&cuMemFreeAsync_ptsz), "cuMemFreeAsync", 11020,
     kForever, true},
    {"cuMemGetInfo_v2", reinterpret_cast<void*>(&cuMemGetInfo_v2), "cuMemGetInfo", 3020, kForever,
     false},
    {"cuDeviceTotalMem_v2", reinterpret_cast<void*>(&cuDeviceTotalMem_v2), "cuDeviceTotalMem", 3020,
     kForever, false},
    {"cuArrayCreate_v2", reinterpret_cast<void*>(&cuArrayCreate_v2), "cuArrayCreate", 3020,
     kForever, false},
    {"cuArray3DCreate_v2", reinterpret_cast<void*>(&cuArray3DCreate_v2), "cuArray3DCreate", 3020,
     kForever, false},
    {"cuArrayDestroy", reinterpret_cast<void*>(&cuArrayDestroy), "cuArrayDestroy", 2000, kForever,
     false},
    {"cuMipmappedArrayCreate", reinterpret_cast<void*>(&cuMipmappedArrayCreate),
     "cuMipmappedArrayCreate", 5000, kForever, false},
    {"cuMipmappedArrayDestroy", reinterpret_cast<void*>(&cuMipmappedArrayDestroy),
     "cuMipmappedArrayDestroy", 5000, kForever, false},
    {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate), "cuMemCreate", 10020, kForever, false},
    {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease), "cuMemRelease", 10020, kForever,
     false},
    {"cuMemMap", reinterpret_cast<void*>(&cuMemMap), "cuMemMap", 10020, kForever, false},
    {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap), "cuMemUnmap", 10020, kForever, false},
    {"cuMemRetainAllocationHandle", reinterpret_cast<void*>(&cuMemRetainAllocationHandle),
     "cuMemRetainAllocationHandle", 11000, kForever, false},
    {"cuMemPoolDestroy", reinterpret_cast<void*>(&cuMemPoolDestroy), "cuMemPoolDestroy", 11020,
     kForever, false},
    {"cuLaunchKernel", reinterpret_cast<void*>(&cuLaunchKernel), "cuLaunchKernel", 4000, kForever,
     false},
    {"cuLaunchKernel_ptsz", reinterpret_cast<void*>(&cuLaunchKernel_ptsz), "cuLaunchKernel", 7000,
     kForever, true},
    {"cuLaunchKernelEx", reinterpret_cast<void*>(&cuLaunchKernelEx), "cuLaunchKernelEx", 11060,
     kForever, false},
    {"cuLaunchKernelEx_ptsz", reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz), "cuLaunchKernelEx",
     11060, kForever, true},
    {"cuLaunchCooperativeKernel", reinterpret_cast<void*>(&cuLaunchCooperativeKernel),
     "cuLaunchCooperativeKernel", 9000, kForever, false},
    {"cuLaunchCooperativeKernel_ptsz", reinterpret_cast<void*>(&cuLaunchCooperativeKernel_ptsz),
     "cuLaunchCooperativeKernel", 9000, kForever, true},
    {"cuGraphLaunch", reinterpret_cast<void*>(&cuGraphLaunch), "cuGraphLaunch", 10000, kForever,
     false},
    {"cuGraphLaunch_ptsz", reinterpret_cast<void*>(&cuGraphLaunch_ptsz), "cuGraphLaunch", 10000,
     kForever, true},
    {"cuGraphAddMemAllocNode", reinterpret_cast<void*>(&cuGraphAddMemAllocNode),
     "cuGraphAddMemAllocNode", 11040, kForever, false},
    {"cuGraphAddMemFreeNode", reinterpret_cast<void*>(&cuGraphAddMemFreeNode),
     "cuGraphAddMemFreeNode", 11040, kForever, false},
    {"cuGraphAddNode", reinterpret_cast<void*>(&cuGraphAddNode), "cuGraphAddNode", 12020, 12030,
     false},
    {"cuGraphAddNode_v2", reinterpret_cast<void*>(&cuGraphAddNode_v2), "cuGraphAddNode", 12030,
     kForever, false},
    {"cuGraphInstantiate", reinterpret_cast<void*>(&cuGraphInstantiate), "cuGraphInstantiate",
     10000, 11000, false},
    {"cuGraphInstantiate_v2", reinterpret_cast<void*>(&cuGraphInstantiate_v2), "cuGraphInstantiate",
     11000, 12000, false},
    {"cuGraphInstantiateWithFlags", reinterpret_cast<void*>(&cuGraphInstantiateWithFlags),
     "cuGraphInstantiateWithFlags", 11040, kForever, false},
    {"cuGraphInstantiateWithParams", reinterpret_cast<void*>(&cuGraphInstantiateWithParams),
     "cuGraphInstantiateWithParams", 12000, kForever, false},
    {"cuGraphInstantiateWithParams_ptsz",
     reinterpret_cast<void*>(&cuGraphInstantiateWithParams_ptsz), "cuGraphInstantiateWithParams",
     12000, kForever, true},
    {"cuGraphExecDestroy", reinterpret_cast<void*>(&cuGraphExecDestroy), "cuGraphExecDestroy",
     10000, kForever, false},
    {"cuGraphDestroy", reinterpret_cast<void*>(&cuGraphDestroy), "cuGraphDestroy", 10000, kForever,
     false},
    {"cuGraphDestroyNode", reinterpret_cast<void*>(&cuGraphDestroyNode), "cuGraphDestroyNode",
     10000, kForever, false},
    {"cuCtxCreate_v2", reinterpret_cast<void*>(&cuCtxCreate_v2), nullptr, 0, 0, false},
    {"cuCtxCreate_v3", reinterpret_cast<void*>(&cuCtxCreate_v3), nullptr, 0, 0, false},
    {"cuCtxCreate_v4", reinterpret_cast<void*>(&cuCtxCreate_v4), nullptr, 0, 0, false},
    {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain),
     "cuDevicePrimaryCtxRetain", 7000, kForever, false},
};

std::atomic<DlsymFn> g_real_dlsym{nullptr};

DlsymFn resolveRealDlsym() noexcept {
  // The next dlsym after this library is the C library's: glibc 2.34+ exports it as
  // dlsym@GLIBC_2.34, older ones from libdl at the architecture's first version.
  static constexpr const char* kVersions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
  for (const char* version : kVersions) {
    if (void* f = dlvsym(RTLD_NEXT, "dlsym", version); f != nullptr) {
      const auto fn = reinterpret_cast<DlsymFn>(f);
      g_real_dlsym.store(fn, std::memory_order_release);
      return fn;
    }
  }
  return nullptr;
}

namespace {

std::atomic<Process*> g_process{nullptr};

// The first call's way: creates the state once, the other threads waiting for it. (A mutex, not
// std::call_once, whose state is thread-local in libstdc++: see t_creating.)
const Process& createProcessOnce() {
  static std::mutex creating;
  const std::lock_guard<std::mutex> lock(creating);
  if (const Process* p = g_process.load(std::memory_order_acquire); p != nullptr) {
    return *p;
  }
  t_creating = true;
  Process* p = createProcess();
  g_process.store(p, std::memory_order_release);
  t_creating = false;
  return *p;
}

}  // namespace

// Every hook calls this: once the state exists, one atomic load. (std::call_once alone cost
// about 15 ns a call here: it sets thread-local state before it looks.)
const Process& process() {
  if (const Process* p = g_process.load(std::memory_order_acquire); p != nullptr) {
    return *p;
  }
  return createProcessOnce();
}

void refreshShareSlow(const Process& p) noexcept {
  timespec now_ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &now_ts);
  const std::int64_t now =
      static_cast<std::int64_t>(now_ts.tv_sec) * 1'000'000'000 + now_ts.tv_nsec;
  if (now < p.caps_recheck_at_ns.load(std::memory_order_relaxed) || p.limiter == nullptr) {
    return;
  }
  std::unique_lock<std::mutex> lock(p.caps_mu, std::try_to_lock);
  if (!lock.owns_lock()) {
    return;
  }
  p.caps_recheck_at_ns.store(now + kCapsRecheckNs, std::memory_order_relaxed);
  struct stat st {};
  if (::stat(kCapsFile, &st) != 0) {
    return;
  }
  if (stampOf(st) == p.caps_stamp) {
    return;
  }
  std::string text;
  std::string error;
  CapsStamp read_stamp;
  if (!readCapsFile(text, &read_stamp, error) || text.empty()) {
    return;
  }
  p.caps_stamp = read_stamp;
  const SettingsResult r = readSettingsFile(text, kCapsFile);
  if (!r.error.empty()) {
    std::fprintf(stderr, "tessera-cuda: %s; the compute share stays as it was\n", r.error.c_str());
    return;
  }
  p.limiter->setSharePercent(r.settings.compute_share_percent);
}

void* dlsymForHandle(void* handle, const char* symbol) noexcept {
  const DlsymFn lookup = realDlsym();
  void* found = lookup != nullptr ? lookup(handle, symbol) : nullptr;
  if (found == nullptr || std::strncmp(symbol, "cu", 2) != 0 || t_creating) {
    return found;
  }
  const int index = hookIndex(symbol);
  if (index < 0) {
    return found;
  }
  const Process& p = process();
  return p.driver != nullptr && found == p.driver->real[index] ? kHooks[index].hook : found;
}

void* procAddressFor(const char* symbol, void* found, int cuda_version, cuuint64_t flags) {
  const Process& p = process();
  if (found == nullptr || symbol == nullptr || p.driver == nullptr) {
    return found;
  }
  for (int i = 0; i < kHookCount; ++i) {
    if (found == p.driver->real[i]) {
      return kHooks[i].hook;
    }
  }
  Dl_info info{};
  if (dladdr(found, &info) != 0 && info.dli_saddr == found &&
      info.dli_fbase == p.driver->base_address) {
    // An exported driver function we do not wrap: an older ABI the caller asked for by its
    // cudaVersion, or a variant newer than this library, which then goes unlimited; say so once.
    const int newest = hookByVersion(symbol, kForever - 1, false);
    if (newest >= 0 && cuda_version >= kHooks[newest].since && !g_warned_unwrapped.exchange(true)) {
      std::fprintf(stderr,
                   "tessera-cuda: cuGetProcAddress('%s', %d) gave %s, which this interposer does "
                   "not wrap; calls through it are not limited\n",
                   symbol, cuda_version, info.dli_sname != nullptr ? info.dli_sname : "?");
    }
    return found;
  }
  if (!baseIsWrapped(symbol)) {
    return found;
  }
  const int index =
      hookByVersion(symbol, cuda_version, (flags & kCuGetProcAddressPerThreadDefaultStream) != 0);
  return index >= 0 && p.driver->real[index] != nullptr ? kHooks[index].hook : found;
}

}  // namespace tessera::cuda::internal

namespace tessera::cuda {

using internal::Hook;
using internal::process;

CUresult cuInit(unsigned flags) noexcept {
  const internal::Process& p = process();
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  const auto real = p.real<CUresult (*)(unsigned)>(Hook::kCuInit);
  return real != nullptr ? real(flags) : kCudaErrorNotInitialized;
}

CUresult cuGetProcAddress(const char* symbol, void** pfn, int cuda_version,
                          cuuint64_t flags) noexcept {
  const auto real =
      process().real<CUresult (*)(const char*, void**, int, cuuint64_t)>(Hook::kCuGetProcAddress);
  if (real == nullptr) {
    return internal::kMissingInDriver;
  }
  const CUresult result = real(symbol, pfn, cuda_version, flags);
  if (result == kCudaSuccess && pfn != nullptr) {
    *pfn = internal::procAddressFor(symbol, *pfn, cuda_version, flags);
  }
  return result;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) noexcept {
  const auto real =
      process()
          .real<CUresult (*)(const char*, void**, int, cuuint64_t,
                             CUdriverProcAddressQueryResult*)>(Hook::kCuGetProcAddressV2);
  if (real == nullptr) {
    return internal::kMissingInDriver;
  }
  const CUresult result = real(symbol, pfn, cuda_version, flags, status);
  if (result == kCudaSuccess && pfn != nullptr) {
    *pfn = internal::procAddressFor(symbol, *pfn, cuda_version, flags);
  }
  return result;
}

// Contexts: nothing is charged for them (their size is the driver's, not the task's choice), but
// a process whose settings are invalid gets none, even if it reached the real cuInit some other
// way.
CUresult cuCtxCreate_v2(CUcontext* ctx, unsigned flags, CUdevice device) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUcontext*, unsigned, CUdevice)>(Hook::kCuCtxCreateV2);
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  return real != nullptr ? real(ctx, flags, device) : internal::kMissingInDriver;
}

CUresult cuCtxCreate_v3(CUcontext* ctx, CUexecAffinityParam* params, int param_count,
                        unsigned flags, CUdevice device) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice)>(
      Hook::kCuCtxCreateV3);
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  return real != nullptr ? real(ctx, params, param_count, flags, device)
                         : internal::kMissingInDriver;
}

CUresult cuCtxCreate_v4(CUcontext* ctx, CUctxCreateParams* params, unsigned flags,
                        CUdevice device) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>(
      Hook::kCuCtxCreateV4);
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  return real != nullptr ? real(ctx, params, flags, device) : internal::kMissingInDriver;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) noexcept {
  const internal::Process& p = process();
  const auto real = p.real<CUresult (*)(CUcontext*, CUdevice)>(Hook::kCuDevicePrimaryCtxRetain);
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  return real != nullptr ? real(ctx, device) : internal::kMissingInDriver;
}

}  // namespace tessera::cuda
