"""Wall time of `sglperf preflight DEPLOYMENT` from command to verdict, cold and warm cache, of
`sglperf explain DEPLOYMENT --variant V --against R` (the comparison resolves V again without each flag
it adds), and of `sglperf --help`.

Cold: a fresh preflight cache, so SGLang is imported and every variant resolved (the environment
itself is already built). Warm: the same command again, served from the cache: what is left is the
interpreter's start and sglperf's own imports, as in `sglperf --help`. Goals: under 1 s for both on
the slowest machine kind (a 2-CPU AVX2 EPYC).

    .venv/bin/python bench/preflight_time.py --sglang-version 0.5.23 --runs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

ROOT = Path(__file__).resolve().parent.parent


def _time(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"preflight failed ({proc.returncode}):\n{proc.stderr}")
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sglang-version", "--sglang", dest="sglang", default="0.5.23")
    parser.add_argument("--deployment", default="deployments/qwen36.toml")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variant", default="mtp3-full", help="explain this variant ...")
    parser.add_argument("--against", default="mtp3-defaults", help="... against this one")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    sglperf = str(Path(sys.executable).with_name("sglperf"))
    cmd = [sglperf, "preflight", args.deployment, "--sglang-version", args.sglang]
    explain = [sglperf, "explain", args.deployment, "--sglang-version", args.sglang, "--variant", args.variant]
    explain += ["--against", args.against]
    cold, warm, explain_cold, explain_warm, help_ = [], [], [], [], []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "SGLPERF_PREFLIGHT_CACHE": cache}
            cold.append(_time(cmd, env))
            warm.append(_time(cmd, env))
            help_.append(_time([sglperf, "--help"], env))
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "SGLPERF_PREFLIGHT_CACHE": cache}
            explain_cold.append(_time(explain, env))
            explain_warm.append(_time(explain, env))
    print(f"`{' '.join(['sglperf', *cmd[1:]])}`, {args.runs} runs, {os.cpu_count()} cores\n")
    print("| cache | median s | min s | max s |\n|---|---:|---:|---:|")
    rows = (
        ("cold (SGLang imported, all variants resolved)", cold),
        ("warm (served from cache)", warm),
        (f"`sglperf explain --variant {args.variant} --against {args.against}`, cold", explain_cold),
        ("the same explain, warm", explain_warm),
        ("`sglperf --help`", help_),
    )
    for name, xs in rows:
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
