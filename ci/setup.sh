#!/usr/bin/env bash
# Set up sglperf on a fresh machine: the harness in .venv, plus managed SGLang environments for
# the releases given as arguments (each: a venv with that release's light pins; torch shared).
# Idempotent: a warm machine re-uses everything (environments live in ~/.cache/sglperf).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
for version in "$@"; do
  .venv/bin/sglperf env build "$version" >/dev/null
done
