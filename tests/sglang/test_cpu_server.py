"""The live and measure tiers against a real SGLang server on this CPU (not the emulator).

One real `sglang.launch_server --device cpu` serving the tiny Qwen3, variant plain: with SGLang's CPU
kernel where this CPU has AVX-512 (deployments/tiny-cpu.toml), else with no native kernel
(deployments/tiny-cpu-native.toml, torch_native attention). Its effective args and live evidence, a
baseline recorded and compared under baselines/cpu/, and teardown that leaves no process (server,
scheduler, detokenizer) after a normal stop, after Ctrl-C to pytest and after SIGKILL of pytest. Skips,
saying why, only where no SGLang CPU environment can be built (an AVX-512 CPU without the kernel folder).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sglperf.baselines import server_moves, store
from sglperf.judge import batch_evidence, live_evidence
from sglperf.measure.samples import HostBusyError
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, OVERLAP_SCHEDULE
from sglperf.model.measurement import BaselineStatus
from sglperf.model.prompts import load_prompts
from sglperf.model.verdict import Status
from sglperf.runtime import server_ledger
from sglperf.runtime.provenance import effective_config_record, effective_digest
from sglperf.runtime.server import Server
from sglperf.runtime.server_ledger import SHARED_MEMORY_DIR
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.session.measurement import CPU_NOTE, baseline_path
from sglperf.session.running import RunningVariant
from sglperf.sglang import cpu_features
from sglperf.sglang.cpu_shim import AMX_NOTE
from sglperf.sglang.flags import KV_POOL_CAP_FLAG
from sglperf.sglang.server_api import KV_POOL_TOKENS_FIELD, LAUNCH_SPECIFIC_FIELDS
from sglperf.testing.neighbours import foreign_spinners

from ..support.cpu_tier import (
    MARKER_ENV,
    ROOT,
    TINY_MODELS_ENV,
    cpu_setup,
    marked_processes,
    new_marker,
    restore_env,
    server_sessions,
)

pytestmark = [pytest.mark.needs_sglang, pytest.mark.quiet_host]
GONE_WITHIN_S = 30.0


def _wait_gone(marker: str, sessions: frozenset[int], seconds: float = GONE_WITHIN_S) -> list[int]:
    deadline = time.monotonic() + seconds
    while True:
        left = marked_processes(marker, sessions)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            lines.append(f"{pid}: {cmdline[:200]}")
        except OSError:
            lines.append(f"{pid}: (gone)")
    return "\n".join(lines)


# First, the tests with a server of their own: the plain server below lives from its first test to the
# module's end, and a server started beside it on a 2-CPU runner is slow to start and compile (the
# torch-compile test took 394 s there, against 72 s for the same start alone in the CPU tier's pass 1).


# Above the torch-compile variant's captured sizes (its own --cuda-graph-bs-decode 1 2).
WIDE_BATCH = 4


def test_the_cpu_graph_replays_up_to_its_captured_batch_and_eager_above_it(tmp_path: Path) -> None:
    """Captured, used, and covering the workload, on a real server. The torch-compile variant captures a
    CPU graph for batches 1 and 2: at concurrency 1 every decode batch replays it (the plain variant's:
    none); preflight fails a workload at 4 naming the cap, and that workload's rounds log
    "cpu graph: False" above batch 2. A variant asking for coverage (request decode_cuda_graph) is
    captured up to 4 (--torch-compile-max-bs 4) and the same workload replays the graph. SGLang 0.5.23
    captures no CPU graph without its CPU kernel ('TorchNativeAttnBackend' object has no attribute
    'init_cpu_graph_state')."""
    setup = cpu_setup()
    if setup.kernel != "sgl-kernel":
        pytest.skip(f"no CPU graph without SGLang's CPU kernel; this CPU {cpu_features.kernel_flags_missing()}")
    base = load(setup.deployment)
    chat = base.workloads[0].model_copy(update={"repeats": 3, "output_len": 24, "warmup": 1})
    # Twice as many prompts as in flight, so that each round decodes a full batch of WIDE_BATCH.
    wide = chat.model_copy(
        update={"id": "decode-chat-wide", "concurrency": [WIDE_BATCH], "max_prompts": 2 * WIDE_BATCH}
    )
    compiled = base.variant("torch-compile")
    covered = compiled.model_copy(
        update={
            "id": "torch-compile-covered",
            "flags": ["--enable-torch-compile"],
            "request": {DECODE_CUDA_GRAPH: True},
        }
    )
    deployment = base.model_copy(update={"variants": [compiled, covered], "workloads": [chat, wide]})
    saved = {k: os.environ.get(k) for k in (TINY_MODELS_ENV, MARKER_ENV)}
    os.environ[TINY_MODELS_ENV], os.environ[MARKER_ENV] = str(setup.models), new_marker()
    pre = PreflightSession(lambda: setup.python, lambda m: print(m, file=sys.stderr))
    # Without baselines: the variant whose graph stops below the wide workload fails preflight, which
    # rightly refuses to record one for it.
    options = LiveOptions(
        results_dir=tmp_path / "results", baselines_dir=tmp_path / "b", baseline_missing="skip", root=ROOT
    )
    live = LiveSession(options, pre, pre._progress)
    try:
        short = pre.verdict(deployment, compiled.id, DECODE_CUDA_GRAPH)
        asked = pre.verdict(deployment, covered.id, DECODE_CUDA_GRAPH)
        narrow = live.measure(deployment, compiled, chat, 1)
        outgrown = live.measure(deployment, compiled, wide, WIDE_BATCH)
        raised = live.measure(deployment, covered, wide, WIDE_BATCH)
    finally:
        live.close()
        pre.close()
        restore_env(saved)
    assert short.status == Status.FAIL and short.actual == "on, up to batch 2: eager above", short.message()
    assert f"decode-chat-wide at concurrency {WIDE_BATCH} decodes eager" in short.detail
    assert "the variant's own flags fix the sizes (--cuda-graph-bs-decode 1 2)" in short.detail
    assert f"--torch-compile-max-bs {WIDE_BATCH}" in short.detail
    assert asked.status == Status.PASS and asked.actual == f"on, up to batch {WIDE_BATCH}", asked.message()

    assert narrow.batches is not None and len(narrow.batches.rounds) == 3, narrow
    assert all(r.decode >= 2 and r.decode_graph == r.decode for r in narrow.batches.rounds), narrow.batches
    assert narrow.batches.graph_decode_line and "cpu graph: True" in narrow.batches.graph_decode_line
    assert not [p for p in narrow.problems if "eager" in p or "ran the graph" in p], narrow.problems

    assert outgrown.batches is not None and outgrown.batches.eager_decode_batches, outgrown.batches
    assert max(outgrown.batches.eager_decode_batches) > 2 and min(outgrown.batches.eager_decode_batches) > 2
    (problem,) = [p for p in outgrown.problems if p.startswith(DECODE_CUDA_GRAPH)]
    assert "ran eager above the largest captured batch 2" in problem and "cpu graph: False" in problem, problem

    assert raised.batches is not None, raised
    assert max(r.max_running_req or 0 for r in raised.batches.rounds) == WIDE_BATCH, raised.batches
    assert all(r.decode_graph == r.decode for r in raised.batches.rounds), raised.batches
    assert not raised.batches.eager_decode_batches and not [p for p in raised.problems if "eager" in p]


def _pytest_until_measuring(tmp: Path) -> tuple[subprocess.Popen[bytes], str, frozenset[int]]:
    """`pytest` on the plain variant's live items and one measurement, as a user runs it, until the
    measurement starts: a server that is up and stays up for seconds (the live items alone take two, and
    the stop after them one and a half)."""
    setup = cpu_setup()
    marker = new_marker()
    results = tmp / "results"
    env = {**os.environ, TINY_MODELS_ENV: str(setup.models), MARKER_ENV: marker}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(setup.deployment),
        "-k",
        f"{load(setup.deployment).key}-plain and (live or decode-chat)",
        f"--sglang-python={setup.python}",
        f"--results-dir={results}",
        "-p",
        "no:cacheprovider",
        "-q",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = results / "progress.log"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if log.is_file() and "-plain-decode-chat-c1: measuring" in log.read_text():
            return proc, marker, server_sessions(marker)
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    _wait_gone(marker, server_sessions(marker))
    pytest.fail(f"the measurement did not start under pytest (exit {proc.poll()}); see {log}")


@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_no_process_left_when_pytest_is_interrupted(tmp_path: Path, how: str) -> None:
    proc, marker, sessions = _pytest_until_measuring(tmp_path)
    # pytest, the preflight probe, the launcher (a session of its own), its scheduler and detokenizer
    assert sessions and len(marked_processes(marker, sessions)) >= 5
    proc.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("pytest did not exit within 60 s of Ctrl-C")
    left = _wait_gone(marker, sessions)
    assert not left, f"processes left after {how} of pytest:\n{_describe(left)}"
    # Its shared memory: removed by the stop after Ctrl-C; after SIGKILL, by the next launch's sweep.
    entries: list[server_ledger.LedgerEntry | None] = [e for e in _ledger_entries() if e.pid in sessions] or [None]
    (entry,) = entries
    if how == "ctrl-c":
        assert entry is None
        return
    assert entry is not None and entry.paths, "the healthy server's shared memory was not written down"
    assert all(os.path.exists(p) for p in entry.paths)  # SIGKILL: nobody stopped the server
    removed = server_ledger.sweep()
    assert set(entry.paths) <= set(removed) and not any(os.path.exists(p) for p in entry.paths)
    assert not entry.file.exists()


def _ledger_entries() -> list[server_ledger.LedgerEntry]:
    return [server_ledger.read_entry(f) for f in server_ledger.entry_files()]


class Plain:
    """The plain variant's real server, started once for this module."""

    @property
    def launched(self) -> Server:
        """The server as this module launched it (a running variant may also be an attached one)."""
        server = self.running.server
        assert isinstance(server, Server)
        return server

    def __init__(self, tmp: Path):
        self.setup = cpu_setup()
        self.python, models = self.setup.python, self.setup.models
        self.marker = new_marker()
        self.saved = {k: os.environ.get(k) for k in (TINY_MODELS_ENV, MARKER_ENV)}
        os.environ[TINY_MODELS_ENV] = str(models)
        os.environ[MARKER_ENV] = self.marker  # inherited by the server and every child it starts
        self.deployment: Deployment = load(self.setup.deployment)
        self.variant = self.deployment.variant("plain")
        self.preflight = PreflightSession(lambda: self.python, lambda m: print(m, file=sys.stderr))
        options = LiveOptions(
            results_dir=tmp / "results", baselines_dir=tmp / "baselines", update_baselines=True, root=ROOT
        )
        self.live = LiveSession(options, self.preflight, self.preflight._progress)
        self.running: RunningVariant = self.live.running(self.deployment, self.variant)
        self.sessions = server_sessions(self.marker)
        # What the server mapped in /dev/shm (SGLang's CPU allreduce buffer): must go with it.
        self.shared = {
            m.path
            for proc in psutil.Process(self.launched.proc.pid).children(recursive=True)
            for m in proc.memory_maps()
            if m.path.startswith(SHARED_MEMORY_DIR)
        }

    def close(self) -> None:
        self.live.close()
        self.preflight.close()
        restore_env(self.saved)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plain]:
    server = Plain(tmp_path_factory.mktemp("cpu-plain"))
    try:
        yield server
    finally:
        server.close()
        left = _wait_gone(server.marker, server.sessions)
        assert not left, f"processes left after a normal stop:\n{_describe(left)}"
        # Stopped, not crashed: SGLang's launcher did not read the stop as its scheduler dying.
        log = server.launched.spec.log_path.read_text()
        assert "crashed with exit code" not in log and "SIGQUIT" not in log, log[-2000:]
        assert server.shared, "expected SGLang's CPU backend to map a shared-memory buffer"
        assert not [p for p in server.shared if os.path.exists(p)], f"shared memory left: {server.shared}"


def test_it_is_a_real_sglang_server_on_the_cpu(plain: Plain) -> None:
    facts = plain.running.facts
    assert not facts.emulated and facts.device == "cpu" and facts.version == "0.5.23"
    # SGLang's CPU serving path (on a CPU without AMX the shim keeps SGLang on it, see cpu_shim.py), or
    # its torch_native fallback without a native kernel.
    assert facts.effective["attention_backend"] == plain.setup.attention_backend
    assert "emulated" not in facts.effective
    # SGLang starts a scheduler and a detokenizer beside the launcher: teardown must find them all.
    assert plain.launched.proc.pid in plain.sessions  # the launcher leads a session (the probe another)
    assert len(marked_processes(plain.marker, plain.sessions)) >= 4


def test_live_items_and_live_vs_preflight_pass(plain: Plain) -> None:
    verdicts = plain.live.verdicts(plain.deployment, plain.variant)
    assert {v.intent: v.status for v in verdicts} == {
        "prefill_cuda_graph": Status.PASS,
        DECODE_CUDA_GRAPH: Status.PASS,
        OVERLAP_SCHEDULE: Status.PASS,
    }
    decode = next(v for v in verdicts if v.intent == DECODE_CUDA_GRAPH)
    assert "decode_cuda_graph_bs = []" in decode.detail and decode.tier == "live"
    diverged, lines = plain.live.divergence(plain.deployment, plain.variant)
    assert not diverged.intent_fields, lines
    # The whole config the results folder keeps from the real server's /server_info: flattened, the
    # launch's own fields (its port, the model's path) left out, keyed by the baselines' digest.
    record = effective_config_record("live", "tiny", "plain", "0.5.23", plain.running.facts.effective)
    assert record.fields["attention_backend"] == plain.setup.attention_backend
    assert "port" not in record.fields and "model_path" not in record.fields
    assert record.digest == effective_digest(plain.running.facts.effective)


def test_args_saying_on_without_a_captured_decode_graph_fail_with_the_evidence(plain: Plain) -> None:
    """The real server's own internal_states: read as a server whose args say decode graph 'full'
    (the CPU rule aside) and that captured none, the live item fails, naming the evidence."""
    facts = plain.running.facts
    as_gpu_args = dataclasses.replace(facts, effective={k: v for k, v in facts.effective.items() if k != "device"})
    (verdict,) = live_evidence.check(
        plain.deployment.key,
        "plain",
        {DECODE_CUDA_GRAPH: True},
        as_gpu_args,
        "",
        config=plain.deployment.hf_config(),
        tp=1,
    )
    assert verdict.status == Status.FAIL and verdict.actual == "on in args, no graph captured"
    assert "internal_states[0].decode_cuda_graph_bs = []" in verdict.detail


def test_baseline_recorded_then_compared_as_cpu_numbers(plain: Plain) -> None:
    workload = plain.deployment.workloads[0].model_copy(update={"repeats": 5, "output_len": 24, "warmup": 1})
    recorded = plain.live.measure(plain.deployment, plain.variant, workload, 1)
    path = baseline_path(plain.live.options, plain.running)
    assert recorded.baseline_status == BaselineStatus.RECORDED and recorded.baseline == str(path)
    runner = plain.deployment.runner.name
    assert path.parts[-4:] == ("cpu", runner, plain.deployment.key, "plain.json") and path.is_file()
    assert CPU_NOTE in recorded.notes and not recorded.emulated
    assert recorded.provenance.kv_pool_tokens, "the real server's KV pool belongs in provenance"
    plain.live.options = dataclasses.replace(plain.live.options, update_baselines=False)
    compared = plain.live.measure(plain.deployment, plain.variant, workload, 1)
    assert compared.baseline_status == BaselineStatus.COMPARED, compared.problems
    assert {c.metric for c in compared.comparisons} >= {"decode_tok_s", "ttft_s"}
    assert recorded.host is not None and compared.host is not None  # counted, whatever this box is doing
    # Every measured round logged its decode batches (the launch set the interval), none ran a graph.
    assert compared.batches is not None and plain.running.decode_log_interval
    assert f"--decode-log-interval {plain.running.decode_log_interval}" in " ".join(plain.running.server.command)
    assert [r.round for r in compared.batches.rounds] == list(range(compared.rounds.used if compared.rounds else 0))
    assert all(r.decode >= 2 and r.decode_graph == 0 and r.prefill == 2 for r in compared.batches.rounds), (
        compared.batches
    )
    assert compared.batches.graph_label == "cpu graph" and not compared.problems
    # The real server's /metrics was read around every measured round (the launch turned it on).
    assert "--enable-metrics" in plain.running.server.command and compared.server_metrics_note is None
    assert compared.provenance.server_metrics is True  # as the server's args say
    metrics = compared.server_metrics
    assert metrics is not None and metrics.scrapes >= 2 * (compared.rounds.used if compared.rounds else 0)
    assert workload.prompts is not None  # a prompts file, not a synthetic set
    prompts = len(load_prompts(plain.deployment.path.parent / workload.prompts).prompts[: workload.max_prompts])
    rounds = len(metrics.series["sglang:num_requests_total"])
    assert metrics.series["sglang:num_requests_total"] == [prompts] * rounds
    assert metrics.series["sglang:generation_tokens_total"] == [prompts * workload.output_len] * rounds
    assert metrics.series["sglang:num_retracted_requests_total"] == [0.0] * rounds  # defined, never printed
    assert max(metrics.series["sglang:num_running_reqs:max"]) <= 1  # concurrency 1
    stored = store.load(path).entries[store.entry_key(workload.id, 1)].server
    assert set(stored) >= {"sglang:num_retracted_requests_total", "sglang:num_queue_reqs:max"}
    # Expected on, the same real log fails the measurement, quoting SGLang's line.
    problems, _ = batch_evidence.judge(compared.batches, {DECODE_CUDA_GRAPH: True})
    assert len(problems) == 1 and "decode_cuda_graph expected on, but none of the" in problems[0]
    assert "'Decode batch, #running-req: 1, " in problems[0] and "cpu graph: False" in problems[0]
    # On a CPU without AMX the effective args still say intel_amx: the shim's doing, and every record says so.
    shimmed = plain.setup.kernel == "sgl-kernel" and "amx_tile" not in cpu_features.cpu_flags()
    assert (AMX_NOTE in compared.notes) == shimmed, compared.notes


def test_a_second_start_has_the_same_effective_args_digest(plain: Plain, tmp_path: Path) -> None:
    """Otherwise every comparison says "effective server args changed since the baseline" for nothing
    (0.5.23's /server_info carries start-up timings, and a KV pool that, left to SGLang, it sizes from the
    memory free at start). The deployment caps the pool; the second start leaves it to SGLang."""
    cap = plain.deployment.launch.extra_flags.index(KV_POOL_CAP_FLAG)
    tokens = int(plain.deployment.launch.extra_flags[cap + 1])
    sized_by_sglang = plain.deployment.without_launch_flag(KV_POOL_CAP_FLAG)
    second = LiveSession(LiveOptions(results_dir=tmp_path / "results", root=ROOT), plain.preflight, print)
    try:
        first = plain.running.facts.effective
        again = second.running(sized_by_sglang, sized_by_sglang.variant(plain.variant.id)).facts.effective
    finally:
        second.close()
    differing = sorted(k for k in {*first, *again} - LAUNCH_SPECIFIC_FIELDS if first.get(k) != again.get(k))
    assert effective_digest(first) == effective_digest(again), f"fields differing between two starts: {differing}"
    assert 0 < first[KV_POOL_TOKENS_FIELD] <= tokens < again[KV_POOL_TOKENS_FIELD]


def test_real_retractions_are_counted_per_round_and_named(plain: Plain, tmp_path: Path) -> None:
    """SGLang's own retraction test hook (SGLANG_TEST_RETRACT: a retraction every third forward pass) on a
    second real server: its /metrics counts retractions in every round, the plain server's in none, and
    the watched series is named as moved, as a failing measurement's line would."""
    workload = plain.deployment.workloads[0].model_copy(update={"repeats": 3, "output_len": 48, "warmup": 0})
    quiet = plain.live.measure(plain.deployment, plain.variant, workload, 2)
    # Started with one flag more, which changes one effective field: its records name it against the plain
    # server's, from what each real server's /server_info said.
    retracting = plain.deployment.with_launch_env({"SGLANG_TEST_RETRACT": "1"})
    launch = retracting.launch.model_copy(update={"extra_flags": [*retracting.launch.extra_flags, *SCHEDULE_LPM]})
    retracting = retracting.model_copy(update={"launch": launch})
    options = LiveOptions(
        results_dir=tmp_path / "results", baselines_dir=tmp_path / "b", update_baselines=True, root=ROOT
    )
    live = LiveSession(options, plain.preflight, print)
    try:
        record = live.measure(retracting, plain.variant, workload, 2)
        log = live.running(retracting, plain.variant).server.spec.log_path.read_text()
    finally:
        live.close()
    assert quiet.server_metrics is not None and record.server_metrics is not None
    retracted = record.server_metrics.series["sglang:num_retracted_requests_total"]
    assert min(retracted) >= 1, retracted
    assert set(quiet.server_metrics.series["sglang:num_retracted_requests_total"]) == {0.0}
    assert "Testing retraction. #retracted_reqs: 1" in log  # SGLang's own line for it
    moved = server_moves.moved_series(quiet.server_metrics.series, record.server_metrics.series)
    assert moved and moved[0].startswith("retracted requests per round rose from 0 to "), moved
    note = store.effective_args_note(quiet.provenance, record.provenance)
    assert note == "effective server args changed since the baseline: schedule_policy 'fcfs' -> 'lpm'", note


SCHEDULE_LPM = ("--schedule-policy", "lpm")  # not SGLang's default (fcfs); orders the queue, not the batch


def test_a_busy_neighbour_is_named_not_blamed_on_sglang(plain: Plain) -> None:
    """What failed a CI run: the CPU server slowed by +70% by other work on the box, and read as an
    SGLang regression. Two busy loops per CPU make every round dropped, then one clear error. Rounds
    of about a second: in a tenth of one, tick rounding (the slack) could hide a neighbour that the
    scheduler happened to hold back."""
    workload = plain.deployment.workloads[0].model_copy(update={"repeats": 2, "output_len": 160, "warmup": 0})
    saved = plain.live.options
    plain.live.options = dataclasses.replace(saved, update_baselines=False, max_host_load=0.1, host_quiet_wait_s=1.0)
    try:
        with foreign_spinners(2 * (psutil.cpu_count() or 1)) as spinners, pytest.raises(HostBusyError) as info:
            plain.live.measure(plain.deployment, plain.variant, workload, 1)
    finally:
        plain.live.options = saved
    message = str(info.value)
    assert message.startswith(f"{plain.running.server.base_url} {workload.id}: the host stayed busy: 3 rounds dropped")
    assert any(f"pid {p.pid}" in message for p in spinners), message
