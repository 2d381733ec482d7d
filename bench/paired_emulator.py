"""Variant effects on a drifting machine, end to end: sglperf's own `pytest -m measure` against the emulator,
the sequential design (``counterbalance = { sessions = 1 }``) against the counterbalanced one (the default).

Each run measures qwen36's reference (mtp3-defaults), an A/A pair ("aa": the reference's flags under another
name, expecting no effect on decode tok/s) and a planted 5% slower decode ("slower", expecting lower), with
the emulator slowing every step as the run goes on (``drift_per_min``, one clock for every server). The
emulator's sessions are a few seconds long, so the drift is given per session: "10% per session" is what
10% per minute does to sessions a minute apart on a GPU runner (start, warm-up, 12 rounds). Each row is
``--runs`` whole runs; a cell counts the runs with that answer, read from each run's results folder the way
report.md reads it. bench/paired_quality.py measures the statistics alone over thousands of trials.

    python bench/paired_emulator.py [--runs 2] [--write-docs]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sglperf.baselines.variant_effects import variant_effects
from sglperf.model.variant_effect import EffectVerdict
from sglperf.results import folder as results_folder

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

ROOT = Path(__file__).resolve().parents[1]
STEP_S, PREFILL_S, SLOWER = 0.003, 0.002, 1.05
DRIFTS = (0.0, 0.05, 0.10)  # per session
WORKLOAD = """
[[workloads]]
id = "decode-chat"
prompts = "../data/prompts/chat.jsonl"
max_prompts = 2
output_len = 64
concurrency = [1]
warmup = 1
repeats = 12
"""
VARIANTS = """
[[variants]]
id = "aa"
description = "the reference's flags under another name: an A/A pair"
expect_effect = { decode-chat = { decode_tok_s = "none" } }

[[variants]]
id = "slower"
description = "the reference's flags, decoding 5% slower in the emulator"
expect_effect = { decode-chat = { decode_tok_s = "lower" } }

"""
DESIGNS = {"sequential": "counterbalance = { sessions = 1, max_sessions = 1 }\n", "counterbalanced": ""}


def _project(folder: Path, top: str) -> Path:
    """A folder laid out like the repository, with qwen36 measuring the A/A pair and the planted slowdown."""
    (folder / "deployments").mkdir(parents=True)
    shutil.copytree(ROOT / "data" / "prompts", folder / "data" / "prompts")
    text = (ROOT / "deployments" / "qwen36.toml").read_text()
    text = text[: text.index("# Workloads for the measurement tier.")]
    text = "\n".join(line for line in text.splitlines() if not line.startswith("expect_effect")) + "\n"
    text = text.replace('config = "../models/', f'config = "{ROOT}/models/', 1)
    (folder / "deployments" / "qwen36.toml").write_text(top + text + VARIANTS + WORKLOAD)
    (folder / "pytest.ini").write_text("[pytest]\ntestpaths = deployments\n")
    return folder


def one_run(folder: Path, design: str, drift_per_session: float, session_s: float) -> tuple[dict[str, str], float]:
    """One `pytest -m measure` run: each effect's answer by variant ("aa", "slower"), and the seconds from
    the first session's start to the last's over the sessions between (what a session took)."""
    project = _project(folder, DESIGNS[design])
    config = {
        "decode_step_s": STEP_S,
        "prefill_s_per_token": PREFILL_S,
        "noise_cv": 0.02,
        "accept_prob": 1.0,
        "drift_per_min": drift_per_session * 60.0 / session_s,
        "variants": {"slower": {"decode_slowdown": SLOWER}},
    }
    results = project / "results"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "measure",
            "-k",
            "mtp3-defaults or aa or slower",
            "--emulator",
            f"--emulator-config={json.dumps(config)}",
            "--baseline-missing=skip",
            f"--baselines-dir={project / 'baselines'}",
            f"--results-dir={results}",
            "-p",
            "no:cacheprovider",
            "-q",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    run = results_folder.collect(results)
    answers = {
        e.variant: e.verdict.value
        for e in variant_effects(run.measurements, run.sessions)
        if e.metric == "decode_tok_s" and e.variant in ("aa", "slower")
    }
    starts = sorted(
        datetime.fromisoformat(t).timestamp()
        for t in [*(m.started_at for m in run.measurements), *(s.started_at for s in run.sessions)]
        if t
    )
    return answers, (starts[-1] - starts[0]) / max(len(starts) - 1, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="whole runs per design and drift")
    parser.add_argument("--session-s", type=float, default=6.0, help="seconds from one session's start to the next")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    print(f"Command: `python bench/paired_emulator.py --runs {args.runs} --session-s {args.session_s:g}`")
    print()
    print(
        "The emulator (a test double: its numbers are not GPU results), qwen36's reference against an A/A pair and "
        f"a planted {SLOWER - 1:.0%} slower decode, decode_tok_s at its 3% floor, 12 rounds a session; "
        f"{args.runs} whole run(s) per row."
    )
    print()
    print("| design | drift per session | A/A: different | A/A: same | A/A: not yet known | 5% slower: worse |")
    print("|---|---:|---:|---:|---:|---:|")
    session_lengths: list[float] = []
    for design in DESIGNS:
        for drift in DRIFTS:
            answers = []
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(prefix="sglperf-paired-") as tmp:
                    said, took = one_run(Path(tmp), design, drift, args.session_s)
                    answers.append(said)
                    session_lengths.append(took)
            aa = [a.get("aa") for a in answers]
            moved = sum(v in (EffectVerdict.BETTER.value, EffectVerdict.WORSE.value) for v in aa)
            same = sum(v == EffectVerdict.NO_EFFECT.value for v in aa)
            worse = sum(a.get("slower") == EffectVerdict.WORSE.value for a in answers)
            n = len(answers)
            print(f"| {design} | {drift:.0%} | {moved}/{n} | {same}/{n} | {n - moved - same}/{n} | {worse}/{n} |")
    print()
    print(
        f"Drift per session assumes {args.session_s:g} s from one session's start to the next; measured: median "
        f"{statistics.median(session_lengths):.1f} s (the emulator's drift_per_min is the per-session drift x "
        f"{60 / args.session_s:g}). Ran in {time.perf_counter() - started:.0f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
