"""The scraper of a server's own /metrics around a round, against a live HTTP server that misbehaves."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from sglperf.measure.server_scrape import MetricsWatch, RoundScraper

RETRACTED = "sglang:num_retracted_requests_total"


class _Metrics(BaseHTTPRequestHandler):
    answers: list[tuple[int, str]] = []

    def do_GET(self) -> None:
        status, body = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[tuple[str, type[_Metrics]]]:
    handler = type("Handler", (_Metrics,), {"answers": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    httpd.shutdown()


def _one_round(url: str, work_s: float = 0.0) -> tuple[dict[str, float] | None, RoundScraper]:
    async def run() -> tuple[dict[str, float] | None, RoundScraper]:
        async with httpx.AsyncClient(base_url=url) as http:
            scraper = RoundScraper(http, MetricsWatch(frozenset({RETRACTED}), interval_s=0.05), 5.0)
            await scraper.around(asyncio.sleep(work_s))
            return scraper.take_round(), scraper

    return asyncio.run(run())


def test_a_round_reads_before_during_and_after(metrics_server: tuple[str, type[_Metrics]]) -> None:
    url, handler = metrics_server
    handler.answers = [
        (200, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"),
        (200, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 7\n"),
        (200, "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"),
    ]
    series, scraper = _one_round(url, work_s=0.3)
    assert series is not None and series["sglang:num_queue_reqs:max"] == 7.0
    assert series[RETRACTED] == 0.0
    assert scraper.scrapes >= 3 and scraper.problem is None


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [(404, "Not Found", "HTTP 404 (Not Found)"), (200, "sglang:x{ 1\n", "not Prometheus text")],
)
def test_a_server_that_does_not_answer_costs_the_series_only(
    metrics_server: tuple[str, type[_Metrics]], status: int, body: str, problem: str
) -> None:
    url, handler = metrics_server
    handler.answers = [(status, body)]
    series, scraper = _one_round(url)
    assert series is None
    assert scraper.problem is not None and problem in scraper.problem and url in scraper.problem


@pytest.mark.parametrize("turns", range(8))
def test_a_round_ends_when_its_end_and_a_reading_coincide(turns: int) -> None:
    """Python 3.11's asyncio.wait_for (in `read`) swallows a cancel that arrives just as its request is
    answered; a sampler stopped by cancelling alone then read on, and the round never ended (a test hung
    for ten minutes at `-n 3`). Here the round's work ends ``turns`` loop turns after the sampler's reading
    is answered: some of them land in that window. In a thread, so that a hang fails the test."""
    text = "# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs 0\n"
    ended: list[dict[str, float] | None] = []

    async def run() -> None:
        answered = asyncio.Event()
        calls = 0

        async def handler(request: httpx.Request) -> httpx.Response:
            nonlocal calls
            calls += 1
            if calls == 2:  # the sampler's first reading; the first of all is the one before the work
                answered.set()
            return httpx.Response(200, text=text)

        async def work() -> None:
            await answered.wait()
            for _ in range(turns):
                await asyncio.sleep(0)

        async with httpx.AsyncClient(base_url="http://sglang.test", transport=httpx.MockTransport(handler)) as http:
            scraper = RoundScraper(http, MetricsWatch(frozenset(), interval_s=0.001), 5.0)
            await scraper.around(work())
            ended.append(scraper.take_round())

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    thread.join(10)
    assert ended and ended[0] is not None, f"the round did not end ({turns} turns after the last reading)"
