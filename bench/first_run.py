"""How long the main job (`ci/preflight.sh`) takes on a fresh machine, at two commits of this repository.

Per commit: a fresh clone into ``--workdir``, and a fresh HOME beside it, so sglperf's cache
(~/.cache/sglperf), pip's and uv's download caches all start empty; pip's user configuration is
copied from the real HOME (it is the machine's: which package folders and indexes pip reads), nothing
else. Then ``/usr/bin/time -v bash ci/preflight.sh`` there, once, with every progress line stamped with
the seconds since the start, so that the table splits the wall time into the main steps. The real
~/.cache/sglperf is never read or written. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

REPO = Path(__file__).resolve().parents[1]

# (step, the progress line that ends it): sglperf's own progress output, in the order a build prints it.
STEPS = (
    ("harness into .venv (ci/setup.sh)", re.compile(r"download sglang==")),
    ("SGLang wheel download", re.compile(r"building shared torch environment")),
    ("shared torch environment", re.compile(r"building SGLang \S+ environment in")),
    ("SGLang environment", re.compile(r"SGLang \S+ environment ready")),
)


@dataclass(frozen=True)
class FirstRun:
    commit: str
    wall: float
    exit_code: int
    steps: tuple[float, ...]  # seconds per entry of STEPS, then the preflight itself (the rest)


def _fresh_home(home: Path) -> dict[str, str]:
    pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
    if pip_conf.is_file():
        (home / ".config" / "pip").mkdir(parents=True)
        shutil.copy(pip_conf, home / ".config" / "pip" / "pip.conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLPERF_", "UV_", "PIP_CACHE"))}
    # pyenv's shims find their interpreters under PYENV_ROOT, which defaults to one under HOME.
    env.setdefault("PYENV_ROOT", str(Path.home() / ".pyenv"))
    return {**env, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}


def _run_once(commit: str, folder: Path) -> FirstRun:
    if folder.exists():
        shutil.rmtree(folder)
    repo, home, timing = folder / "repo", folder / "home", folder / "time.txt"
    home.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", commit], check=True)
    cmd = ["/usr/bin/time", "-v", "-o", str(timing), "bash", "ci/preflight.sh"]
    started = time.monotonic()
    ends: list[float] = []
    with (folder / "log.txt").open("w") as log:
        proc = subprocess.Popen(
            cmd, cwd=repo, env=_fresh_home(home), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            at = time.monotonic() - started
            log.write(f"{at:7.1f} {line}")
            if len(ends) < len(STEPS) and STEPS[len(ends)][1].search(line):
                ends.append(at)
                print(f"  {commit[:10]} {at:6.1f} s  {STEPS[len(ends) - 1][0]} done", file=sys.stderr)
        code = proc.wait()
    wall = _wall(timing.read_text())
    if len(ends) < len(STEPS):
        raise SystemExit(f"{commit}: the progress output lacked a step (see {folder / 'log.txt'})")
    marks = [0.0, *ends, wall]
    return FirstRun(commit, wall, code, tuple(b - a for a, b in itertools.pairwise(marks)))


def _wall(time_v: str) -> float:
    """``Elapsed (wall clock) time (h:mm:ss or m:ss): 3:33.37`` in seconds."""
    text = next(ln for ln in time_v.splitlines() if "Elapsed (wall clock)" in ln).rsplit(" ", 1)[1]
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="commit without the change")
    parser.add_argument("--after", default="HEAD", help="commit with it")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sglperf-first-run"), help="clones and HOMEs")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    runs = []
    for label, commit in (("before", args.before), ("after", args.after)):
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", commit], check=True, capture_output=True, text=True
        ).stdout.strip()
        runs.append((label, _run_once(sha, args.workdir / label)))  # one after the other: each wants both CPUs
    command = _docs_table.command(__file__, argv)
    print(f"`{command}` ({os.cpu_count()} CPUs; fresh clone, fresh HOME: empty sglperf, pip and uv caches)\n")
    heads = " | ".join(f"{label} ({run.commit[:7]})" for label, run in runs)
    print(f"| step | {heads} |")
    print("|---|" + "---:|" * len(runs))
    names = [name for name, _ in STEPS] + ["preflight itself"]
    for i, name in enumerate(names):
        print(f"| {name} | " + " | ".join(f"{run.steps[i]:.1f} s" for _, run in runs) + " |")
    print("| **wall time** (`/usr/bin/time`) | " + " | ".join(f"**{run.wall:.1f} s**" for _, run in runs) + " |")
    print("| exit code | " + " | ".join(str(run.exit_code) for _, run in runs) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
