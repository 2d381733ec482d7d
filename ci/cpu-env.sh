#!/usr/bin/env bash
# Sourced by ci/selftest.sh and ci/cpu-tier.sh: prepares the real-SGLang-on-CPU tier when this CPU can
# run it (AVX-512): the SGLang 0.5.23 CPU environment (the kernel wheel from
# $SGLPERF_SGLANG_CPU_DIR, default ../shared/sglang-cpu beside the clone) and the tiny models, whose
# folder it exports as SGLPERF_TINY_MODELS. Otherwise the tier's items skip, saying why.
cpu_problem=$(.venv/bin/python -c 'from sglperf.sglang import envs; print(envs.cpu_kernel_problem() or "")')
if [ -z "$cpu_problem" ]; then
  cpu_python=$(.venv/bin/sglperf env build 0.5.23 --cpu)
  SGLPERF_TINY_MODELS=$(.venv/bin/python -m sglperf.testing.tiny_models --ensure "$cpu_python")
  export SGLPERF_TINY_MODELS
else
  echo "CPU tier will skip: $cpu_problem" >&2
fi
