#!/usr/bin/env bash
# On one CUDA GPU: benchmarks/bench_gpu.py (training tokens/s of the story presets eager and compiled, the
# sgatlin layer against SwiGLU and the copy bandwidth, all in one run), and the kernel tests on the GPU.
# Everything goes to $RESULTS (default runs/gpu_bench): bench.log, bench_gpu.json, bench_gpu.md, tests.log.
#   RESULTS=runs/gpu_bench bash scripts/gpu_bench.sh bench     # about 4 minutes on one H200
#   RESULTS=runs/gpu_bench bash scripts/gpu_bench.sh tests     # about 2 minutes (python -m pytest -q tests/kernels)
#   RESULTS=runs/gpu_bench bash scripts/gpu_bench.sh           # both, bench first
#   DEVICE=cpu bash scripts/gpu_bench.sh bench                 # dry run: the benchmark's --smoke on the CPU
#   BENCH_ARGS="--skip paired" bash scripts/gpu_bench.sh bench   # arguments passed on to bench_gpu.py
# One H200 call is limited to 10 minutes: the whole benchmark fits in two, "--skip paired" and then
# "--skip layers,parts,training".
# Wheels fetched by scripts/device_wheels.sh into .whl/ (TransformerLens and what it imports) are installed
# into a temporary folder first when transformer_lens is not importable.
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
RESULTS="${RESULTS:-runs/gpu_bench}"
DEVICE="${DEVICE:-cuda}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import transformer_lens" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site="$(mktemp -d)"
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:$site"
fi
"$PYTHON" -c "import torch, triton, transformer_lens, circuitlab.kernels.ops; print('torch', torch.__version__, 'triton', triton.__version__, 'transformer_lens ok')" \
  || { echo "imports failed: see above"; exit 1; }
status=0
if [ "$what" = "bench" ] || [ "$what" = "all" ]; then
  if [ "$DEVICE" = "cpu" ]; then
    TRITON_INTERPRET=1 "$PYTHON" benchmarks/bench_gpu.py --smoke --out "$RESULTS" 2>&1 | tee "$RESULTS/bench.log" | grep -v "^W[0-9]"
  else
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$RESULTS/gpu.txt"
    # shellcheck disable=SC2086  # BENCH_ARGS splits on spaces on purpose
    timeout 540 "$PYTHON" benchmarks/bench_gpu.py --out "$RESULTS" ${BENCH_ARGS:-} 2>&1 | tee "$RESULTS/bench.log" | grep -v "^W[0-9]"
  fi
  status="${PIPESTATUS[0]}"
fi
if [ "$what" = "tests" ] || [ "$what" = "all" ]; then
  [ "$DEVICE" = "cpu" ] && export TRITON_INTERPRET=1
  workers=$("$PYTHON" -c "import xdist" 2>/dev/null && echo "-n 8" || echo "")
  timeout 420 "$PYTHON" -m pytest -q -p no:cacheprovider $workers tests/kernels 2>&1 | tee "$RESULTS/tests.log" | tail -n 15
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
fi
echo "results in $RESULTS"
exit "$status"
