#!/usr/bin/env bash
# The CUDA interposer's cost per intercepted call against the fake libcuda (issue #41, item 6):
# tessera_cuda_probe's `overhead` scenario (cuMemGetInfo, a cuMemAlloc + cuMemFree pair of 256
# bytes, cuLaunchKernel of a 0 us kernel; the median of 101 batches) run without the interposer,
# with it and no limits, and with a memory cap. The three take turns for nine rounds; each figure
# is the median of its nine runs. A compute share below 100 is left out on purpose: launches then wait for the
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

# One run of the probe with the given environment, on one CPU (the last): the fake's launch hands
# each kernel to its engine thread, and across CPUs that hand-off alone varied by +-10 ns a run.
pin=()
if command -v taskset >/dev/null; then
  pin=(taskset -c "$(($(nproc) - 1))")
fi
run() {
  env "$@" LD_LIBRARY_PATH="$fake" "${pin[@]}" "$probe" overhead --calls 1000000
}

# The three configurations take turns, nine rounds, so that drift in the machine's speed (other
# load, frequency) falls on all three alike; each figure is the median of its nine runs.
rounds=9
plain_runs="" bare_runs="" capped_runs=""
for _ in $(seq "$rounds"); do
  plain_runs+=$(run)$'\n'
  bare_runs+=$(run LD_PRELOAD="$interposer")$'\n'
  capped_runs+=$(run LD_PRELOAD="$interposer" TESSERA_CUDA_MEMORY_LIMIT=8G)$'\n'
done
median() {  # KEY RUNS
  grep "^$1=" <<<"$2" | cut -d= -f2 | sort -g | sed -n "$(((rounds + 1) / 2))p"
}
printf '%-18s %10s %12s %10s %12s %10s\n' "call (ns)" "driver" "interposer" "+" "memory cap" "+"
for key in mem_get_info_ns alloc_free_ns launch_ns; do
  p=$(median "$key" "$plain_runs")
  b=$(median "$key" "$bare_runs")
  c=$(median "$key" "$capped_runs")
  awk -v k="${key%_ns}" -v p="$p" -v b="$b" -v c="$c" \
    'BEGIN { printf "%-18s %10.1f %12.1f %10.1f %12.1f %10.1f\n", k, p, b, b - p, c, c - p }'
done
echo "(alloc_free is two calls; launch: batches of 512 the fake queues, drained between batches)"
