#!/usr/bin/env bash
# The CUDA device on a machine with an NVIDIA GPU (e.g. an H200), in one go (about 10 minutes):
#   1. the probe ("$py" -m petagrad.device); 2. bench/gpu_smoke.py: a few kernels checked exactly, tensor-core tiles
#   printed where they differ; 3. the backend op suites on CUDA against PyTorch (skipped when torch is not installed:
#   pip install -e ".[test,cuda]"), on several processes where pytest-xdist is there, going on past failures (up to
#   MAXFAIL); 4. bench/gpu.py (GEMM TFLOP/s, elementwise GB/s, launch cost, CUDA graphs; PyTorch on the GPU beside it
#   when it is a CUDA build).
# Results go to $OUT (default bench/results/): nvidia-smi.txt, probe.txt, smoke.txt, tests.txt, gpu.json, gpu.log.
# Record the numbers in docs/devices.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"; mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"   # (the GPU machines' PyTorch is their python3's)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
"$py" -m petagrad.device 2>&1 | tee "$out/probe.txt"
DEV=CUDA timeout "${SMOKE_TIMEOUT:-120}" "$py" bench/gpu_smoke.py 2>&1 | tee "$out/smoke.txt"
if "$py" -c "import torch, pytest, numpy" 2>/dev/null; then
  workers=(); "$py" -c "import xdist" 2>/dev/null && workers=(-n "${TEST_WORKERS:-8}")
  TEST_DEVICES=CUDA timeout "${TEST_TIMEOUT:-300}" "$py" -m pytest -q -rf --maxfail="${MAXFAIL:-30}" -p no:cacheprovider "${workers[@]}" \
    test/backend/test_ops.py test/backend/test_dtype.py test/backend/test_gpu_devices.py test/backend/test_nn_ops.py \
    test/backend/test_tensor_cores.py > "$out/tests.txt" 2>&1
  echo "tests exit $?"; tail -60 "$out/tests.txt"
else
  echo "torch/pytest/numpy not installed: the op suites are skipped" | tee "$out/tests.txt"
fi
DEV=CUDA timeout "${BENCH_TIMEOUT:-240}" "$py" bench/gpu.py > "$out/gpu.json" 2> "$out/gpu.log"; echo "bench exit $?"
cat "$out/gpu.json"
