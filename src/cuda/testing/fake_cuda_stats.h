// What the fake libcuda.so.1 (tests/fake_cuda) reports about the calls that reached it, through
// its test-only export `void fakeCudaStats(FakeCudaStats*)`. Shared by the fake and the probe
// (testing/driver_probe.cc) that the interposer test runs; not part of the interposer.
#pragma once

#include <cstdint>

namespace tessera::cuda::testing {

struct FakeCudaStats {
  std::uint64_t alloc_calls;           // Device allocation calls of any kind that reached the fake.
  std::uint64_t live_bytes;            // Device memory the fake holds allocated now...
  std::uint64_t peak_live_bytes;       // ... and the most it ever held at once.
  std::uint64_t kernels;               // Kernels and graphs run to completion.
  std::int64_t kernel_ns;              // Their summed run time (measured, CLOCK_MONOTONIC).
  std::int64_t first_kernel_start_ns;  // CLOCK_MONOTONIC; 0 before the first kernel.
  std::int64_t last_kernel_end_ns;
  std::uint64_t ctx_create_v2_calls;  // Which cuCtxCreate ABI was called, by version.
  std::uint64_t ctx_create_v3_calls;
  std::uint64_t ctx_create_v4_calls;
  std::uint64_t mem_alloc_v1_calls;  // cuMemAlloc, the 32-bit ABI of before CUDA 3.2.
};

}  // namespace tessera::cuda::testing
