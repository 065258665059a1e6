#!/usr/bin/env bash
# README screenshots of the dashboard: make (or reuse) the demo run folder of a shipped model, then serve
# the dashboard on a free localhost port and photograph every page with headless Chromium into
# docs/screenshots/<page>.png.
#   bash scripts/screenshots.sh                      # sgatlin-stories
#   bash scripts/screenshots.sh legible-stories      # any shipped model or model folder
# Environment: PYTHON (default .venv/bin/python, else python3), RUNS (default runs), OUT (default
# docs/screenshots), WINDOW (default 1400,1000).
set -euo pipefail
cd "$(dirname "$0")/.."
model="${1:-sgatlin-stories}"
runs="${RUNS:-runs}"
out="${OUT:-docs/screenshots}"
window="${WINDOW:-1400,1000}"
python="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
if ! command -v chromium >/dev/null 2>&1; then
  echo "chromium is not installed (Debian: apt-get install chromium)" >&2
  exit 1
fi
"$python" -m circuitlab.cli demo "$model" --runs "$runs" --no-serve
name="$(basename "$model")"
"$python" apps/screenshots.py --run "$runs/$name" --out "$out" --window "$window"
