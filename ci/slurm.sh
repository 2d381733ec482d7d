#!/usr/bin/env bash
# Slurm and MUNGE for the Slurm launcher's tests (tests/integration/test_slurm_steps.py): they start a
# single-node cluster of their own from these packages (tests/support/slurm_cluster.py), as root, with a
# private configuration; nothing here configures or starts a daemon. Where the packages cannot be
# installed, this says so in one line and succeeds: those tests then skip, with the reason.
# Usage: ci/slurm.sh install
set -euo pipefail
case "${1:-}" in
  install) ;;
  *) echo "usage: ci/slurm.sh install" >&2; exit 2 ;;
esac
have() { command -v "$1" >/dev/null || [ -x "/usr/sbin/$1" ]; }
if have slurmctld && have slurmd && have srun && have munged; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm slurm-client munge >/dev/null) \
    || echo "slurm: could not install slurm-wlm, slurm-client and munge; the Slurm launcher tests will skip" >&2
else
  echo "slurm: Slurm is not installed (needs root and apt-get to install); the Slurm launcher tests will skip" >&2
fi
exit 0
