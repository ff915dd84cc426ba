#!/usr/bin/env bash
# scripts/gpu-check's whole path without a GPU: the fake NVML shows one 1 GiB GPU with MIG mode
# off, and the probes find the fake libcuda.so.1 (a 1 MiB/us clock, kernels that sleep), so the
# check runs two shares under the interposer and must report both grants held.
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
grep -q "^300 *256 MiB *256 MiB " <<< "$out" || { echo "300-milli share: cap not reached exactly"; exit 1; }
grep -q "^700 *512 MiB *512 MiB " <<< "$out" || { echo "700-milli share: cap not reached exactly"; exit 1; }
grep -q "gpu-check: grants held" <<< "$out"
