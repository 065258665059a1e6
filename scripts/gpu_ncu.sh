#!/usr/bin/env bash
# On one CUDA GPU with Nsight Compute (ncu): the floors of benchmarks/ncu_bound.py for the training steps and
# layers whose targets are missed, each beside the baseline its target is set against.
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh steps     # parity-stories, sgatlin-stories and gelu-stories steps
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh layers    # the sgatlin layer and SwiGLU at both shapes
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh           # both
# Writes <workload>.ncu-rep (open in Nsight Compute), <workload>.csv (raw counters), <workload>.log and
# <workload>_bound.{md,json} (the tables) into $RESULTS. The clocks are left as they are (--clock-control none).
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
RESULTS="${RESULTS:-runs/ncu}"
PYTHON="${PYTHON:-python3}"
NCU="${NCU:-ncu}"
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
metrics="$("$PYTHON" -c "import sys; sys.path.insert(0, 'benchmarks'); import ncu_bound; print(','.join(ncu_bound.METRICS))")"
status=0

profile() {  # profile NAME ARGS...: one workload of ncu_bound.py under ncu, then its raw CSV
  local name="$1"; shift
  timeout "${NCU_TIMEOUT:-300}" "$NCU" --profile-from-start off --clock-control none --target-processes all \
    --metrics "$metrics" -f -o "$RESULTS/$name" "$PYTHON" benchmarks/ncu_bound.py "$@" > "$RESULTS/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$RESULTS/$name.log"
  if [ "$rc" != 0 ] || [ ! -f "$RESULTS/$name.ncu-rep" ]; then
    echo "$name: ncu failed (rc $rc), see $RESULTS/$name.log"; status=1; return 1
  fi
  "$NCU" --import "$RESULTS/$name.ncu-rep" --csv --page raw --print-units base > "$RESULTS/$name.csv" || status=1
}

table() {  # table NAME BASELINE RATIO
  "$PYTHON" benchmarks/ncu_bound.py table "$RESULTS/$1.csv" --baseline "$RESULTS/$2.csv" --target-ratio "$3" \
    --out "$RESULTS" || status=1
}

if [ "$what" = "steps" ] || [ "$what" = "all" ]; then
  for preset in gelu-stories parity-stories sgatlin-stories; do
    profile "step_$preset" step --preset "$preset"
  done
  table step_parity-stories step_gelu-stories 0.5
  table step_sgatlin-stories step_gelu-stories 0.5
fi
if [ "$what" = "layers" ] || [ "$what" = "all" ]; then
  for shape in tinystories scale8; do
    profile "layer_swiglu_$shape" layer --shape "$shape" --which swiglu
    profile "layer_sgatlin_$shape" layer --shape "$shape" --which sgatlin
  done
  table layer_sgatlin_tinystories layer_swiglu_tinystories 0.5   # target: sgatlin <= 2.0x SwiGLU
  table layer_sgatlin_scale8 layer_swiglu_scale8 0.4             # target: sgatlin <= 2.5x SwiGLU
fi
echo "results in $RESULTS"
exit "$status"
