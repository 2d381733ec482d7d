"""How long a first run takes on a fresh machine, at two commits of this repository, in one of two forms:

- ``--page``: a new user following docs/getting-started.md in a repository of their own. The page's
  command lines run as written, one after the other, in a new empty folder beside the clone
  (``$SGLPERF_SRC`` names the clone; ``../configs/`` holds its tests/data/hf-configs, as in the page's
  test), up to the end of the first ``sglperf preflight`` line, or with ``--until end`` every line.
- otherwise the main job, ``bash ci/preflight.sh``, in the clone.

Per commit: a fresh clone into ``--workdir``, and a fresh HOME beside it, so sglperf's cache
(~/.cache/sglperf), pip's and uv's download caches all start empty; pip's user configuration is
copied from the real HOME (it is the machine's: which package folders and indexes pip reads), nothing
else. Then ``/usr/bin/time -v`` of the run, once, with every progress line stamped with the seconds
since the start, so that the table splits the wall time into its steps, and what the rest of the
machine took of its CPU meanwhile (a shared host). The real ~/.cache/sglperf is never read or written.
Prints a markdown table.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.runtime.host_probe import HostProbe

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

REPO = Path(__file__).resolve().parents[1]
PAGE = Path("docs") / "getting-started.md"
CONFIGS = Path("tests") / "data" / "hf-configs"  # what the page's test gives as ../configs/

Step = tuple[str, re.Pattern[str]]  # a step, and the output line that ends it
# sglperf's own progress output, in the order a build prints it.
# The main job installs the harness first; the page's preflight line starts with sglperf's own start-up.
HARNESS: Step = ("harness into .venv (ci/setup.sh)", re.compile(r"download sglang=="))
BUILD: tuple[Step, ...] = (
    ("SGLang wheel download", re.compile(r"building shared torch environment")),
    ("shared torch environment", re.compile(r"building SGLang \S+ environment in")),
    ("SGLang environment", re.compile(r"SGLang \S+ environment ready")),
)
STEPS = (HARNESS, *BUILD)
# Printed by the page's script before each of its lines, so that each line's time is read from the output.
LINE_MARK = "first-run: line "
PREFLIGHT_DONE = re.compile(r"SGLang \S+: \d+ passed, \d+ failed, \d+ inert, \d+ errors, \d+ unproven")


@dataclass(frozen=True)
class FirstRun:
    commit: str
    wall: float
    exit_code: int
    steps: tuple[tuple[str, float], ...]  # (step, seconds), the last one running to the end
    others_cpu: float  # what the rest of the machine took meanwhile, as a share of all its CPUs
    verdict: str  # the preflight's summary line, or "" when it printed none


def _fresh_home(home: Path) -> dict[str, str]:
    pip_conf = Path.home() / ".config" / "pip" / "pip.conf"
    if pip_conf.is_file():
        (home / ".config" / "pip").mkdir(parents=True)
        shutil.copy(pip_conf, home / ".config" / "pip" / "pip.conf")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLPERF_", "UV_", "PIP_CACHE"))}
    # pyenv's shims find their interpreters under PYENV_ROOT, which defaults to one under HOME.
    env.setdefault("PYENV_ROOT", str(Path.home() / ".pyenv"))
    return {**env, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}


def _page_lines(clone: Path, until: str) -> list[str]:
    """The command lines of the clone's docs/getting-started.md, in order: through its first `sglperf
    preflight` line (``until="preflight"``), or all of them."""
    if str(REPO) not in sys.path:  # the one reader of a page's fenced blocks, the docs check's
        sys.path.insert(0, str(REPO))
    from tests import docs_check

    lines = [line for b in docs_check.blocks(clone / PAGE) if b.lang == "bash" for line in b.text.strip().splitlines()]
    if until == "end":
        return lines
    first = next((i for i, line in enumerate(lines) if "sglperf preflight " in line), None)
    if first is None:
        raise SystemExit(f"{PAGE} has no `sglperf preflight` line")
    return lines[: first + 1]


def _page_script(folder: Path, clone: Path, until: str) -> tuple[list[str], list[Step], str]:
    """The page's lines as one script run in a new repository (``folder/mine``); the steps that split its
    output, one per line, the first preflight's SGLang builds apart; and the name of the last step."""
    mine = folder / "mine"
    mine.mkdir()
    shutil.copytree(clone / CONFIGS, folder / "configs")
    subprocess.run(["git", "init", "-q"], cwd=mine, check=True)
    script = ["set -e", f"cd {shlex.quote(str(mine))}"]
    steps: list[Step] = []
    running, built = "", False
    for i, line in enumerate(_page_lines(clone, until)):
        mark = f"{LINE_MARK}{i + 1}"
        script += [f"echo {shlex.quote(mark)}", line]
        if running:  # the line before ends where this one starts
            steps.append((running, re.compile(re.escape(mark) + "$")))
        words = shlex.split(line)
        running = f"`{' '.join([Path(words[0]).name, *words[1:3]])}`"
        seen = sum(name.startswith(running) for name, _ in steps)
        running += f" ({seen + 1})" if seen else ""  # the page's second `pytest -m measure`, say
        if "sglperf preflight " in line and not built:  # it builds the SGLang environments first
            steps += [(f"{running}: start-up, {BUILD[0][0]}", BUILD[0][1]), *BUILD[1:]]
            running, built = f"{running}: preflight itself", True
    return ["bash", "-c", "\n".join(script)], steps, running


def _run_once(commit: str, folder: Path, page: str | None) -> FirstRun:
    if folder.exists():
        shutil.rmtree(folder)
    repo, home, timing = folder / "repo", folder / "home", folder / "time.txt"
    home.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(REPO), str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", commit], check=True)
    env = _fresh_home(home)
    cmd, steps, last = ["bash", "ci/preflight.sh"], list(STEPS), "preflight itself"
    if page is not None:
        cmd, steps, last = _page_script(folder, repo, page)
        env["SGLPERF_SRC"] = str(repo)
    probe = HostProbe()
    probe.start()
    started = time.monotonic()
    ends: list[float] = []
    verdict = ""
    with (folder / "log.txt").open("w") as log:
        proc = subprocess.Popen(
            ["/usr/bin/time", "-v", "-o", str(timing), *cmd],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            at = time.monotonic() - started
            log.write(f"{at:7.1f} {line}")
            if not verdict and (found := PREFLIGHT_DONE.search(line)):
                verdict = found.group(0)
            if len(ends) < len(steps) and steps[len(ends)][1].search(line.rstrip("\n")):
                ends.append(at)
                print(f"  {commit[:10]} {at:6.1f} s  {steps[len(ends) - 1][0]} done", file=sys.stderr)
        code = proc.wait()
    others = probe.stop().share
    wall = _wall(timing.read_text())
    if len(ends) < len(steps):
        missing = steps[len(ends)][0]
        raise SystemExit(f"{commit}: the output lacked the end of step {missing} (see {folder / 'log.txt'})")
    marks = [0.0, *ends, wall]
    names = [name for name, _ in steps] + [last]
    seconds = tuple(b - a for a, b in itertools.pairwise(marks))
    return FirstRun(commit, wall, code, tuple(zip(names, seconds)), others, verdict)


def _wall(time_v: str) -> float:
    """``Elapsed (wall clock) time (h:mm:ss or m:ss): 3:33.37`` in seconds."""
    text = next(ln for ln in time_v.splitlines() if "Elapsed (wall clock)" in ln).rsplit(" ", 1)[1]
    seconds = 0.0
    for part in text.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds


def _rows(runs: list[list[str]]) -> list[str]:
    """Every run's steps in one list, each run's in its order: a step only one run has (the page's
    install lines of another commit) comes right after the step it follows there."""
    rows: list[str] = []
    for names in runs:
        for i, name in enumerate(names):
            if name not in rows:
                rows.insert(rows.index(names[i - 1]) + 1 if i else 0, name)
    return rows


def _row(name: str, cells: list[str]) -> None:
    print(f"| {name} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="commit without the change (default: none, only --after)")
    parser.add_argument("--after", default="HEAD", help="commit with it")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/sglperf-first-run"), help="clones and HOMEs")
    parser.add_argument("--page", action="store_true", help=f"follow {PAGE} (default: bash ci/preflight.sh)")
    parser.add_argument(
        "--until",
        choices=("preflight", "end"),
        default="preflight",
        help="with --page: stop after its first `sglperf preflight` line (default), or run every line",
    )
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    runs = []
    commits = [("before", args.before)] if args.before else []
    for label, commit in [*commits, ("after", args.after)]:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", commit], check=True, capture_output=True, text=True
        ).stdout.strip()
        # One after the other: each wants both CPUs.
        runs.append((label, _run_once(sha, args.workdir / label, args.until if args.page else None)))
    command = _docs_table.command(__file__, argv)
    what = f"{PAGE}'s command lines in a new folder" if args.page else "bash ci/preflight.sh"
    print(f"`{command}` ({os.cpu_count()} CPUs; {what}; fresh clone, fresh HOME: empty sglperf, pip and uv caches)\n")
    heads = " | ".join(f"{label} ({run.commit[:7]})" for label, run in runs)
    print(f"| step | {heads} |")
    print("|---|" + "---:|" * len(runs))
    for name in _rows([[name for name, _ in run.steps] for _, run in runs]):  # one a commit lacks: "-"
        _row(name, [f"{dict(run.steps)[name]:.1f} s" if name in dict(run.steps) else "-" for _, run in runs])
    _row("**wall time** (`/usr/bin/time`)", [f"**{run.wall:.1f} s**" for _, run in runs])
    _row("exit code", [str(run.exit_code) for _, run in runs])
    _row("the rest of the machine's CPU meanwhile", [f"{run.others_cpu:.0%}" for _, run in runs])
    _row("preflight said", [run.verdict or "(nothing)" for _, run in runs])
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
