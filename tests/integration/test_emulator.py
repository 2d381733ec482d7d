"""The SGLang emulator: HTTP API, timing truth, and every injected fault, against a real subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sglperf.runtime.server import free_port
from sglperf.sglang.batch_log import parse_batch_lines
from sglperf.testing.emulator.config import CONFIG_ENV, EFFECTIVE_ENV, EmulatorConfig
from sglperf.testing.emulator.console import READY_LINE
from sglperf.testing.emulator.timing import (
    expected_accept_length,
    expected_decode_tok_s,
    plan_request,
    prompt_tokens_of_text,
)

from ..support.project import ROOT
from ..support.quiet_host import judged_on_a_quiet_host

pytestmark = pytest.mark.selftest

SPEC_ARGV = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-num-draft-tokens",
    "4",
    "--speculative-eagle-topk",
    "1",
)


@dataclass
class Emulator:
    proc: subprocess.Popen[bytes]
    url: str
    stdout: Path
    stderr: Path

    def log(self) -> str:
        return self.stdout.read_text()

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 10.0), **kwargs)

    def status(self, path: str = "/health") -> int | None:
        """The status of GET path, or None while nothing listens yet."""
        try:
            return httpx.get(self.url + path, timeout=2.0).status_code
        except httpx.TransportError:
            return None

    def wait_listening(self, timeout: float = 60.0) -> None:
        """Until the emulator answers at all (any status)."""
        deadline = time.monotonic() + timeout
        while self.status() is None:
            assert self.proc.poll() is None, f"emulator exited early:\n{self.stderr.read_text()}"
            assert time.monotonic() < deadline, f"emulator not listening after {timeout} s"
            time.sleep(0.02)

    def wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status() == 200:
                return
            assert self.proc.poll() is None, f"emulator exited early:\n{self.stderr.read_text()}"
            time.sleep(0.02)
        raise AssertionError("emulator did not become healthy")


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Emulator]]:
    """Start emulators as subprocesses; every one is killed when the test ends."""
    procs: list[subprocess.Popen[bytes]] = []

    def _spawn(
        *argv: str, config: dict[str, Any] | None = None, effective: dict[str, Any] | None = None, wait: bool = True
    ) -> Emulator:
        n = len(procs)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLPERF_EMULATOR")}
        env[CONFIG_ENV] = json.dumps({"startup_s": 0.1, **(config or {})})
        if effective is not None:
            path = tmp_path / f"effective{n}.json"
            path.write_text(json.dumps(effective))
            env[EFFECTIVE_ENV] = str(path)
        out, err = tmp_path / f"emu{n}.out", tmp_path / f"emu{n}.err"
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sglperf.testing.emulator", "--port", str(port), *argv],
                cwd=ROOT,
                env=env,
                stdout=o,
                stderr=e,
            )
        procs.append(proc)
        emu = Emulator(proc, f"http://127.0.0.1:{port}", out, err)
        if wait:
            emu.wait_healthy()
        return emu

    try:
        yield _spawn
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"architectures": ["Qwen3_5ForConditionalGeneration"]}))
    return path


def sse(client: httpx.Client, path: str, body: dict[str, Any]) -> list[tuple[float, str]]:
    """(arrival time, data) of each SSE event of a streamed POST."""
    events = []
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append((time.perf_counter(), line[len("data: ") :]))
    return events


def native_chunks(events: list[tuple[float, str]]) -> list[tuple[float, dict[str, Any]]]:
    assert events[-1][1] == "[DONE]"
    return [(t, json.loads(data)) for t, data in events[:-1]]


def stream_body(max_new_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": "The quick brown fox jumps over the lazy dog.",
        "stream": True,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        **extra,
    }


def test_unknown_config_key_exits_2_naming_it() -> None:
    env = {**os.environ, CONFIG_ENV: json.dumps({"decode_step": 0.01})}
    done = subprocess.run(
        [sys.executable, "-m", "sglperf.testing.emulator", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "'decode_step'" in done.stderr and "decode_step_s" in done.stderr


# --- startup, info endpoints ---


def test_health_503_then_200_and_log(spawn: Callable[..., Emulator], model_dir: Path) -> None:
    emu = spawn(
        "--model-path",
        str(model_dir),
        "--tp",
        "2",
        "--mem-fraction-static",
        "0.8",
        "--some-new-flag",
        config={"startup_s": 1.0},
        wait=False,
    )
    statuses = []
    while (status := emu.status()) != 200:
        if status is not None:
            statuses.append(status)
        time.sleep(0.02)
    assert statuses and set(statuses) == {503}
    lines = emu.log().splitlines()
    assert "sglperf emulator" in lines[0] and "TEST DOUBLE" in lines[0] and "not a GPU" in lines[0]
    assert any("Load weight end." in ln and "mem usage=27.50 GB" in ln for ln in lines)
    assert any("Capture cuda graph end" in ln for ln in lines)
    assert not any("capture prefill" in ln.lower() for ln in lines)
    assert READY_LINE in lines[-1]
    with emu.client() as c:
        info = c.get("/server_info").json()
    assert info["effective_source"] == "argv" and info["tp_size"] == 2 and info["emulated"] is True
    assert info["speculative_algorithm"] is None
    assert info["internal_states"][0]["memory_usage"]["graph"]["prefill"] == 0


def test_server_info_from_effective_file(spawn: Callable[..., Emulator], model_dir: Path) -> None:
    effective = {
        "model_path": str(model_dir),
        "tp_size": 2,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_num_draft_tokens": 4,
        "speculative_eagle_topk": 1,
        "cuda_graph_config": {"prefill": {"backend": "breakable"}, "decode": {"backend": "full"}},
        "mem_fraction_static": 0.85,
    }
    emu = spawn(
        "--model-path",
        str(model_dir),
        config={"vision_weight_gb_per_gpu": 1.5},
        effective={"sglang_version": "0.5.23", "effective": effective},
    )
    with emu.client() as c:
        info = c.get("/server_info").json()
        assert c.get("/get_server_info").json()["version"] == "0.5.23"
        model = c.get("/model_info").json()
        assert c.get("/get_model_info").json() == model
        for _ in range(2):
            flushed = c.post("/flush_cache")
            assert flushed.status_code == 200 and flushed.text.startswith("Cache flushed.")
        assert c.get("/server_info").json()["flush_count"] == 2
        assert c.get("/metrics").status_code == 404  # no --enable-metrics
    assert info["emulated"] is True and info["effective_source"] == "preflight" and info["version"] == "0.5.23"
    for key, value in effective.items():
        assert info[key] == value
    state = info["internal_states"][0]
    assert "avg_spec_accept_length" not in state
    assert state["memory_usage"]["weight"] == pytest.approx(29.0)
    graph = state["memory_usage"]["graph"]
    # speculative decoding: the target's decode graph is its verify graph, as SGLang reports it
    assert graph["prefill"] > 0 and graph["target_verify"] > 0 and graph["decode"] == 0
    assert state["decode_cuda_graph_bs"] and state["decode_cuda_graph_memory_gb"] > 0
    assert isinstance(state["memory_usage"]["token_capacity"], int)
    assert {k: model[k] for k in ("model_path", "tokenizer_path", "is_generation", "architectures")} == {
        "model_path": str(model_dir),
        "tokenizer_path": str(model_dir),
        "is_generation": True,
        "architectures": ["Qwen3_5ForConditionalGeneration"],
    }
    assert model["has_image_understanding"] is True and model["has_audio_understanding"] is False
    with c_models(emu.url) as models:
        assert models["data"][0]["owned_by"] == "sglang" and models["object"] == "list"
    assert any("capture prefill cuda graph end" in ln.lower() for ln in emu.log().splitlines())
    assert any("mem usage=29.00 GB" in ln for ln in emu.log().splitlines())


@contextlib.contextmanager
def c_models(url: str) -> Iterator[dict[str, Any]]:
    """/v1/models, which SGLang serves (bench_serving asks it for the model id)."""
    with httpx.Client(base_url=url) as client:
        response = client.get("/v1/models")
        assert response.status_code == 200
        yield response.json()


# --- generation ---


def test_generate_stream_speculative(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(*SPEC_ARGV, "--enable-metrics", config={"decode_step_s": 0.002})
    with emu.client() as c:
        assert "avg_spec_accept_length" not in c.get("/server_info").json()["internal_states"][0]
        chunks = native_chunks(sse(c, "/generate", stream_body(200)))
        state = c.get("/server_info").json()
        metrics = c.get("/metrics").text
        whole = c.post("/generate", json={**stream_body(30), "stream": False}).json()
    assert state["speculative_algorithm"] == "EAGLE"  # NEXTN rewritten, as SGLang does
    previous = 0
    deltas = []
    for _, chunk in chunks:
        meta = chunk["meta_info"]
        assert meta["completion_tokens"] == len(chunk["output_ids"]) == chunk["text"].count(" tok")
        deltas.append(meta["completion_tokens"] - previous)
        previous = meta["completion_tokens"]
    assert deltas[0] == 1 and max(deltas) > 1 and min(deltas) >= 1
    assert all(m["meta_info"]["finish_reason"] is None for _, m in chunks[:-1])
    final = chunks[-1][1]["meta_info"]
    assert final["finish_reason"] == {"type": "length", "length": 200} and final["completion_tokens"] == 200
    assert final["spec_accept_length"] == pytest.approx(final["completion_tokens"] / final["spec_verify_ct"])
    assert 0 < final["spec_accept_rate"] <= 1 and final["e2e_latency"] > 0
    avg = state["internal_states"][0]["avg_spec_accept_length"]
    assert avg == pytest.approx(final["spec_accept_length"])
    assert "sglang:spec_accept_length" in metrics and "sglang:num_requests_total" in metrics
    assert whole["meta_info"]["completion_tokens"] == 30 and len(whole["output_ids"]) == 30
    assert whole["meta_info"]["spec_accept_length"] == pytest.approx(30 / whole["meta_info"]["spec_verify_ct"])


def scrape(client: httpx.Client) -> dict[str, Metric]:
    """The /metrics families by name (a counter's without ``_total``), as the suite parses them."""
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {f.name: f for f in text_string_to_metric_families(response.text)}


def value(families: dict[str, Metric], sample: str, **labels: str) -> float | None:
    """The sample's value (summed over the labels not given), or None when the server has none."""
    found = [
        s.value
        for family in families.values()
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    ]
    return sum(found) if found else None


SCHEDULER_LABELS = {"engine_type": "unified", "model_name": "tiny", "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
SGLANG_E2E_BUCKETS = ["0.1", "0.2", "0.4", "0.6", "0.8", "1.0", "2.0", "4.0", "6.0", "8.0", "10.0", "20.0", "40.0"]
SGLANG_E2E_BUCKETS += ["60.0", "80.0", "100.0", "200.0", "400.0", "600.0", "1200.0", "1800.0", "2400.0", "+Inf"]


def test_metrics_count_what_was_served(spawn: Callable[..., Emulator]) -> None:
    emu = spawn("--enable-metrics", "--served-model-name", "tiny", config={"decode_step_s": 0.002, "noise_cv": 0.0})
    prompt = prompt_tokens_of_text(stream_body(1)["text"])
    with emu.client() as c, emu.client() as other:
        before = scrape(c)
        # As in SGLang (prometheus multiprocess mode), a labelled counter is absent until it first moves.
        assert "sglang:num_requests" not in before and "sglang:time_to_first_token_seconds" not in before
        [running] = before["sglang:num_running_reqs"].samples
        assert running.labels == SCHEDULER_LABELS and running.value == 0
        assert before["sglang:num_running_reqs"].documentation == "The number of running requests."
        sse(c, "/generate", stream_body(20))
        assert c.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}}).is_success
        with c.stream("POST", "/generate", json=stream_body(400)) as response:
            lines = response.iter_lines()  # kept: a dropped iterator closes the connection
            next(lines)
            during = scrape(other)
        # Left before its end: the server aborts it once it finds the client gone.
        deadline = time.monotonic() + 30
        while value(after := scrape(c), "sglang:num_aborted_requests_total") is None and time.monotonic() < deadline:
            time.sleep(0.02)
    assert value(during, "sglang:num_running_reqs") == 1 and value(during, "sglang:num_queue_reqs") == 0
    usage = value(during, "sglang:token_usage")
    assert usage is not None and 0 < usage < 1
    assert value(after, "sglang:num_aborted_requests_total") == 1
    family = after["sglang:num_requests"]
    assert family.type == "counter" and family.documentation == "Number of requests processed."
    for stream, prompt_tokens, generated in (("true", prompt, 20), ("false", 3, 5)):
        assert value(after, "sglang:num_requests_total", is_streaming=stream) == 1  # the aborted one is not
        assert value(after, "sglang:prompt_tokens_total", is_streaming=stream) == prompt_tokens
        assert value(after, "sglang:generation_tokens_total", is_streaming=stream) == generated
        assert value(after, "sglang:e2e_request_latency_seconds_count", is_streaming=stream) == 1
    # TTFT is observed at the first token, so the aborted stream counts there.
    assert value(after, "sglang:time_to_first_token_seconds_count", is_streaming="true") == 2
    assert value(after, "sglang:time_to_first_token_seconds_bucket", le="0.1", is_streaming="true") == 2
    e2e = after["sglang:e2e_request_latency_seconds"]
    assert e2e.type == "histogram" and e2e.documentation == "Histogram of End-to-end request latency in seconds"
    buckets = [s.labels["le"] for s in e2e.samples if s.name.endswith("_bucket") and s.labels["is_streaming"] == "true"]
    assert buckets == SGLANG_E2E_BUCKETS
    assert value(after, "sglang:num_running_reqs") == 0 and value(after, "sglang:token_usage") == 0
    throughput = value(after, "sglang:gen_throughput")
    assert value(after, "sglang:cache_hit_rate") == 0 and throughput is not None and throughput > 0
    [retracted] = after["sglang:num_retracted_reqs"].samples
    assert retracted.value == 0 and retracted.labels == {**SCHEDULER_LABELS, "pid": str(emu.proc.pid)}
    assert "sglang:num_retracted_requests" not in after


def test_retraction_fault(spawn: Callable[..., Emulator]) -> None:
    config: dict[str, Any] = {"decode_step_s": 0.002, "noise_cv": 0.0, "retract_pause_s": 0.3}
    plain = spawn("--enable-metrics", config=config, wait=False)
    emu = spawn("--enable-metrics", config={**config, "retract_fraction": 1.0}, wait=False)
    plain.wait_healthy()
    emu.wait_healthy()
    retracting = EmulatorConfig(**{**config, "retract_fraction": 1.0})
    prompt = prompt_tokens_of_text(stream_body(1)["text"])
    plans = [
        plan_request(retracting, None, p, n, np.random.default_rng([0, i]))
        for i, p, n in ((0, prompt, 40), (1, 3, 8), (2, prompt, 40))
    ]
    points: list[int] = []
    for plan in plans:
        assert plan.retract_tokens is not None
        points.append(plan.retract_tokens)

    def timed(emu: Emulator) -> tuple[float, list[tuple[float, dict[str, Any]]]]:
        with emu.client() as c:
            start = time.perf_counter()
            chunks = native_chunks(sse(c, "/generate", stream_body(40)))
        return time.perf_counter() - start, chunks

    plain_s, _ = timed(plain)
    slow_s, chunks = timed(emu)
    # Slower by the pause (and the re-prefill's 0.1 ms per token): a gap right after the retraction point.
    # The server keeps absolute deadlines, so a busy host only lengthens the whole request (at least the
    # pause and the 39 decode steps after the first token), while a late chunk before the pause shortens
    # the gap after it: 50 ms of slack there, none on the whole.
    assert 0.3 + 39 * config["decode_step_s"] <= slow_s < plain_s + 0.6
    sent = [m["meta_info"]["completion_tokens"] for _, m in chunks]
    at = sent.index(points[0])
    assert chunks[at + 1][0] - chunks[at][0] > 0.25
    with emu.client() as c, emu.client() as other:
        assert c.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}}).is_success
        with c.stream("POST", "/generate", json=stream_body(40)) as response:
            for line in response.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:])["meta_info"]["completion_tokens"] == points[2]:
                    paused = _scrape_retracted(other, 3)
        after = scrape(c)
    # While retracted the request waits in the queue, holding no KV.
    assert value(paused, "sglang:num_queue_reqs") == 1 and value(paused, "sglang:num_running_reqs") == 0
    assert value(paused, "sglang:token_usage") == 0
    assert value(after, "sglang:num_retracted_requests_total") == 3
    assert value(after, "sglang:num_retracted_input_tokens_total") == 2 * prompt + 3
    assert value(after, "sglang:num_retracted_output_tokens_total") == sum(points)
    assert value(after, "sglang:num_retracted_reqs") in (0, 1)  # retracted since the report before the last
    assert after["sglang:num_retracted_requests"].documentation == "Total number of retracted requests."
    lines = [ln for ln in emu.log().splitlines() if "KV cache pool is full. Retract requests." in ln]
    assert len(lines) == 3
    assert f"#retracted_reqs: 1, #new_tokens_gained: {prompt + points[0]}, #new_token_ratio: " in lines[0]
    with plain.client() as c:
        assert "sglang:num_retracted_requests" not in scrape(c)
    assert "Retract requests" not in plain.log()


def _scrape_retracted(client: httpx.Client, count: int) -> dict[str, Metric]:
    """/metrics once it has counted ``count`` retractions (a moment after the token before the last is out)."""
    deadline = time.monotonic() + 5  # a wait: a busy host delays the count
    while value(families := scrape(client), "sglang:num_retracted_requests_total") != count:
        assert time.monotonic() < deadline, "the retraction was not counted"
        time.sleep(0.005)
    return families


def _decode_rate(chunks: list[tuple[float, dict[str, Any]]]) -> float:
    """Tokens after the first chunk over the time from the first chunk to the last."""
    tokens: int = chunks[-1][1]["meta_info"]["completion_tokens"] - chunks[0][1]["meta_info"]["completion_tokens"]
    return tokens / (chunks[-1][0] - chunks[0][0])


# A 2 ms step is timed by the emulator's sleeps: a neighbour on the CPU stretches them (3% off under one).
@pytest.mark.quiet_host
def test_decode_rate_matches_truth(spawn: Callable[..., Emulator]) -> None:
    plain_config: dict[str, Any] = {"noise_cv": 0.0, "decode_step_s": 0.004}
    spec_config: dict[str, Any] = {"noise_cv": 0.0, "decode_step_s": 0.002}  # ~1300 tok/s: 10x a real rate
    plain, spec = spawn(config=plain_config, wait=False), spawn(*SPEC_ARGV, config=spec_config, wait=False)
    plain.wait_healthy()
    spec.wait_healthy()
    with judged_on_a_quiet_host():
        with plain.client() as c:
            plain_rate = _decode_rate(native_chunks(sse(c, "/generate", stream_body(300))))
        with spec.client() as c:
            spec_chunks = native_chunks(sse(c, "/generate", stream_body(1500)))
        _assert_rates(plain_rate, spec_chunks, plain_config, spec_config)


def _assert_rates(
    plain_rate: float,
    spec_chunks: list[tuple[float, dict[str, Any]]],
    plain_config: dict[str, Any],
    spec_config: dict[str, Any],
) -> None:
    assert plain_rate == pytest.approx(expected_decode_tok_s(EmulatorConfig(**plain_config), None), rel=0.05)
    assert _decode_rate(spec_chunks) == pytest.approx(expected_decode_tok_s(EmulatorConfig(**spec_config), 3), rel=0.05)
    final = spec_chunks[-1][1]["meta_info"]
    assert final["spec_accept_length"] == pytest.approx(expected_accept_length(0.7, 3), rel=0.05)
    # Against this request's own draws (seeded) the emitted rate is tighter still.
    realized = (final["completion_tokens"] - 1) / (final["spec_verify_ct"] * spec_config["decode_step_s"])
    assert _decode_rate(spec_chunks) == pytest.approx(realized, rel=0.03)


# --- under load (timing.py's "Under load") ---

# Slow enough that 8 streams and their client threads keep up on a busy 2-CPU box; an 11-token prompt
# prefills in 44 ms, so a burst of 8 queues about 0.3 s behind one prefill slot.
LOAD_BASE: dict[str, Any] = {"decode_step_s": 0.008, "prefill_s_per_token": 0.004, "noise_cv": 0.0}
LOAD_KNOBS: dict[str, Any] = {"step_s_per_running_request": 0.008, "prefill_slots": 1}
LOAD_TOKENS = 25


@dataclass(frozen=True)
class Streamed:
    """One stream as its client saw it, with the server's final ``meta_info``."""

    ttft: float
    decode_tok_s: float
    meta: dict[str, Any]


def _streams(emu: Emulator, n: int) -> list[Streamed]:
    """n streams of LOAD_TOKENS tokens sent together (each from its own thread and connection)."""
    gate = threading.Barrier(n)

    def one(_: int) -> Streamed:
        with emu.client() as c:
            gate.wait()
            start = time.perf_counter()
            chunks = native_chunks(sse(c, "/generate", stream_body(LOAD_TOKENS)))
        return Streamed(chunks[0][0] - start, _decode_rate(chunks), chunks[-1][1]["meta_info"])

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def _p99(values: list[float]) -> float:
    return float(np.percentile(values, 99))


def _gauges_during(emu: Emulator, work: Callable[[], list[Streamed]]) -> tuple[list[Streamed], dict[str, float]]:
    """``work``'s result, and the highest num_running_reqs / num_queue_reqs /metrics showed meanwhile."""
    names = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
    highest = dict.fromkeys(names, 0.0)
    done = threading.Event()

    def watch() -> None:
        with emu.client() as c:
            while not done.is_set():
                families = scrape(c)
                for name in names:
                    highest[name] = max(highest[name], value(families, name) or 0.0)
                time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = work()
    finally:
        done.set()
        watcher.join(timeout=10)
    return result, highest


def test_load_knobs_slow_a_burst_but_not_a_request_alone(spawn: Callable[..., Emulator]) -> None:
    plain = spawn("--enable-metrics", config=LOAD_BASE, wait=False)
    loaded = spawn("--enable-metrics", config={**LOAD_BASE, **LOAD_KNOBS}, wait=False)
    plain.wait_healthy()
    loaded.wait_healthy()
    plain_alone, loaded_alone = _streams(plain, 1)[0], _streams(loaded, 1)[0]
    plain_burst = _streams(plain, 8)
    loaded_burst, highest = _gauges_during(loaded, lambda: _streams(loaded, 8))

    # (c) Alone, the knobs change nothing: no queue, the plan's own first token, the single-stream rate.
    truth = EmulatorConfig(**LOAD_BASE)
    prompt = prompt_tokens_of_text(stream_body(1)["text"])
    first_token = plan_request(truth, None, prompt, LOAD_TOKENS, np.random.default_rng([0, 0]))  # noise off
    # The rates are the server's own (the model's times): over 0.2 s, one chunk read 20 ms late on a busy
    # host would move a client-side rate by 10%.
    for alone in (plain_alone, loaded_alone):
        assert alone.meta["queue_time"] == 0.0
        assert alone.meta["first_token_latency"] == first_token.passes[0].at_s
        assert alone.meta["decode_throughput"] == pytest.approx(expected_decode_tok_s(truth, None), rel=0.1)
    assert loaded_alone.meta["decode_throughput"] == pytest.approx(plain_alone.meta["decode_throughput"], rel=0.1)

    # (a) Knobs off: 8 at once are served as if each were alone.
    assert all(s.meta["queue_time"] == 0.0 for s in plain_burst)
    assert {s.meta["first_token_latency"] for s in plain_burst} == {first_token.passes[0].at_s}
    assert statistics.median(s.decode_tok_s for s in plain_burst) > 0.7 * plain_alone.decode_tok_s

    # (b) Knobs on: the burst queues for prefill (a tail TTFT several times one alone, and than the same
    # burst without the knobs) and decodes in one batch (per-stream decode several times slower).
    ttfts = [s.ttft for s in loaded_burst]
    assert _p99(ttfts) > 3 * loaded_alone.ttft and _p99(ttfts) > 2 * _p99([s.ttft for s in plain_burst])
    assert max(s.meta["queue_time"] for s in loaded_burst) > 0
    assert statistics.median(s.decode_tok_s for s in loaded_burst) < loaded_alone.decode_tok_s / 3
    # The server's own account of the batch agrees (its times are the model's, free of client jitter).
    assert statistics.median(s.meta["decode_throughput"] for s in loaded_burst) < (
        loaded_alone.meta["decode_throughput"] / 3
    )
    # /metrics saw the queue and the batch, and both are empty again.
    assert highest["sglang:num_queue_reqs"] >= 1 and highest["sglang:num_running_reqs"] >= 2
    with loaded.client() as c:
        after = scrape(c)
    assert value(after, "sglang:num_queue_reqs") == 0 and value(after, "sglang:num_running_reqs") == 0
    # So do the batch lines: a prefill with requests queued behind it, a decode batch of several.
    lines = parse_batch_lines(loaded.log())
    assert max(b.queue_req or 0 for b in lines if b.kind == "prefill") >= 1
    assert max(b.running_req or 0 for b in lines if b.kind == "decode") >= 2
    assert max(b.queue_req or 0 for b in parse_batch_lines(plain.log())) == 0


def test_eager_steps_above_the_captured_batch_cost_what_the_knob_says(spawn: Callable[..., Emulator]) -> None:
    """A decode graph captured up to batch 4: a request alone runs in it at the plan's rate; eight at once
    run eager, twice as slow per step with ``eager_step_factor`` 2, and their batch lines say eager."""
    effective = {
        "sglang_version": "0.5.23",
        "effective": {"cuda_graph_config": {"decode": {"backend": "full", "bs": [1, 2, 4]}}},
    }
    emu = spawn(
        "--enable-metrics",
        "--decode-log-interval",
        "1",
        config={**LOAD_BASE, "eager_step_factor": 2.0},
        effective=effective,
    )
    alone = _streams(emu, 1)[0]
    burst = _streams(emu, 8)
    truth = EmulatorConfig(**LOAD_BASE)
    assert alone.meta["decode_throughput"] == pytest.approx(expected_decode_tok_s(truth, None), rel=0.1)
    assert statistics.median(s.meta["decode_throughput"] for s in burst) == pytest.approx(
        alone.meta["decode_throughput"] / 2, rel=0.15
    )
    decode = [b for b in parse_batch_lines(emu.log()) if b.kind == "decode"]
    assert any(b.running_req == 1 and b.graph for b in decode)
    assert any((b.running_req or 0) > 4 and b.graph is False for b in decode)


def test_openai_streams_expose_tokens_per_chunk(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(*SPEC_ARGV, config={"decode_step_s": 0.002})
    client = openai.OpenAI(base_url=emu.url + "/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=60,
        stream=True,
        logprobs=True,
        stream_options={"include_usage": True},
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    per_chunk, text, finishes, usage = [], "", [], None
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []
            usage = chunk.usage
            continue
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        finishes.append(choice.finish_reason)
        if choice.logprobs is not None:
            assert choice.logprobs.content is not None
            tokens = [t.token for t in choice.logprobs.content]
            assert "".join(tokens) == choice.delta.content
            per_chunk.append(len(tokens))
    assert usage is not None and sum(per_chunk) == usage.completion_tokens == 60
    assert max(per_chunk) > 1 and text.count(" tok") == 60
    assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
    whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=7)
    assert whole.usage is not None and whole.usage.completion_tokens == 7
    assert whole.choices[0].finish_reason == "length"

    with emu.client() as c:
        events = sse(
            c,
            "/v1/completions",
            {
                "prompt": "hello",
                "max_tokens": 40,
                "stream": True,
                "logprobs": 1,
                "stream_options": {"include_usage": True},
            },
        )
    assert events[-1][1] == "[DONE]"
    objects = [json.loads(data) for _, data in events[:-1]]
    assert objects[-1]["choices"] == [] and objects[-1]["usage"]["completion_tokens"] == 40
    counts = [len(o["choices"][0]["logprobs"]["tokens"]) for o in objects[:-1]]
    assert sum(counts) == 40 and max(counts) > 1
    assert objects[-2]["choices"][0]["finish_reason"] == "length"
    assert all(o["object"] == "text_completion" for o in objects)


def test_stream_interval_eos_and_bad_requests(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(config={"decode_step_s": 0.001, "stream_interval": 3, "eos_after_tokens": 8})
    with emu.client() as c:
        chunks = native_chunks(sse(c, "/generate", stream_body(20)))
        assert [m["meta_info"]["completion_tokens"] for _, m in chunks] == [1, 4, 7, 10, 13, 16, 19, 20]
        stopped = c.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 20}}).json()
        assert stopped["meta_info"]["finish_reason"]["type"] == "stop"
        assert stopped["meta_info"]["completion_tokens"] == 8 and stopped["meta_info"]["prompt_tokens"] == 3
        bad = [
            ("/generate", b"{not json"),
            ("/generate", b"[1, 2]"),
            ("/generate", b"{}"),
            ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": "many"}}).encode()),
            ("/generate", json.dumps({"text": "x", "sampling_params": {"max_new_tokens": -1}}).encode()),
            ("/generate", json.dumps({"text": ["a", "b"]}).encode()),
            ("/v1/chat/completions", json.dumps({"messages": []}).encode()),
            ("/v1/completions", json.dumps({"prompt": "x", "n": 2}).encode()),
        ]
        for path, body in bad:
            response = c.post(path, content=body, headers={"Content-Type": "application/json"})
            assert response.status_code == 400, (path, body)
            assert response.json()["message"]
        assert c.get("/nowhere").status_code == 404
        assert c.get("/generate").status_code == 405
        assert c.get("/health").status_code == 200


# --- faults ---


def test_never_healthy(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(config={"never_healthy": True, "startup_s": 0.1}, wait=False)
    # The window starts when the emulator first answers, not when it was spawned: its import alone
    # takes 1.4 s on a slow 2-CPU machine, and a window counted from the spawn saw nothing there.
    emu.wait_listening()
    deadline = time.monotonic() + 1.0
    seen = set()
    while time.monotonic() < deadline:
        seen.add(emu.status())
        time.sleep(0.05)
    assert 503 in seen and 200 not in seen
    assert httpx.post(emu.url + "/generate", json=stream_body(3)).status_code == 503
    assert READY_LINE not in emu.log()


def test_exit_during_startup(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(config={"exit_during_startup": 3, "startup_s": 0.6}, wait=False)
    seen = set()
    while emu.proc.poll() is None:
        seen.add(emu.status())
        time.sleep(0.02)
    assert emu.proc.returncode == 3 and 200 not in seen
    assert READY_LINE not in emu.log()


def test_crash_after_tokens(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(*SPEC_ARGV, config={"crash_after_tokens": 10, "decode_step_s": 0.002})
    received = []
    with (
        emu.client() as c,
        pytest.raises(httpx.HTTPError),
        c.stream("POST", "/generate", json=stream_body(50)) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: "):
                received.append(line[6:])
    assert "[DONE]" not in received
    assert json.loads(received[-1])["meta_info"]["completion_tokens"] == 10
    assert emu.proc.wait(timeout=5) == 1


def test_stall_after_tokens(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(*SPEC_ARGV, config={"stall_after_tokens": 10, "decode_step_s": 0.002})
    received = []
    with (
        emu.client(timeout=httpx.Timeout(5.0, read=0.5)) as c,
        pytest.raises(httpx.ReadTimeout),
        c.stream("POST", "/generate", json=stream_body(50)) as response,
    ):
        for line in response.iter_lines():
            if line.startswith("data: "):
                received.append(line[6:])
    assert json.loads(received[-1])["meta_info"]["completion_tokens"] == 10
    assert emu.proc.poll() is None and emu.status() == 200


def test_http_5xx_paths(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(config={"http_5xx_paths": ["/server_info", "/v1/chat/completions"]})
    with emu.client() as c:
        assert c.get("/server_info").status_code == 500
        assert c.get("/get_server_info").status_code == 200
        chat = c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]})
        assert chat.status_code == 500 and chat.json()["code"] == 500
        assert c.get("/health").status_code == 200


def test_malformed_json_after_tokens(spawn: Callable[..., Emulator]) -> None:
    emu = spawn(*SPEC_ARGV, config={"malformed_json_after_tokens": 5, "decode_step_s": 0.002})
    with emu.client() as c:
        events = [data for _, data in sse(c, "/generate", stream_body(30))]
    bad = [i for i, data in enumerate(events) if data == "{not json"]
    assert len(bad) == 1 and events[-1] == "[DONE]"
    assert json.loads(events[bad[0] - 1])["meta_info"]["completion_tokens"] == 5
    assert json.loads(events[-2])["meta_info"]["completion_tokens"] == 30


# --- access and lifecycle ---


def test_api_key(spawn: Callable[..., Emulator]) -> None:
    emu = spawn("--api-key", "sekret")
    auth = {"Authorization": "Bearer sekret"}
    with emu.client() as c:
        assert c.get("/health").status_code == 200 and c.get("/health_generate").status_code == 200
        for path in ("/server_info", "/model_info", "/flush_cache"):
            assert c.get(path).status_code == 401 and "error" in c.get(path).json()
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert c.get(path, headers=auth).status_code == 200
        assert c.post("/generate", json={**stream_body(3), "stream": False}).status_code == 401
        assert c.post("/generate", json={**stream_body(3), "stream": False}, headers=auth).status_code == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=emu.url + "/v1", api_key="wrong").chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_promptly_mid_stream(spawn: Callable[..., Emulator], signum: int) -> None:
    emu = spawn(config={"decode_step_s": 0.05})
    with emu.client() as c:
        try:
            with c.stream("POST", "/generate", json=stream_body(1000)) as response:
                next(response.iter_lines())
                start = time.monotonic()
                emu.proc.send_signal(signum)
                assert emu.proc.wait(timeout=5) == 0
                assert time.monotonic() - start < 2.0
        except httpx.HTTPError:
            pass  # the stream breaks when the server goes; only the exit matters here
    assert "Shutting down" in emu.log()
