#!/usr/bin/env bash
# The CUDA interposer's cost per intercepted call against the fake libcuda (issue #41, item 6):
# tessera_cuda_probe's `overhead` scenario (cuMemGetInfo, a cuMemAlloc + cuMemFree pair of 256
# bytes, cuLaunchKernel of a 0 us kernel; the median of 101 batches) run without the interposer,
# with it and no limits, and with a memory cap. Each configuration runs three times; the median
# run is shown. A compute share below 100 is left out on purpose: launches then wait for the
# share by design, and the fake GPU sleeps for every kernel, so what it would show is the cap
# working, not the interposer's cost.
# Usage: bench/cuda_overhead.sh [BUILD_DIR]
set -euo pipefail
build=${1:-build}
probe="$build/src/cuda/tessera_cuda_probe"
interposer="$(cd "$build/src/cuda" && pwd)/libtessera-cuda.so"
fake="$build/tests/fake_cuda/lib"
for f in "$probe" "$interposer" "$fake/libcuda.so.1"; do
  if [ ! -e "$f" ]; then
    echo "cuda_overhead: $f is missing (build with tests: make build)" >&2
    exit 1
  fi
done

# Runs the probe three times with the given environment and prints "key=median" lines.
measure() {
  local runs
  runs=$(for _ in 1 2 3; do
    env "$@" LD_LIBRARY_PATH="$fake" "$probe" overhead --calls 1000000
  done)
  for key in mem_get_info_ns alloc_free_ns launch_ns; do
    echo "$key=$(grep "^$key=" <<<"$runs" | cut -d= -f2 | sort -g | sed -n 2p)"
  done
}

plain=$(measure)
bare=$(measure LD_PRELOAD="$interposer")
capped=$(measure LD_PRELOAD="$interposer" TESSERA_CUDA_MEMORY_LIMIT=8G)
printf '%-18s %10s %12s %10s %12s %10s\n' "call (ns)" "driver" "interposer" "+" "memory cap" "+"
for key in mem_get_info_ns alloc_free_ns launch_ns; do
  p=$(grep "^$key=" <<<"$plain" | cut -d= -f2)
  b=$(grep "^$key=" <<<"$bare" | cut -d= -f2)
  c=$(grep "^$key=" <<<"$capped" | cut -d= -f2)
  awk -v k="${key%_ns}" -v p="$p" -v b="$b" -v c="$c" \
    'BEGIN { printf "%-18s %10.1f %12.1f %10.1f %12.1f %10.1f\n", k, p, b, b - p, c, c - p }'
done
echo "(alloc_free is two calls; launch: batches of 512 the fake queues, drained between batches)"
