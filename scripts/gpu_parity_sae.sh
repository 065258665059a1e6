#!/usr/bin/env bash
# The parity bottleneck beside top-k sparse autoencoders (Gao et al. 2024) of the same m and k: one autoencoder
# per layer trained on the GELU model's FFN writes over the natural stories' training split, then both codes
# measured on the parity report's held-out tokens by `circuitlab report sae` (circuitlab.analysis.sae_compare).
#
#   bash scripts/gpu_parity_sae.sh OUTPUT [PARITY_MODEL [GELU_MODEL]]
#
#   bash scripts/gpu_parity_sae.sh "$OUT"                          # one H200: m 2^16, k 16, d 256, 4 layers
#   bash scripts/gpu_parity_sae.sh "$OUT" runs/parity/parity-stories models/gelu-stories
#                                         # beside a parity model retrained by scripts/gpu_parity.sh
#   TINY=1 bash scripts/gpu_parity_sae.sh /tmp/parity-sae           # the same end to end on CPU with tiny
#                                         # random models it makes (m 2^10, k 8, d 64, 2 layers)
#
# Run from anywhere; paths are relative to the repository root. OUTPUT defaults to $OUT (then $RESULTS); the
# models default to models/parity-stories and models/gelu-stories. Everything is written under OUTPUT:
# OUTPUT/sae/layer_<l>/ (sae.json: settings, training record and loss log; sae.safetensors), OUTPUT/sae_comparison.json,
# OUTPUT/sae_comparison.md and OUTPUT/report_sae.log. Copy the .json and .md into results/parity/ for the
# dashboard's Parity page and the docs. Calling it again loads the autoencoders already trained (a run stopped
# between layers carries on with the next) and measures again.
#
# Settings (environment): DEVICE (cuda), STEPS (2000 per autoencoder), SAE_BATCH (4096 writes a step), LR (5e-4),
# WARMUP (100), DEAD_AFTER (1048576 tokens), TRAIN_TOKENS (empty: the whole training split), REPORT_TOKENS
# (65536, as the parity report), SEQ_LEN (256), BATCH (16 windows a forward pass), PROBE_STORIES (400),
# PROBE_MAX_ITER (500), NATURAL (data/natural), PYTHON (python3), TINY (1: tiny models and sizes on the CPU).
#
# Token budget, full size (chosen to finish in under 4 minutes on one H200; measured: 400 s on one H200 that three
# training runs shared at the same time):
# 2000 steps x 4096 writes = 8.2M training writes per autoencoder. The natural training split is about 0.65M
# tokens, so that is about 12 passes over it: every one of the m = 65,536 latents sees each write ~12 times,
# and with dead_after = 2^20 tokens (256 steps) a latent has 7 windows in which to be counted dead and revived
# by AuxK. A step is dominated by the encoder's [4096 x 256] @ [256 x 65536] product and its gradient (~0.3 TFLOP
# with the top-k and AuxK top-k over the 4096 x 65536 pre-activations); in TF32 (the command turns it on for
# CUDA) that is ~10-15 ms, so ~20-30 s per layer and ~2 minutes for the 4 layers. Collecting the 4 x 0.65M
# writes, the measurement on 65,536 held-out tokens (5 + 5 forward passes of a 4-layer d-256 model) and the 16
# probes (CPU, one BLAS thread, at most PROBE_MAX_ITER L-BFGS steps each, ~29k labelled tokens of 400 stories)
# take the remaining ~1-1.5 min: on a shared 2-core CPU one probe of an m = 2^16, k = 16 code on 29k tokens took
# 5-10 s and one on the 256-dim raw write 2 s (synthetic codes, 14 classes).
# Gao et al. train on far more tokens; more steps buy a better autoencoder, so raise STEPS when there is time
# (the script prints its total seconds; `python3 benchmarks/sae_step_time.py --device cuda` measures the seconds
# per step alone: scale STEPS from there).
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS="${1:-${OUT:-${RESULTS:-}}}"
: "${RESULTS:?give the output folder as the first argument (or set OUT)}"
PYTHON="${PYTHON:-python3}"
mkdir -p "$RESULTS"
# circuitlab's own dependencies must be importable by $PYTHON (a bare GPU image has torch but may lack these)
"$PYTHON" -c "import circuitlab, transformer_lens, sklearn, scipy, pydantic, safetensors" || {
  echo "$PYTHON cannot import circuitlab and its dependencies (transformer-lens 4.3, scikit-learn, scipy, pydantic," \
       "safetensors): install the package (pip install -e .) or set PYTHON to its environment's python" >&2; exit 2; }

if [ "${TINY:-0}" = "1" ]; then
  # tiny random-weight parity and GELU models with the shipped tokenizer (same seed, so same shapes and tokens)
  "$PYTHON" - "$RESULTS" <<'EOF'
import sys
from pathlib import Path

from circuitlab import CircuitTransformer, ModelConfig
from circuitlab.data.tokenizer import CircuitTokenizer
from circuitlab.resources import models_root

tokenizer = CircuitTokenizer.from_file(models_root() / "sgatlin-stories" / "tokenizer.json")
for name in ("tiny-parity", "tiny-gelu"):
    folder = Path(sys.argv[1]) / name
    if not (folder / "config.json").is_file():
        model = CircuitTransformer(ModelConfig.preset(name, d_vocab=tokenizer.vocab_size), tokenizer=tokenizer)
        model.reset_parameters(seed=0)
        model.save(folder)
EOF
  DEFAULT_PARITY="$RESULTS/tiny-parity"; DEFAULT_GELU="$RESULTS/tiny-gelu"; DEVICE="${DEVICE:-cpu}"
  STEPS="${STEPS:-60}"; SAE_BATCH="${SAE_BATCH:-256}"; LR="${LR:-3e-3}"; WARMUP="${WARMUP:-6}"
  DEAD_AFTER="${DEAD_AFTER:-4096}"; TRAIN_TOKENS="${TRAIN_TOKENS:-16384}"; REPORT_TOKENS="${REPORT_TOKENS:-1024}"
  SEQ_LEN="${SEQ_LEN:-64}"; BATCH="${BATCH:-8}"; PROBE_STORIES="${PROBE_STORIES:-30}"
fi
PARITY="${2:-${DEFAULT_PARITY:-models/parity-stories}}"
GELU="${3:-${DEFAULT_GELU:-models/gelu-stories}}"
DEVICE="${DEVICE:-cuda}"
STEPS="${STEPS:-2000}"
SAE_BATCH="${SAE_BATCH:-4096}"
LR="${LR:-5e-4}"
WARMUP="${WARMUP:-100}"
DEAD_AFTER="${DEAD_AFTER:-1048576}"
TRAIN_TOKENS="${TRAIN_TOKENS:-}"
REPORT_TOKENS="${REPORT_TOKENS:-65536}"
SEQ_LEN="${SEQ_LEN:-256}"
BATCH="${BATCH:-16}"
PROBE_STORIES="${PROBE_STORIES:-400}"
PROBE_MAX_ITER="${PROBE_MAX_ITER:-500}"
NATURAL="${NATURAL:-data/natural}"
train_tokens=(); [ -n "$TRAIN_TOKENS" ] && train_tokens=(--train-tokens "$TRAIN_TOKENS")
quiet=(); [ "$DEVICE" != "cpu" ] || quiet=(--quiet)

started=$(date +%s)
PYTHONUNBUFFERED=1 "$PYTHON" -m circuitlab.cli report sae "$PARITY" --gelu "$GELU" --sae-dir "$RESULTS/sae" \
  --steps "$STEPS" --sae-batch-size "$SAE_BATCH" --lr "$LR" --warmup "$WARMUP" --dead-after "$DEAD_AFTER" \
  "${train_tokens[@]}" --tokens "$REPORT_TOKENS" --seq-len "$SEQ_LEN" --batch-size "$BATCH" \
  --probe-stories "$PROBE_STORIES" --probe-max-iter "$PROBE_MAX_ITER" --natural "$NATURAL" --device "$DEVICE" \
  "${quiet[@]}" --json "$RESULTS/sae_comparison.json" --markdown "$RESULTS/sae_comparison.md" \
  2>&1 | tee "$RESULTS/report_sae.log"
echo "report sae took $(( $(date +%s) - started )) s on $DEVICE" | tee -a "$RESULTS/report_sae.log"
