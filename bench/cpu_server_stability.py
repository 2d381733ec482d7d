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
import math
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.measure.meter import HostGuard, measure
from sglperf.runtime.host_probe import HostProbe
from sglperf.sglang.cpu_envs import CPU_OMP_BIND_ENV

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu

DISTURBED_AT = 0.03  # stricter than the suite's default: a call with anything beside it shows here


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20, help="measure() calls per binding")
    parser.add_argument("--binds", default="all,0", help=f"{CPU_OMP_BIND_ENV} values, comma-separated")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    python, _ = tiny_cpu.set_up()
    workload, prompts = tiny_cpu.decode_chat(tiny_cpu.deployment(), repeats=4)
    rows = []
    for bind in args.binds.split(","):
        deployment = tiny_cpu.deployment(bind)
        with tempfile.TemporaryDirectory() as tmp, tiny_cpu.running(deployment, "plain", python, Path(tmp)) as running:
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
                disturbed += any(r.host is not None and r.host.disturbed(DISTURBED_AT) for r in result.rounds)
            rows.append((bind, medians, disturbed))

    command = _docs_table.command(__file__, argv)
    print(
        f"`{command}` ({os.cpu_count()} CPUs; real SGLang {tiny_cpu.SGLANG_VERSION} CPU server, tiny Qwen3 plain, "
        "decode-chat: "
        f"{workload.max_prompts} prompts x {workload.output_len} tokens, {workload.repeats} rounds per call)\n"
    )
    print(
        f"| {CPU_OMP_BIND_ENV} | median ITL | slowest call / median | fastest call / median | slowest / fastest call "
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
    sys.exit(_docs_table.run_script(__file__, main))
