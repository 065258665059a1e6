#!/usr/bin/env bash
# Set up everything the tests need, then run the fast suite on every core (kernel tests under TRITON_INTERPRET=1).
#   bash scripts/test.sh            # the fast suite (minutes)
#   bash scripts/test.sh --slow     # the slow end-to-end tests: notebooks, demo, dashboard, wheel, torchrun, browser
# Other arguments go to pytest (e.g. tests/analysis -k lookup).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # PNG export (kaleido) and the dashboard's browser test drive Debian's headless Chromium
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: its tests will skip"
fi
export TRITON_INTERPRET=1
exec .venv/bin/python -m pytest -q -n auto "$@"
