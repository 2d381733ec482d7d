"""What compiling an SGLang environment's bytecode when it is built buys, where no import writes any.

uv installs no bytecode, and with PYTHONDONTWRITEBYTECODE set (this project's machines, many container
images) no import writes any: every process that imports SGLang compiles it, transformers and the rest
from source again. Per release: its managed environment (built first if missing) is copied to a temporary
folder and every ``__pycache__`` of the copy removed (the shared torch environment, which pip compiled, is
left as it is). With PYTHONDONTWRITEBYTECODE=1, timed ``--repeats`` times each: importing SGLang's server
arguments, and ``sglperf preflight`` of the shipped deployments with an empty preflight cache (what a
deployment's first check runs: the worker imports SGLang and builds each model on the meta device). Then
the copy is compiled as ``envs.compile_bytecode`` does at build time (timed: the build's added cost) and
both are timed again. Prints a markdown table: medians, the range, and the ratio.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.sglang import envs

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

REPO = Path(__file__).resolve().parents[1]
SGLPERF = Path(sys.executable).with_name("sglperf")
PREFLIGHT_SUMMARY = re.compile(r"^SGLang \S+: \d+ passed, \d+ failed", re.M)


def _timed(cmd: Sequence[str], env: dict[str, str], finished: re.Pattern[str] | None = None) -> float:
    """Seconds ``cmd`` took. It must exit 0, or, given ``finished``, print it: a preflight that finds a
    problem (the shipped qwen36 deployments keep an inert flag on purpose) exits 1 having checked everything."""
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    took = time.monotonic() - started
    done = proc.returncode == 0 or (finished is not None and proc.returncode == 1 and finished.search(proc.stdout))
    if not done:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return took


def _measure(python: Path, repeats: int, tmp: Path) -> tuple[list[float], list[float]]:
    """(import times, cold preflight times) with this interpreter, nothing written meanwhile."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    imports = [_timed([str(python), "-c", "import sglang.srt.server_args"], env) for _ in range(repeats)]
    preflights = []
    for _ in range(repeats):
        cache = tempfile.mkdtemp(dir=tmp, prefix="preflight-cache-")
        cmd = [str(SGLPERF), "preflight", "--sglang-python", str(python)]
        preflights.append(_timed(cmd, {**env, "SGLPERF_PREFLIGHT_CACHE": cache}, PREFLIGHT_SUMMARY))
    return imports, preflights


def progress(line: str) -> None:
    print(line, file=sys.stderr)


def _cell(times: list[float]) -> str:
    return f"{statistics.median(times):.1f} s ({min(times):.1f}-{max(times):.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", nargs="+", default=["0.5.23"], help="SGLang releases")
    parser.add_argument("--repeats", type=int, default=3, help="timings per state")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for version in args.versions:
            copy = tmp / f"sglang-{version}"
            shutil.copytree(envs.ensure_env(version, progress).path, copy, symlinks=True)
            for cache in list(copy.rglob("__pycache__")):
                shutil.rmtree(cache)
            python = copy / "bin" / "python"
            source = _measure(python, args.repeats, tmp)
            progress(f"  {version} from source: {source}")
            started = time.monotonic()
            envs.compile_bytecode(next(copy.glob("lib/python*/site-packages")), progress)
            compile_s = time.monotonic() - started
            compiled = _measure(python, args.repeats, tmp)
            progress(f"  {version} compiled ({compile_s:.1f} s): {compiled}")
            rows.append((version, compile_s, source, compiled))
    command = _docs_table.command(__file__, argv)
    print(f"`{command}` ({os.cpu_count()} CPUs, PYTHONDONTWRITEBYTECODE=1; median (range) of {args.repeats})\n")
    print("| release | what | from source | compiled | ratio | compiling, once at build |")
    print("|---|---|---:|---:|---:|---:|")
    for version, compile_s, source, compiled in rows:
        for what, before, after in (
            ("import sglang.srt.server_args", source[0], compiled[0]),
            ("cold preflight, shipped deployments", source[1], compiled[1]),
        ):
            ratio = statistics.median(before) / statistics.median(after)
            print(f"| {version} | {what} | {_cell(before)} | {_cell(after)} | {ratio:.2f}x | {compile_s:.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
