#!/usr/bin/env bash
# Train the four shipped story models (sgatlin-stories, gelu-stories, legible-stories, parity-stories), three
# seeds each, on one training mixture; copy seed 0 of each into models/, keep every seed's metrics (and its
# per-story held-out losses) in results/models/, and print the table with the seed spread.
#
#   bash scripts/train_shipped.sh                            # one GPU runs the twelve runs side by side
#   GPUS="0 1 2 3" bash scripts/train_shipped.sh             # round robin over four GPUs
#   SEEDS="0" MODELS="gelu-stories" bash scripts/train_shipped.sh   # rebuild one run (same settings, same data)
# Settings (environment): RUN, SEEDS, MODELS, EPOCHS, BATCH, SEQ_LEN, N_STORIES, HELD_OUT_STORIES,
# VALIDATION_STORIES, NATURAL (folder), VOCAB, TOKENIZER_STORIES, TOKENIZER (a tokenizer.json to use instead of
# training one: the shipped models' tokenizer keeps new weights comparable, token for token, with earlier ones), DEVICE, MAX_MINUTES, COMPILE, GPUS, MODELS_DIR,
# RESULTS_DIR, PYTHON.
#
# The mixture (the same for every run): the natural children's stories of data/natural (their training split,
# once) plus N_STORIES generated stories (seed 0), whose labels the circuit analyses read. The runs evaluate the
# natural validation split and VALIDATION_STORIES generated stories of the validation seed as they train and
# keep the weights of their lowest validation loss; their cards report the natural held-out split (stories never
# trained on or chosen on, each read alone, with a bootstrap interval over stories) and HELD_OUT_STORIES
# generated stories of the held-out seed. The number of steps is set so that the runs see the training mixture,
# and so each natural training story, EPOCHS times (default 2). One byte-level BPE tokenizer of VOCAB tokens,
# trained on the mixture, and one data cache serve all runs. MAX_MINUTES is each run's time budget, counted from
# its start: the learning-rate decay runs on it (`circuitlab train --fit-to-time`), so a run that cannot make
# EPOCHS passes in time stops there fully decayed (metrics.json says "time budget" and how many passes it made).
# Calling the script again skips finished runs and resumes killed ones.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${RUN:-runs/shipped}"
PYTHON="${PYTHON:-python}"
EPOCHS="${EPOCHS:-2}"
BATCH="${BATCH:-64}"
SEQ_LEN="${SEQ_LEN:-256}"
N_STORIES="${N_STORIES:-60000}"
NATURAL="${NATURAL:-data/natural}"
VOCAB="${VOCAB:-8192}"
TOKENIZER_STORIES="${TOKENIZER_STORIES:-60000}"
MODELS_DIR="${MODELS_DIR:-models}"
RESULTS_DIR="${RESULTS_DIR:-results/models}"
DEVICE="${DEVICE:-cuda}"
MAX_MINUTES="${MAX_MINUTES:-8}"
# eager by default: twelve torch.compile runs started together contend for the host's cores for minutes, and the
# small models' steps gain less from compiling than a few minutes' budget loses (COMPILE=--compile to compile)
COMPILE="${COMPILE:---no-compile}"
HELD_OUT_STORIES="${HELD_OUT_STORIES:-2000}"
VALIDATION_STORIES="${VALIDATION_STORIES:-500}"
read -r -a GPUS <<< "${GPUS:-0}"
read -r -a MODELS <<< "${MODELS:-sgatlin-stories gelu-stories legible-stories parity-stories}"
read -r -a SEEDS <<< "${SEEDS:-0 1 2}"
mkdir -p "$RUN/notes"
circuitlab() { "$PYTHON" -m circuitlab.cli "$@"; }
MIX=(--natural "$NATURAL" --n-stories "$N_STORIES" --held-out-stories "$HELD_OUT_STORIES"
     --validation-stories "$VALIDATION_STORIES")

# 1. one tokenizer for all runs, trained on the mixture (TOKENIZER_STORIES generated stories + the natural
#    training split)
TOKENIZER_NOTE="trained on the mixture"
if [ -n "${TOKENIZER:-}" ]; then
  cp "$TOKENIZER" "$RUN/tokenizer.json"
  TOKENIZER_NOTE="reused from $TOKENIZER (trained on an earlier, smaller state of the same mixture)"
fi
if [ ! -f "$RUN/tokenizer.json" ]; then
  circuitlab tokenizer --natural "$NATURAL" --n "$TOKENIZER_STORIES" --seed 0 \
    --vocab-size "$VOCAB" --out "$RUN/tokenizer.json" --quiet | tee "$RUN/tokenizer.log"
fi

# 2. the shared corpus cache (tokenized and packed once; every run reads it), and the steps that make EPOCHS
#    passes over it
circuitlab train --preset sgatlin-stories --out "$RUN/prepare" --tokenizer "$RUN/tokenizer.json" \
  --data-dir "$RUN/data" "${MIX[@]}" --seq-len "$SEQ_LEN" --prepare-only --quiet
STEPS=$("$PYTHON" - "$RUN/data" "$EPOCHS" "$BATCH" <<'PY'
import json, sys
from pathlib import Path
manifests = [json.loads(p.read_text()) for p in Path(sys.argv[1]).glob("windows-*.json")]
windows = max(m["train_windows"] for m in manifests)
print(int(float(sys.argv[2]) * windows // int(sys.argv[3])))
PY
)
echo "steps per run: $STEPS ($EPOCHS passes over the training mixture at batch $BATCH x $SEQ_LEN)"

cat > "$RUN/notes/common.md" <<EOF
Trained with \`circuitlab train\` (AdamW, weight decay 0.1 on matrices and the tied embedding, none on
norm scales or other vectors; warmup-stable-decay with 100 warmup steps and square-root decay over the
last 20% of steps; gradient clipping at 2.0 as in seed 000's TinyStories setting; bf16 autocast with
float32 master weights) for at most $STEPS steps of $BATCH x $SEQ_LEN tokens ($EPOCHS passes over the training mixture):
the natural children's stories of data/natural (training split, once) and $N_STORIES generated stories (seed 0).
The weights kept are those of the lowest validation loss (the natural validation split and $VALIDATION_STORIES
generated stories of the validation seed). Evaluated on two held-out sets: the natural stories' held-out split
(stories never trained or chosen on) and $HELD_OUT_STORIES generated stories of the held-out generator seed.
All shipped models share this corpus, three training seeds each (seed 0 ships; results/models keeps every
seed's metrics), and one byte-level BPE tokenizer of at most $VOCAB tokens $TOKENIZER_NOTE. Each run had a budget of
$MAX_MINUTES minutes of one shared GPU (with the other runs of its call side by side) with the learning-rate decay fitted to it;
metrics.json gives the steps it made and the passes over the natural stories that makes. Weights are stored
in bf16.
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
cat > "$RUN/notes/legible-stories-uncentred.md" <<'EOF'
legible-stories with seed 002's own NC-FFN: operand pre-activations not centred (`centre_operands` false), the
paper's configuration that seed 002's claims are judged on; everything else as legible-stories. Trained beside
the shipped models (MODELS="... legible-stories-uncentred"); its weights are kept in results/models, not shipped.
EOF
cat > "$RUN/notes/parity-stories.md" <<'EOF'
The same skeleton (dense GELU MLP of width 1024) with a deep parity bottleneck on every block's FFN write,
seed 003's eq. 1 design (circuitlab/architectures/bottleneck/parity_linear.py records each choice): m = 2^16
features in d_model 256, feature u writing R(M bits(u)) / 16 for a seeded random 256 x 16 F2 code M (no
dictionary stored); the k = 16 features of largest |score| per token, all 2^16 scores exact by one
Walsh-Hadamard transform; least-squares coefficients; a learned bias path that carries the writes' common
part; a reconstruction term (lambda 1) on the error of the FFN write relative to its variation around the
batch's mean write (docs/decisions/parity-recon.md) and a usage-balancing term
(circuitlab/architectures/bottleneck/usage.py). `circuitlab report parity` measures reconstruction, feature
usage (effective features, dead features, the most used feature's share of tokens), the writes' participation
ratio and mean- and zero-ablation costs on held-out natural text.
EOF

# 3. every model x seed, concurrently, round robin over the GPUs
runs=()
for seed in "${SEEDS[@]}"; do for name in "${MODELS[@]}"; do runs+=("$name:$seed"); done; done
pids=()
run_index=0
for entry in "${runs[@]}"; do
  name="${entry%%:*}"
  seed="${entry##*:}"
  folder="$name"; [ "$seed" = 0 ] || folder="$name-seed$seed"
  gpu="${GPUS[$((run_index % ${#GPUS[@]}))]}"
  run_index=$((run_index + 1))
  if [ -f "$RUN/$folder/metrics.json" ]; then continue; fi  # finished in an earlier call of this script
  resume=(); if [ -d "$RUN/$folder/checkpoints" ]; then resume=(--resume); fi  # killed earlier: continue it
  { cat "$RUN/notes/$name.md" 2>/dev/null || true; echo; cat "$RUN/notes/common.md"; } > "$RUN/notes/$folder.card.md"
  CUDA_VISIBLE_DEVICES="$gpu" circuitlab train --preset "$name" --steps "$STEPS" --batch-size "$BATCH" \
    --seq-len "$SEQ_LEN" --lr 1e-3 --warmup 100 --grad-clip 2.0 --eval-every 200 --ckpt-every 500 "${MIX[@]}" \
    --tokenizer "$RUN/tokenizer.json" --data-dir "$RUN/data" --seed "$seed" --device "$DEVICE" \
    --max-minutes "$MAX_MINUTES" --fit-to-time "$COMPILE" --save-dtype bf16 --card-notes "$RUN/notes/$folder.card.md" --quiet \
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

# 4. seed 0 of each model into MODELS_DIR (models/); every seed's metrics, log and per-story losses into
#    RESULTS_DIR/<model>/seed<N>/ (`SEEDS=N MODELS=name bash scripts/train_shipped.sh` rebuilds its weights)
for name in "${MODELS[@]}"; do
  if [ -f "$RUN/$name/metrics.json" ]; then
    mkdir -p "$MODELS_DIR/$name"
    cp "$RUN/$name/config.json" "$RUN/$name/model.safetensors" "$RUN/$name/tokenizer.json" \
       "$RUN/$name/card.md" "$RUN/$name/metrics.json" "$RUN/$name/train_log.jsonl" "$MODELS_DIR/$name/"
    if [ -f "$RUN/$name/held_out_stories.npz" ]; then cp "$RUN/$name/held_out_stories.npz" "$MODELS_DIR/$name/"; fi
  fi
  for seed in "${SEEDS[@]}"; do
    folder="$name"; [ "$seed" = 0 ] || folder="$name-seed$seed"
    if [ ! -f "$RUN/$folder/metrics.json" ]; then continue; fi
    mkdir -p "$RESULTS_DIR/$name/seed$seed"
    cp "$RUN/$folder/metrics.json" "$RUN/$folder/train_log.jsonl" "$RESULTS_DIR/$name/seed$seed/"
    if [ -f "$RUN/$folder/held_out_stories.npz" ]; then cp "$RUN/$folder/held_out_stories.npz" "$RESULTS_DIR/$name/seed$seed/"; fi
  done
done
"$PYTHON" -m circuitlab.training.compare "$RUN" "${MODELS[@]}" | tee "$RUN/table.md"
du -ch "$MODELS_DIR"/*-stories/model.safetensors | tail -1
