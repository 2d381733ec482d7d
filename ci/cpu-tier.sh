#!/usr/bin/env bash
# The live and measure tiers against a real SGLang 0.5.23 server on this CPU (no GPU), plus the emulator
# contract test (the same probes against the real server and the emulator). On every x86-64 CPU: the server
# with no native kernel (tiny-cpu-native.toml); with AVX-512 also SGLang's CPU kernel (tiny-cpu.toml,
# tiny-cpu-mtp.toml, AMX used where present), whose items skip elsewhere saying why. ci/cpu-env.sh says which.
# CPU timings move with the machine and its load, so baselines are recorded by this run and then
# compared against (results/cpu-baselines/cpu/...), never against numbers from another machine.
# Usage: ci/cpu-tier.sh [--quick] [pytest args...]     JUnit XML: results/cpu-tier-record.xml, results/cpu-tier.xml
#   --quick (.ci/run): the second pass compares no deployment item; the CPU-server tests' own record -> compare
#   (test_baseline_recorded_then_compared_as_cpu_numbers) is then the real server's comparison path. Every
#   variant compared again is ci/selftest-long.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
if [ "${1:-}" = "--quick" ]; then
  quick=true
  shift
fi
bash ci/setup.sh 0.5.23
# The Slurm replicas of tests/sglang/test_cpu_topology.py (they skip, saying why, where it cannot be installed).
bash ci/slurm.sh install
source ci/cpu-env.sh
baselines=${CPU_BASELINES_DIR:-results/cpu-baselines}
mkdir -p results
# examples/ (users' own tests on the fixtures) run on the torch-compile variant, the one whose decode
# graph is on, as examples/test_effective_args.py expects of a deployment.
export SGLPERF_EXAMPLE_DEPLOYMENT=tiny-cpu
# 1. every live and measure item, recording the baselines (tiny-cpu-replicas.toml: two servers behind SGLang's
#    router); and the variant effects of tiny-cpu-effects.toml (an A/A pair and a capped batch against plain, on
#    any x86-64 CPU), whose floors hold within one run only, so the second pass leaves it out
.venv/bin/pytest deployments/tiny-cpu.toml deployments/tiny-cpu-mtp.toml deployments/tiny-cpu-native.toml \
  deployments/tiny-cpu-effects.toml deployments/tiny-cpu-replicas.toml examples -k "not examples or torch-compile" \
  --sglang-version=0.5.23 -p no:cacheprovider --update-baselines --baselines-dir="$baselines" \
  --junit-xml=results/cpu-tier-record.xml "$@"
# 2. the measurements again, compared with those baselines; the CPU-server tests, the emulator contract, a
#    bisect between two releases on real CPU servers, and the topology tests (replicas that differ, attached;
#    the replicas as Slurm job steps)
if $quick; then
  exec .venv/bin/pytest tests/sglang/test_cpu_server.py tests/sglang/test_emulator_contract.py \
    tests/sglang/test_cpu_bisect.py tests/sglang/test_cpu_topology.py --sglang-version=0.5.23 -p no:cacheprovider \
    --junit-xml=results/cpu-tier.xml "$@"
fi
exec .venv/bin/pytest deployments/tiny-cpu.toml deployments/tiny-cpu-mtp.toml deployments/tiny-cpu-native.toml \
  deployments/tiny-cpu-replicas.toml examples tests/sglang/test_cpu_server.py tests/sglang/test_emulator_contract.py \
  tests/sglang/test_cpu_bisect.py tests/sglang/test_cpu_topology.py \
  -m "measure or needs_sglang" \
  -k "not examples or torch-compile" \
  --sglang-version=0.5.23 -p no:cacheprovider --baselines-dir="$baselines" \
  --junit-xml=results/cpu-tier.xml "$@"
