"""How long ci/setup.sh takes to install the harness into a fresh ``.venv``: with uv, and with pip.

Every CI run starts from a fresh clone, so from a fresh ``.venv``: ``pip install -e '.[test]'`` there
is the first thing a run waits for. Per tool, ``--runs`` times, taking turns: a new venv, then the
install as ci/setup.sh does it (for uv, installing uv itself with pip first, as setup.sh does), timed
from the venv's creation to the install's end. Package caches are warm after the first run of each;
the first run is shown apart. Prints a markdown table.
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

REPO = Path(__file__).resolve().parents[1]
PIP = ("-m", "pip", "install", "-q", "--disable-pip-version-check")


def _install(tool: str, venv: Path) -> float:
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    if tool == "uv":
        subprocess.run([python, *PIP, "uv"], check=True, capture_output=True)
        cmd = [str(venv / "bin" / "uv"), "pip", "install", "-q", "--python", python, "-e", ".[test]"]
    else:
        cmd = [python, *PIP, "-e", ".[test]"]
    subprocess.run(cmd, check=True, capture_output=True, cwd=REPO)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="installs per tool")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    seconds: dict[str, list[float]] = {"uv": [], "pip": []}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for tool, times in seconds.items():
                times.append(_install(tool, Path(tmp) / f"{tool}-{run}"))
                print(f"  {tool} run {run + 1}: {times[-1]:.1f} s", file=sys.stderr)
    command = _docs_table.command(__file__, argv)
    print(f"`{command}` ({os.cpu_count()} CPUs; `-e '.[test]'` into a fresh venv, venv creation included)\n")
    print("| installer | first run | later runs (median) | later runs (slowest) |")
    print("|---|---:|---:|---:|")
    for tool, times in seconds.items():
        later = times[1:] or times
        print(f"| {tool} | {times[0]:.1f} s | {statistics.median(later):.1f} s | {max(later):.1f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
