"""docs/history.md's example, run: its commands, and its output's shape (numbers and times masked)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.project import NEW_SGLANG, ROOT, SglangPython, make_project, with_workloads
from .test_live import MEASURE_WORKLOAD

# Judges a 15% slowdown: runs alone under pytest-xdist (tests/conftest.py).
pytestmark = pytest.mark.quiet_host

DOC = ROOT / "docs" / "history.md"


def _blocks(kind: str) -> list[list[str]]:
    return [block.strip("\n").splitlines() for block in re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)]


MASKS = ((r"\b[0-9a-f]{12}\b", "[0-9a-f]{12}"), (r"[-+]?\d+(\.\d+)?", "[-+]?[0-9.]+"))


def _shape(line: str) -> re.Pattern[str]:
    """The line with every number, date and digest masked."""
    parts, pos = [], 0
    token = re.compile("|".join(f"(?:{mask})" for mask, _ in MASKS))
    for m in token.finditer(line):
        parts.append(re.escape(line[pos : m.start()]))
        parts.append(next(repl for mask, repl in MASKS if re.fullmatch(mask, m.group())))
        pos = m.end()
    parts.append(re.escape(line[pos:]))
    return re.compile("".join(parts))


def test_the_documented_example_runs_and_prints_what_the_doc_shows(
    tmp_path: Path, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_project(tmp_path)
    (tmp_path / "deployments" / "qwen36.toml").write_text(with_workloads(MEASURE_WORKLOAD))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = deployments\n")
    monkeypatch.setenv("SGLPERF_HISTORY", str(tmp_path / "history.sqlite"))
    monkeypatch.setenv("SGLPERF_GPU_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    python = sglang_python(NEW_SGLANG)
    runs, compare = _blocks("console")
    outputs: dict[str, str] = {}
    for block in (runs, compare):
        commands = [(i, line[2:]) for i, line in enumerate(block) if line.startswith("$ ")]
        for n, (i, command) in enumerate(commands):
            argv = shlex.split(command)
            if argv[0] == "pytest":
                argv = [
                    sys.executable,
                    "-m",
                    "pytest",
                    f"--sglang-python={python}",
                    "-p",
                    "no:cacheprovider",
                    # The test checks what the runs say, not a speed: a neighbour on a shared runner must not
                    # turn a night into "host stayed busy" (the doc's slowdown is 15%, its floor 3%).
                    "--max-host-load=1",
                    *argv[1:],
                ]
            else:
                argv = [str(Path(sys.executable).parent / argv[0]), *argv[1:]]
            proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert proc.returncode in (0, 1), f"{command}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
            end = commands[n + 1][0] if n + 1 < len(commands) else len(block)
            outputs[command] = proc.stdout
            shown = block[i + 1 : end]
            printed = proc.stdout.splitlines()
            for line in shown:
                assert any(_shape(line).fullmatch(p) for p in printed), f"{command}: no line like {line!r}"
            if shown:  # the doc shows the whole output: nothing more was printed
                assert len(printed) == len(shown), proc.stdout
    (report_head,) = _blocks("text")
    report = (tmp_path / "results" / "night-3" / "report.md").read_text().splitlines()
    for line in report_head:
        assert any(_shape(line).fullmatch(r) for r in report), f"report.md: no line like {line!r}"
