#!/usr/bin/env bash
# Record new baselines after an intentional change (same serving environment as the nightly).
#   SGLANG_PYTHON  the serving environment's python (required)
# Arguments: extra pytest arguments, e.g. `-k qwen36` to refresh one deployment.
# Variants whose effective args are wrong are refused; the run prints what changed per metric.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${SGLANG_PYTHON:?set SGLANG_PYTHON}"
RESULTS_DIR=${RESULTS_DIR:-results/refresh-$(date -u +%Y%m%dT%H%M%SZ)}
bash ci/setup.sh || exit 1
.venv/bin/pytest -m "live or measure" "--sglang-python=$SGLANG_PYTHON" "--results-dir=$RESULTS_DIR" \
  --update-baselines -p no:cacheprovider "$@"
status=$?
git status --short baselines/
exit $status
