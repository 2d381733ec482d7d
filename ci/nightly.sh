#!/usr/bin/env bash
# Nightly run on a GPU runner: preflight, then live checks and measurements against the baselines,
# then the report (markdown + plots) into the results folder and, in GitHub Actions, the job summary.
#
# Environment:
#   SGLANG_PYTHON   interpreter of the serving environment on the runner (required unless SGLANG_VERSION)
#   SGLANG_VERSION  use sglperf's managed environment instead (CPU-side resolution only: with --emulator)
#   RESULTS_DIR     default results/nightly-<UTC time>
#   SGLPERF_HISTORY the run-history store (default: ~/.local/share/sglperf/history.sqlite, outside the
#                   checkout; a postgresql:// URL for a fleet). Each run is recorded there, and drift and
#                   "failing since" are read from it. SGLPERF_RUN_ID names the run (default: UTC time).
# Arguments: extra pytest arguments, e.g. `-k qwen36`, or `--emulator` for a dry run without GPUs.
# Exit status: non-zero if preflight or the live suite failed, or the report could not be written (it is
# attempted either way).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS_DIR=${RESULTS_DIR:-results/nightly-$(date -u +%Y%m%dT%H%M%SZ)}
if [ -n "${SGLANG_PYTHON:-}" ]; then
  bash ci/setup.sh || exit 1
  interp=("--sglang-python=$SGLANG_PYTHON")
elif [ -n "${SGLANG_VERSION:-}" ]; then
  bash ci/setup.sh "$SGLANG_VERSION" || exit 1
  interp=("--sglang-version=$SGLANG_VERSION")
else
  echo "set SGLANG_PYTHON (the serving environment's python) or SGLANG_VERSION" >&2
  exit 2
fi
mkdir -p "$RESULTS_DIR"

echo "== preflight"
.venv/bin/sglperf preflight "${interp[@]}" | tee "$RESULTS_DIR/preflight.txt"
preflight_status=${PIPESTATUS[0]}

echo "== live checks and measurements"
.venv/bin/pytest -m "live or measure" "${interp[@]}" "--results-dir=$RESULTS_DIR" \
  "--junit-xml=$RESULTS_DIR/junit.xml" -p no:cacheprovider "$@"
live_status=$?

echo "== report"
# `sglperf report` prints the path it wrote; an earlier run's report.md in a reused folder is not this one.
if report=$(.venv/bin/sglperf report "$RESULTS_DIR") && [ -n "$report" ] && [ -f "$report" ]; then
  report_status=0
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    cat "$report" >> "$GITHUB_STEP_SUMMARY"
  fi
  echo "report: $report"
else
  report_status=1
  echo "report: FAILED, no report written for $RESULTS_DIR (see the error above)" >&2
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    echo "sglperf: the report for $RESULTS_DIR could not be written; see the job log" >> "$GITHUB_STEP_SUMMARY"
  fi
fi
[ "$preflight_status" -eq 0 ] && [ "$live_status" -eq 0 ] && [ "$report_status" -eq 0 ]
