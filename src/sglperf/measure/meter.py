"""Client-side meter: decode speed, TTFT, ITL and MTP acceptance of a running SGLang server.

Definitions of the numbers are in `sglperf.measure.samples`; parsing in `sglperf.measure.stream`.

To keep client overhead out of these numbers, the request (body, headers) is built and its
connection opened before the clock starts; the clock's zero is taken immediately before the request
is written, on both the native and the OpenAI endpoints (sent with the same client: the OpenAI SDK
would build and validate the request after the zero). While streams run, the only work is stamping
each network read with ``perf_counter`` (`sglperf.measure.transport`; an SSE event gets the time of
the read that completed it); HTTP decoding, SSE splitting and JSON happen after the whole batch of
concurrent requests has ended, so handling one finished stream never delays the stamps of another
still running. Garbage collection is paused while streaming. So TTFT runs from the write of the
request to the read that delivered the first token-carrying chunk.

``run_workload`` takes an optional ``on_round`` callback, called with the result so far after every
measured round; returning True stops the loop there (sequential stopping, decided by the caller).
With a ``HostGuard`` it counts what the rest of the machine took during each round
(`sglperf.model.host_load`); a disturbed round is dropped and run again, and a host that stays
busy for more dropped rounds than the workload's repeats is a :class:`HostBusyError`: its numbers would
measure the neighbour, not SGLang. A ``GpuGuard`` does the same for the server's GPUs
(`sglperf.model.gpu_telemetry`: a thermal or power throttle, another process on the GPU), and
:class:`GpuDisturbedError` ends a measurement whose dropped rounds were mostly the GPU's. After a dropped
round the meter first waits, a minute at most per measurement, for a quiet half second: a neighbour
that comes and goes, a GPU that cools, costs time, not rounds.

Closed loop: each round sends the requests of the load point's plan (`Workload.round_plan`), the prompts
taken in turn, so ``concurrency`` are in flight until the round's last wave: over fewer prompts than that,
or a number that is not a multiple of it, the prompts are cycled (a workload that forbids it, and whose
prompts cannot hold the concurrency, is a :class:`MeterError` before the first request).

Open loop (a workload with a ``rate``): each round sends ``requests`` requests (one per prompt by
default, the prompts taken in turn), or every request due within ``duration_s``, at the offsets of
`sglperf.measure.arrivals`, whatever the server is doing, with at most max_concurrency in flight when
capped; the warm-up runs as in closed loop.
Each request's send lag is recorded (`sglperf.measure.samples`). A round whose 90th-percentile lag
exceeds max(10 ms, a tenth of the mean gap) fell behind its schedule: it measured the client, so
it is dropped like a disturbed one (cause "client"), and a client that stays behind is a
:class:`MeterError` saying to lower the rate.

Ctrl-C raises KeyboardInterrupt wherever the meter is, as in plain Python (`_ctrl_c_at_once`):
asyncio's own handling only cancels the running task at its next ``await``, and a round's parsing
(hundreds of milliseconds to seconds of CPU) has none.

Anything that would make a number untrustworthy (HTTP error, malformed or truncated stream, stall,
counts that disagree, a length other than the workload's) raises :class:`MeterError`.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import httpx

from sglperf.measure import arrivals
from sglperf.measure.samples import (
    GpuDisturbedError,
    HostBusyError,
    MeterError,
    RequestSample,
    RequestSummary,
    RoundStats,
    WorkloadResult,
    metric_values,
    round_metric_values,
    round_stats,
)
from sglperf.measure.server_scrape import MetricsWatch, RoundScraper, WorkersScraper
from sglperf.measure.stream import RequestContext, parse_native, parse_openai, sse_events
from sglperf.measure.transport import Ending, Exchange, Origin, TransportError, decode_response, post_streamed
from sglperf.model.gpu_telemetry import GpuLimits, GpuRound
from sglperf.model.host_load import HOST_STAYED_BUSY, HostLoad
from sglperf.model.metrics import METRIC_NAMES, METRICS
from sglperf.model.prompts import Prompt, PromptSet
from sglperf.model.server_facts import ServerFacts
from sglperf.model.workload import LoadPoint, RoundPlan, Workload
from sglperf.sglang.server_api import FLUSH_CACHE_PATH, GENERATE_PATHS, NOT_ARGS, SERVER_INFO_PATHS

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 600.0  # a whole request; long outputs at low rates take minutes
DEFAULT_CHUNK_TIMEOUT_S = 60.0  # silence between two chunks (covers a long prefill) before it is a stall
DEFAULT_MODEL = "default"  # SGLang serves one model and does not check the name

# Control requests (flush, server info) end by this wall time: httpx's timeouts bound each read, and a
# server that drips a byte every few seconds would otherwise hold the run.
CONTROL_DEADLINE_S = 30.0
DEFAULT_QUIET_WAIT_S = 60.0  # per measurement, waiting for a quiet host and GPU after a dropped round
HOST_CAUSE, GPU_CAUSE, CLIENT_CAUSE = "host", "GPU", "client"  # how RoundStats.dropped_because starts
# Open loop: a round is behind schedule when its p90 send lag exceeds the larger of these (see above).
SEND_LAG_FLOOR_S = 0.010
SEND_LAG_SHARE_OF_GAP = 0.1


def send_lag_limit_s(rate: float) -> float:
    """The p90 send lag above which an open-loop round measured the client (see the module docstring)."""
    return max(SEND_LAG_FLOOR_S, SEND_LAG_SHARE_OF_GAP / rate)


_NO_ANSWER = f"no complete answer within {CONTROL_DEADLINE_S:g} s (a wedged server?)"
FLUSH_ATTEMPTS = 20  # SGLang refuses a flush while a finished request is still being retired
FLUSH_RETRY_S = 0.05


class RoundProbe(Protocol):
    """Counts the rest of the machine's CPU between ``start`` and ``stop`` (`sglperf.runtime.host_probe`)."""

    def start(self) -> None: ...

    def stop(self) -> HostLoad: ...

    def busiest_others(self) -> str: ...


def response_limit_bytes(output_len: int) -> int:
    """The most one streamed response may hold. SGLang's native stream repeats the whole text and
    output_ids in every event, so a stream grows with the square of its length; 32 bytes x
    output_len**2 + 16 MiB leaves room for that and for logprobs, and cuts off a server that floods."""
    return 16 * 2**20 + 32 * output_len**2


class RoundMarks(Protocol):
    """Told where each round starts and where the workload ends (`sglperf.runtime.log_windows`: what the
    server logged during each round). ``begin`` comes after the round's cache flush, just before its
    first request; ``end`` after the server's acceptance has been read, once."""

    def begin(self, index: int) -> None: ...

    def end(self) -> None: ...


class GpuRoundProbe(Protocol):
    """Samples the server's GPUs between ``start`` and ``stop`` (`sglperf.runtime.gpu_telemetry`)."""

    def start(self) -> None: ...

    def stop(self) -> GpuRound: ...

    def quiet(self, limits: GpuLimits | None = None) -> bool: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class GpuGuard:
    """Drop rounds during which a GPU throttled or ran a foreign process (`sglperf.model.gpu_telemetry`)."""

    probe: GpuRoundProbe
    limits: GpuLimits
    quiet_wait_s: float = DEFAULT_QUIET_WAIT_S  # as HostGuard's (the host's wins when both guard)


@dataclass(frozen=True)
class HostGuard:
    """Drop rounds during which the rest of the machine took more than ``limit`` of its CPU; after a
    dropped round, wait (``quiet_wait_s`` in all, per measurement) for a quiet moment before the next."""

    probe: RoundProbe
    limit: float  # share of the machine's capacity (CPUs x wall time)
    quiet_wait_s: float = DEFAULT_QUIET_WAIT_S
    quiet_window_s: float = 0.5


async def _wait_for_quiet(host: HostGuard | None, gpu: GpuGuard | None, budget_s: float) -> float:
    """Watch the host and the GPUs in windows until one is quiet or ``budget_s`` is spent; the time spent."""
    started = time.perf_counter()
    window_s = host.quiet_window_s if host is not None else 0.5
    while time.perf_counter() - started < budget_s:
        if host is not None:
            host.probe.start()
        await asyncio.sleep(window_s)
        host_quiet = host is None or not host.probe.stop().disturbed(host.limit)
        if host_quiet and (gpu is None or gpu.probe.quiet(gpu.limits)):
            break
    return time.perf_counter() - started


@dataclass(frozen=True)
class RawResponse:
    ctx: RequestContext
    exchange: Exchange
    send_lag_s: float | None = None  # open loop: see `sglperf.measure.samples`


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
        workers: Sequence[str] = (),
    ) -> None:
        self.base_url, self.workload, self.model = base_url, workload, model
        self.timeout_s, self.chunk_timeout_s = timeout_s, chunk_timeout_s
        self.limit_bytes = response_limit_bytes(workload.output_len)
        # OpenAI-compatible servers expect a bearer token even when they do not check it.
        token = api_key or ("EMPTY" if workload.api != "native" else None)
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self.origin = Origin.of(base_url)
        except TransportError as exc:
            raise MeterError(str(exc)) from None
        # Control requests only (flush, server info); generation goes through `transport`. No proxy
        # from the environment, as there: it would sit between the meter and the server.
        self.http = httpx.AsyncClient(base_url=base_url, headers=self.headers, timeout=30.0, trust_env=False)
        # Behind a router, each worker is flushed and asked at itself: the router's own /get_server_info is its
        # summary, not a worker's (sglperf.runtime.router).
        self.controls = [
            httpx.AsyncClient(base_url=w, headers=self.headers, timeout=30.0, trust_env=False) for w in workers
        ] or [self.http]

    async def close(self) -> None:
        for http in {id(c): c for c in [self.http, *self.controls]}.values():
            await http.aclose()

    def context(self, prompt: Prompt, request_id: str, repeat: int) -> RequestContext:
        url = self.base_url + GENERATE_PATHS[self.workload.api]
        return RequestContext(url, request_id, prompt.id, repeat, self.workload.output_len)

    async def fetch(self, prompt: Prompt, request_id: str, repeat: int) -> RawResponse:
        """Send one request and stamp its stream (the body is encoded before the clock starts)."""
        ctx = self.context(prompt, request_id, repeat)
        body = json.dumps(self.body(prompt)).encode()
        try:
            exchange = await post_streamed(
                self.origin,
                GENERATE_PATHS[self.workload.api],
                body,
                self.headers,
                timeout_s=self.timeout_s,
                chunk_timeout_s=self.chunk_timeout_s,
                limit_bytes=self.limit_bytes,
            )
        except TransportError as exc:
            raise ctx.error(str(exc)) from None
        raw = RawResponse(ctx, exchange)
        if not exchange.last_chunk_seen:
            # Not a whole stream (an error, a crash, a stall): decode it now, so this failure is the
            # one reported, not the refused connection of the next request to a dead server.
            self.parse(raw)
        return raw

    def parse(self, raw: RawResponse) -> RequestSample:
        ctx, exchange = raw.ctx, raw.exchange
        try:
            response = decode_response(exchange.reads, exchange.ending is Ending.CLOSED)
        except TransportError as exc:
            raise ctx.error(f"malformed HTTP response: {exc}") from None
        if response is None:
            raise ctx.error(self._interrupted(exchange, "before the response's status and headers arrived"))
        if response.status != 200:
            raise ctx.error(f"HTTP {response.status}: {response.text[:300]}")
        events = sse_events(response.body)
        if not response.complete:
            raise ctx.error(self._interrupted(exchange, f"after {len(events)} stream events"))
        if self.workload.api == "native":
            sample = parse_native(events, ctx)
        else:
            sample = parse_openai(events, ctx, chat=self.workload.api == "openai-chat")
        return sample if raw.send_lag_s is None else replace(sample, send_lag_s=raw.send_lag_s)

    def _interrupted(self, exchange: Exchange, when: str) -> str:
        if exchange.ending is Ending.STALLED:
            return f"stall: no data for {self.chunk_timeout_s:g} s {when}"
        if exchange.ending is Ending.TIMED_OUT:
            return f"no complete answer within {self.timeout_s:g} s ({when})"
        if exchange.ending is Ending.TOO_LARGE:
            return (
                f"the response outgrew {self.limit_bytes / 2**20:.0f} MiB for {self.workload.output_len} tokens and "
                f"was cut off ({when}): a flooding server, or a stream format far larger than SGLang's"
            )
        return f"connection dropped {when}" + (f" ({exchange.detail})" if exchange.detail else "")

    def body(self, prompt: Prompt) -> dict[str, Any]:
        """The request body: greedy, exactly ``output_len`` tokens, streamed, with token counts."""
        if self.workload.api == "native":
            return {
                "text": prompt.text,
                "stream": True,
                "sampling_params": {"max_new_tokens": self.workload.output_len, "temperature": 0, "ignore_eos": True},
            }
        common: dict[str, Any] = {
            "model": self.model,
            "stream": True,
            "temperature": 0,
            "max_tokens": self.workload.output_len,
            "stream_options": {"include_usage": True},
            "ignore_eos": True,  # SGLang extensions, top-level fields as the OpenAI SDK's extra_body sends them
            "return_spec_tokens_details": True,
        }
        if self.workload.api == "openai-chat":
            # logprobs: one entry per token in every chunk, so tokens per chunk are counted, not guessed.
            return {**common, "messages": prompt.chat_messages(), "logprobs": True}
        return {**common, "prompt": prompt.text, "logprobs": 0}

    async def flush_cache(self) -> None:
        """Every worker's cache (the one server's, without a router), each answer checked."""
        for http in self.controls:
            await self._flush(http)

    async def _flush(self, http: httpx.AsyncClient) -> None:
        # SGLang answers 400 while its scheduler has not yet retired a request whose stream already ended
        # ("Cache not flushed because there are pending requests", seen with speculative decoding on a
        # real CPU server right after a round): ask again for a moment before calling it a failure.
        for attempt in range(FLUSH_ATTEMPTS):
            try:
                response = await asyncio.wait_for(http.post(FLUSH_CACHE_PATH), CONTROL_DEADLINE_S)
            except TimeoutError:
                raise MeterError(f"{http.base_url}{FLUSH_CACHE_PATH}: {_NO_ANSWER}") from None
            except httpx.HTTPError as exc:
                raise MeterError(f"{http.base_url}{FLUSH_CACHE_PATH}: {type(exc).__name__}: {exc}") from None
            if response.status_code != 400 or attempt == FLUSH_ATTEMPTS - 1:
                break
            await asyncio.sleep(FLUSH_RETRY_S)
        if response.status_code != 200:
            raise MeterError(f"{http.base_url}{FLUSH_CACHE_PATH}: HTTP {response.status_code}: {response.text[:300]}")

    async def server_accept_length(self) -> tuple[float | None, str | None]:
        """Mean over DP ranks (and workers, behind a router) of internal_states[..].avg_spec_accept_length, or
        (None, why)."""
        values = []
        for http in self.controls:
            value, why = await self._accept_length(http)
            if value is None:
                return None, why if len(self.controls) == 1 else f"{http.base_url}: {why}"
            values.append(value)
        return sum(values) / len(values), None

    async def _accept_length(self, http: httpx.AsyncClient) -> tuple[float | None, str | None]:
        info = None
        for path in SERVER_INFO_PATHS:
            try:
                response = await asyncio.wait_for(http.get(path), CONTROL_DEADLINE_S)
            except TimeoutError:
                return None, f"{path}: {_NO_ANSWER}"
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
        value = ServerFacts.from_server_info(str(http.base_url), info, {}, NOT_ARGS).avg_spec_accept_length
        if value is None:
            return None, "server_info has no internal_states[..].avg_spec_accept_length (speculative decoding off?)"
        return value, None


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

    return await _all_or_none([one(job) for job in jobs])


Job = Callable[[], Awaitable[RawResponse]]


async def _on_schedule(limit: asyncio.Semaphore, jobs: Sequence[tuple[float, Job]]) -> list[RawResponse]:
    """Send each job at its offset (seconds from now), with at most ``limit`` in flight; each response
    carries how late it went out: from when it was due, or from when a slot freed if it waited for one."""
    zero = time.perf_counter()

    async def one(offset: float, job: Job) -> RawResponse:
        due = zero + offset
        if (delay := due - time.perf_counter()) > 0:
            await asyncio.sleep(delay)
        slot_free = not limit.locked()
        async with limit:
            ready = due if slot_free else max(due, time.perf_counter())
            raw = await job()
        return replace(raw, send_lag_s=max(0.0, raw.exchange.sent_at - ready))

    return await _all_or_none([one(offset, job) for offset, job in jobs])


async def _all_or_none(jobs: Sequence[Awaitable[T]]) -> list[T]:
    """All results in order; the first failure cancels the rest."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        with _gc_paused():
            return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


RoundCallback = Callable[[WorkloadResult], bool]


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
    on_round: RoundCallback | None = None,
    host: HostGuard | None = None,
    marks: RoundMarks | None = None,
    metrics: MetricsWatch | None = None,
    gpu: GpuGuard | None = None,
    workers: Sequence[str] = (),
) -> WorkloadResult:
    """Warm up, then up to ``workload.repeats`` rounds of the load point's plan (`round_plan`): closed loop,
    ``concurrency`` in flight, the prompts cycled as needed; open loop, the round's requests on their
    schedule, at most ``concurrency`` in flight.

    Unless the workload reuses the prefix cache, the cache is flushed before every measured round so
    no round benefits from the previous one (or from the warm-up). ``on_round``, when given, sees the
    result so far after each round (without the server's acceptance, read once at the end) and
    stops the loop by returning True; without it every round runs. ``host`` and ``gpu``: see the module
    docstring; ``marks``: see :class:`RoundMarks`; ``metrics``: read the server's ``/metrics`` around every round
    (`sglperf.measure.server_scrape`); ``workers``: the servers behind the router at ``base_url``, whose caches
    are flushed and acceptance read at each of them.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    base_url = base_url.rstrip("/")
    items = prompts.prompts
    sends = _open_loop_sends(workload, len(items))
    plan = round_plan(workload, len(items), concurrency)
    started = time.perf_counter()
    session = _Session(base_url, workload, api_key, timeout_s, chunk_timeout_s, model, workers)
    limit = asyncio.Semaphore(concurrency)
    scraper: RoundScraper | WorkersScraper | None = None
    if metrics is not None and workers:
        scraper = WorkersScraper([RoundScraper(http, metrics, CONTROL_DEADLINE_S) for http in session.controls])
    elif metrics is not None:
        scraper = RoundScraper(session.http, metrics, CONTROL_DEADLINE_S)

    def job(prompt: Prompt, request_id: str, repeat: int) -> Callable[[], Awaitable[RawResponse]]:
        return lambda: session.fetch(prompt, request_id, repeat)

    samples: list[RequestSample] = []
    rounds: list[RoundStats] = []
    dropped: list[RoundStats] = []
    try:
        warm = [job(items[i % len(items)], f"{workload.id}/warmup{i}", -1) for i in range(workload.warmup)]
        for raw in await _bounded(limit, warm):
            session.parse(raw)  # a broken warm-up answer is as much an error as a measured one
        r = 0  # rounds run, dropped ones included: request ids stay unique
        waited_s = 0.0
        while len(rounds) < workload.repeats:
            if not workload.reuse_prefix_cache:
                await session.flush_cache()
            if marks is not None:
                marks.begin(r)
            if host is not None:
                host.probe.start()
            if gpu is not None:
                gpu.probe.start()
            if sends is None:
                turns = [(i, items[i % len(items)]) for i in range(plan.requests)]  # the prompts in turn
                batch = _bounded(limit, [job(p, _request_id(workload, r, i, p, len(items)), r) for i, p in turns])
            else:
                scheduled = [
                    (offset, job(items[i % len(items)], f"{workload.id}/r{r}/{i}-{items[i % len(items)].id}", r))
                    for i, offset in enumerate(sends)
                ]
                batch = _on_schedule(limit, scheduled)
            raws = await (scraper.around(batch) if scraper is not None else batch)
            load = host.probe.stop() if host is not None else None
            gpu_round = gpu.probe.stop() if gpu is not None else None
            parsed = [session.parse(raw) for raw in raws]
            sent_at = [raw.exchange.sent_at for raw in raws]
            stats = replace(round_stats(r, sent_at, parsed, load, workload.slo), gpu=gpu_round)
            r += 1
            why = _disturbance(host, load, gpu, gpu_round, _behind_schedule(workload, stats))
            if why is not None:
                if scraper is not None:
                    scraper.forget_round()
                dropped.append(replace(stats, dropped_because=why))
                if len(dropped) > workload.repeats:
                    raise _disturbed_error(base_url, workload, host, gpu, dropped)
                quiet_wait_s = host.quiet_wait_s if host is not None else gpu.quiet_wait_s if gpu else 0.0
                waited_s += await _wait_for_quiet(host, gpu, quiet_wait_s - waited_s)
                continue
            samples += parsed
            rounds.append(replace(stats, server=scraper.take_round()) if scraper is not None else stats)
            if on_round is not None and len(rounds) < workload.repeats:
                partial = _result(
                    base_url, workload, prompts, concurrency, tuple(samples), tuple(rounds), None, None, 0.0
                )
                if on_round(partial):
                    break
        server_accept, server_note = await session.server_accept_length()
        if marks is not None:
            marks.end()
    finally:
        await session.close()
    result = _result(
        base_url,
        workload,
        prompts,
        concurrency,
        tuple(samples),
        tuple(rounds),
        server_accept,
        server_note,
        time.perf_counter() - started,
    )
    if scraper is not None:
        result = replace(result, server_scrapes=scraper.scrapes, metrics_note=scraper.problem)
    return replace(result, dropped_rounds=tuple(dropped))


def _request_id(workload: Workload, r: int, i: int, prompt: Prompt, prompts: int) -> str:
    """Closed loop: unique in the run; a cycled prompt's later sends are numbered (p3, p3+1, p3+2)."""
    return f"{workload.id}/r{r}/{prompt.id}" + (f"+{i // prompts}" if i >= prompts else "")


def round_plan(workload: Workload, prompts: int, concurrency: int) -> RoundPlan:
    """What every round sends at ``concurrency`` (open loop: the cap in flight) over ``prompts`` prompts: the
    load point's plan (`Workload.round_plan`), an open loop's sends as its schedule has them; a
    :class:`MeterError` naming the workload and what to change when it cannot hold the load."""
    if prompts < 1:
        raise MeterError(f"{workload.id}: no prompts to send (an empty prompt set)")
    sends = _open_loop_sends(workload, prompts)
    load, scheduled = LoadPoint(concurrency, workload.rate), None if sends is None else len(sends)
    if (unheld := workload.unheld(load, prompts, scheduled)) is not None:
        raise MeterError(f"{workload.id}: {unheld[1]}")
    return workload.round_plan(load, prompts, scheduled)


def _open_loop_sends(workload: Workload, prompts: int) -> tuple[float, ...] | None:
    """An open-loop round's send offsets (the same every round), or None in closed loop."""
    if workload.rate is None:
        return None
    shape = (workload.rate, workload.arrival, workload.burstiness, workload.seed)
    if workload.duration_s is not None:
        return arrivals.offsets_within(workload.duration_s, *shape)
    return arrivals.send_offsets(workload.requests or prompts, *shape)


def requests_per_round(workload: Workload, prompts: int, concurrency: int = 1) -> int:
    """How many requests one round sends (`round_plan`): closed loop, whole waves of ``concurrency``; open
    loop, its schedule's sends."""
    return round_plan(workload, prompts, concurrency).requests


def _behind_schedule(workload: Workload, stats: RoundStats) -> str | None:
    """Why an open-loop round measured the client rather than the server, or None."""
    if workload.rate is None or stats.send_lag_p90_s is None:
        return None
    limit = send_lag_limit_s(workload.rate)
    if stats.send_lag_p90_s <= limit:
        return None
    return (
        f"sending fell behind its schedule at {workload.rate:g} req/s: p90 send lag {stats.send_lag_p90_s * 1e3:.1f} "
        f"ms, max {(stats.send_lag_max_s or 0) * 1e3:.1f} ms (limit {limit * 1e3:.0f} ms)"
    )


def _disturbance(
    host: HostGuard | None,
    load: HostLoad | None,
    gpu: GpuGuard | None,
    gpu_round: GpuRound | None,
    behind: str | None = None,
) -> str | None:
    """Why a round is dropped ("host: ..." / "GPU: ..." / "client: ..."), or None to keep it."""
    reasons = []
    if host is not None and load is not None and load.disturbed(host.limit):
        reasons.append(f"{HOST_CAUSE}: {load.describe()}")
    if gpu is not None and gpu_round is not None and (line := gpu_round.disturbance(gpu.limits)):
        reasons.append(f"{GPU_CAUSE}: {line}")
    if behind is not None:
        reasons.append(f"{CLIENT_CAUSE}: {behind}")
    return "; ".join(reasons) or None


def _disturbed_error(
    base_url: str, workload: Workload, host: HostGuard | None, gpu: GpuGuard | None, dropped: Sequence[RoundStats]
) -> MeterError:
    """The error for a measurement whose host, GPUs or client stayed disturbed: the client's when most
    rounds fell behind their schedule, else the GPU's when any round was its."""
    by_client = [s for s in dropped if s.dropped_because and CLIENT_CAUSE + ":" in s.dropped_because]
    if len(by_client) * 2 > len(dropped):
        line = (by_client[-1].dropped_because or "").split(CLIENT_CAUSE + ": ", 1)[-1]
        return MeterError(
            f"{base_url} {workload.id}: the meter could not keep its schedule: {len(dropped)} rounds dropped, "
            f"{len(by_client)} of them behind schedule (last: {line}); its numbers would measure this client, "
            "not SGLang: lower the workload's rate, or run on a machine with free CPU for the client"
        )
    by_gpu = [s for s in dropped if s.dropped_because and GPU_CAUSE + ":" in s.dropped_because]
    if not by_gpu or (host is not None and len(by_gpu) * 2 < len(dropped)):
        assert host is not None
        return HostBusyError(_host_busy(base_url, workload, host, dropped))
    assert gpu is not None
    worst = max(by_gpu, key=lambda s: s.gpu.severity(gpu.limits) if s.gpu else (0.0, 0))
    line = worst.dropped_because or ""
    return GpuDisturbedError(
        f"{base_url} {workload.id}: the GPU stayed disturbed: {len(dropped)} rounds dropped, {len(by_gpu)} of them "
        f"by the GPU (worst: {line.split(GPU_CAUSE + ': ', 1)[-1]}); its numbers would measure that, not SGLang: "
        "let the GPU cool or stop the other process, or raise --max-gpu-throttle (runner max_gpu_throttle), "
        "or list the process in the runner's gpu_ignore_processes"
    )


def _host_busy(base_url: str, workload: Workload, host: HostGuard, dropped: Sequence[RoundStats]) -> str:
    shares = sorted(s.host.share for s in dropped if s.host is not None)
    return (
        f"{base_url} {workload.id}: {HOST_STAYED_BUSY}: {len(dropped)} rounds dropped because other processes "
        f"and the hypervisor took more than {host.limit:.0%} of this machine's CPU (median "
        f"{shares[len(shares) // 2]:.0%}; busiest other processes: {host.probe.busiest_others()}); its numbers "
        "would measure them, not SGLang: run on a quiet host, or raise --max-host-load"
    )


def _result(
    base_url: str,
    workload: Workload,
    prompts: PromptSet,
    concurrency: int,
    samples: tuple[RequestSample, ...],
    rounds: tuple[RoundStats, ...],
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
    summary = {
        m: RequestSummary.of(values)
        for m in METRIC_NAMES
        if (
            values := round_metric_values(rounds, concurrency, m, open_loop=workload.rate is not None)
            if METRICS[m].per_round
            else metric_values(samples, m)
        )
    }
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
        rounds,
        rate=workload.rate,
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
    on_round: RoundCallback | None = None,
    host: HostGuard | None = None,
    marks: RoundMarks | None = None,
    metrics: MetricsWatch | None = None,
    gpu: GpuGuard | None = None,
    workers: Sequence[str] = (),
) -> WorkloadResult:
    """Synchronous :func:`run_workload` (runs its own event loop)."""
    with _ctrl_c_at_once():
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
                on_round=on_round,
                host=host,
                marks=marks,
                metrics=metrics,
                gpu=gpu,
                workers=workers,
            )
        )


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextmanager
def _ctrl_c_at_once() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt at once, not at the task's next ``await``: asyncio.run only
    takes SIGINT over when Python's default handler is installed, so a handler of the same effect
    keeps it out. ``asyncio.run`` then cancels the remaining requests and closes the loop."""
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield  # a caller's own handler (or none: SIG_IGN) is left as it is
        return
    signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
