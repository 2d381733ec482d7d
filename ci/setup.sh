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
# This machine's pip configuration names local package folders that may be absent; pip warns about
# each on every call, which buries real errors.
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2> >(grep -v "^WARNING: Location" >&2)
for version in "$@"; do
  .venv/bin/sglperf env build "$version" >/dev/null
done
