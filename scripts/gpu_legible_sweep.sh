#!/usr/bin/env bash
# The pressure regimes of seed 002 (sections 4 and 5.3) on the 6-layer legible model, trained concurrently on
# one GPU, then measured by `circuitlab report legibility` on the natural stories' held-out split.
#
#   RESULTS=runs/legible-sweep bash scripts/gpu_legible_sweep.sh                  # one H200, ~11 min
#   STAGE=prepare ...; STAGE=train ...; STAGE=report ...                           # the same in three calls
#                                                     (~2 + ~8 + ~2 min, for a 10-minute limit per command)
#   RESULTS=/tmp/sweep DEVICE=cpu STEPS=3 BATCH=4 SEQ_LEN=32 N_STORIES=200 HELD_OUT_STORIES=20 \
#     REPORT_WINDOWS=2 bash scripts/gpu_legible_sweep.sh                          # CPU smoke test
#
# Regimes (presets; circuitlab.training.pressure states the calibration rule they share):
#   legible-none    legible-stories-none     no pressure
#   legible-sparse  legible-stories-sparse   sparsity alone   (lambda_s = 0.2 / 3, both surfaces)
#   legible-crisp   legible-stories          crispness alone  (lambda_c = 0.2: the shipped model)
#   legible-both    legible-stories-both     both pressures
#   legible-strong  legible-stories-strong   crispness alone at lambda_c = 1.0 (STRONG=0 leaves it out)
# Each is one command (see the loop below), e.g. for the crispness-alone model:
#   circuitlab train --preset legible-stories --steps 2000 --batch-size 64 --seq-len 256 --lr 1e-3 --warmup 100 \
#     --grad-clip 2.0 --natural data/natural --natural-upsample 3 --n-stories 60000 --held-out-stories 2000 \
#     --tokenizer models/sgatlin-stories/tokenizer.json --save-dtype bf16 --out runs/legible-crisp
# Settings (environment): RESULTS, STEPS, BATCH, SEQ_LEN, N_STORIES, HELD_OUT_STORIES, NATURAL, NATURAL_UPSAMPLE,
# TOKENIZER, DEVICE, MAX_MINUTES, STRONG, STAGE (all | prepare | train | report), REPORT_WINDOWS (held-out windows the report reads; empty = all),
# SHIP (1: copy the crispness-alone model into MODELS_DIR/legible-stories and the report into analyses/, where
# the notebook analyses/06_legibility_regimes.ipynb and the dashboard's Regimes page read it), MODELS_DIR, PYTHON.
# Calling the script again skips finished runs and resumes killed ones and those stopped by MAX_MINUTES (such
# a run saves its model and says "time limit" in metrics.json; STAGE=train again carries it on to STEPS).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS="${RESULTS:-runs/legible-sweep}"
PYTHON="${PYTHON:-python}"
STEPS="${STEPS:-2000}"
BATCH="${BATCH:-64}"
SEQ_LEN="${SEQ_LEN:-256}"
N_STORIES="${N_STORIES:-60000}"
HELD_OUT_STORIES="${HELD_OUT_STORIES:-2000}"
NATURAL="${NATURAL:-data/natural}"
NATURAL_UPSAMPLE="${NATURAL_UPSAMPLE:-3}"
TOKENIZER="${TOKENIZER:-models/sgatlin-stories/tokenizer.json}"
DEVICE="${DEVICE:-cuda}"
MAX_MINUTES="${MAX_MINUTES:-7}"
STRONG="${STRONG:-1}"
REPORT_WINDOWS="${REPORT_WINDOWS:-}"
SHIP="${SHIP:-0}"
STAGE="${STAGE:-all}"
case "$STAGE" in all|prepare|train|report) ;; *) echo "STAGE must be all, prepare, train or report, got $STAGE" >&2; exit 2;; esac
MODELS_DIR="${MODELS_DIR:-models}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
circuitlab() { "$PYTHON" -m circuitlab.cli "$@"; }
MIX=(--natural "$NATURAL" --natural-upsample "$NATURAL_UPSAMPLE" --n-stories "$N_STORIES" --held-out-stories "$HELD_OUT_STORIES")
REGIMES=(none:legible-stories-none sparse:legible-stories-sparse crisp:legible-stories both:legible-stories-both)
[ "$STRONG" = 1 ] && REGIMES+=(strong:legible-stories-strong)
mkdir -p "$RESULTS/notes"

# 1. the shared corpus cache (tokenized and packed once; every run reads it)
if [ "$STAGE" = all ] || [ "$STAGE" = prepare ]; then
  circuitlab train --preset legible-stories --out "$RESULTS/prepare" --tokenizer "$TOKENIZER" --data-dir "$RESULTS/data" \
    "${MIX[@]}" --seq-len "$SEQ_LEN" --prepare-only --quiet
fi
[ "$STAGE" = prepare ] && exit 0

# 2. card notes
cat > "$RESULTS/notes/common.md" <<NOTES
Seed 002's end-to-end design at 6 layers (d_model 256, 4 heads of 64, RoPE, QK-norm, tied embeddings):
Boolean attention values on all 4 heads (no unbounded minority: seed 002, appendix A) and an NC-FFN of
width 1024 with GELU fraction rho 0.75 (25% named operators) and 32 sequence quantifiers, its operand
pre-activations centred by a running per-channel mean (circuitlab's design: without it the channels of the
crispness-only model sat 4-7 standard deviations from 0 and crispness pushed whole channels to a rail;
circuitlab.architectures.feedforward.ncffn says how the centre is kept and trained). One of the
pressure regimes of seed 002 (sections 4 and 5.3), on both surfaces, under the calibration rule of
circuitlab.training.pressure: each pressure is a mean over tokens, operand channels and layers (crispness
at most lambda/4 nats/token per surface, sparsity at most lambda), lambda_s = lambda_c / 3 (seed 002's
ratio), ramped in over the first 200 steps and capped at 0.25 x the LM loss. train_log.jsonl logs every
pressure in nats/token beside the LM loss; the table above gives them at step 1 and at the end.

Trained with \`circuitlab train\` (AdamW, weight decay 0.1 on matrices and the tied embedding;
warmup-stable-decay, 100 warmup steps, square-root decay over the last 20%; gradient clipping at 2.0; bf16
autocast) for $STEPS steps of $BATCH x $SEQ_LEN tokens on the training mixture: the natural stories of
data/natural (training split, each story repeated $NATURAL_UPSAMPLE times) and $N_STORIES generated stories
(seed 0); evaluated on the natural held-out split and $HELD_OUT_STORIES generated stories of the held-out
seed. The shared tokenizer of the shipped models. Legibility: `circuitlab report legibility`. Weights in bf16.
NOTES
echo "No selectivity pressure: the bounded values and operands are shaped by the language-modelling loss alone (seed 002, Table 5's plain row)." > "$RESULTS/notes/none.md"
echo "Sparsity alone (lambda_s = 0.2/3 on the attention operands A, B and the NC-FFN operands A, B): seed 002, Table 1's first regime, here on both surfaces." > "$RESULTS/notes/sparse.md"
echo "Crispness alone (lambda_c = 0.2 on both surfaces): seed 002's recommended readable setting for conjunctive operators (sections 4.5 and 5.3). This is the shipped legible-stories model." > "$RESULTS/notes/crisp.md"
echo "Both pressures (lambda_c = 0.2, lambda_s = 0.2/3 on both surfaces): seed 002's quality-strongest end-to-end setting, whose operators it finds crisp but nearly dead (Table 5)." > "$RESULTS/notes/both.md"
echo "Crispness alone at five times the rule's lambda (lambda_c = 1.0, at most 0.25 nats/token per surface): the sweep's check of how strong crispness may be before the operands collapse onto the rails." > "$RESULTS/notes/strong.md"

# 3. the runs, concurrently on one device
pids=()
[ "$STAGE" = report ] && REGIMES_TO_TRAIN=() || REGIMES_TO_TRAIN=("${REGIMES[@]}")
for entry in "${REGIMES_TO_TRAIN[@]}"; do
  regime="${entry%%:*}"
  preset="${entry##*:}"
  folder="$RESULTS/legible-$regime"
  # finished in an earlier call; a run that stopped at MAX_MINUTES resumes from its last checkpoint
  if [ -f "$folder/metrics.json" ] && ! grep -q '"stopped": "time limit"' "$folder/metrics.json"; then continue; fi
  resume=(); [ -d "$folder/checkpoints" ] && resume=(--resume)
  { cat "$RESULTS/notes/$regime.md"; echo; cat "$RESULTS/notes/common.md"; } > "$RESULTS/notes/$regime.card.md"
  circuitlab train --preset "$preset" --steps "$STEPS" --batch-size "$BATCH" --seq-len "$SEQ_LEN" --lr 1e-3 \
    --warmup 100 --grad-clip 2.0 --eval-every 250 --ckpt-every 500 "${MIX[@]}" --tokenizer "$TOKENIZER" \
    --data-dir "$RESULTS/data" --device "$DEVICE" --max-minutes "$MAX_MINUTES" --save-dtype bf16 \
    --card-notes "$RESULTS/notes/$regime.card.md" --quiet --out "$folder" "${resume[@]}" > "$folder.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
if [ "$status" != 0 ]; then
  echo "a training run failed (exit $status); see $RESULTS/*.log" >&2
  exit "$status"
fi
[ "$STAGE" = train ] && exit 0

# 4. the legibility report on every regime
folders=()
for entry in "${REGIMES[@]}"; do folders+=("$RESULTS/legible-${entry%%:*}"); done
window_flag=(); [ -n "$REPORT_WINDOWS" ] && window_flag=(--max-windows "$REPORT_WINDOWS")
report_device="$DEVICE"; [ "$DEVICE" = cuda ] || report_device=cpu
"$PYTHON" -m circuitlab.cli report legibility "${folders[@]}" --json "$RESULTS/legibility_regimes.json" \
  --markdown "$RESULTS/legibility_regimes.md" --figure "$RESULTS/legibility_regimes.png" --device "$report_device" \
  --quiet "${window_flag[@]}" | tee "$RESULTS/report_table.txt"

# 5. pressures beside the LM loss, sizes, and (SHIP=1) the shipped model
"$PYTHON" - "${folders[@]}" <<'PY'
import json, sys
from pathlib import Path
print("run | stopped | steps | held-out loss | pressure step 1 (full strength) / LM loss | pressure final / LM loss | model MB")
for folder in map(Path, sys.argv[1:]):
    m = json.loads((folder / "metrics.json").read_text())
    p = m.get("pressures", {})
    start = p.get("first_unscaled", p.get("first"))
    first = f"{start['total']:.4f} / {start['lm_loss']:.4f}" if start else "none"
    final = f"{p['final']['total']:.4f} / {p['final']['lm_loss']:.4f}" if "final" in p else "none"
    size = (folder / "model.safetensors").stat().st_size / 1e6
    print(f"{folder.name} | {m['stopped']} | {m['steps']} | {m['held_out_loss']:.4f} | {first} | {final} | {size:.1f}")
PY
if [ "$SHIP" = 1 ]; then
  mkdir -p "$MODELS_DIR/legible-stories" analyses/figures
  cp "$RESULTS/legible-crisp/"{config.json,model.safetensors,tokenizer.json,card.md,metrics.json,train_log.jsonl} \
     "$MODELS_DIR/legible-stories/"
  cp "$RESULTS/legibility_regimes.json" "$RESULTS/legibility_regimes.md" analyses/
  [ -f "$RESULTS/legibility_regimes.png" ] && cp "$RESULTS/legibility_regimes.png" analyses/figures/06_legibility_regimes.png
  echo "copied $RESULTS/legible-crisp into $MODELS_DIR/legible-stories and the report into analyses/"
fi
