#!/usr/bin/env bash
# Set up everything the tests need, then run the whole suite (kernel tests under TRITON_INTERPRET=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  # the dashboard screenshot test renders the app in Debian's headless Chromium
  (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: its test will skip"
fi
export TRITON_INTERPRET=1
exec .venv/bin/python -m pytest -q "$@"
