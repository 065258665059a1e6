#!/usr/bin/env bash
# On one CUDA GPU: the one-kernel parity beam search's options, where its time goes, and the training step they
# give, in one go.
#   RESULTS=runs/parity_select bash scripts/gpu_parity_select.sh
# 1. benchmarks/explore_parity_select.py --options: every option of parity_select_triton.BEAM_OPTIONS timed
#    (options.txt), the fastest at the shipped settings written to best.json;
# 2. benchmarks/bench_gpu.py: parity-stories against gelu-stories, compiled, paired, with those options
#    (paired/bench_gpu.{md,json});
# 3. Nsight Compute (if `ncu` is on the PATH): one launch of the kernel with those options, its per-line
#    source counters and warp stalls (beam_select_source.csv: by line of parity_select_triton.py;
#    beam_select_details.csv: occupancy, registers, throughput);
# 4. the kernel's tests on this GPU (tests.log);
# 5. with PROFILE=1, parity-stories' compiled step profiled per kernel beside gelu-stories' (profile/).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS="${RESULTS:-runs/parity_select}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$RESULTS"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
status=0
"$PYTHON" benchmarks/explore_parity_select.py --options "$RESULTS/best.json" 2>&1 | tee "$RESULTS/options.txt" || status=1
[ -f "$RESULTS/best.json" ] || echo '{}' > "$RESULTS/best.json"
echo "options timed at the shipped settings, fastest: $(cat "$RESULTS/best.json")"
"$PYTHON" benchmarks/bench_gpu.py --presets parity-stories,gelu-stories --skip training,layers,router,parts \
  --pairs parity-stories:gelu-stories --beam-options "$RESULTS/best.json" --out "$RESULTS/paired" \
  > "$RESULTS/paired.log" 2>&1 || status=1
tail -n 8 "$RESULTS/paired/bench_gpu.md" 2>/dev/null || tail -n 20 "$RESULTS/paired.log"
if [ "${NCU:-ncu}" != none ] && command -v "${NCU:-ncu}" > /dev/null; then
  "${NCU:-ncu}" --kernel-name regex:_beam_select_kernel --launch-skip 1 --launch-count 1 --import-source yes \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section Occupancy \
    --section SpeedOfLight --section ComputeWorkloadAnalysis -f -o "$RESULTS/beam_select" \
    "$PYTHON" benchmarks/explore_parity_select.py --once "$RESULTS/best.json" > "$RESULTS/ncu.log" 2>&1 || status=1
  "${NCU:-ncu}" --import "$RESULTS/beam_select.ncu-rep" --page details --csv > "$RESULTS/beam_select_details.csv" 2>&1
  "${NCU:-ncu}" --import "$RESULTS/beam_select.ncu-rep" --page source --csv --print-source cuda \
    > "$RESULTS/beam_select_source.csv" 2>&1 \
    || "${NCU:-ncu}" --import "$RESULTS/beam_select.ncu-rep" --page source --csv --print-source sass \
    > "$RESULTS/beam_select_source.csv" 2>&1 || status=1
  head -c 600 "$RESULTS/beam_select_source.csv"; echo
else
  echo "no ncu (or NCU=none): the per-line profile is skipped"
fi
if [ "${PROFILE:-0}" = 1 ]; then
  "$PYTHON" benchmarks/bench_gpu.py --presets gelu-stories,parity-stories --skip layers,router,parts,paired --steps 3 \
    --profile parity-stories --beam-options "$RESULTS/best.json" --out "$RESULTS/profile" > "$RESULTS/profile.log" 2>&1 \
    || status=1
fi
timeout "${TEST_TIMEOUT:-240}" "$PYTHON" -m pytest -q -p no:cacheprovider tests/kernels/test_kernels.py \
  -k "one_kernel or beam_select or feature_solve or fused_solves" > "$RESULTS/tests.log" 2>&1 || status=1
tail -n 3 "$RESULTS/tests.log"
exit "$status"
