#!/usr/bin/env bash
# The longer half of sglperf's own CI: what .ci/run leaves out to keep its margin (docs/ci.md lists each test
# and what .ci/run keeps of its path). Run nightly by ci/workflows/selftest-long.yml, and by hand before a
# release. 1. the tests marked `long`; 2. the CPU tier in full: every variant recorded, then compared.
# Usage: ci/selftest-long.sh [extra pytest args...]
set -uo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh 0.5.23 0.5.13 0.5.19 0.5.20 || exit 1
.venv/bin/pytest tests --sglang-version=0.5.23 -p no:cacheprovider -n 2 -m long "$@"
status=$?
[ "$status" -eq 5 ] && { echo "no test is marked long: failing the run" >&2; status=1; }
bash ci/cpu-tier.sh "$@"
cpu_status=$?
[ "$cpu_status" -eq 5 ] && { echo "the CPU tier collected no tests: failing the run" >&2; cpu_status=1; }
[ "$status" -eq 0 ] && [ "$cpu_status" -eq 0 ]
