"""Parsing a finished SSE stream into a sample, with the server's own token counts.

Under speculative decoding one stream chunk carries several tokens, so a chunk is never counted as
one token (the error behind SGLang issue 12064). Tokens per chunk come from the server's own counts:
native ``/generate`` reports a cumulative ``meta_info.completion_tokens``; the OpenAI endpoints
return per-token ``logprobs`` in each chunk, cross-checked against the final ``usage``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglperf.measure.samples import (
    Chunk,
    MeterError,
    RequestSample,
    chunks_from_cumulative,
    decode_tok_s,
    itl_s,
    ttft_s,
)


@dataclass(frozen=True)
class Event:
    t: float
    data: str  # the payload of one ``data:`` line


def sse_events(reads: Sequence[tuple[float, bytes]]) -> list[Event]:
    """The ``data:`` lines of an SSE byte stream, each stamped with the read that completed it.

    One ``data:`` line is one event (SGLang never splits a payload over several lines). A line the
    stream ended in the middle of is dropped, as the SSE standard says; the missing ``[DONE]`` then
    reports the truncation.
    """
    events: list[Event] = []
    pending = b""
    for t, data in reads:
        pending += data
        if b"\n" not in data:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                value = line[5:].removesuffix(b"\r")
                value = value[1:] if value.startswith(b" ") else value  # the SSE standard drops one space
                events.append(Event(t, value.decode("utf-8", errors="replace")))
    return events


@dataclass(frozen=True)
class RequestContext:
    """Who asked what, for error messages."""

    url: str
    request_id: str
    prompt_id: str
    repeat: int
    output_len: int

    def error(self, what: str) -> MeterError:
        return MeterError(f"{self.url}: request {self.request_id} (prompt {self.prompt_id!r}): {what}")


def _events_json(events: Sequence[Event], ctx: RequestContext) -> tuple[list[tuple[float, dict[str, Any]]], float]:
    """JSON events before ``[DONE]`` and the time ``[DONE]`` arrived; fails if it never did."""
    out: list[tuple[float, dict[str, Any]]] = []
    for i, ev in enumerate(events):
        if ev.data == "[DONE]":
            return out, ev.t
        try:
            obj = json.loads(ev.data)
        except json.JSONDecodeError as exc:
            what = f"malformed JSON in stream event {i} at {ev.t:.3f} s: {exc.msg}: {ev.data[:120]!r}"
            raise ctx.error(what) from None
        if not isinstance(obj, dict):
            raise ctx.error(f"stream event {i} is not a JSON object: {ev.data[:120]!r}")
        if obj.get("error") is not None:
            raise ctx.error(f"server reported an error in the stream: {json.dumps(obj['error'])[:300]}")
        out.append((ev.t, obj))
    raise ctx.error(f"truncated stream: no [DONE] after {len(events)} events")


def _check_length(ctx: RequestContext, completion: int, finish: Any) -> None:
    if completion != ctx.output_len:
        raise ctx.error(
            f"server produced {completion} tokens, the workload needs exactly {ctx.output_len} "
            f"(finish_reason {json.dumps(finish)}; ignore_eos not honoured or context too short?)"
        )


def _sample(
    ctx: RequestContext,
    chunks: tuple[Chunk, ...],
    e2e: float,
    completion: int,
    verify: int | None,
    length: float | None,
    rate: float | None,
    note: str | None,
    server_id: Any,
) -> RequestSample:
    first = ttft_s(chunks)
    if first is None:
        raise ctx.error("no chunk carried tokens")
    return RequestSample(
        ctx.prompt_id,
        ctx.repeat,
        first,
        decode_tok_s(chunks),
        itl_s(chunks),
        e2e,
        completion,
        chunks,
        verify,
        length,
        rate,
        note,
        server_id if isinstance(server_id, str) else None,
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _spec_fields(
    stats: Mapping[str, Any], completion: int
) -> tuple[int | None, float | None, float | None, str | None]:
    """(verify steps, accept length, accept rate, reason if absent) from a meta_info-like mapping."""
    verify = _int(stats.get("spec_verify_ct"))
    if not verify:
        return None, None, None, "the server reports no spec_verify_ct (speculative decoding off, or not exposed)"
    length = stats.get("spec_accept_length")
    # Older releases report the count but not the ratio; SGLang defines it the same way.
    length = float(length) if isinstance(length, (int, float)) else completion / verify
    rate = stats.get("spec_accept_rate")
    return verify, length, float(rate) if isinstance(rate, (int, float)) else None, None


def parse_native(events: Sequence[Event], ctx: RequestContext) -> RequestSample:
    """A sample from the SSE events of a native ``/generate`` stream."""
    objs, t_done = _events_json(events, ctx)
    times, counts, meta = [], [], None
    for t, obj in objs:
        meta = obj.get("meta_info")
        count = _int(meta.get("completion_tokens")) if isinstance(meta, dict) else None
        if count is None:
            raise ctx.error(f"stream event at {t:.3f} s has no integer meta_info.completion_tokens")
        times.append(t)
        counts.append(count)
    if meta is None or meta.get("finish_reason") is None:
        raise ctx.error("truncated stream: [DONE] without a final meta_info carrying finish_reason")
    finish = meta["finish_reason"]
    if isinstance(finish, dict) and finish.get("type") == "abort":
        raise ctx.error(f"server aborted the request: {json.dumps(finish)[:300]}")
    try:
        chunks = chunks_from_cumulative(times, counts)
    except ValueError as exc:
        raise ctx.error(str(exc)) from None
    _check_length(ctx, counts[-1], finish)
    verify, length, rate, note = _spec_fields(meta, counts[-1])
    return _sample(ctx, chunks, t_done, counts[-1], verify, length, rate, note, meta.get("id"))


def _openai_tokens(choice: Mapping[str, Any], chat: bool, ctx: RequestContext, t: float) -> int:
    logprobs = choice.get("logprobs")
    if chat:
        delta = choice.get("delta") or {}
        text = (delta.get("content") or "") + (delta.get("reasoning_content") or "")
        tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    else:
        text = choice.get("text") or ""
        tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if tokens is None:
        if text:
            raise ctx.error(
                f"chunk at {t:.3f} s carries text but no logprobs, so its tokens cannot be counted "
                "(the server ignored logprobs?)"
            )
        return 0
    if not isinstance(tokens, list):
        raise ctx.error(f"chunk at {t:.3f} s: logprobs tokens is not a list")
    return len(tokens)


def parse_openai(events: Sequence[Event], ctx: RequestContext, *, chat: bool) -> RequestSample:
    """A sample from the SSE events of an OpenAI chat or completions stream (n=1)."""
    objs, t_done = _events_json(events, ctx)
    chunks: list[Chunk] = []
    usage: int | None = None
    finish: Any = None
    spec: Mapping[str, Any] = {}
    for t, obj in objs:
        if isinstance(obj.get("usage"), dict):
            usage = _int(obj["usage"].get("completion_tokens"))
        details = (obj.get("sglext") or {}).get("spec_tokens_details")
        if isinstance(details, dict):  # SGLang 0.5.19+ with return_spec_tokens_details
            spec = details
        for choice in obj.get("choices") or []:
            if choice.get("index", 0) != 0:
                raise ctx.error(f"unexpected choice index {choice.get('index')!r}: the meter sends n=1")
            n = _openai_tokens(choice, chat, ctx, t)
            if n:
                chunks.append(Chunk(t, n))
            finish = choice.get("finish_reason") or finish
    if finish is None:
        raise ctx.error("truncated stream: [DONE] without a finish_reason")
    if usage is None:
        raise ctx.error("no usage.completion_tokens in the stream (stream_options.include_usage ignored?)")
    counted = sum(c.tokens for c in chunks)
    if counted != usage:
        raise ctx.error(f"per-chunk logprobs count {counted} tokens but usage.completion_tokens is {usage}")
    _check_length(ctx, usage, finish)
    verify, length, rate, note = _spec_fields(spec, usage)
    if note is not None:
        note = (
            "the OpenAI stream carries no spec stats (only SGLang 0.5.19+ sends them, in "
            "sglext.spec_tokens_details); use the native API for acceptance"
        )
    return _sample(ctx, tuple(chunks), t_done, usage, verify, length, rate, note, objs[0][1].get("id"))
