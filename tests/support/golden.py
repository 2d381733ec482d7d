"""What sglperf prints, recorded: the text and JSON of its commands on fixed inputs, kept in
tests/data/golden/ and compared byte for byte (paths aside) by tests/sglang/test_output_unchanged.py and
tests/integration/test_report_unchanged.py.

A refactoring must leave every file as it is. A change that means to alter what a person reads rewrites
the files it alters (`python -m tests.support.golden --write NAME...`) in the same commit, so the diff
shows exactly which lines moved.

The inputs: the shipped qwen36 deployment and golden/deployments/ (a tiny dense model on one 24 GB GPU:
graph coverage at c32, raw and abbreviated flags; DeepSeek-V2-Lite, an MLA and MoE model, on one H100) under
real SGLang releases, and two emulator runs'
results folders (golden/runs/: a baseline recorded, then compared with a planted slowdown) for report.md
and `sglperf compare`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .project import ROOT

GOLDEN = ROOT / "tests" / "data" / "golden"
RUNS = GOLDEN / "runs"
DEPLOYMENTS = GOLDEN / "deployments"
QWEN36 = "deployments/qwen36.toml"
TINY = "tests/data/golden/deployments/tiny-4090.toml"
MLA = "tests/data/golden/deployments/mla-h100.toml"
SGLPERF = str(Path(sys.executable).with_name("sglperf"))


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # after `sglperf`; {run_a}/{run_b} name copies of the stored results folders
    releases: tuple[str, ...] = ()  # managed SGLang environments it needs
    long: bool = False  # ci/selftest-long.sh's: a walk over every release since 0.5.13

    @property
    def path(self) -> Path:
        return GOLDEN / f"{self.name}.txt"


def _both(name: str, args: tuple[str, ...], releases: tuple[str, ...], long: bool = False) -> list[Case]:
    return [Case(name, args, releases, long), Case(f"{name}.json", (*args, "--json"), releases, long)]


CASES: tuple[Case, ...] = (
    *_both("preflight-0.5.23", ("preflight", QWEN36, TINY, MLA, "--sglang-version", "0.5.23"), ("0.5.23",)),
    *_both("preflight-0.5.13", ("preflight", QWEN36, TINY, "--sglang-version", "0.5.13"), ("0.5.13",)),
    *_both("explain-qwen36-0.5.23", ("explain", QWEN36, "--sglang-version", "0.5.23"), ("0.5.23",)),
    *_both(
        "explain-qwen36-against-0.5.13",
        ("explain", QWEN36, "--sglang-version", "0.5.13", "--variant", "mtp3-full", "--against", "mtp3-defaults"),
        ("0.5.13",),
    ),
    *_both(
        "explain-tiny-against-0.5.23",
        ("explain", TINY, "--sglang-version", "0.5.23", "--against", "plain"),
        ("0.5.23",),
    ),
    *_both(
        "upgrade-0.5.13-0.5.23",
        ("upgrade-check", QWEN36, TINY, "--from", "0.5.13", "--to", "0.5.23"),
        ("0.5.13", "0.5.23"),
    ),
    *_both(
        "upgrade-walk-0.5.19-0.5.21",
        ("upgrade-check", QWEN36, TINY, "--from", "0.5.19", "--to", "0.5.21", "--walk"),
        ("0.5.19", "0.5.20", "0.5.21"),
    ),
    *_both(
        "upgrade-walk-0.5.13-0.5.23",
        ("upgrade-check", QWEN36, "--from", "0.5.13", "--to", "0.5.23", "--walk"),
        ("0.5.13", "0.5.23"),
        long=True,
    ),
    *_both(
        "upgrade-walk-mla-0.5.13-0.5.23",
        ("upgrade-check", MLA, "--from", "0.5.13", "--to", "0.5.23", "--walk"),
        ("0.5.13", "0.5.23"),
        long=True,
    ),
    Case("report-a", ("report", "{run_a}", "--history-store", "off", "--summary")),
    Case("report-b", ("report", "{run_b}", "--history-store", "off", "--summary")),
    Case("compare-a-b", ("compare", "{run_a}", "{run_b}")),
    *_both("compare-variants-b", ("compare", "{run_b}", "--variants"), ()),
)
BY_NAME = {case.name: case for case in CASES}


def runs_copied(into: Path) -> dict[str, str]:
    """Copies of the stored results folders (the report writes into its folder)."""
    places = {}
    for run in ("a", "b"):
        target = into / f"run-{run}"
        shutil.copytree(RUNS / f"run-{run}", target)
        places[f"run_{run}"] = str(target)
    return places


def normalised(text: str, places: dict[str, str]) -> str:
    """The output with this machine's paths replaced by names that hold everywhere."""
    for name, path in sorted(places.items(), key=lambda item: -len(item[1])):
        text = text.replace(path, f"<{name}>")
    for name, path in (("home", str(Path.home())), ("root", str(ROOT))):
        text = text.replace(path, f"<{name}>")
    return text


def run(case: Case, workdir: Path) -> str:
    """The case's stdout and exit code, normalised."""
    places = runs_copied(workdir) if any("{run_" in a for a in case.args) else {}
    args = [a.format(**places) for a in case.args]
    env = {**os.environ, "SGLPERF_HISTORY": "off", "COLUMNS": "200"}
    proc = subprocess.run([SGLPERF, *args], capture_output=True, text=True, cwd=ROOT, timeout=3600, env=env)
    if proc.returncode not in (0, 1):
        raise AssertionError(f"sglperf {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return normalised(proc.stdout, places) + f"\n[exit {proc.returncode}]\n"


def main() -> int:
    parser = argparse.ArgumentParser(description="(Re)write the recorded outputs in tests/data/golden/")
    parser.add_argument("--write", nargs="*", metavar="NAME", help="cases to rewrite (none given: every case)")
    args = parser.parse_args()
    import tempfile

    for case in CASES:
        if args.write and case.name not in args.write:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            case.path.write_text(run(case, Path(tmp)))
        print(f"wrote {case.path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
