#!/usr/bin/env bash
# Train the four shipped story models (models/sgatlin-stories, gelu-stories, legible-stories,
# parity-stories) and a second seed of the GELU and sgatlin models on the training mixture, then copy the
# four into models/ and print their metrics with the seed spread.
#
#   GPUS="0 1" bash scripts/train_shipped.sh            # two GPUs (the shipped models were made so)
#   bash scripts/train_shipped.sh                       # one GPU takes all six runs (use STEPS=1500 for ~10 min)
#   RUN=runs/shipped2 STEPS=4000 BATCH=64 NATURAL_UPSAMPLE=3 bash scripts/train_shipped.sh
# Settings (environment): RUN, STEPS, BATCH, SEQ_LEN, N_STORIES, HELD_OUT_STORIES, NATURAL (folder), NATURAL_UPSAMPLE, VOCAB,
# TOKENIZER_STORIES, DEVICE, MAX_MINUTES, GPUS, MODELS_DIR, PYTHON.
#
# The mixture (same for every run): the natural stories' training split (data/natural, about 90% of the
# stories, repeated NATURAL_UPSAMPLE times) plus N_STORIES generated stories (seed 0). Two held-out sets: the
# natural stories' held-out split and 2000 stories of the generator's held-out seed; every card and
# metrics.json reports the loss on both, their unigram entropies, fact accuracy, tokens and wall time.
# One tokenizer for all runs (step 1: byte-level BPE of VOCAB tokens on the mixture; it prints the share of
# natural held-out words that are single tokens), one shared data cache (step 2).
# Sizing (step 3): STEPS x BATCH x SEQ_LEN tokens per run; the defaults, 3000 x 64 x 256 = 49.2M per run,
# 295M for the six. Four runs of that size on the generated corpus alone took 2.3 to 3.3 minutes each on
# two H200s (two runs per GPU); three runs per GPU and an 8k vocabulary take longer, so MAX_MINUTES (8)
# guards the budget: a run that reaches it stops cleanly (checkpoint, evaluation, saved model;
# metrics.json says "time limit"). Calling the script again skips finished runs and resumes killed ones.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${RUN:-runs/shipped}"
PYTHON="${PYTHON:-python}"
STEPS="${STEPS:-3000}"
BATCH="${BATCH:-64}"
SEQ_LEN="${SEQ_LEN:-256}"
N_STORIES="${N_STORIES:-150000}"
NATURAL="${NATURAL:-data/natural}"
NATURAL_UPSAMPLE="${NATURAL_UPSAMPLE:-3}"
VOCAB="${VOCAB:-8192}"
TOKENIZER_STORIES="${TOKENIZER_STORIES:-100000}"
MODELS_DIR="${MODELS_DIR:-models}"
DEVICE="${DEVICE:-cuda}"
MAX_MINUTES="${MAX_MINUTES:-8}"
HELD_OUT_STORIES="${HELD_OUT_STORIES:-2000}"
# GPUs to spread the six runs over (round robin)
read -r -a GPUS <<< "${GPUS:-0}"
MODELS=(sgatlin-stories gelu-stories legible-stories parity-stories)
SECOND_SEED=(sgatlin-stories gelu-stories)
mkdir -p "$RUN/notes"
circuitlab() { "$PYTHON" -m circuitlab.cli "$@"; }
MIX=(--natural "$NATURAL" --natural-upsample "$NATURAL_UPSAMPLE" --n-stories "$N_STORIES" --held-out-stories "$HELD_OUT_STORIES")

# 1. one tokenizer for all runs, trained on the mixture (TOKENIZER_STORIES generated stories + the natural
#    training split)
if [ ! -f "$RUN/tokenizer.json" ]; then
  circuitlab tokenizer --natural "$NATURAL" --natural-upsample "$NATURAL_UPSAMPLE" --n "$TOKENIZER_STORIES" --seed 0 \
    --vocab-size "$VOCAB" --out "$RUN/tokenizer.json" --quiet | tee "$RUN/tokenizer.log"
fi

# 2. the shared corpus cache (tokenized and packed once; every run reads it)
circuitlab train --preset sgatlin-stories --out "$RUN/prepare" --tokenizer "$RUN/tokenizer.json" \
  --data-dir "$RUN/data" "${MIX[@]}" --seq-len "$SEQ_LEN" --prepare-only --quiet

cat > "$RUN/notes/common.md" <<EOF
Trained with \`circuitlab train\` (AdamW, weight decay 0.1 on matrices and the tied embedding, none on
norm scales or other vectors; warmup-stable-decay with 100 warmup steps and square-root decay over the
last 20% of steps; gradient clipping at 2.0 as in seed 000's TinyStories setting; bf16 autocast with
float32 master weights) on the training mixture: the natural children's stories of data/natural (training
split, each story repeated $NATURAL_UPSAMPLE times) and $N_STORIES generated stories (seed 0). Evaluated on two
held-out sets: the natural stories' held-out split (stories never trained on) and $HELD_OUT_STORIES generated stories of
the held-out generator seed. All shipped models share this corpus and one byte-level BPE tokenizer of at
most $VOCAB tokens trained on the mixture. Weights are stored in bf16.
EOF
cat > "$RUN/notes/sgatlin-stories.md" <<'EOF'
The shape of seed 000's TinyStories model (4 layers, d_model 256, 4 heads of 64, QK-norm, RoPE, tied
embeddings; sgatlin FFN with 8 channels of N = 1024 neurons, k = 8 per channel, d_key 128), trained
shorter and on the circuitlab mixture instead of TinyStories.
EOF
cat > "$RUN/notes/gelu-stories.md" <<'EOF'
The same skeleton with a dense GELU MLP of width 1024: the dense baseline of seed 000's TinyStories
comparison, for side-by-side loss and fact accuracy.
EOF
cat > "$RUN/notes/legible-stories.md" <<'EOF'
6 layers; Boolean attention values on all 4 heads (no unbounded minority: seed 002, appendix A, finds small
unbounded minorities diverge) and an NC-FFN of width 1024 with GELU fraction rho 0.75 and 32 sequence
quantifiers; crispness pressure alone on both surfaces, seed 002's recommended readable setting, under the
calibration rule of circuitlab.training.pressure (lambda_c 0.2 on a mean over tokens, operand channels and
layers, ramped in over 200 steps, capped at 0.25 x the LM loss). scripts/gpu_legible_sweep.sh trains it
beside seed 002's other pressure regimes.
The divergence guard keys on the running (median) loss, so isolated spikes from binarised operators
(seed 002, appendix A.3) do not stop the run.
EOF
cat > "$RUN/notes/parity-stories.md" <<'EOF'
The same skeleton (dense GELU MLP of width 1024) with a deep parity bottleneck on every block's FFN write,
product design (circuitlab/architectures/feedforward/parity.py records each choice): m = 2^16 features in
d_model 256 read as a 16 x 16 grid, feature (u1, u2) writing outer(sP(u2), sQ(u1)) / 16 with the sign
patterns of two seeded full-rank F2 codes (8 + 8 index bits; no dictionary stored); k = 32 features per
token found by scoring the 64 column patterns of largest bound (certified exact when the 32nd score beats
every bound left out), least-squares coefficients with one pursuit round, and a reconstruction term
(lambda 1) on the relative error of the FFN write. `circuitlab report parity` measures reconstruction,
encoder agreement, write norms, feature usage and write ablations on held-out natural text.
EOF

# 3. the six runs, concurrently, round robin over the GPUs
runs=()
for name in "${MODELS[@]}"; do runs+=("$name:0"); done
for name in "${SECOND_SEED[@]}"; do runs+=("$name:1"); done
pids=()
run_index=0
for entry in "${runs[@]}"; do
  name="${entry%%:*}"
  seed="${entry##*:}"
  folder="$name"; [ "$seed" = 0 ] || folder="$name-seed$seed"
  gpu="${GPUS[$((run_index % ${#GPUS[@]}))]}"
  run_index=$((run_index + 1))
  [ -f "$RUN/$folder/metrics.json" ] && continue  # finished in an earlier call of this script
  resume=(); [ -d "$RUN/$folder/checkpoints" ] && resume=(--resume)  # killed earlier: continue it
  { cat "$RUN/notes/$name.md"; echo; cat "$RUN/notes/common.md"; } > "$RUN/notes/$folder.card.md"
  CUDA_VISIBLE_DEVICES="$gpu" circuitlab train --preset "$name" --steps "$STEPS" --batch-size "$BATCH" \
    --seq-len "$SEQ_LEN" --lr 1e-3 --warmup 100 --grad-clip 2.0 --eval-every 250 --ckpt-every 500 "${MIX[@]}" \
    --tokenizer "$RUN/tokenizer.json" --data-dir "$RUN/data" --seed "$seed" --device "$DEVICE" \
    --max-minutes "$MAX_MINUTES" --save-dtype bf16 --card-notes "$RUN/notes/$folder.card.md" --quiet \
    --out "$RUN/$folder" "${resume[@]}" > "$RUN/$folder.log" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
if [ "$status" != 0 ]; then
  echo "a training run failed (exit $status); see $RUN/*.log" >&2
  exit "$status"
fi

# 4. copy the four model folders into MODELS_DIR (models/); the second seeds' metrics go beside them
for name in "${MODELS[@]}"; do
  mkdir -p "$MODELS_DIR/$name"
  cp "$RUN/$name/config.json" "$RUN/$name/model.safetensors" "$RUN/$name/tokenizer.json" \
     "$RUN/$name/card.md" "$RUN/$name/metrics.json" "$RUN/$name/train_log.jsonl" "$MODELS_DIR/$name/"
done
for name in "${SECOND_SEED[@]}"; do
  cp "$RUN/$name-seed1/metrics.json" "$MODELS_DIR/$name/metrics_seed1.json"
done
"$PYTHON" -m circuitlab.training.compare "$RUN" "${MODELS[@]}" | tee "$RUN/table.md"
du -ch "$MODELS_DIR"/*-stories/model.safetensors | tail -1
