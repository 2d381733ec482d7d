#!/usr/bin/env bash
# sglperf's own test suite: lint and types, then the tests, with real SGLang resolution in three
# releases (0.5.13: boolean flags; 0.5.19: the last that deprecates them; 0.5.23: backend config).
# The shipped deployments are checked through tests/ (their expected verdicts, the inert one
# included), not collected directly: qwen36's mtp3-full is red on purpose.
# Usage: ci/selftest.sh [extra pytest args...]      (fast tier: ci/selftest.sh -m "not needs_sglang",
# which is tests/unit and tests/integration; tests/sglang needs the SGLang environments)
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh 0.5.23 0.5.13 0.5.19
.venv/bin/ruff check src tests bench examples conftest.py
.venv/bin/ruff format --check src tests bench examples conftest.py
.venv/bin/mypy
exec .venv/bin/pytest tests --sglang-version=0.5.23 -p no:cacheprovider "$@"
