#!/usr/bin/env bash
# On one CUDA GPU with Nsight Compute (ncu): the floors of benchmarks/ncu_bound.py for the training steps and
# layers whose targets are missed, each beside the baseline its target is set against.
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh steps     # parity-, gelu- and sgatlin-stories steps (every kernel;
#                                                      # parity's alone outlasts a 10-minute call: parity-kernels)
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh layers    # the sgatlin layer and SwiGLU at both shapes
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh           # both
#   RESULTS=runs/ncu bash scripts/gpu_ncu.sh parity-kernels   # only parity-stories' own kernels (see below)
# Writes <workload>.csv (raw counters), <workload>.log and <workload>_bound.{md,json} (the tables) into
# $RESULTS; the reports themselves (<workload>.ncu-rep, to open in Nsight Compute) into $REPORTS (default
# $RESULTS/reports; they are large). The clocks are left as they are (--clock-control none). A step that fails
# compiled under ncu is profiled eager (step_<preset>_eager): its custom kernels are the same.
set -uo pipefail
cd "$(dirname "$0")/.."
what="${1:-all}"
RESULTS="${RESULTS:-runs/ncu}"
PYTHON="${PYTHON:-python3}"
NCU="${NCU:-ncu}"
REPORTS="${REPORTS:-$RESULTS/reports}"
mkdir -p "$RESULTS" "$REPORTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
metrics="$(cd benchmarks && "$PYTHON" -c "import ncu_bound; print(','.join(ncu_bound.METRICS))")"
status=0

profile() {  # profile NAME ARGS...: one workload of ncu_bound.py under ncu, then its raw CSV
  local name="$1"; shift
  # shellcheck disable=SC2086  # NCU_ARGS splits on spaces on purpose
  timeout "${NCU_TIMEOUT:-300}" "$NCU" --profile-from-start off --clock-control none --target-processes all \
    ${NCU_ARGS:-} --metrics "$metrics" -f -o "$REPORTS/$name" "$PYTHON" benchmarks/ncu_bound.py "$@" \
    > "$RESULTS/$name.log" 2>&1
  local rc=$?
  tail -n 3 "$RESULTS/$name.log"
  # a report cut short (timeout, a kernel that failed) still holds the kernels profiled before: kept as
  # <workload>_partial.csv, never read as a whole workload
  local csv="$RESULTS/$name.csv"
  [ "$rc" = 0 ] || csv="$RESULTS/${name}_partial.csv"
  [ -f "$REPORTS/$name.ncu-rep" ] \
    && "$NCU" --import "$REPORTS/$name.ncu-rep" --csv --page raw --print-units base > "$csv"
  if [ "$rc" != 0 ] || [ ! -f "$REPORTS/$name.ncu-rep" ]; then
    echo "$name: ncu failed (rc $rc), see $RESULTS/$name.log"; status=1; return 1
  fi
}

table() {  # table NAME BASELINE RATIO (NAME_eager where only the eager step was profiled)
  local name="$1"
  [ -f "$RESULTS/$name.csv" ] || name="${1}_eager"
  "$PYTHON" benchmarks/ncu_bound.py table "$RESULTS/$name.csv" --baseline "$RESULTS/$2.csv" --target-ratio "$3" \
    --out "$RESULTS" || status=1
}

if [ "$what" = "steps" ] || [ "$what" = "all" ]; then
  for preset in parity-stories gelu-stories sgatlin-stories; do
    profile "step_$preset" step --preset "$preset" || profile "step_${preset}_eager" step --preset "$preset" --eager
  done
  table step_parity-stories step_gelu-stories 0.5
  table step_sgatlin-stories step_gelu-stories 0.5
fi
if [ "$what" = "parity-kernels" ]; then
  # The whole parity-stories step has too many kernels to profile in one 10-minute call (269 of them took
  # 220 s): only its encoder's and solver's kernels and torch's top-k and sorts, against a budget given in ms
  # (default: twice gelu-stories' compiled step of 11.87 ms in the paired run of record, for 0.5x).
  NCU_ARGS="--kernel-name regex:_candidates_kernel|_features_kernel|_decode_kernel|_dots_kernel|[Tt]op[Kk]|[Ss]ort" \
    profile step_parity-stories_kernels step --preset parity-stories
  name=step_parity-stories_kernels; [ -f "$RESULTS/$name.csv" ] || name="${name}_partial"
  "$PYTHON" benchmarks/ncu_bound.py table "$RESULTS/$name.csv" --budget-ms "${BUDGET_MS:-23.74}" \
    --out "$RESULTS" || status=1
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
