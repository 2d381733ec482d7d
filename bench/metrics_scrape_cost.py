"""What reading SGLang's /metrics during a round costs the measurement.

A real SGLang 0.5.23 server on this CPU (the tiny Qwen3, variant ``plain`` of
``deployments/tiny-cpu.toml``, launched as the suite launches it: ``--enable-metrics`` on) is
measured with the ``decode-chat`` workload in interleaved blocks (off, 1 s, 0.1 s, off, 1 s, 0.1 s,
...) of ``--rounds`` rounds each, so drift over the run falls on every condition alike:

* off: no reading at all;
* 1 s: what the suite does (before the round, every second during it, after it);
* 0.1 s: ten times as often, to make a cost visible if there is one.

First, the answer itself: ``--reads`` reads of an idle server's /metrics, their latency and size.
The table gives each condition's median decode tok/s and ITL over all its rounds, as a ratio to
"off", and the readings per round. Prints markdown headed by the command line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from sglperf.measure.meter import measure
from sglperf.measure.server_scrape import MetricsWatch
from sglperf.sglang.metrics_catalogue import METRICS_PATH

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu

CONDITIONS: tuple[tuple[str, float | None], ...] = (("off", None), ("every 1 s (the suite)", 1.0), ("every 0.1 s", 0.1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per block")
    parser.add_argument("--blocks", type=int, default=4, help="blocks per condition, interleaved")
    parser.add_argument("--reads", type=int, default=50, help="reads of an idle server's /metrics")
    parser.add_argument("--output-len", type=int, default=512, help="tokens per request: rounds of seconds")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    python, _ = tiny_cpu.set_up()
    deployment = tiny_cpu.deployment()
    workload, prompts = tiny_cpu.decode_chat(deployment, args.rounds)
    workload = workload.model_copy(update={"output_len": args.output_len})
    tok_s: dict[str, list[float]] = {label: [] for label, _ in CONDITIONS}
    itl: dict[str, list[float]] = {label: [] for label, _ in CONDITIONS}
    reads_per_round: dict[str, list[float]] = {label: [] for label, _ in CONDITIONS}
    with tempfile.TemporaryDirectory() as tmp, tiny_cpu.running(deployment, "plain", python, Path(tmp)) as running:
        url = running.server.base_url
        latency_ms, size = [], 0
        with httpx.Client(base_url=url, timeout=30) as http:
            for _ in range(args.reads):
                started = time.perf_counter()
                size = len(http.get(METRICS_PATH).content)
                latency_ms.append((time.perf_counter() - started) * 1000)
        for block in range(args.blocks):
            for label, interval in CONDITIONS:
                watch = MetricsWatch(interval_s=interval) if interval is not None else None
                result = measure(url, workload, prompts, concurrency=1, metrics=watch)
                for r in result.rounds:
                    samples = [s for s in result.samples if s.repeat == r.round]
                    tok_s[label] += [s.decode_tok_s for s in samples if s.decode_tok_s is not None]
                    itl[label] += [s.itl_s for s in samples if s.itl_s is not None]
                if watch is not None and result.rounds:
                    reads_per_round[label].append(result.server_scrapes / len(result.rounds))
                tiny_cpu.progress(f"block {block + 1}/{args.blocks} {label}: done")

    command = _docs_table.command(__file__, argv)
    cuts = statistics.quantiles(latency_ms, n=10)
    print(
        f"`{command}` (real SGLang {tiny_cpu.SGLANG_VERSION} CPU server, tiny Qwen3 plain, decode-chat: "
        f"{workload.max_prompts} prompts x {workload.output_len} tokens per round, {args.blocks} blocks of "
        f"{args.rounds} rounds per condition, interleaved)\n"
    )
    print(
        f"An idle server's /metrics: {size / 1024:.0f} KiB, read in {statistics.median(latency_ms):.1f} ms median "
        f"(p90 {cuts[-1]:.1f} ms, {args.reads} reads).\n"
    )
    print("| /metrics read | readings per round | decode tok/s / off (median) | ITL / off (median) | requests |")
    print("|---|---:|---:|---:|---:|")
    base_tok, base_itl = statistics.median(tok_s["off"]), statistics.median(itl["off"])
    for label, _ in CONDITIONS:
        per_round = f"{statistics.median(reads_per_round[label]):.1f}" if reads_per_round[label] else "0"
        print(
            f"| {label} | {per_round} | {statistics.median(tok_s[label]) / base_tok:.3f} | "
            f"{statistics.median(itl[label]) / base_itl:.3f} | {len(tok_s[label])} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
