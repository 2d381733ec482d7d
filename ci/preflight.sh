#!/usr/bin/env bash
# The main job on any machine: what SGLang will actually do with every shipped deployment's flags.
# Usage: ci/preflight.sh [SGLANG_VERSION] [extra sglperf preflight args...]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-0.5.23}
shift || true
bash ci/setup.sh "$version"
exec .venv/bin/sglperf preflight --sglang-version "$version" "$@"
