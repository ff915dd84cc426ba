// The launch hooks: with a compute share under 100 %, every kernel launch and graph launch goes
// through the LaunchLimiter (internal/launch_limiter.h), which holds it until the process's
// budget allows it and measures it. Without a share they only forward.
//
// The _ptsz variants are what a program built for the per-thread default stream gets; for them
// stream 0 means this thread's default stream, so the bracketing events go on
// CU_STREAM_PER_THREAD, the same stream, rather than on the legacy one.
#include "cuda/internal/hooks.h"
#include "cuda/internal/interposer.h"
#include "cuda/internal/launch_limiter.h"

namespace tessera::cuda {
namespace {

using internal::Hook;
using internal::process;

template <typename Fn, typename Call>
CUresult throttled(Hook hook, CUstream stream, bool per_thread, Call call) {
  const internal::Process& p = process();
  const Fn real = p.real<Fn>(hook);
  if (real == nullptr) {
    return internal::kMissingInDriver;
  }
  if (!p.valid) {
    return kCudaErrorNotInitialized;
  }
  if (p.limiter == nullptr) {
    return call(real);
  }
  internal::refreshShare(p);
  // CU_STREAM_PER_THREAD is a handle made of a number, by the driver's definition.
  const auto per_thread_stream =
      reinterpret_cast<CUstream>(kCuStreamPerThread);  // NOLINT(performance-no-int-to-ptr)
  const CUstream event_stream = per_thread && stream == nullptr ? per_thread_stream : stream;
  return p.limiter->run(event_stream, [&] { return call(real); });
}

using LaunchKernelFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                    unsigned, unsigned, CUstream, void**, void**);
using LaunchKernelExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
using LaunchCooperativeFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                                         unsigned, unsigned, unsigned, CUstream, void**);
using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);

}  // namespace

CUresult cuLaunchKernel(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                        unsigned block_x, unsigned block_y, unsigned block_z, unsigned shared_bytes,
                        CUstream stream, void** params, void** extra) noexcept {
  return throttled<LaunchKernelFn>(Hook::kCuLaunchKernel, stream, false, [&](LaunchKernelFn r) {
    return r(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params,
             extra);
  });
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                             unsigned block_x, unsigned block_y, unsigned block_z,
                             unsigned shared_bytes, CUstream stream, void** params,
                             void** extra) noexcept {
  return throttled<LaunchKernelFn>(Hook::kCuLaunchKernelPtsz, stream, true, [&](LaunchKernelFn r) {
    return r(f, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params,
             extra);
  });
}

CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                          void** extra) noexcept {
  const CUstream stream = config != nullptr ? config->hStream : nullptr;
  return throttled<LaunchKernelExFn>(
      Hook::kCuLaunchKernelEx, stream, false,
      [&](LaunchKernelExFn r) { return r(config, f, params, extra); });
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                               void** extra) noexcept {
  const CUstream stream = config != nullptr ? config->hStream : nullptr;
  return throttled<LaunchKernelExFn>(
      Hook::kCuLaunchKernelExPtsz, stream, true,
      [&](LaunchKernelExFn r) { return r(config, f, params, extra); });
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                                   unsigned block_x, unsigned block_y, unsigned block_z,
                                   unsigned shared_bytes, CUstream stream, void** params) noexcept {
  return throttled<LaunchCooperativeFn>(Hook::kCuLaunchCooperativeKernel, stream, false,
                                        [&](LaunchCooperativeFn r) {
                                          return r(f, grid_x, grid_y, grid_z, block_x, block_y,
                                                   block_z, shared_bytes, stream, params);
                                        });
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned grid_x, unsigned grid_y,
                                        unsigned grid_z, unsigned block_x, unsigned block_y,
                                        unsigned block_z, unsigned shared_bytes, CUstream stream,
                                        void** params) noexcept {
  return throttled<LaunchCooperativeFn>(Hook::kCuLaunchCooperativeKernelPtsz, stream, true,
                                        [&](LaunchCooperativeFn r) {
                                          return r(f, grid_x, grid_y, grid_z, block_x, block_y,
                                                   block_z, shared_bytes, stream, params);
                                        });
}

namespace {

// A launched graph backs its allocation nodes; those its graph does not free stay allocated
// after it (the memory ledger's to know).
CUresult graphLaunched(CUgraphExec graph, CUresult result) {
  const internal::Process& p = process();
  if (result == kCudaSuccess && p.ledger != nullptr && p.ledger->hasGraphNodes()) {
    p.ledger->graphLaunched(reinterpret_cast<std::uint64_t>(graph));
  }
  return result;
}

}  // namespace

CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream) noexcept {
  return graphLaunched(graph,
                       throttled<GraphLaunchFn>(Hook::kCuGraphLaunch, stream, false,
                                                [&](GraphLaunchFn r) { return r(graph, stream); }));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream) noexcept {
  return graphLaunched(graph,
                       throttled<GraphLaunchFn>(Hook::kCuGraphLaunchPtsz, stream, true,
                                                [&](GraphLaunchFn r) { return r(graph, stream); }));
}

}  // namespace tessera::cuda
