#!/usr/bin/env bash
# The iso-FLOP ladder of seed 000 (Figure 3) at the largest budgets the shipped stories support: mlp, swiglu,
# sgatlin, peer and moe, each at two FLOP budgets (ladder budget scales 1 and 2) with three model sizes per
# budget (ladder scales 1, 2, 3: d_model 128 to 384, 2 to 6 layers) and three seeds, seed 000's two Table 1
# ablations (sgatlin with a GELU on each neuron; sgatlin with PEER's router in place of its gating network) at
# the smallest budget, and a learning-rate grid (3e-4, 1e-3, 3e-3) at the smallest budget. BUDGET_SCALE=max
# picks the budgets at which no run sees a natural story more than twice (with the shipped mixture, 5.25e13 and
# 2.1e14 FLOPs: about 480 to 110,000 times below seed 000's 1e17 to 6e18). 138 runs, JOBS at a time per GPU.
#
#   RESULTS=results/ladder bash scripts/gpu_ladder.sh                  # one H200
#   RESULTS=results/ladder SIZES="" SEEDS="0 1" LR_GRID="" BUDGET_SCALE=1 bash scripts/gpu_ladder.sh  # one size a budget
#   DEVICE=cpu SMOKE=1 RESULTS=/tmp/ladder bash scripts/gpu_ladder.sh   # CPU check of every code path
#   RESULTS=results/ladder ARCHS=moe ABLATIONS= BUDGET_SCALE=0.875 JOBS=8 bash scripts/gpu_ladder.sh
#                                  # one design's missing runs of the committed sweep; name the sweep's
#                                  # budget scale, since `max` is computed from the designs in ARCHS, then
#                                  # write the results with `circuitlab ladder --report-only` and the whole
#                                  # sweep's options
# Settings (environment): RESULTS, DEVICE, BUDGET_SCALE, SCALES, SIZES, ARCHS, SEEDS, ABLATIONS, LR_GRID,
# MAX_NATURAL_PASSES, JOBS (runs per GPU), MAX_MINUTES (per run), COMPILE (1: torch.compile each run),
# N_STORIES, NATURAL, TOKENIZER, SMOKE, PYTHON, TIME_LIMIT (seconds: interrupt the sweep then).
#
# Writes into RESULTS: ladder_results.json (one record per run: sizes, FLOPs per token, budget, tokens,
# passes over the natural stories, natural and generated held-out loss), ladder_table.md (with the verdicts on
# seed 000's claims and the learning-rate grid), ladder_loss_vs_flops.html (the figure), runs/<name>/
# (metrics.json, card.md, train_log.jsonl; the weights are deleted to keep the folder small) and
# runs/<name>.log. Calling it again skips the runs that reached their budget on the same training mixture and
# trains the others (those stopped by MAX_MINUTES or killed, and all of them after a change of the mixture).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS="${RESULTS:?set RESULTS to the results folder}"
PYTHON="${PYTHON:-python}"
DEVICE="${DEVICE:-cuda}"
BUDGET_SCALE="${BUDGET_SCALE:-max}"
SCALES="${SCALES:-1 2}"
SIZES="${SIZES-1 2 3}"
LR_GRID="${LR_GRID-3e-4 3e-3}"
MAX_NATURAL_PASSES="${MAX_NATURAL_PASSES:-2}"
ARCHS="${ARCHS:-mlp swiglu sgatlin peer moe}"
SEEDS="${SEEDS:-0 1 2}"
ABLATIONS="${ABLATIONS-sgatlin-gelu sgatlin-peer-router}"
JOBS="${JOBS:-12}"
MAX_MINUTES="${MAX_MINUTES:-12}"  # per run: the committed sweep's slowest trained 4.99 minutes (PEER, size 1, larger budget)
COMPILE="${COMPILE:-0}"
N_STORIES="${N_STORIES:-60000}"
NATURAL="${NATURAL:-data/natural}"
TOKENIZER="${TOKENIZER:-models/sgatlin-stories/tokenizer.json}"
mkdir -p "$RESULTS"
if [ "${SMOKE:-0}" = 1 ]; then  # --smoke picks its own tiny sizes (scale 1, 2 steps per run, 40 stories)
  # shellcheck disable=SC2086  # the lists split on spaces on purpose
  sweep=(--smoke --archs $ARCHS --jobs "$JOBS")
else
  # shellcheck disable=SC2086
  sweep=(--budget-scale "$BUDGET_SCALE" --scales $SCALES --archs $ARCHS --seeds $SEEDS --jobs "$JOBS"
         --max-minutes "$MAX_MINUTES" --n-stories "$N_STORIES" --max-natural-passes "$MAX_NATURAL_PASSES"
         --ablations $ABLATIONS)
  [ -n "$SIZES" ] && sweep+=(--sizes $SIZES)
  [ -n "$LR_GRID" ] && sweep+=(--lr-grid $LR_GRID)
fi
[ "$COMPILE" = 1 ] && sweep+=(--compile)
# TIME_LIMIT (seconds): interrupt the sweep then (its runs stop; the next call trains what is left)
limit=()
[ -n "${TIME_LIMIT:-}" ] && limit=(timeout -s INT "$TIME_LIMIT")
"${limit[@]}" "$PYTHON" -m circuitlab.cli ladder --out "$RESULTS" --device "$DEVICE" --natural "$NATURAL" --tokenizer "$TOKENIZER" \
  "${sweep[@]}" 2>&1 | tee -a "$RESULTS/ladder.log"
