"""How long the CPU tier's server takes to start and to stop, and what would make either shorter.

The real SGLang 0.5.23 CPU server (tiny Qwen3, variant ``plain`` of ``deployments/tiny-cpu.toml``) is
launched ``--starts`` times per setting, as the suite launches it, the settings taking turns:
``as shipped``: the deployment (its KV pool capped by ``--max-total-tokens``) and sglperf's teardown (the
launcher killed first, then SIGTERM); ``pool from free memory``: the cap removed, so that SGLang sizes the
pool from the memory free at start (about a million tokens here, which it allocates and zeroes);
``SIGTERM to all``: stopped as sglperf did before 2026-12-03, every process of the tree at once; ``two at
once``: two servers as shipped, started side by side (two processes), their row the later of the two
(would the CPU tier gain by starting servers in parallel?). Per start:
seconds to healthy (sglperf's own progress line), to stopped (its line, or the wait for every process),
SGLang's own ``kv_cache_allocation`` and ``scheduler_e2e`` from its "Engine startup timings" log line, and
whether SGLang read the stop as a crash ("crashed with exit code" in its log). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from sglperf.model.deployment import Deployment
from sglperf.runtime.server import Server
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang.flags import KV_POOL_CAP_FLAG

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu

TWO_AT_ONCE = "two at once (the later)"
_SECONDS = re.compile(r"(healthy after|processes in) ([0-9.]+) s")
_TIMING = re.compile(r"(kv_cache_allocation|scheduler_e2e)=([0-9.]+)")


def _start_and_stop(deployment: Deployment, python: str, results: Path, all_at_once: bool) -> dict[str, float]:
    said: list[str] = []
    preflight = PreflightSession(lambda: python, tiny_cpu.progress)
    live = LiveSession(LiveOptions(results_dir=results, root=tiny_cpu.REPO), preflight, said.append)
    stopped_in = None
    try:
        running = live.running(deployment, deployment.variant("plain"))
        log_path = running.server.spec.log_path
        if all_at_once:
            assert isinstance(running.server, Server)  # launched here, never attached
            procs = [psutil.Process(pid) for pid in running.server.pids()]
            started = time.monotonic()
            for proc in procs:
                proc.send_signal(signal.SIGTERM)
            psutil.wait_procs(procs, timeout=30)
            stopped_in = time.monotonic() - started
    finally:
        live.close()
        preflight.close()
    found = {m.group(1): float(m.group(2)) for line in said for m in [_SECONDS.search(line)] if m}
    if stopped_in is not None:
        found["processes in"] = stopped_in
    log = log_path.read_text()
    timings = {m.group(1): float(m.group(2)) for m in _TIMING.finditer(log)}
    return {
        "start": found["healthy after"],
        "stop": found["processes in"],
        **timings,
        "crash": float("crashed with exit code" in log),
    }


def _two_at_once(deployment: Deployment, python: str, results: Path) -> dict[str, float]:
    """Both servers' starts and stops overlapping; each figure is the later of the two."""
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        pair = list(
            pool.map(_start_and_stop, [deployment] * 2, [python] * 2, [results / "a", results / "b"], [False] * 2)
        )
    return {key: max(side[key] for side in pair) for key in pair[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3, help="starts per pool setting")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    python, _ = tiny_cpu.set_up()
    shipped = tiny_cpu.deployment()
    settings = {
        "as shipped": (shipped, False),
        "pool from free memory": (shipped.without_launch_flag(KV_POOL_CAP_FLAG), False),
        "SIGTERM to all": (shipped, True),
    }
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in [*settings, TWO_AT_ONCE]}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.starts):  # alternating, so a slow spell of the VM hits every setting
            for name, (deployment, all_at_once) in settings.items():
                results = Path(tmp) / f"{name.replace(' ', '-')}-{i}"
                rows[name].append(_start_and_stop(deployment, python, results, all_at_once))
                tiny_cpu.progress(f"{name}: {rows[name][-1]}")
            rows[TWO_AT_ONCE].append(_two_at_once(shipped, python, Path(tmp) / f"two-at-once-{i}"))
            tiny_cpu.progress(f"{TWO_AT_ONCE}: {rows[TWO_AT_ONCE][-1]}")

    def median(values: list[dict[str, float]], key: str) -> str:
        return f"{statistics.median(v[key] for v in values):.1f} s"

    def spread(values: list[dict[str, float]], key: str) -> str:
        return f"{min(v[key] for v in values):.1f}-{max(v[key] for v in values):.1f} s"

    command = _docs_table.command(__file__, argv)
    print(f"`{command}` ({os.cpu_count()} CPUs; real SGLang {tiny_cpu.SGLANG_VERSION} CPU server, tiny Qwen3 plain)\n")
    print(
        "| setting | starts | to healthy (median) | to healthy (range) | kv_cache_allocation | scheduler_e2e "
        "| stop | read as a crash |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, values in rows.items():
        print(
            f"| {name} | {len(values)} | {median(values, 'start')} | {spread(values, 'start')} "
            f"| {median(values, 'kv_cache_allocation')} "
            f"| {median(values, 'scheduler_e2e')} | {median(values, 'stop')} "
            f"| {sum(int(v['crash']) for v in values)} of {len(values)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
