"""How steady is the tiny CPU server's speed from one measurement to the next, and what steadies it?

The real SGLang 0.5.23 CPU server (tiny Qwen3, variant ``plain`` of ``deployments/tiny-cpu.toml``)
is measured ``--calls`` times in a row with the ``decode-chat`` workload, as the CPU tier does (one
``measure()`` per item, 4 rounds each here), once per OpenMP binding in ``--binds``: SGLang binds its
OpenMP threads to every CPU of the NUMA node by default (``all``: on a 2-CPU box, both), so the
tokenizer, detokenizer and the meter must take a CPU from one of them, and a thread that loses its
CPU stalls the other at the next barrier; ``SGLANG_CPU_OMP_THREADS_BIND=0`` leaves CPU 1 to them.

Per binding: the median ITL over calls, and the spread the CPU tier's two passes would see: the
largest and smallest call medians against the overall median, and the largest ratio between any two
calls (the worst "regression" an unchanged server would show). Host load is counted per round; a
call with a disturbed round (limit 0.03) is reported, not dropped. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path

from sglperf.measure.meter import HostGuard, measure
from sglperf.measure.prompts import load_prompts
from sglperf.model.deployment import load
from sglperf.runtime.host_probe import HostProbe
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang import envs
from sglperf.testing import tiny_models

REPO = Path(__file__).resolve().parents[1]
SGLANG_VERSION = "0.5.23"
BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="measure() calls per binding")
    parser.add_argument("--binds", default="all,0", help="SGLANG_CPU_OMP_THREADS_BIND values, comma-separated")
    args = parser.parse_args(argv)
    python = str(envs.ensure_cpu_env(SGLANG_VERSION).python)
    cache = Path(os.environ.get("SGLPERF_HOME", Path.home() / ".cache" / "sglperf"))
    os.environ["SGLPERF_TINY_MODELS"] = str(tiny_models.ensure(python, cache / "tiny-models"))
    base = load(REPO / "deployments" / "tiny-cpu.toml")
    workload = next(w for w in base.workloads if w.id == "decode-chat").model_copy(update={"repeats": 4})
    prompts = load_prompts(base.path.parent / workload.prompts)
    prompts = dataclasses.replace(prompts, prompts=prompts.prompts[: workload.max_prompts])
    progress = lambda message: print(f"  {message}", file=sys.stderr)  # noqa: E731
    rows = []
    for bind in args.binds.split(","):
        env = {**base.launch.env, BIND_ENV: bind}
        deployment = base.model_copy(update={"launch": base.launch.model_copy(update={"env": env})})
        with tempfile.TemporaryDirectory() as tmp:
            preflight = PreflightSession(lambda: python, progress)
            live = LiveSession(LiveOptions(results_dir=Path(tmp), root=REPO), preflight, progress)
            try:
                running = live.running(deployment, deployment.variant("plain"))
                medians, disturbed = [], 0
                for _ in range(args.calls):
                    result = measure(
                        running.server.base_url,
                        workload,
                        prompts,
                        concurrency=1,
                        host=HostGuard(HostProbe(), limit=math.inf),
                    )
                    medians.append(result.summary["itl_s"].median)
                    disturbed += any(r.host is not None and r.host.disturbed(0.03) for r in result.rounds)
                rows.append((bind, medians, disturbed))
            finally:
                live.close()
                preflight.close()

    command = " ".join(["python", "bench/cpu_server_stability.py", *(argv if argv is not None else sys.argv[1:])])
    print(
        f"`{command}` ({os.cpu_count()} CPUs; real SGLang {SGLANG_VERSION} CPU server, tiny Qwen3 plain, decode-chat: "
        f"{workload.max_prompts} prompts x {workload.output_len} tokens, {workload.repeats} rounds per call)\n"
    )
    print(
        f"| {BIND_ENV} | median ITL | slowest call / median | fastest call / median | slowest / fastest call "
        "| calls with a disturbed round |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for bind, medians, disturbed in rows:
        mid = statistics.median(medians)
        print(
            f"| {bind} | {mid * 1000:.2f} ms | {max(medians) / mid:.2f} | {min(medians) / mid:.2f} "
            f"| {max(medians) / min(medians):.2f} | {disturbed} of {len(medians)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
