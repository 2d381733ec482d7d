#!/usr/bin/env bash
# Set up sglperf on a fresh machine: the harness in .venv, plus managed SGLang environments for
# the releases given as arguments (each: a venv with that release's light pins; torch shared).
# Idempotent: a warm machine re-uses everything (environments live in ~/.cache/sglperf).
# Nothing here needs root: PostgreSQL, which only sglperf's own tests use, is installed by ci/selftest.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# pip resolves every requirement again when nothing changed (6 s alone on a 2-CPU VM, 12 s beside a
# test run, on every nightly run): the editable install is redone only when pyproject.toml differs from
# the last one installed.
# Remove .venv/.sglperf-installed to force it.
stamp=.venv/.sglperf-installed
wanted=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  # uv installs the harness in about 9 s where pip took 38 s (bench/harness_install.py, 2-CPU VM): every
  # CI run starts with a fresh .venv. uv reads no pip configuration, so pip, which does (a private index),
  # is the fallback. This machine's pip configuration names local package folders that may be absent;
  # pip warns about each on every call, which buries real errors. uv writes no bytecode unless asked (pip
  # does), and with PYTHONDONTWRITEBYTECODE set no import writes any: every test's subprocess would compile
  # the harness's dependencies and sglperf's own modules again (bench/bytecode.py measures the same cost
  # for an SGLang environment).
  if ! { .venv/bin/python -m pip install -q --disable-pip-version-check uv 2> >(grep -v "^WARNING: Location" >&2) \
    && .venv/bin/uv pip install -q --compile-bytecode --python .venv/bin/python -e '.[test]'; }; then
    echo "setup: uv could not install the harness; installing it with pip" >&2
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]' 2> >(grep -v "^WARNING: Location" >&2)
  fi
  .venv/bin/python -m compileall -q -j 0 src > /dev/null
  echo "$wanted" > "$stamp"
fi
for version in "$@"; do
  .venv/bin/sglperf env build "$version" >/dev/null
done
