"""The meter: per-chunk arithmetic, stream parsing, and measurement against the emulator's known truth.

Tolerances (the emulator runs with noise_cv=0, so every request's true rate is exact):

* decode tok/s: median |error| <= 2 %, every request <= 10 %. The meter's own error is < 0.1 %
  at one stream (bench/meter_overhead.py); the slack is for CPU hiccups on a small shared CI box,
  where a few ms on one chunk move a 0.4 s window by 1-2 %. Counting one token per chunk would be
  off by 2.5x (MTP) or 4x (stream_interval=4), far outside.
* TTFT: one-sided, measured >= truth - 1 ms (HTTP and client set-up only add time). Excess at
  concurrency 1: median <= 5 ms, each <= 20 ms. At 8, the client and the emulator set the 8 requests
  up one after another (~2 ms each on a 2-CPU box), queueing that a client-side TTFT rightly
  includes: median <= 30 ms, each <= 80 ms.
* acceptance: per request exactly completion_tokens / spec_verify_ct (SGLang's definition, prefill
  token included); pooled without the prefill token, within 4 standard errors of
  expected_accept_length (the per-step token count is random; the seeded emulator makes the run
  reproducible, the bound keeps the test honest if the seed changes).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.measure.meter import HostGuard, measure
from sglperf.measure.prompts import Message, Prompt, PromptError, PromptSet, load_prompts
from sglperf.measure.samples import (
    Chunk,
    HostBusyError,
    MeterError,
    WorkloadResult,
    chunks_from_cumulative,
    decode_tok_s,
    decode_window,
    itl_s,
    ttft_s,
)
from sglperf.measure.stream import Event, RequestContext, parse_native, parse_openai, sse_events
from sglperf.model.deployment import Workload
from sglperf.model.host_load import HostLoad
from sglperf.runtime.server import free_port
from sglperf.testing.emulator.config import CONFIG_ENV
from sglperf.testing.emulator.timing import expected_accept_length, prompt_tokens_of_text

pytestmark = pytest.mark.selftest

REPO = Path(__file__).resolve().parents[1]
SPEC_STEPS, ACCEPT_PROB = 3, 0.7
SPEC_ARGV = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    str(SPEC_STEPS),
    "--speculative-num-draft-tokens",
    str(SPEC_STEPS + 1),
    "--speculative-eagle-topk",
    "1",
)
STEP_S = 0.003
PREFILL_S_PER_TOKEN = 0.0001
OUTPUT_LEN = 128
APIS = ("native", "openai-chat", "openai-completions")


# --- per-chunk arithmetic ---


@st.composite
def chunked_timelines(draw: st.DrawFn) -> tuple[list[float], list[Chunk], list[Chunk]]:
    """Token times, then two chunkings of them; the first token is always a chunk of its own (prefill)."""
    gaps = draw(st.lists(st.floats(1e-4, 0.5), min_size=1, max_size=200))
    times = [draw(st.floats(0.0, 5.0))]
    for g in gaps:
        times.append(times[-1] + g)

    def chunking() -> list[Chunk]:
        chunks, i = [Chunk(times[0], 1)], 1
        while i < len(times):
            size = draw(st.integers(1, min(8, len(times) - i)))
            i += size
            chunks.append(Chunk(times[i - 1], size))  # a chunk leaves when its last token is ready
        return chunks

    return times, chunking(), chunking()


@given(chunked_timelines())
def test_any_chunking_gives_the_same_rate(case: tuple[list[float], list[Chunk], list[Chunk]]) -> None:
    times, a, b = case
    truth = (len(times) - 1) / (times[-1] - times[0])
    assert decode_tok_s(a) == pytest.approx(truth, rel=1e-9)
    assert decode_tok_s(b) == pytest.approx(truth, rel=1e-9)
    assert ttft_s(a) == ttft_s(b) == times[0]


@given(chunked_timelines())
def test_itl_times_tokens_is_the_decode_window(case: tuple[list[float], list[Chunk], list[Chunk]]) -> None:
    _, chunks, _ = case
    window = decode_window(chunks)
    assert window is not None
    tokens, seconds = window
    assert itl_s(chunks) * tokens == pytest.approx(seconds, rel=1e-9)
    assert itl_s(chunks) * decode_tok_s(chunks) == pytest.approx(1.0, rel=1e-9)
    assert seconds == pytest.approx(chunks[-1].t - chunks[0].t)


@given(st.lists(st.tuples(st.floats(0, 1e-2), st.integers(0, 5)), min_size=1, max_size=100))
def test_cumulative_counts_round_trip(steps: list[tuple[float, int]]) -> None:
    times, totals, t, total = [], [], 0.0, 0
    for gap, n in steps:
        t, total = t + gap, total + n
        times.append(t)
        totals.append(total)
    chunks = chunks_from_cumulative(times, totals)
    assert sum(c.tokens for c in chunks) == total
    assert all(c.tokens > 0 for c in chunks)  # events without new tokens are not chunks
    assert ttft_s(chunks) == next((t for t, n in zip(times, totals) if n > 0), None)


def test_undefined_rates_and_a_falling_counter() -> None:
    assert decode_tok_s([Chunk(0.1, 5)]) is None and itl_s([]) is None
    assert decode_tok_s([Chunk(0.0, 0), Chunk(0.1, 1), Chunk(0.1, 0), Chunk(0.3, 4)]) == pytest.approx(20.0)
    with pytest.raises(ValueError, match="went down from 3 to 2"):
        chunks_from_cumulative([0.1, 0.2], [3, 2])


@given(st.data())
def test_sse_split_anywhere_gives_the_same_events(data: st.DataObject) -> None:
    text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30)
    payloads = data.draw(st.lists(text, max_size=8))
    raw, line_ends = b"", []  # byte offset of each data line's newline
    for i, payload in enumerate([*payloads, "[DONE]"]):
        # Both spellings occur; the standard drops one space after the colon, so a payload that
        # starts with a space needs it.
        line = f"data: {payload}\r" if i % 2 or payload.startswith(" ") else f"data:{payload}"
        raw += line.encode()
        line_ends.append(len(raw))
        raw += b"\n\n" + (b": keep-alive comment\n\n" if i == 0 else b"")
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
    reads = [(float(i), raw[a:b]) for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(raw)]))]
    events = sse_events(reads)
    assert [e.data for e in events] == [*payloads, "[DONE]"]
    # each event is stamped with the read that delivered its newline
    read_of = [i for i, (_, piece) in enumerate(reads) for _ in piece]
    assert [e.t for e in events] == [float(read_of[end]) for end in line_ends]


# --- parsing finished streams ---

CTX = RequestContext("http://srv:1/generate", "w/r0/p1", "p1", 0, 3)


def native_events(counts: list[int], final: dict[str, Any] | None = None, done: bool = True) -> list[Event]:
    events = []
    for i, n in enumerate(counts):
        meta: dict[str, Any] = {"id": "rid1", "completion_tokens": n, "finish_reason": None}
        if i == len(counts) - 1 and final is not None:
            meta.update(final)
        events.append(Event(0.01 * (i + 1), json.dumps({"text": "", "meta_info": meta})))
    return events + ([Event(0.01 * (len(counts) + 1), "[DONE]")] if done else [])


def test_parse_native_counts_tokens_and_acceptance() -> None:
    final = {"finish_reason": {"type": "length", "length": 3}, "spec_verify_ct": 2}
    sample = parse_native(native_events([1, 3], final), CTX)
    assert [c.tokens for c in sample.chunks] == [1, 2] and sample.completion_tokens == 3
    assert sample.ttft_s == pytest.approx(0.01) and sample.decode_tok_s == pytest.approx(200.0)
    assert sample.spec_accept_length == 1.5 and sample.spec_accept_rate is None  # computed: release lacks it
    assert sample.e2e_s == pytest.approx(0.03) and sample.server_request_id == "rid1"
    plain = parse_native(native_events([1, 2, 3], {"finish_reason": {"type": "length"}}), CTX)
    assert plain.spec_accept_length is None and "spec_verify_ct" in (plain.spec_note or "")


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (native_events([1, 3], {"finish_reason": {"type": "length"}}, done=False), "truncated stream: no \\[DONE\\]"),
        (native_events([1, 3]), "without a final meta_info"),
        (native_events([1, 2], {"finish_reason": {"type": "stop"}}), "produced 2 tokens, the workload needs exactly 3"),
        (native_events([2, 1, 3], {"finish_reason": {"type": "length"}}), "went down"),
        (native_events([1, 3], {"finish_reason": {"type": "abort", "message": "oom"}}), "aborted"),
        ([Event(0.1, "{not json"), Event(0.2, "[DONE]")], "malformed JSON in stream event 0"),
        ([Event(0.1, '{"error": {"message": "boom"}}'), Event(0.2, "[DONE]")], "server reported an error.*boom"),
    ],
)
def test_parse_native_failures_name_server_request_and_cause(events: list[Event], message: str) -> None:
    with pytest.raises(MeterError, match=message) as info:
        parse_native(events, CTX)
    assert str(info.value).startswith("http://srv:1/generate: request w/r0/p1 (prompt 'p1'): ")


def chat_events(token_lists: list[list[str]], usage: int | None, logprobs: bool = True) -> list[Event]:
    def chunk(tokens: list[str], finish: str | None) -> dict[str, Any]:
        lp = {"content": [{"token": t} for t in tokens]} if logprobs else None
        return {
            "id": "chatcmpl-x",
            "choices": [{"index": 0, "delta": {"content": "".join(tokens)}, "logprobs": lp, "finish_reason": finish}],
        }

    objs = [
        {
            "id": "chatcmpl-x",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
            ],
        }
    ]
    objs += [chunk(t, "length" if i == len(token_lists) - 1 else None) for i, t in enumerate(token_lists)]
    if usage is not None:
        objs.append({"id": "chatcmpl-x", "choices": [], "usage": {"completion_tokens": usage}})
    return [Event(0.01 * i, json.dumps(o)) for i, o in enumerate(objs)] + [Event(1.0, "[DONE]")]


def test_parse_openai_counts_logprob_tokens_not_chunks() -> None:
    sample = parse_openai(chat_events([["a"], ["b", "c"]], usage=3), CTX, chat=True)
    assert [c.tokens for c in sample.chunks] == [1, 2]
    assert sample.ttft_s == pytest.approx(0.01)  # the role-only chunk carries no token
    assert sample.decode_tok_s == pytest.approx(200.0)
    assert sample.spec_accept_length is None and "OpenAI stream" in (sample.spec_note or "")
    with pytest.raises(MeterError, match=re.escape("logprobs count 3 tokens but usage.completion_tokens is 4")):
        parse_openai(chat_events([["a"], ["b", "c"]], usage=4), CTX, chat=True)
    with pytest.raises(MeterError, match=re.escape("no usage.completion_tokens")):
        parse_openai(chat_events([["a"], ["b", "c"]], usage=None), CTX, chat=True)
    with pytest.raises(MeterError, match="carries text but no logprobs"):
        parse_openai(chat_events([["a"], ["b", "c"]], usage=3, logprobs=False), CTX, chat=True)


# --- prompt sets ---


def test_shipped_prompt_sets_load() -> None:
    sets = {p.stem: load_prompts(p) for p in sorted((REPO / "data" / "prompts").glob("*.jsonl"))}
    assert set(sets) >= {"chat", "code", "reasoning", "summarisation", "long"}
    for name, ps in sets.items():
        assert len(ps.prompts) >= (3 if name == "long" else 8), name
        assert len(ps.digest) == 64
    longest = max(prompt_tokens_of_text(p.text) for p in sets["long"].prompts)
    assert longest >= 7000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no prompts"),
        ('{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n{"id": "b",\n', ":2: not valid JSON"),
        ('{"id": "a"}\n', ":1: required field 'messages' is missing"),
        ('{"id": "a", "messages": [{"role": "robot", "content": "x"}]}\n', ":1: messages\\[0\\].*role 'robot'"),
        ('{"id": "a", "messages": [{"role": "user", "content": "x"}], "extra": 1}\n', "unknown field"),
        (
            '{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n\n'
            '{"id": "a", "messages": [{"role": "user", "content": "y"}]}\n',
            ":3: duplicate id 'a' \\(first on line 1\\)",
        ),
    ],
)
def test_malformed_prompt_files_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "set.jsonl"
    path.write_text(text)
    with pytest.raises(PromptError, match=message) as info:
        load_prompts(path)
    assert str(info.value).startswith(str(path))


# --- against the emulator ---


class Emulators:
    """Emulator subprocesses; every one is killed at teardown."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, spec: bool = False, **config: Any) -> str:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SGLPERF_EMULATOR")}
        env[CONFIG_ENV] = json.dumps(
            {
                "startup_s": 0.05,
                "noise_cv": 0.0,
                "decode_step_s": STEP_S,
                "prefill_s_per_token": PREFILL_S_PER_TOKEN,
                "accept_prob": ACCEPT_PROB,
                **config,
            }
        )
        with (self.tmp / f"emu{len(self.procs)}.err").open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "sglperf.testing.emulator", "--port", str(port), *(SPEC_ARGV if spec else ())],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        self.procs.append(proc)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
            assert proc.poll() is None, "emulator exited during startup"
            time.sleep(0.02)
        raise AssertionError("emulator did not become healthy")

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One emulator per chunking: one token per chunk, MTP (several, random), four steps per chunk."""
    emus = Emulators(tmp_path_factory.mktemp("emulators"))
    try:
        yield {"plain": emus.start(), "mtp": emus.start(spec=True), "interval": emus.start(stream_interval=4)}
    finally:
        emus.close()


@pytest.fixture
def emulators(tmp_path: Path) -> Iterator[Emulators]:
    emus = Emulators(tmp_path)
    try:
        yield emus
    finally:
        emus.close()


def prompt_set(n: int) -> PromptSet:
    # 400-1000 bytes: 100-250 emulator prompt tokens, 10-25 ms of prefill
    prompts = tuple(
        Prompt(f"p{i}", (Message("user", f"Question {i}: " + "why is the sky blue? " * (19 + 5 * i)),))
        for i in range(n)
    )
    return PromptSet("test", Path("<test>"), prompts, "test")


def workload(api: str, **kw: Any) -> Workload:
    return Workload(
        **{"id": "w", "prompts": Path("<test>"), "output_len": OUTPUT_LEN, "warmup": 1, "repeats": 1, "api": api, **kw}
    )


def run(url: str, api: str, concurrency: int, n: int, **kw: Any) -> WorkloadResult:
    return measure(url, workload(api, **kw), prompt_set(n), concurrency=concurrency, chunk_timeout_s=10.0)


@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("chunking", ["plain", "mtp", "interval"])
def test_recovers_decode_rate_and_ttft(servers: dict[str, str], chunking: str, api: str, concurrency: int) -> None:
    result = run(servers[chunking], api, concurrency, n=4 if concurrency == 1 else 8)
    samples = result.samples
    assert len(samples) == (4 if concurrency == 1 else 8) and result.concurrency == concurrency
    errors, excess = [], []
    for s in samples:
        assert s.completion_tokens == OUTPUT_LEN == sum(c.tokens for c in s.chunks)
        # Each chunk after the first is a whole number of steps of exactly STEP_S (noise_cv=0).
        steps = (
            s.spec_verify_ct
            if api == "native" and chunking == "mtp"
            else OUTPUT_LEN - 1
            if chunking != "mtp"
            else len(s.chunks) - 1
        )
        if chunking == "mtp" and api == "native":
            assert s.spec_verify_ct == len(s.chunks) - 1
        truth = (OUTPUT_LEN - 1) / (steps * STEP_S)
        errors.append(abs(s.decode_tok_s / truth - 1))
        assert s.itl_s == pytest.approx(1 / s.decode_tok_s)
        prompt = next(p for p in prompt_set(8).prompts if p.id == s.prompt_id)
        ttft_truth = PREFILL_S_PER_TOKEN * prompt_tokens_of_text(prompt.text) + STEP_S
        assert s.ttft_s >= ttft_truth - 0.001
        excess.append(s.ttft_s - ttft_truth)
    sizes = {c.tokens for s in samples for c in s.chunks[1:-1]}
    if chunking == "mtp":
        assert max(sizes) > 1
    else:
        assert sizes == {1 if chunking == "plain" else 4}
    assert statistics.median(errors) <= 0.02 and max(errors) <= 0.10, errors
    median_bound, max_bound = (0.005, 0.020) if concurrency == 1 else (0.030, 0.080)
    assert statistics.median(excess) <= median_bound and max(excess) <= max_bound, excess
    assert result.summary["decode_tok_s"].n == len(samples)
    json.dumps(result.to_record())


def test_acceptance_matches_the_emulator_truth(emulators: Emulators) -> None:
    # A fresh server with no warm-up: its running average covers exactly the measured requests.
    url = emulators.start(spec=True)
    result = run(url, "native", 8, n=8, warmup=0, repeats=2)
    samples = result.samples
    for s in samples:
        assert s.spec_accept_length == pytest.approx(s.completion_tokens / s.spec_verify_ct)
        assert 0.0 <= s.spec_accept_rate <= 1.0
    steps = sum(s.spec_verify_ct for s in samples)
    per_step = sum(s.completion_tokens - 1 for s in samples) / steps  # without the prefill token
    p, k = ACCEPT_PROB, SPEC_STEPS
    probs = [(1 - p) * p**i for i in range(k)] + [p**k]  # i drafts accepted, i + 1 tokens
    mean = expected_accept_length(p, k)
    sd = math.sqrt(sum(q * (i + 1 - mean) ** 2 for i, q in enumerate(probs)))
    assert abs(per_step - mean) <= 4 * sd / math.sqrt(steps), (per_step, mean)
    # The prefill-token bias the emulator documents: pooled tokens / steps exceeds per-step by n / steps.
    assert result.client_accept_length == pytest.approx(per_step + len(samples) / steps)
    assert result.server_accept_length == pytest.approx(result.client_accept_length, rel=1e-9)
    assert result.summary["accept_length"].n == len(samples) and result.accept_note is None


def test_without_spec_stats_acceptance_is_none_with_a_reason(servers: dict[str, str]) -> None:
    openai_mtp = run(servers["mtp"], "openai-chat", 2, n=2)
    assert openai_mtp.client_accept_length is None and openai_mtp.server_accept_length is not None
    assert "OpenAI stream carries no spec stats" in (openai_mtp.accept_note or "")
    assert "accept_length" not in openai_mtp.summary
    plain = run(servers["plain"], "native", 2, n=2)
    assert plain.client_accept_length is None and plain.server_accept_length is None
    assert "spec_verify_ct" in (plain.accept_note or "") and "avg_spec_accept_length" in (plain.accept_note or "")


@pytest.mark.parametrize("reuse", [False, True])
def test_prefix_cache_flushed_before_each_measured_round(servers: dict[str, str], reuse: bool) -> None:
    def flushes() -> int:
        return httpx.get(servers["plain"] + "/server_info").json()["flush_count"]

    before = flushes()
    run(servers["plain"], "native", 2, n=2, repeats=3, reuse_prefix_cache=reuse, output_len=8)
    assert flushes() - before == (0 if reuse else 3)


@pytest.mark.parametrize("api", ["native", "openai-chat"])
@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ({"crash_after_tokens": 10}, "connection dropped after"),
        ({"stall_after_tokens": 10}, "stall: no data for 0.5 s after"),
        ({"malformed_json_after_tokens": 5}, "malformed JSON in stream event"),
        ({"http_5xx_paths": ["/generate", "/v1/chat/completions"]}, "HTTP 500"),
    ],
)
@pytest.mark.parametrize("concurrency", [1, 2])  # at 1 the next request would find the server dead
def test_faults_end_in_a_clear_meter_error(
    emulators: Emulators, api: str, fault: dict[str, Any], message: str, concurrency: int
) -> None:
    url = emulators.start(**fault)
    with pytest.raises(MeterError, match=message) as info:
        measure(
            url, workload(api, warmup=0, output_len=32), prompt_set(2), concurrency=concurrency, chunk_timeout_s=0.5
        )
    path = "/generate" if api == "native" else "/v1/chat/completions"
    assert str(info.value).startswith(f"{url}{path}: request w/r0/p")


def test_a_url_the_meter_cannot_use_is_one_clear_error() -> None:
    with pytest.raises(MeterError, match="not an http:// or https:// URL"):
        measure("unix:///tmp/sglang.sock", workload("native"), prompt_set(1), concurrency=1)


class ScriptedProbe:
    """Reports the scripted rounds in order (True: a neighbour took 1.5 of 2 CPUs for the round)."""

    def __init__(self, busy: list[bool]):
        self.busy = busy
        self.started = 0

    def start(self) -> None:
        self.started += 1

    def stop(self) -> HostLoad:
        busy = self.busy[min(self.started, len(self.busy)) - 1]
        return HostLoad(wall_s=1.0, cpus=2, foreign_cpu_s=1.5 if busy else 0.01, steal_cpu_s=0.0, slack_cpu_s=0.06)

    def busiest_others(self) -> str:
        return "cc1plus (pid 4242, 98% of a CPU)"


def test_rounds_the_host_disturbed_are_dropped_and_run_again(servers: dict[str, str]) -> None:
    def flushes() -> int:
        return httpx.get(servers["plain"] + "/server_info").json()["flush_count"]

    probe = ScriptedProbe([True, False, True, False, False])
    before = flushes()
    result = measure(
        servers["plain"],
        workload("native", repeats=3, output_len=8),
        prompt_set(2),
        concurrency=2,
        host=HostGuard(probe, limit=0.1, quiet_wait_s=0.0),
    )
    assert probe.started == 5 and flushes() - before == 5  # every round run is a clean one
    assert [r.round for r in result.rounds] == [1, 3, 4]
    assert [r.round for r in result.dropped_rounds] == [0, 2]
    assert all(r.host is not None and r.host.disturbed(0.1) for r in result.dropped_rounds)
    # The dropped rounds' requests are in no sample, summary or per-round metric.
    assert sorted({s.repeat for s in result.samples}) == [1, 3, 4]
    assert result.summary["decode_tok_s"].n == 6 and result.summary["output_tok_s"].n == 3
    json.dumps(result.to_record())


def test_after_a_dropped_round_the_meter_waits_for_a_quiet_moment(servers: dict[str, str]) -> None:
    # Round 0 busy; two busy watch windows, a quiet one; then rounds 1 and 2.
    probe = ScriptedProbe([True, True, True, False, False, False])
    started = time.perf_counter()
    result = measure(
        servers["plain"],
        workload("native", repeats=2, output_len=8),
        prompt_set(1),
        concurrency=1,
        host=HostGuard(probe, limit=0.1, quiet_window_s=0.2),
    )
    assert probe.started == 6 and time.perf_counter() - started >= 0.6
    assert [r.round for r in result.rounds] == [1, 2] and len(result.dropped_rounds) == 1


def test_a_host_that_stays_busy_is_one_clear_error(servers: dict[str, str]) -> None:
    url = servers["plain"]
    with pytest.raises(HostBusyError) as info:
        measure(
            url,
            workload("native", repeats=2, output_len=8),
            prompt_set(1),
            concurrency=1,
            host=HostGuard(ScriptedProbe([True]), limit=0.1, quiet_wait_s=0.0),
        )
    assert str(info.value) == (
        f"{url} w: the host stayed busy: 3 rounds dropped because other processes and the hypervisor took more than "
        "10% of this machine's CPU (median 75%; busiest other processes: cc1plus (pid 4242, 98% of a CPU)); its "
        "numbers would measure them, not SGLang: run on a quiet host, or raise --max-host-load"
    )
    assert isinstance(info.value, MeterError)  # so an item reports it as one line, like other meter failures


def test_ctrl_c_while_the_meter_parses_a_round_is_raised_at_once(
    servers: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """asyncio.run alone would only cancel the task at its next ``await``; a round's parsing has none
    (seconds of CPU for long outputs at high concurrency), so Ctrl-C waited for it."""
    import signal

    from sglperf.measure import meter

    parse = meter._Session.parse
    signalled: list[float] = []

    def slow_parse(self: Any, raw: Any) -> Any:
        if not signalled:
            signalled.append(time.monotonic())
            os.kill(os.getpid(), signal.SIGINT)
            while time.monotonic() - signalled[0] < 10.0:  # ten seconds of parsing, at least
                pass
        return parse(self, raw)

    monkeypatch.setattr(meter._Session, "parse", slow_parse)
    with pytest.raises(KeyboardInterrupt):
        run(servers["plain"], "native", 1, n=2)
    raised_after = time.monotonic() - signalled[0]
    assert raised_after < 1.0, f"KeyboardInterrupt {raised_after:.1f} s after Ctrl-C"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Python's own again
