#!/usr/bin/env bash
# The iso-FLOP ladder of seed 000 (Figure 3) at small scale: mlp, swiglu, sgatlin, peer and moe at ladder
# scales 1, 2, 3 (d_model 128 to 384, 2 to 6 layers), each scale one training FLOP budget shared by the five
# designs (6e13, 2.4e14, 9.6e14 FLOPs), plus a second seed of all five at scale 1 and seed 000's nonlinearity
# ablation (sgatlin with a GELU on each neuron) at scale 1 with both seeds: 22 runs, ten at a time on one GPU
# by default (set ABLATIONS="" to skip the ablation). These budgets are 100 to 100000 times below seed 000's (1e17 to 6e18 FLOPs).
#
#   RESULTS=results/ladder bash scripts/gpu_ladder.sh                  # one H200, about 7 minutes (estimate)
#   RESULTS=results/ladder BUDGET_SCALE=2 bash scripts/gpu_ladder.sh   # twice the FLOPs per run
#   DEVICE=cpu SMOKE=1 RESULTS=/tmp/ladder bash scripts/gpu_ladder.sh   # CPU check of every code path
# Settings (environment): RESULTS, DEVICE, BUDGET_SCALE, SCALES, ARCHS, SEEDS, ABLATIONS, JOBS (runs per GPU),
# MAX_MINUTES (per run), COMPILE (1: torch.compile each run), N_STORIES, NATURAL, TOKENIZER, SMOKE, PYTHON.
#
# Writes into RESULTS: ladder_results.json (one record per run: sizes, FLOPs per token, budget, tokens,
# natural and generated held-out loss), ladder_table.md (with the verdicts on seed 000's claims),
# ladder_loss_vs_flops.html (the figure), runs/<name>/ (metrics.json, card.md, train_log.jsonl; the
# weights are deleted to keep the folder small) and runs/<name>.log. Calling it again skips the runs that
# reached their budget on the same training mixture and trains the others (those stopped by MAX_MINUTES, and
# all of them after a change of the story generator).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS="${RESULTS:?set RESULTS to the results folder}"
PYTHON="${PYTHON:-python}"
DEVICE="${DEVICE:-cuda}"
BUDGET_SCALE="${BUDGET_SCALE:-1}"
SCALES="${SCALES:-1 2 3}"
ARCHS="${ARCHS:-mlp swiglu sgatlin peer moe}"
SEEDS="${SEEDS:-0 1}"
ABLATIONS="${ABLATIONS-sgatlin-gelu}"
JOBS="${JOBS:-10}"
MAX_MINUTES="${MAX_MINUTES:-5}"
COMPILE="${COMPILE:-0}"
N_STORIES="${N_STORIES:-40000}"
NATURAL="${NATURAL:-data/natural}"
TOKENIZER="${TOKENIZER:-models/sgatlin-stories/tokenizer.json}"
mkdir -p "$RESULTS"
if [ "${SMOKE:-0}" = 1 ]; then  # --smoke picks its own tiny sizes (scale 1, 2 steps per run, 40 stories)
  # shellcheck disable=SC2086  # the lists split on spaces on purpose
  sweep=(--smoke --archs $ARCHS --jobs "$JOBS")
else
  # shellcheck disable=SC2086
  sweep=(--budget-scale "$BUDGET_SCALE" --scales $SCALES --archs $ARCHS --seeds $SEEDS --jobs "$JOBS"
         --max-minutes "$MAX_MINUTES" --n-stories "$N_STORIES" --ablations $ABLATIONS)
fi
[ "$COMPILE" = 1 ] && sweep+=(--compile)
"$PYTHON" -m circuitlab.cli ladder --out "$RESULTS" --device "$DEVICE" --natural "$NATURAL" --tokenizer "$TOKENIZER" \
  "${sweep[@]}" 2>&1 | tee -a "$RESULTS/ladder.log"
