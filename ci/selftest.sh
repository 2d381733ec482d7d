#!/usr/bin/env bash
# sglperf's own test suite, including real SGLang resolution in two release families.
# Usage: ci/selftest.sh [extra pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh 0.5.23 0.5.13
exec .venv/bin/pytest tests deployments --sglang-version=0.5.23 -p no:cacheprovider "$@"
