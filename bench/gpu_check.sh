#!/usr/bin/env bash
# The CUDA device on a machine with an NVIDIA GPU (e.g. an H200), in one go (about 10 minutes):
#   1. the probe (python -m petagrad.device), 2. the backend op suites on CUDA against PyTorch (skipped when torch is
#   not installed: pip install -e ".[test,cuda]"), 3. bench/gpu.py (GEMM TFLOP/s, elementwise GB/s, launch cost).
# Results go to $OUT (default bench/results/): probe.txt, tests.txt, gpu.json. Record the numbers in docs/devices.md.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"; mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
python -m petagrad.device 2>&1 | tee "$out/probe.txt"
if python -c "import torch, pytest, numpy" 2>/dev/null; then
  TEST_DEVICES=CUDA timeout "${TEST_TIMEOUT:-300}" python -m pytest -q -x -p no:cacheprovider \
    test/backend/test_ops.py test/backend/test_dtype.py test/backend/test_gpu_devices.py test/backend/test_nn_ops.py \
    test/backend/test_tensor_cores.py 2>&1 | tail -40 | tee "$out/tests.txt"
else
  echo "torch/pytest/numpy not installed: the op suites are skipped" | tee "$out/tests.txt"
fi
DEV=CUDA timeout "${BENCH_TIMEOUT:-240}" python bench/gpu.py > "$out/gpu.json" 2> "$out/gpu.log"; echo "bench exit $?"
cat "$out/gpu.json"
