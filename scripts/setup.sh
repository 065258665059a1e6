#!/usr/bin/env bash
# Set up circuitlab in ./.venv: torch first, pinned (an unpinned torch requirement would pull a multi-GB CUDA
# build), then the package with everything its commands and dashboard use.
#   bash scripts/setup.sh            # circuitlab (library, commands, dashboard, search)
#   bash scripts/setup.sh dev        # + test tools, notebooks, triton, the docs site
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
TORCH_VERSION="${CIRCUITLAB_TORCH:-2.13.0}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q "torch==${TORCH_VERSION}"
fi
.venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
echo "circuitlab is installed in .venv${extras:+ (extras: $extras)}; activate it with: . .venv/bin/activate"
