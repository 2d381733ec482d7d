"""`sglperf bisect` end to end on the emulator, each release's effective args from its own preflight (issue 55).

- Llama-3.1-8B on one L40S, 0.5.19 -> 0.5.23, with 10% longer decode steps planted from 0.5.22 on (a change in
  SGLang's code no effective arg shows): the culprit is 0.5.22, "no effective-config change", with fewer
  releases measured than a linear walk; interrupted after its endpoints, the same command resumes without
  measuring them again, and every release measured is a run in the history store.
- The same model on one 24 GB GPU at batch 32, 0.5.19 -> 0.5.21, nothing planted: SGLang 0.5.20 raised the decode
  graph's cap from 24 to 48 (its memory tier for GPUs under 35 GB), so 0.5.19 decodes eager, which the emulator
  runs 30% slower (``eager_step_factor``): the bisect names 0.5.20, faster, with the field and SGLang's rule.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sglperf.commands import bisect as bisect_command
from sglperf.history import open_store
from sglperf.measure.samples import HostBusyError
from sglperf.model.deployment_file import load
from sglperf.model.variant_effect import EffectVerdict
from sglperf.runtime import gpus
from sglperf.session.release_sessions import ReleaseSessions
from sglperf.session.running import LiveOptions
from sglperf.upgrade import bisect
from sglperf.upgrade.bisect import Answer, Purpose

from ..support.project import ROOT, SGLPERF, SglangPython
from ..support.quiet_host import skip_if_the_guard_said_so

pytestmark = [pytest.mark.needs_sglang, pytest.mark.quiet_host]

LLAMA = ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct" / "config.json"
DEPLOYMENT = """\
[model]
key = "llama-3.1-8b-instruct"
served_path = "/models/llama-3.1-8b-instruct"
config = "{config}"

[runner]
name = "{runner}"
gpu_count = 1
gpu_name = "{gpu}"
compute_capability = "8.9"
memory_gib = {memory}

[launch]
tp_size = 1

[expect]
decode_cuda_graph = true

[[variants]]
id = "defaults"
description = "SGLang's defaults for this model and runner"

[[workloads]]
id = "decode-chat"
prompts = "{prompts}"
output_len = 32
concurrency = [{concurrency}]
warmup = 1
repeats = 8
"""
# Fast steps, little noise: a session (server start, warm-up, 8 rounds) takes seconds.
TIMING = {"decode_step_s": 0.004, "noise_cv": 0.01}


def _deployment(folder: Path, runner: str, gpu: str, memory: int, concurrency: int) -> Path:
    path = folder / f"{runner}.toml"
    path.write_text(
        DEPLOYMENT.format(
            config=LLAMA,
            runner=runner,
            gpu=gpu,
            memory=memory,
            prompts=ROOT / "data" / "prompts" / "chat.jsonl",
            concurrency=concurrency,
        )
    )
    return path


def _wait_for(path: Path, done: int, proc: subprocess.Popen[str], timeout_s: float = 900.0) -> bisect.BisectState:
    """The state once ``done`` comparisons are finished and the next has a session."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _, err = proc.communicate()
            skip_if_the_guard_said_so(err.splitlines())
            raise AssertionError(f"the bisect ended before comparison {done + 1}: {err[-3000:]}")
        state = bisect.read_state(path) if path.exists() else None
        if state and len(state.comparisons) > done and state.comparisons[done].sessions:
            return state
        time.sleep(0.2)
    raise AssertionError(f"{path}: no comparison {done + 1} within {timeout_s} s")


def test_a_planted_code_change_is_bisected_to_its_release_and_resumes_after_an_interrupt(
    tmp_path: Path, sglang_python: SglangPython
) -> None:
    for release in ("0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"):
        sglang_python(release)  # built before the clock of the bisect starts
    path = _deployment(tmp_path, "1xl40s", "NVIDIA L40S", 48, 1)
    config = {**TIMING, "releases": {v: {"decode_slowdown": 1.1} for v in ("0.5.22", "0.5.23")}}
    results, store = tmp_path / "bisect", tmp_path / "history.sqlite"
    argv = [
        SGLPERF, "bisect", str(path), "--from", "0.5.19", "--to", "0.5.23", "-k", "defaults", "--emulator",
        "--emulator-config", json.dumps(config), "--results-dir", str(results), "--history-store", str(store),
    ]  # fmt: skip
    first = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    state_path = results / "bisect.json"
    kept = _wait_for(state_path, 1, first)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=300)
    skip_if_the_guard_said_so(err.splitlines())
    assert first.returncode == 130, err
    assert err.splitlines()[-1] == (
        f"sglperf: interrupted (the bisect's state is kept in {state_path}: the same command resumes it)"
    )
    assert "server starts if each comparison decides in 1 quartet(s)" in err  # the plan, before any start
    ends = kept.comparisons[0]
    assert (ends.purpose, ends.verdict) == (Purpose.ENDPOINTS, EffectVerdict.WORSE)

    again = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    skip_if_the_guard_said_so(again.stderr.splitlines())
    assert again.returncode == 0, again.stderr
    assert "resuming the bisect" in again.stderr
    assert "endpoints: 0.5.19 -> 0.5.23: worse" in again.stderr and "(measured before: not again)" in again.stderr
    out = again.stdout
    assert "culprit: 0.5.22 made decode_tok_s worse" in out, out
    assert "no effective-config change: the cause is in SGLang's code between 0.5.21 and 0.5.22" in out
    assert "(EMULATOR: a test double, not GPU results)" in out.splitlines()[0]
    final = bisect.read_state(state_path)
    assert final is not None
    assert final.comparisons[0].sessions == ends.sessions  # kept, never measured again
    sessions = {r: sum(s.release == r for c in final.comparisons for s in c.sessions) for r in final.releases}
    assert sessions["0.5.23"] == 2  # the endpoints' quartet only
    measured = [r for r, n in sessions.items() if n]
    assert len(measured) < len(final.releases), sessions  # fewer than a linear walk
    verify = final.comparisons[-1]
    assert (verify.purpose, verify.older, verify.newer, verify.verdict) == (
        Purpose.VERIFY,
        "0.5.21",
        "0.5.22",
        EffectVerdict.WORSE,
    )
    assert verify.ci_high is not None and verify.ci_high < 0.97  # the interval, beyond the 3% floor
    opened = open_store(str(store))
    assert opened is not None
    try:
        recorded = sorted(run.sglang_version for run in opened.runs())
    finally:
        opened.close()
    assert recorded == measured  # one run per release measured, the first session's record


def test_a_decode_graph_cap_moved_by_sglang_is_bisected_to_its_release_with_the_rule(
    tmp_path: Path, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process the emulator gives itself the runner's GPUs through the environment: gone afterwards.
    monkeypatch.delenv(gpus.SIMULATED_ENV, raising=False)
    for release in ("0.5.19", "0.5.20", "0.5.21"):
        sglang_python(release)
    monkeypatch.chdir(tmp_path)
    path = _deployment(tmp_path, "1x4090", "NVIDIA GeForce RTX 4090", 24, 32)
    said: list[str] = []
    try:
        result = bisect_command.bisect(
            bisect_command.BisectRequest(
                deployment=path,
                from_version="0.5.19",
                to_version="0.5.21",
                selector="c32",
                emulator=True,
                emulator_config=json.dumps({**TIMING, "eager_step_factor": 1.3}),
                history="off",
            ),
            said.append,
        )
    except HostBusyError as exc:
        skip_if_the_guard_said_so([str(exc)])
        raise
    outcome = result.outcome
    assert (outcome.answer, outcome.culprit, outcome.parent) == (Answer.CULPRIT, "0.5.20", "0.5.19"), outcome.summary
    assert outcome.verification is not None and outcome.verification.verdict is EffectVerdict.BETTER
    assert [c.purpose for c in outcome.state.comparisons] == [Purpose.ENDPOINTS, Purpose.CANDIDATE, Purpose.VERIFY]
    cap = next(c for c in outcome.changes if c.what == "cuda_graph_config.decode.max_bs")
    assert (cap.before, cap.after, cap.rule_release) == ("24", "48", "0.5.20")
    assert "handle_gpu_memory_settings (memory_hook.py:" in cap.rule
    assert any(c.what == "intent decode_cuda_graph" and "eager above" in c.before for c in outcome.changes)
    # The servers really ran eager above the cap on 0.5.19 and in the graph on 0.5.20: their own batch lines.
    logs = {
        r: (result.folder / "releases" / r / "servers" / f"{path.stem}-defaults.log").read_text()
        for r in ("0.5.19", "0.5.20")
    }
    assert "cuda graph: False" in logs["0.5.19"] and "cuda graph: True" in logs["0.5.20"]


def test_a_release_whose_server_will_not_start_is_tried_twice_then_a_verdict(
    tmp_path: Path, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.5.23's emulator exits during start-up (``exit_during_startup`` planted for that release only): one
    failed start is not yet a verdict; the second is, with the server's own words, and the release is not
    measured."""
    monkeypatch.setenv(gpus.SIMULATED_ENV, "1xNVIDIA L40S:48")  # the runner's GPUs, whatever ran before here
    python = sglang_python("0.5.23")
    deployment = load(_deployment(tmp_path, "1xl40s", "NVIDIA L40S", 48, 1))
    workload = deployment.workloads[0]
    said: list[str] = []
    options = LiveOptions(
        emulator=True,
        emulator_config=json.dumps({**TIMING, "releases": {"0.5.23": {"exit_during_startup": 3}}}),
        results_dir=tmp_path / "bisect",
        baselines_dir=tmp_path / "no-baselines",
        baseline_missing="skip",
        root=tmp_path,
    )
    sessions = ReleaseSessions(
        options, deployment, deployment.variants[0], workload, workload.load_points()[0], lambda r: python, said.append
    )
    try:
        with pytest.raises(bisect.ReleaseUnusable, match="exit") as raised:
            sessions.session("0.5.23")
    finally:
        sessions.close()
    retried = [line for line in said if "starting it once more before calling 0.5.23 unusable" in line]
    assert len(retried) == 1, said
    assert "\n" not in str(raised.value)
    # SGLang's words, from the server's log: what the emulator logs as SGLang's scheduler would
    assert "RuntimeError: emulated startup failure (exit_during_startup=3)" in str(raised.value)
    logs = sorted(p.name for p in (tmp_path / "bisect" / "releases" / "0.5.23" / "servers").glob("*.log*"))
    assert logs == ["1xl40s-defaults.log", "1xl40s-defaults.log.1"]  # two starts, each its own log
