"""Client-side meter: decode speed, TTFT, ITL and MTP acceptance of a running SGLang server.

Under speculative decoding one stream chunk carries several tokens, so a chunk is never counted as
one token (the error behind SGLang issue 12064). Tokens per chunk come from the server's own counts:
native ``/generate`` reports a cumulative ``meta_info.completion_tokens``; the OpenAI endpoints
return per-token ``logprobs`` in each chunk, cross-checked against the final ``usage``.

Definitions, per request (times in seconds from just before the request is sent):

* TTFT: arrival of the first chunk that carries tokens.
* decode tok/s: tokens after the first chunk / (last chunk time - first chunk time). The first
  chunk is excluded because its tokens come from prefill, not from the decode loop.
* ITL: the same window per token, (last - first) / tokens after the first chunk = 1 / decode tok/s.

To keep client overhead out of these numbers, the receive loop only stamps each network read with
``perf_counter`` (an SSE event gets the time of the read that completed it); splitting, decoding and
JSON happen after the whole batch of concurrent requests has ended, so handling one finished stream
never delays the stamps of another still running. Garbage collection is paused while streaming.

Anything that would make a number untrustworthy (HTTP error, malformed or truncated stream, stall,
counts that disagree, a length other than the workload's) raises :class:`MeterError`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import httpx
import numpy as np
import openai

from sglperf.measure.prompts import Prompt, PromptSet
from sglperf.model.deployment import Workload

try:  # openai 3.x talks through httpx2, older releases through httpx
    import httpx2

    _HTTP_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, httpx2.HTTPError, openai.APIError)
    _READ_TIMEOUTS: tuple[type[Exception], ...] = (httpx.ReadTimeout, httpx2.ReadTimeout, openai.APITimeoutError)
    _CONNECT_ERRORS: tuple[type[Exception], ...] = (httpx.ConnectError, httpx2.ConnectError, openai.APIConnectionError)
except ImportError:
    _HTTP_ERRORS = (httpx.HTTPError, openai.APIError)
    _READ_TIMEOUTS = (httpx.ReadTimeout, openai.APITimeoutError)
    _CONNECT_ERRORS = (httpx.ConnectError, openai.APIConnectionError)

T = TypeVar("T")
PATHS = {"native": "/generate", "openai-chat": "/v1/chat/completions", "openai-completions": "/v1/completions"}
METRICS = ("decode_tok_s", "ttft_s", "itl_s", "e2e_s", "accept_length")
DEFAULT_TIMEOUT_S = 600.0  # a whole request; long outputs at low rates take minutes
DEFAULT_CHUNK_TIMEOUT_S = 60.0  # silence between two chunks (covers a long prefill) before it is a stall
DEFAULT_MODEL = "default"  # SGLang serves one model and does not check the name
SERVER_ACCEPT_CAVEAT = (
    "server value is a running average since the server started (warm-up and other "
    "clients included); the client value covers the measured requests only"
)


class MeterError(RuntimeError):
    """A request or workload could not be measured; the message names server, request and cause."""


# ---------------------------------------------------------------------------------------------
# Records and per-chunk arithmetic


@dataclass(frozen=True)
class Chunk:
    t: float  # perf_counter seconds since the request was sent
    tokens: int  # tokens this chunk carries


@dataclass(frozen=True)
class RequestSample:
    prompt_id: str
    repeat: int
    ttft_s: float
    decode_tok_s: float | None  # None with fewer than two token-carrying chunks
    itl_s: float | None  # per token, not per chunk
    e2e_s: float
    completion_tokens: int
    chunks: tuple[Chunk, ...]  # token-carrying chunks only
    spec_verify_ct: int | None
    spec_accept_length: float | None  # completion_tokens / spec_verify_ct (prefill token included)
    spec_accept_rate: float | None
    spec_note: str | None = None  # why the spec fields are None
    server_request_id: str | None = None  # the server's id for this request, to find it in server logs

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["chunks"] = [[c.t, c.tokens] for c in self.chunks]
        return record


def ttft_s(chunks: Sequence[Chunk]) -> float | None:
    """Arrival of the first chunk carrying tokens."""
    return next((c.t for c in chunks if c.tokens > 0), None)


def decode_window(chunks: Sequence[Chunk]) -> tuple[int, float] | None:
    """(tokens after the first token-carrying chunk, seconds from it to the last), or None if undefined."""
    carrying = [c for c in chunks if c.tokens > 0]
    if len(carrying) < 2:
        return None
    window = carrying[-1].t - carrying[0].t
    if window <= 0:
        return None
    return sum(c.tokens for c in carrying[1:]), window


def decode_tok_s(chunks: Sequence[Chunk]) -> float | None:
    w = decode_window(chunks)
    return None if w is None else w[0] / w[1]


def itl_s(chunks: Sequence[Chunk]) -> float | None:
    w = decode_window(chunks)
    return None if w is None else w[1] / w[0]


def chunks_from_cumulative(times: Sequence[float], cumulative: Sequence[int]) -> tuple[Chunk, ...]:
    """Token-carrying chunks from a cumulative token counter; ValueError if the counter goes down."""
    chunks, previous = [], 0
    for t, total in zip(times, cumulative, strict=True):
        if total < previous:
            raise ValueError(f"completion_tokens went down from {previous} to {total} at {t:.4f} s")
        if total > previous:
            chunks.append(Chunk(t, total - previous))
        previous = total
    return tuple(chunks)


@dataclass(frozen=True)
class Summary:
    median: float
    p10: float
    p90: float
    mean: float
    stdev: float | None  # sample standard deviation; None for a single value
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        a = np.asarray(values, dtype=float)
        if a.size == 0:
            raise ValueError("no values to summarise")
        p10, median, p90 = np.percentile(a, [10, 50, 90])
        stdev = float(a.std(ddof=1)) if a.size > 1 else None
        return cls(float(median), float(p10), float(p90), float(a.mean()), stdev, int(a.size))


# ---------------------------------------------------------------------------------------------
# Parsing a finished stream into a sample


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


# ---------------------------------------------------------------------------------------------
# Talking to the server


def _transport_problem(exc: BaseException, reads: Sequence[tuple[float, bytes]], chunk_timeout_s: float) -> str:
    events = _count_events(reads)
    if isinstance(exc, _READ_TIMEOUTS):
        return f"stall: no data for {chunk_timeout_s:g} s after {events}"
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}: {exc.message}"[:500]
    if isinstance(exc, _CONNECT_ERRORS) and not reads:
        return f"cannot connect: {type(exc).__name__}: {exc}"
    return f"connection dropped after {events} ({type(exc).__name__}: {exc})"


@dataclass(frozen=True)
class RawResponse:
    ctx: RequestContext
    reads: tuple[tuple[float, bytes], ...]  # (seconds since sent, bytes of one network read)


class _Session:
    """HTTP clients for one workload run, and the requests they send."""

    def __init__(
        self,
        base_url: str,
        workload: Workload,
        api_key: str | None,
        timeout_s: float,
        chunk_timeout_s: float,
        model: str,
        concurrency: int,
    ) -> None:
        self.base_url, self.workload, self.model = base_url, workload, model
        self.timeout_s, self.chunk_timeout_s = timeout_s, chunk_timeout_s
        timeout = httpx.Timeout(30.0, read=chunk_timeout_s)
        oai_timeout = openai.Timeout(30.0, read=chunk_timeout_s)  # httpx or httpx2, as this openai uses
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout, limits=httpx.Limits(max_connections=concurrency + 4)
        )
        self.oai: openai.AsyncOpenAI | None = None
        if workload.api != "native":
            # No retries: a retried request would hide the failure and skew the timing.
            self.oai = openai.AsyncOpenAI(
                base_url=f"{base_url}/v1", api_key=api_key or "EMPTY", max_retries=0, timeout=oai_timeout
            )

    async def close(self) -> None:
        await self.http.aclose()
        if self.oai is not None:
            await self.oai.close()

    def context(self, prompt: Prompt, request_id: str, repeat: int) -> RequestContext:
        url = self.base_url + PATHS[self.workload.api]
        return RequestContext(url, request_id, prompt.id, repeat, self.workload.output_len)

    async def fetch(self, prompt: Prompt, request_id: str, repeat: int) -> RawResponse:
        """Send one request and stamp its stream; transport failures raise MeterError here."""
        ctx = self.context(prompt, request_id, repeat)
        reads: list[tuple[float, bytes]] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                if self.workload.api == "native":
                    await self._native(prompt, reads, ctx)
                else:
                    await self._openai(prompt, reads)
        except MeterError:
            raise
        except TimeoutError:
            raise ctx.error(f"no complete answer within {self.timeout_s:g} s ({_count_events(reads)})") from None
        except _HTTP_ERRORS as exc:
            raise ctx.error(_transport_problem(exc, reads, self.chunk_timeout_s)) from None
        return RawResponse(ctx, tuple(reads))

    def parse(self, raw: RawResponse) -> RequestSample:
        events = sse_events(raw.reads)
        if self.workload.api == "native":
            return parse_native(events, raw.ctx)
        return parse_openai(events, raw.ctx, chat=self.workload.api == "openai-chat")

    async def _native(self, prompt: Prompt, reads: list[tuple[float, bytes]], ctx: RequestContext) -> None:
        body = {
            "text": prompt.text,
            "stream": True,
            "sampling_params": {"max_new_tokens": self.workload.output_len, "temperature": 0, "ignore_eos": True},
        }
        t0 = time.perf_counter()
        async with self.http.stream("POST", "/generate", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                raise ctx.error(f"HTTP {response.status_code}: {text[:300]}")
            await _stamp_reads(response.aiter_bytes(), t0, reads)

    async def _openai(self, prompt: Prompt, reads: list[tuple[float, bytes]]) -> None:
        assert self.oai is not None
        common: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "temperature": 0,
            "max_tokens": self.workload.output_len,
            "stream_options": {"include_usage": True},
            "extra_body": {"ignore_eos": True, "return_spec_tokens_details": True},
        }
        t0 = time.perf_counter()
        # The raw response, not the parsed stream: per-chunk pydantic parsing would delay the stamps.
        if self.workload.api == "openai-chat":
            stream = self.oai.chat.completions.with_streaming_response.create(
                messages=prompt.chat_messages(),  # type: ignore[arg-type]  # role is checked when prompts load
                logprobs=True,
                **common,
            )
        else:
            stream = self.oai.completions.with_streaming_response.create(prompt=prompt.text, logprobs=0, **common)
        async with stream as response:
            await _stamp_reads(response.iter_bytes(), t0, reads)

    async def flush_cache(self) -> None:
        try:
            response = await self.http.post("/flush_cache")
        except httpx.HTTPError as exc:
            raise MeterError(f"{self.base_url}/flush_cache: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise MeterError(f"{self.base_url}/flush_cache: HTTP {response.status_code}: {response.text[:300]}")

    async def server_accept_length(self) -> tuple[float | None, str | None]:
        """Mean over DP ranks of internal_states[..].avg_spec_accept_length, or (None, why)."""
        info = None
        for path in ("/server_info", "/get_server_info"):  # the first appeared in 0.5.6, the second is deprecated
            try:
                response = await self.http.get(path)
            except httpx.HTTPError as exc:
                return None, f"{path}: {type(exc).__name__}: {exc}"
            if response.status_code == 200:
                try:
                    info = response.json()
                except ValueError:
                    return None, f"{path} did not answer JSON"
                break
        if not isinstance(info, dict):
            return None, "neither /server_info nor /get_server_info answered with a JSON object"
        states = info.get("internal_states")
        values = [
            s["avg_spec_accept_length"]
            for s in states or ()
            if isinstance(s, dict) and isinstance(s.get("avg_spec_accept_length"), (int, float))
        ]
        if not values:
            return None, "server_info has no internal_states[..].avg_spec_accept_length (speculative decoding off?)"
        return float(np.mean(values)), None


async def _stamp_reads(chunks: AsyncIterator[bytes], t0: float, reads: list[tuple[float, bytes]]) -> None:
    """Stamp each network read as it arrives; nothing else happens in this loop."""
    async for data in chunks:
        reads.append((time.perf_counter() - t0, data))


def _count_events(reads: Sequence[tuple[float, bytes]]) -> str:
    return f"{len(sse_events(reads))} stream events"


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No garbage collection while streams are stamped: a collection pauses the loop for milliseconds."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


async def _bounded(limit: asyncio.Semaphore, jobs: Sequence[Callable[[], Awaitable[T]]]) -> list[T]:
    """Run jobs with at most ``limit`` in flight; the first failure cancels the rest."""

    async def one(job: Callable[[], Awaitable[T]]) -> T:
        async with limit:
            return await job()

    tasks = [asyncio.create_task(one(job)) for job in jobs]
    try:
        with _gc_paused():
            return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


# ---------------------------------------------------------------------------------------------
# Workloads


@dataclass(frozen=True)
class WorkloadResult:
    base_url: str
    workload_id: str
    api: str
    concurrency: int
    output_len: int
    prompt_set: str
    prompt_digest: str
    samples: tuple[RequestSample, ...]
    summary: Mapping[str, Summary]  # by metric name (METRICS); a metric without values is absent
    client_accept_length: float | None  # total completion tokens / total verify steps, measured requests
    server_accept_length: float | None  # server-wide running average, see SERVER_ACCEPT_CAVEAT
    accept_note: str | None  # why an acceptance value is missing
    wall_s: float

    def values(self, metric: str) -> tuple[float, ...]:
        """Per-request values of one metric (what baselines are compared on)."""
        return metric_values(self.samples, metric)

    def to_record(self) -> dict[str, Any]:
        record = {k: v for k, v in asdict(self).items() if k not in ("samples", "summary")}
        record["summary"] = {k: asdict(v) for k, v in self.summary.items()}
        record["server_accept_caveat"] = SERVER_ACCEPT_CAVEAT
        record["samples"] = [s.to_record() for s in self.samples]
        return record


async def run_workload(
    base_url: str,
    workload: Workload,
    prompts: PromptSet,
    *,
    api_key: str | None = None,
    concurrency: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S,
    model: str = DEFAULT_MODEL,
) -> WorkloadResult:
    """Warm up, then ``workload.repeats`` rounds over every prompt with ``concurrency`` requests in flight.

    Unless the workload reuses the prefix cache, the cache is flushed before every measured round so
    no round benefits from the previous one (or from the warm-up).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    base_url = base_url.rstrip("/")
    started = time.perf_counter()
    session = _Session(base_url, workload, api_key, timeout_s, chunk_timeout_s, model, concurrency)
    limit = asyncio.Semaphore(concurrency)

    def job(prompt: Prompt, request_id: str, repeat: int) -> Callable[[], Awaitable[RawResponse]]:
        return lambda: session.fetch(prompt, request_id, repeat)

    try:
        items = prompts.prompts
        warm = [job(items[i % len(items)], f"{workload.id}/warmup{i}", -1) for i in range(workload.warmup)]
        for raw in await _bounded(limit, warm):
            session.parse(raw)  # a broken warm-up answer is as much an error as a measured one
        samples: list[RequestSample] = []
        for r in range(workload.repeats):
            if not workload.reuse_prefix_cache:
                await session.flush_cache()
            raws = await _bounded(limit, [job(p, f"{workload.id}/r{r}/{p.id}", r) for p in items])
            samples += [session.parse(raw) for raw in raws]
        server_accept, server_note = await session.server_accept_length()
    finally:
        await session.close()
    return _result(
        base_url,
        workload,
        prompts,
        concurrency,
        tuple(samples),
        server_accept,
        server_note,
        time.perf_counter() - started,
    )


def metric_values(samples: Sequence[RequestSample], metric: str) -> tuple[float, ...]:
    """Per-request values of one metric, skipping requests where it is undefined."""
    if metric not in METRICS:
        raise KeyError(f"unknown metric {metric!r}; known: {', '.join(METRICS)}")
    attr = "spec_accept_length" if metric == "accept_length" else metric
    return tuple(v for s in samples if (v := getattr(s, attr)) is not None)


def _result(
    base_url: str,
    workload: Workload,
    prompts: PromptSet,
    concurrency: int,
    samples: tuple[RequestSample, ...],
    server_accept: float | None,
    server_note: str | None,
    wall_s: float,
) -> WorkloadResult:
    verify = [s.spec_verify_ct for s in samples]
    client_accept = None
    notes = []
    if samples and all(verify):
        # Same definition as the server's running average, so the two can be compared.
        client_accept = sum(s.completion_tokens for s in samples) / sum(v for v in verify if v)
    else:
        notes.append(next((s.spec_note for s in samples if s.spec_note), "no spec stats"))
    if server_note:
        notes.append(f"server: {server_note}")
    summary = {m: Summary.of(values) for m in METRICS if (values := metric_values(samples, m))}
    return WorkloadResult(
        base_url,
        workload.id,
        workload.api,
        concurrency,
        workload.output_len,
        prompts.name,
        prompts.digest,
        samples,
        summary,
        client_accept,
        server_accept,
        "; ".join(notes) or None,
        wall_s,
    )


def measure(
    base_url: str,
    workload: Workload,
    prompts: PromptSet,
    *,
    api_key: str | None = None,
    concurrency: int,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S,
    model: str = DEFAULT_MODEL,
) -> WorkloadResult:
    """Synchronous :func:`run_workload` (runs its own event loop)."""
    return asyncio.run(
        run_workload(
            base_url,
            workload,
            prompts,
            api_key=api_key,
            concurrency=concurrency,
            timeout_s=timeout_s,
            chunk_timeout_s=chunk_timeout_s,
            model=model,
        )
    )
