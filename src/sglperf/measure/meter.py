"""Client-side meter: decode speed, TTFT, ITL and MTP acceptance of a running SGLang server.

Definitions of the numbers are in `sglperf.measure.samples`; parsing in `sglperf.measure.stream`.

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
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import numpy as np
import openai

from sglperf.measure.prompts import Prompt, PromptSet
from sglperf.measure.samples import MeterError, RequestSample, RequestSummary, WorkloadResult, metric_values
from sglperf.measure.stream import RequestContext, parse_native, parse_openai, sse_events
from sglperf.model.deployment import Workload
from sglperf.model.metrics import METRIC_NAMES
from sglperf.sglang.server_api import FLUSH_CACHE_PATH, GENERATE_PATHS, SERVER_INFO_PATHS

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
DEFAULT_TIMEOUT_S = 600.0  # a whole request; long outputs at low rates take minutes
DEFAULT_CHUNK_TIMEOUT_S = 60.0  # silence between two chunks (covers a long prefill) before it is a stall
DEFAULT_MODEL = "default"  # SGLang serves one model and does not check the name


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
        url = self.base_url + GENERATE_PATHS[self.workload.api]
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
        async with self.http.stream("POST", GENERATE_PATHS["native"], json=body) as response:
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
            response = await self.http.post(FLUSH_CACHE_PATH)
        except httpx.HTTPError as exc:
            raise MeterError(f"{self.base_url}{FLUSH_CACHE_PATH}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            raise MeterError(f"{self.base_url}{FLUSH_CACHE_PATH}: HTTP {response.status_code}: {response.text[:300]}")

    async def server_accept_length(self) -> tuple[float | None, str | None]:
        """Mean over DP ranks of internal_states[..].avg_spec_accept_length, or (None, why)."""
        info = None
        for path in SERVER_INFO_PATHS:
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
            return None, f"none of {', '.join(SERVER_INFO_PATHS)} answered with a JSON object"
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
    summary = {m: RequestSummary.of(values) for m in METRIC_NAMES if (values := metric_values(samples, m))}
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
