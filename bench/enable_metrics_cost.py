"""What ``--enable-metrics`` itself costs SGLang (its own bookkeeping, not sglperf's reads of /metrics).

Every launch of the suite adds ``--enable-metrics`` (`sglperf.sglang.metrics_catalogue`), so baselines
recorded before that compare with runs that have it. A real SGLang 0.5.23 server on this CPU (the
tiny Qwen3, variant ``plain`` of ``deployments/tiny-cpu.toml``) is started ``--starts`` times with the
flag and as many times without (``[launch] server_metrics = false``), alternating, and each start is
measured with ``decode-chat`` (``--rounds`` rounds, no /metrics read). Two starts of one build differ
by themselves (the KV pool, where the allocator put things), so the table shows every start's median
decode tok/s and ITL against the median over the starts without the flag: the flag's cost is only
resolved where it is larger than that spread. Prints markdown headed by the command line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.measure.meter import measure

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3, help="server starts per condition, alternating")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output-len", type=int, default=256)
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    python, _ = tiny_cpu.set_up()
    base = tiny_cpu.deployment()
    workload, prompts = tiny_cpu.decode_chat(base, args.rounds)
    workload = workload.model_copy(update={"output_len": args.output_len})
    rows: list[tuple[str, float, float]] = []
    for start in range(args.starts):
        for metrics in (True, False):
            launch = base.launch.model_copy(update={"server_metrics": metrics})
            deployment = base.model_copy(update={"launch": launch})
            with tempfile.TemporaryDirectory() as tmp, tiny_cpu.running(deployment, "plain", python, Path(tmp)) as run:
                assert ("--enable-metrics" in run.server.command) == metrics
                result = measure(run.server.base_url, workload, prompts, concurrency=1)
            tok_s = statistics.median(s.decode_tok_s for s in result.samples if s.decode_tok_s is not None)
            itl = statistics.median(s.itl_s for s in result.samples if s.itl_s is not None)
            rows.append(("on" if metrics else "off", tok_s, itl))
            tiny_cpu.progress(f"start {start + 1}/{args.starts}, metrics {rows[-1][0]}: {tok_s:.1f} tok/s")

    command = _docs_table.command(__file__, argv)
    off_tok = statistics.median(t for label, t, _ in rows if label == "off")
    off_itl = statistics.median(i for label, _, i in rows if label == "off")
    print(
        f"`{command}` (real SGLang {tiny_cpu.SGLANG_VERSION} CPU server, tiny Qwen3 plain, decode-chat: "
        f"{workload.max_prompts} prompts x {workload.output_len} tokens, {args.rounds} rounds per start)\n"
    )
    print("| start | --enable-metrics | decode tok/s / off's median | ITL / off's median |")
    print("|---:|---|---:|---:|")
    for i, (label, tok_s, itl) in enumerate(rows):
        print(f"| {i // 2 + 1} | {label} | {tok_s / off_tok:.3f} | {itl / off_itl:.3f} |")
    on = [t / off_tok for label, t, _ in rows if label == "on"]
    off = [t / off_tok for label, t, _ in rows if label == "off"]
    print(
        f"\nOn: {min(on):.3f} to {max(on):.3f} of off's median decode tok/s; off itself: {min(off):.3f} to "
        f"{max(off):.3f}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
