#!/usr/bin/env bash
# Sourced by ci/cpu-tier.sh: prepares the real-SGLang-on-CPU tier for this CPU and says in one line what
# will run. Every CPU: the SGLang 0.5.23 environment with no native kernel (tiny-cpu-native.toml) and the
# tiny models, whose folder it exports as SGLPERF_TINY_MODELS. A CPU with AVX-512 also gets the environment
# with SGLang's CPU kernel (tiny-cpu.toml, tiny-cpu-mtp.toml; the wheel from $SGLPERF_SGLANG_CPU_DIR, default
# ../shared/sglang-cpu beside the clone); elsewhere their items skip, saying why.
native_python=$(.venv/bin/sglperf env build 0.5.23 --cpu torch-native)
SGLPERF_TINY_MODELS=$(.venv/bin/python -m sglperf.testing.tiny_models --ensure "$native_python")
export SGLPERF_TINY_MODELS
cpu_kind=$(.venv/bin/python -c 'from sglperf.sglang import cpu_features; print(cpu_features.cpu_kind())')
cpu_problem=$(.venv/bin/python -c 'from sglperf.sglang import cpu_features; print(cpu_features.cpu_kernel_problem() or "")')
if [ -z "$cpu_problem" ]; then
  .venv/bin/sglperf env build 0.5.23 --cpu sgl-kernel >/dev/null
  echo "CPU tier on this CPU ($cpu_kind): tiny-cpu and tiny-cpu-mtp with SGLang's CPU kernel, tiny-cpu-native without" >&2
else
  echo "CPU tier on this CPU ($cpu_kind): tiny-cpu-native only; tiny-cpu and tiny-cpu-mtp skip: $cpu_problem" >&2
fi
