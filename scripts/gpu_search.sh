#!/usr/bin/env bash
# On CUDA GPUs: the exact-search kernel's tests compiled on the GPU (TRITON_INTERPRET unset), then
# benchmarks/bench_search.py at 10^6, 10^7 and 10^8 codes on one GPU (with the posting-list probe), then at
# 10^7 and 10^8 codes over every visible GPU with torchrun (rows split over the ranks, answers merged).
# Everything goes to $OUT (default runs/gpu_search): gpu.txt, tests.log, one log and one JSON per benchmark run.
#   OUT=runs/gpu_search bash scripts/gpu_search.sh          # all three stages
#   OUT=... bash scripts/gpu_search.sh tests one            # chosen stages: tests, one, ranks
# Time on one H200 (measured): tests 48 s with set-up, 10^6 codes 27 s, 10^7 codes 70 s; 10^8 codes more than
# 4 minutes (drawing the codes); all GPUs not yet run. Where a call is
# limited to 10 minutes, run "tests one" and "ranks" as two calls.
# pydantic (which circuitlab's database manifest needs) is installed from .whl/ (scripts/device_wheels.sh)
# into a temporary folder when it is not importable.
set -uo pipefail
cd "$(dirname "$0")/.."
stages="${*:-tests one ranks}"
OUT="${OUT:-runs/gpu_search}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
unset TRITON_INTERPRET
# NVLink multicast stays off (it can take a shared host's GPUs out of service)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PYTHON" -c "import pydantic" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site="$(mktemp -d)"
  "$PYTHON" -m pip install -q --no-index --no-deps --target "$site" .whl/*.whl
  export PYTHONPATH="$PYTHONPATH:$site"
fi
"$PYTHON" -c "import torch, triton, pydantic, filelock, scipy, jaxtyping, circuitlab.analysis.circuitdb.device; \
print('torch', torch.__version__, 'triton', triton.__version__, 'GPUs', torch.cuda.device_count())" \
  || { echo "imports failed: see above"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
gpus=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
status=0
for stage in $stages; do
  case "$stage" in
    tests)
      timeout 420 "$PYTHON" -m pytest -q -p no:cacheprovider tests/kernels/test_search_kernel.py 2>&1 \
        | tee "$OUT/tests.log" | tail -n 15
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
      ;;
    one)
      for codes in 1e6 1e7 1e8; do
        check=$([ "$codes" = 1e8 ] && echo 32 || echo 100)
        timeout 420 "$PYTHON" benchmarks/bench_search.py --device cuda --codes "$codes" --check "$check" --postings-probe \
          --out "$OUT/search_1gpu_$codes.json" 2>&1 | tee "$OUT/bench_1gpu_$codes.log"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
      done
      ;;
    ranks)
      if [ "$gpus" -lt 2 ]; then echo "one GPU visible: no torchrun stage"; continue; fi
      for codes in 1e7 1e8; do
        timeout 420 "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$gpus" \
          benchmarks/bench_search.py --device cuda --codes "$codes" --check 32 \
          --out "$OUT/search_${gpus}gpu_$codes.json" 2>&1 | tee "$OUT/bench_${gpus}gpu_$codes.log"
        [ "${PIPESTATUS[0]}" = 0 ] || status=1
      done
      ;;
    *) echo "unknown stage $stage (expected tests, one, ranks)"; status=1 ;;
  esac
done
echo "results in $OUT"
exit "$status"
