#!/usr/bin/env bash
# On a CUDA machine: the kernel tests on the GPU, then the kernel benchmark (and, with --e2e, the
# end-to-end training timing). Logs and JSON go to $OUT (default: runs/gpu_kernels).
#   bash benchmarks/gpu_kernels.sh [--e2e]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/gpu_kernels}"
mkdir -p "$OUT"
export OUT PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
workers=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8" || echo "")
python3 -m pytest tests/kernels -q -p no:cacheprovider $workers \
  2>&1 | tee "$OUT/tests.log" | tail -n 15
python3 benchmarks/bench_kernels.py --json "$OUT/bench_kernels.json" 2>&1 | tee "$OUT/bench.log" | grep -v "^  check .* met$"
if [ "${1:-}" = "--e2e" ]; then
  timeout 150 python3 benchmarks/bench_kernels.py --e2e --steps 5 --rounds 3 --profile --json "$OUT/bench_e2e.json" 2>&1 | tee "$OUT/e2e.log"
fi
