"""Reading SGLang's ``/metrics`` around and during a measured round (`sglperf.model.server_metrics`).

A reading is one small GET on the meter's control client; while streams run it only stores the text
and its time, and parsing waits for the round's end, as the streams' parsing does. A server that does
not answer (metrics off, an error, a timeout) costs the measurement its server metrics, never its
numbers: the first failure is kept as a note and nothing more is asked of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import httpx

from sglperf.model.server_metrics import ServerScrape, combined_series, round_series
from sglperf.sglang.metrics_catalogue import METRICS_PATH, ExpositionError, parse_exposition

T = TypeVar("T")
DEFAULT_INTERVAL_S = 1.0  # readings during a round: often enough for a queue's peak, rare enough to cost nothing


@dataclass(frozen=True)
class MetricsWatch:
    """What to read: the watched counters the release defines (one never printed rose by 0), and how often."""

    defined_counters: frozenset[str] = frozenset()
    interval_s: float = DEFAULT_INTERVAL_S


class RoundScraper:
    """Readings of one server's ``/metrics``, a round at a time."""

    def __init__(self, http: httpx.AsyncClient, watch: MetricsWatch, deadline_s: float) -> None:
        self.http, self.watch, self.deadline_s = http, watch, deadline_s
        self.problem: str | None = None
        self.scrapes = 0
        self._texts: list[tuple[float, str]] = []

    async def read(self) -> None:
        if self.problem is not None:
            return
        url = f"{self.http.base_url}{METRICS_PATH.lstrip('/')}"
        try:
            response = await asyncio.wait_for(self.http.get(METRICS_PATH), self.deadline_s)
        except TimeoutError:
            self.problem = f"{url}: no answer within {self.deadline_s:g} s"
            return
        except httpx.HTTPError as exc:
            self.problem = f"{url}: {type(exc).__name__}: {exc}"
            return
        if response.status_code != 200:
            self.problem = f"{url}: HTTP {response.status_code} ({response.text[:120].strip()})"
            return
        self._texts.append((time.perf_counter(), response.text))

    async def around(self, work: Awaitable[T]) -> T:
        """Read before ``work``, every ``interval_s`` while it runs, and after it; ``work``'s result."""
        return await _sampled(self.read, self.watch.interval_s, work)

    def take_round(self) -> dict[str, float] | None:
        """The round's series from its readings (then forgotten); None when the server stopped answering."""
        texts, self._texts = self._texts, []
        if self.problem is not None:
            return None
        scrapes: list[ServerScrape] = []
        for at_s, text in texts:
            try:
                scrapes.append(parse_exposition(text, at_s))
            except ExpositionError as exc:
                self.problem = f"{self.http.base_url}{METRICS_PATH.lstrip('/')}: {exc}"
                return None
        self.scrapes += len(scrapes)
        return round_series(scrapes, self.watch.defined_counters)

    def forget_round(self) -> None:
        """A dropped round's readings are not the next round's."""
        self._texts = []


class WorkersScraper:
    """Every worker's ``/metrics`` behind a router, read as one server's: the router serves none of theirs, and
    one worker's series are not the deployment's (`combined_series`). The first worker that stops answering
    costs the round its server metrics, as a single server's would."""

    def __init__(self, scrapers: Sequence[RoundScraper]) -> None:
        self.scrapers = list(scrapers)

    @property
    def problem(self) -> str | None:
        return next((s.problem for s in self.scrapers if s.problem is not None), None)

    @property
    def scrapes(self) -> int:
        return sum(s.scrapes for s in self.scrapers)

    async def around(self, work: Awaitable[T]) -> T:
        async def read_all() -> None:
            await asyncio.gather(*(s.read() for s in self.scrapers))

        return await _sampled(read_all, self.scrapers[0].watch.interval_s, work)

    def take_round(self) -> dict[str, float] | None:
        rounds = [s.take_round() for s in self.scrapers]
        if any(r is None for r in rounds):
            return None
        return combined_series([r for r in rounds if r is not None])

    def forget_round(self) -> None:
        for s in self.scrapers:
            s.forget_round()


async def _sampled(read: Callable[[], Awaitable[None]], interval_s: float, work: Awaitable[T]) -> T:
    """``read`` before ``work``, every ``interval_s`` while it runs, and after it; ``work``'s result."""
    done = False

    async def sample() -> None:
        # Until told, not only until cancelled: Python 3.11's wait_for (in read) swallows a cancel that
        # arrives as its request is answered, and a `while True` then read on and the round never ended.
        while not done:
            await asyncio.sleep(interval_s)
            await read()

    await read()
    sampler = asyncio.create_task(sample())
    try:
        result = await work
    finally:
        done = True
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    await read()
    return result
