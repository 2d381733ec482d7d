#!/usr/bin/env bash
# Before and after an SGLang upgrade on a GPU runner.
#   TARGET_VERSION  the release to upgrade to (required)
#   SGLANG_PYTHON   the serving environment in use now (required)
#   TARGET_ENV      where to install the target release (default: ~/sglang-$TARGET_VERSION)
# 1. upgrade-check: the deployments under both releases, side by side (no GPU needed);
# 2. installs the target release into its own serving environment (full install, GPU packages included);
# 3. runs the live suite with it against the current baselines (ci/nightly.sh; arguments go to pytest).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${TARGET_VERSION:?set TARGET_VERSION}" "${SGLANG_PYTHON:?set SGLANG_PYTHON}"
TARGET_ENV=${TARGET_ENV:-$HOME/sglang-$TARGET_VERSION}
bash ci/setup.sh || exit 1
.venv/bin/sglperf upgrade-check --sglang-python "$SGLANG_PYTHON" --to "$TARGET_VERSION"
check_status=$?
if [ ! -x "$TARGET_ENV/bin/python" ]; then
  python3 -m venv "$TARGET_ENV" && "$TARGET_ENV/bin/pip" install -q "sglang==$TARGET_VERSION" || exit 1
fi
SGLANG_PYTHON="$TARGET_ENV/bin/python" RESULTS_DIR=${RESULTS_DIR:-results/upgrade-$TARGET_VERSION} bash ci/nightly.sh "$@"
live_status=$?
[ "$check_status" -eq 0 ] && [ "$live_status" -eq 0 ]
