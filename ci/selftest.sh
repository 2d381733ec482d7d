#!/usr/bin/env bash
# sglperf's own test suite: lint and types, then the tests, with real SGLang resolution in four
# releases (0.5.13: boolean flags; 0.5.19: the last that deprecates them; 0.5.20: the release that raised
# the decode graph's batch cap for 20-35 GB GPUs; 0.5.23: backend config).
# The shipped deployments are checked through tests/ (their expected verdicts, the inert one
# included), not collected directly: qwen36's mtp3-full is red on purpose.
# Tests marked `long` are left out: ci/selftest-long.sh runs them (docs/ci.md lists them, and what this run
# keeps of each path). A -m of your own replaces that selection.
# Usage: ci/selftest.sh [extra pytest args...]   (-n 0: one test at a time; fast tier: .venv/bin/pytest tests/unit)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh 0.5.23 0.5.13 0.5.19 0.5.20 0.5.15 0.5.16
# A PostgreSQL server for the history-store tests (they start their own cluster with its binaries): only
# these tests need it, so the main job (ci/preflight.sh, through ci/setup.sh) does not install it.
if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
      || echo "selftest: could not install postgresql; the PostgreSQL history-store tests will skip" >&2
  else
    echo "selftest: PostgreSQL is not installed; the PostgreSQL history-store tests will skip" >&2
  fi
fi
# Slurm and MUNGE for the Slurm launcher's tests (each starts a single-node cluster of its own).
bash ci/slurm.sh install
# Headless Chromium for the docs site as a reader's browser shows it (tests/integration/test_docs_site.py
# drives Debian's package through playwright; Playwright's own browser download does not work here).
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "selftest: could not install chromium; the docs site test will skip" >&2
  else
    echo "selftest: chromium is not installed; the docs site test will skip" >&2
  fi
fi
.venv/bin/ruff check src tests bench examples ci conftest.py docs/hooks.py
.venv/bin/ruff format --check src tests bench examples ci conftest.py docs/hooks.py
.venv/bin/mypy
# The docs site, as a reader gets it: a dead link or a page outside the nav fails the build.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
# Two workers: most tests wait on processes, not the CPU; those that measure a server's speed are
# marked quiet_host and run alone (tests/support/quiet_host.py).
exec .venv/bin/pytest tests --sglang-version=0.5.23 -p no:cacheprovider -n 2 -m "not long" "$@"
