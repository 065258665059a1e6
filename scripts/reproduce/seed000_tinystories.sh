#!/usr/bin/env bash
# Train seed 000's TinyStories model with the paper's settings (appendix B.1.2): sgatlin FFNs, 4 layers,
# d_model 256, 4 heads of 64, context 1024, batch 256 sequences, a byte-level BPE of 8,192 tokens trained on
# the data, AdamW (lr 1e-3, weight decay 0.1), warmup-stable-decay with 100 warm-up steps and square-root decay
# over the last 20%, gradients clipped at 2.0. The paper does not give the number of steps; the default, 1,800
# steps of 262,144 tokens, is about one pass over TinyStories' training split.
#
#   bash scripts/reproduce/seed000_tinystories.sh                       # from the hub (needs internet), one GPU
#   GPUS=8 bash scripts/reproduce/seed000_tinystories.sh                # eight GPUs of one host (torchrun, DDP)
#   DATASET=/data/tinystories bash scripts/reproduce/seed000_tinystories.sh   # a local copy: a save_to_disk
#                                                                       # folder or a folder of parquet/jsonl files
#   TINY=1 OUT=/tmp/t bash scripts/reproduce/seed000_tinystories.sh     # the same script end to end on a tiny
#                                                                       # dataset it makes here (CI, no internet)
# Settings (environment): DATASET, SPLIT, OUT, STEPS, GPUS, PYTHON, WORKERS, TINY.
#
# The documents are streamed into uint16 token shards under OUT/data (resumable: run the script again after
# a kill and it continues the tokenization, then the training with --resume). The run keeps the weights of its
# lowest validation loss; OUT is a model folder (load_model(OUT), circuitlab demo OUT) with a card that
# records the data source, the tokens seen and the passes over the training data.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-python}"
DATASET="${DATASET:-roneneldan/TinyStories}"
SPLIT="${SPLIT:-train}"
OUT="${OUT:-runs/seed000-tinystories}"
STEPS="${STEPS:-1800}"
GPUS="${GPUS:-1}"
WORKERS="${WORKERS:-0}"
SIZES=(--batch-size 256 --seq-len 1024 --vocab-size 8192 --eval-every 200 --ckpt-every 200)
DEVICE=(--device auto)
if [ "${TINY:-0}" = "1" ]; then
  # a tiny dataset in the layout researchers download (a folder of jsonl files), made from generated stories
  DATASET="$OUT/tiny-dataset"
  mkdir -p "$DATASET"
  if [ ! -f "$DATASET/stories.jsonl" ]; then
    "$PYTHON" -m circuitlab.cli corpus --n 600 --seed 7 --out "$DATASET/stories.jsonl" --quiet
  fi
  STEPS=4
  SIZES=(--batch-size 8 --seq-len 64 --vocab-size 512 --eval-every 2 --ckpt-every 2 --shard-documents 200 --threads 2)
  DEVICE=(--device cpu)
fi
ARGS=(train --preset seed000-tinystories --hf-dataset "$DATASET" --hf-split "$SPLIT" --streaming --workers "$WORKERS"
      "${SIZES[@]}" --steps "$STEPS" --lr 1e-3 --weight-decay 0.1 --warmup 100 --decay-fraction 0.2 --grad-clip 2.0
      --held-out-fraction 0.01 --validation-fraction 0.01 "${DEVICE[@]}" --out "$OUT")
if [ "${TINY:-0}" = "1" ]; then ARGS+=(--quiet); fi
RESUME=()
if [ -f "$OUT/checkpoints/latest.json" ]; then RESUME=(--resume); fi
if [ "$GPUS" -gt 1 ]; then
  # rank 0 tokenizes, the others wait for the shards; every rank then reads them memory-mapped
  "$PYTHON" -m circuitlab.cli "${ARGS[@]}" --prepare-only
  "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$GPUS" -m circuitlab.cli "${ARGS[@]}" "${RESUME[@]}"
else
  "$PYTHON" -m circuitlab.cli "${ARGS[@]}" "${RESUME[@]}"
fi
"$PYTHON" - "$OUT" <<'PY'
import json, sys
metrics = json.load(open(f"{sys.argv[1]}/metrics.json"))
print(f"seed 000 TinyStories model in {sys.argv[1]}: {metrics['steps']} steps, {metrics['tokens_seen']:,} tokens "
      f"({metrics['epochs']:.2f} passes), held-out loss {metrics['held_out_loss']:.3f} nats/token, validation loss "
      f"{metrics['validation_loss']:.3f} (step {metrics['selected_step']})")
PY
