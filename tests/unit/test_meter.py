"""The meter without a server: per-chunk arithmetic, stream parsing and prompt sets (measuring the
emulator's known truth: tests/integration/test_meter_emulator.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.measure.meter import measure
from sglperf.measure.samples import (
    Chunk,
    MeterError,
    chunks_from_cumulative,
    decode_tok_s,
    decode_window,
    itl_s,
    ttft_s,
)
from sglperf.measure.stream import Event, RequestContext, parse_native, parse_openai, sse_events
from sglperf.model.prompts import PromptError, load_prompts
from sglperf.testing.emulator.timing import prompt_tokens_of_text

from ..support.meter import prompt_set, workload
from ..support.project import ROOT

pytestmark = pytest.mark.selftest


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
    itl, rate = itl_s(chunks), decode_tok_s(chunks)
    assert itl is not None and rate is not None
    assert itl * tokens == pytest.approx(seconds, rel=1e-9)
    assert itl * rate == pytest.approx(1.0, rel=1e-9)
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
    text = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\r\n"), max_size=30)
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

    objs: list[dict[str, Any]] = [
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
    sets = {p.stem: load_prompts(p) for p in sorted((ROOT / "data" / "prompts").glob("*.jsonl"))}
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


def test_a_url_the_meter_cannot_use_is_one_clear_error() -> None:
    with pytest.raises(MeterError, match="not an http:// or https:// URL"):
        measure("unix:///tmp/sglang.sock", workload("native"), prompt_set(1), concurrency=1)


def test_a_load_the_prompts_cannot_hold_without_repeats_is_refused_before_any_request() -> None:
    # Port 9 (discard): nothing is sent; the refusal comes first, naming the workload and what to change.
    strict = workload("native", cycle_prompts=False)
    with pytest.raises(MeterError, match=r"^w: concurrency 8 is not held: .* at most 4 are ever in flight"):
        measure("http://127.0.0.1:9", strict, prompt_set(4), concurrency=8)
    with pytest.raises(MeterError, match=r"^w: no prompts to send"):
        measure("http://127.0.0.1:9", workload("native"), prompt_set(0), concurrency=1)
