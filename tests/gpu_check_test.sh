#!/usr/bin/env bash
# scripts/gpu-check's whole path without a GPU: the fake NVML shows one 1 GiB GPU with MIG mode
# off, and the probes find the fake libcuda.so.1 (a 1 MiB/us clock, kernels that sleep), so the
# check runs every allocation and launch path under the interposer and must report every grant
# held, with the overhead figures.
#   tests/gpu_check_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/nvml.json" <<'JSON'
{"driver_version": "550.54.15",
 "gpus": [{"uuid": "GPU-00000000-1111-2222-3333-444444444444", "name": "NVIDIA H100 80GB HBM3",
           "memory_mib": 1024}]}
JSON
out=$(FAKE_NVML_SCRIPT=$work/nvml.json FAKE_CUDA_TOTAL_MIB=4096 \
      LD_LIBRARY_PATH=$build/tests/fake_cuda/lib \
      "$source/scripts/gpu-check" --build-dir "$build" --seconds 2 \
      --nvml-library "$build/tests/fake_nvml/full/libnvidia-ml.so.1" 2>&1) || {
  echo "$out"; echo "gpu-check failed"; exit 1; }
echo "$out"
for path in alloc pitch managed async pool vmm array graph captured; do
  grep -Eq "^  $path +256 MiB +256 MiB +yes$" <<< "$out" || {
    echo "memory by $path: the cap was not reached exactly"; exit 1; }
done
for how in kernel ex graph; do
  grep -Eq "^  $how +[0-9]+ +[0-9]+ +[0-9.]+:[0-9.]+ +yes$" <<< "$out" || {
    echo "compute by $how: not 30:70"; exit 1; }
done
grep -Eq "^  launch +[0-9.]+ +[0-9.]+ " <<< "$out" || { echo "no overhead figures"; exit 1; }
grep -q "gpu-check: grants held" <<< "$out"
