#!/usr/bin/env bash
# Train the four shipped story models (models/sgatlin-stories, gelu-stories, legible-stories,
# parity-stories) concurrently, then copy them into models/ and print their metrics.
#
#   bash scripts/train_shipped.sh                       # one CUDA GPU takes all four runs
#   GPUS="0 1" bash scripts/train_shipped.sh            # spread the runs over two GPUs (how the shipped ones were made)
#   RUN=runs/shipped2 STEPS=3000 N_STORIES=150000 bash scripts/train_shipped.sh
#
# Same corpus and same tokenizer for all four: the tokenizer is trained once (step 1), the corpus is
# generated, tokenized and packed once into a shared data cache (step 2), and the four runs read it.
# Sizing (step 3): 3000 steps of 64 x 256 tokens = 49.2M tokens per model (about 4.8 passes over the
# 10.2M tokens of 150k stories). Measured on two H200s, two runs per GPU: 2.3 to 3.3 minutes of training
# per model, 4 min 40 s for the whole script. --max-minutes is a guard: a run that reaches it stops
# cleanly (checkpoint, evaluation, saved model; metrics.json says "time limit").
# A run killed for any other reason resumes with the same command plus --resume.
set -euo pipefail
cd "$(dirname "$0")/.."
RUN="${RUN:-runs/shipped}"
PYTHON="${PYTHON:-python}"
STEPS="${STEPS:-3000}"
N_STORIES="${N_STORIES:-150000}"
DEVICE="${DEVICE:-cuda}"
MAX_MINUTES="${MAX_MINUTES:-6}"
# GPUs to spread the four runs over (round robin); one GPU takes all four
read -r -a GPUS <<< "${GPUS:-0}"
mkdir -p "$RUN/notes"
circuitlab() { "$PYTHON" -m circuitlab.cli "$@"; }

# 1. one tokenizer for all four models (byte-level BPE; the story vocabulary saturates near 2.1k tokens,
#    below the 4096 asked for, and every model's d_vocab follows the tokenizer)
if [ ! -f "$RUN/tokenizer.json" ]; then
  circuitlab tokenizer --vocab-size 4096 --n 100000 --seed 0 --out "$RUN/tokenizer.json" --quiet
fi

# 2. the shared corpus cache: N_STORIES training stories (seed 0), 2000 held-out stories (the held-out seed)
circuitlab train --preset sgatlin-stories --out "$RUN/prepare" --tokenizer "$RUN/tokenizer.json" \
  --data-dir "$RUN/data" --n-stories "$N_STORIES" --held-out-stories 2000 --seq-len 256 --prepare-only --quiet

cat > "$RUN/notes/common.md" <<'EOF'
Trained with `circuitlab train` (AdamW, weight decay 0.1 on matrices and the tied embedding, none on
norm scales or other vectors; warmup-stable-decay with 100 warmup steps and square-root decay over the
last 20% of steps; gradient clipping at 2.0 as in seed 000's TinyStories setting; bf16 autocast with
float32 master weights), on @N_STORIES@ generated stories (seed 0), evaluated on 2,000 stories of the
held-out generator seed. The four shipped models share this corpus and this tokenizer; the tokenizer's
vocabulary saturates below the preset's 4096, and d_vocab follows it. Weights are stored in bf16.
EOF
sed -i "s/@N_STORIES@/$N_STORIES/" "$RUN/notes/common.md"
cat > "$RUN/notes/sgatlin-stories.md" <<'EOF'
The shape of seed 000's TinyStories model (4 layers, d_model 256, 4 heads of 64, QK-norm, RoPE, tied
embeddings; sgatlin FFN with 8 channels of N = 1024 neurons, k = 8 per channel, d_key 128), trained
shorter and on the generated story corpus instead of TinyStories.
EOF
cat > "$RUN/notes/gelu-stories.md" <<'EOF'
The same skeleton with a dense GELU MLP of width 1024: the dense baseline of seed 000's TinyStories
comparison, for side-by-side perplexity and fact accuracy.
EOF
cat > "$RUN/notes/legible-stories.md" <<'EOF'
Boolean attention values on all 4 heads (no unbounded minority: seed 002, appendix A, finds small
unbounded minorities diverge) and an NC-FFN of width 1024 with GELU fraction rho 0.75 and 32 sequence
quantifiers; crispness pressure alone (3e-3 on both surfaces), seed 002's recommended readable setting.
The divergence guard keys on the running (median) loss, so isolated spikes from binarised operators
(seed 002, appendix A.3) do not stop the run.
EOF
cat > "$RUN/notes/parity-stories.md" <<'EOF'
The same skeleton (dense GELU MLP of width 1024) with a deep parity bottleneck on every block's FFN
write: m = 2^16 features in d_model 256, k = 32 active features per token, index bits beyond the 8
parent bits split into levels of 4 bits with beams of 16 and 64 (see DESIGN section 5 and the config).
EOF

# 3. the four runs, concurrently on one GPU
pids=()
run_index=0
for name in sgatlin-stories gelu-stories legible-stories parity-stories; do
  gpu="${GPUS[$((run_index % ${#GPUS[@]}))]}"
  run_index=$((run_index + 1))
  { cat "$RUN/notes/$name.md"; echo; cat "$RUN/notes/common.md"; } > "$RUN/notes/$name.card.md"
  CUDA_VISIBLE_DEVICES="$gpu" circuitlab train --preset "$name" --steps "$STEPS" --batch-size 64 --seq-len 256 --lr 1e-3 --warmup 100 \
    --grad-clip 2.0 --eval-every 250 --ckpt-every 500 --n-stories "$N_STORIES" --held-out-stories 2000 \
    --tokenizer "$RUN/tokenizer.json" --data-dir "$RUN/data" --seed 0 --device "$DEVICE" --max-minutes "$MAX_MINUTES" \
    --save-dtype bf16 --card-notes "$RUN/notes/$name.card.md" --quiet --out "$RUN/$name" \
    > "$RUN/$name.log" 2>&1 &
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

# 4. copy the model folders into models/ (weights, config, tokenizer, card, metrics)
for name in sgatlin-stories gelu-stories legible-stories parity-stories; do
  mkdir -p "models/$name"
  cp "$RUN/$name/config.json" "$RUN/$name/model.safetensors" "$RUN/$name/tokenizer.json" \
     "$RUN/$name/card.md" "$RUN/$name/metrics.json" "models/$name/"
done
"$PYTHON" - <<'EOF'
import json
print("| model | held-out ppl | fact accuracy | tokens seen | train time | stopped |")
print("|---|---|---|---|---|---|")
for name in ("sgatlin-stories", "gelu-stories", "legible-stories", "parity-stories"):
    m = json.load(open(f"models/{name}/metrics.json"))
    facts = "n/a" if m["fact_accuracy"] is None else f"{100 * m['fact_accuracy']:.1f}%"
    print(f"| {name} | {m['held_out_ppl']:.3f} | {facts} | {m['tokens_seen']:,} | {m['train_seconds'] / 60:.1f} min | {m['stopped']} |")
EOF
du -ch models/*-stories/model.safetensors | tail -1
