"""What a busy neighbour does to a measurement, and does the busy-host check see it?

A real SGLang 0.5.23 server on this CPU (the tiny Qwen3, variant ``plain`` of
``deployments/tiny-cpu.toml``, launched as the suite launches it) is measured with the
``decode-chat`` workload, ``--rounds`` rounds per condition, while other processes that are not
sglperf's (busy loops adopted by init, `sglperf.testing.neighbours`) take the CPU: none, one loop
busy a fifth of the time, one fully busy loop, and one per CPU. Each round's ITL and the probe's
reading (`sglperf.runtime.host_probe`) are kept; no round is dropped here, so the table
shows, per condition:

* the median ITL against the quiet rounds' median (what a neighbour would be blamed on SGLang for);
* the median share of the machine's CPU the probe counted as taken by others;
* how many rounds each of ``--limits`` would drop and run again.

``--bind all`` measures the server with SGLang's own OpenMP binding (every CPU), much more sensitive
to a neighbour than the tiny-cpu deployments' binding to CPU 0.

A quiet row's dropped share is the check's false alarms (a quiet round run again for nothing); the
loaded rows' is its detection. Prints a markdown table headed by the command line.
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
from sglperf.model.host_load import DEFAULT_MAX_HOST_LOAD
from sglperf.runtime.host_probe import HostProbe
from sglperf.sglang.cpu_envs import CPU_OMP_BIND_ENV
from sglperf.testing.neighbours import foreign_spinners

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu

CPUS = os.cpu_count() or 1
# (label, busy loops, share of the time each is busy)
CONDITIONS = (
    ("quiet", 0, 1.0),
    ("1 loop, busy 20% of the time", 1, 0.2),
    ("1 busy loop", 1, 1.0),
    (f"{CPUS} busy loops (one per CPU)", CPUS, 1.0),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="rounds per condition")
    parser.add_argument("--limits", default=f"{DEFAULT_MAX_HOST_LOAD:g},0.03", help="max host loads to apply")
    parser.add_argument(
        "--bind", help=f"{CPU_OMP_BIND_ENV} for the server (default: the deployment's; 'all' is SGLang's own default)"
    )
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    limits = [float(x) for x in args.limits.split(",")]
    python, _ = tiny_cpu.set_up()
    deployment = tiny_cpu.deployment(args.bind)
    workload, prompts = tiny_cpu.decode_chat(deployment, args.rounds)
    rows = []
    with tempfile.TemporaryDirectory() as tmp, tiny_cpu.running(deployment, "plain", python, Path(tmp)) as running:
        for label, loops, duty in CONDITIONS:
            with foreign_spinners(loops, duty):
                result = measure(
                    running.server.base_url,
                    workload,
                    prompts,
                    concurrency=1,
                    host=HostGuard(HostProbe(), limit=math.inf),  # counted, never dropped
                )
            # Per round, the median ITL of its requests; a request starved into a single chunk has none.
            itl = [
                statistics.median(values)
                for r in result.rounds
                if (values := [s.itl_s for s in result.samples if s.repeat == r.round and s.itl_s is not None])
            ]
            loads = [r.host for r in result.rounds if r.host is not None]
            rows.append((label, itl, loads))
            tiny_cpu.progress(f"{label}: done")

    command = _docs_table.command(__file__, argv)
    quiet_itl = statistics.median(rows[0][1])
    print(
        f"`{command}` ({CPUS} CPUs; real SGLang {tiny_cpu.SGLANG_VERSION} CPU server, tiny Qwen3 plain, "
        f"{CPU_OMP_BIND_ENV}={deployment.launch.env.get(CPU_OMP_BIND_ENV, 'all')}, decode-chat: "
        f"{workload.max_prompts} prompts x {workload.output_len} tokens per round, {args.rounds} rounds per row)\n"
    )
    print(
        "| neighbour | median ITL / quiet | ITL p90 / quiet | others' share of the CPU, median (min to max) | "
        + " | ".join(f"rounds dropped at {limit:g}" for limit in limits)
        + " |"
    )
    print("|---|---:|---:|---:|" + "---:|" * len(limits))
    for label, itl, loads in rows:
        shares = [h.share for h in loads]
        dropped = [f"{sum(h.disturbed(limit) for h in loads)} of {len(loads)}" for limit in limits]
        p90 = statistics.quantiles(itl, n=10)[-1] if len(itl) > 1 else itl[0]
        print(
            f"| {label} | {statistics.median(itl) / quiet_itl:.2f} | {p90 / quiet_itl:.2f} "
            f"| {statistics.median(shares):.0%} ({min(shares):.0%} to {max(shares):.0%}) | "
            + " | ".join(dropped)
            + " |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
