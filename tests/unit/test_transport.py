"""The meter's HTTP/1.1 client without a connection: decoding recorded reads, origins, and what a
response cut off for its size says (against servers on loopback: tests/integration/test_transport_loopback.py)."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.measure import meter
from sglperf.measure.stream import sse_events
from sglperf.measure.transport import (
    Ending,
    Exchange,
    Origin,
    TransportError,
    decode_response,
)
from sglperf.model.workload import Workload

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(payloads: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


def split(raw: bytes, cuts: list[int]) -> list[tuple[float, bytes]]:
    """``raw`` as reads cut at ``cuts``, read i stamped i seconds."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(raw)}), len(raw)]
    return [(float(i), raw[a:b]) for i, (a, b) in enumerate(itertools.pairwise(bounds))]


events_st = st.lists(st.text(alphabet='abc {}":0123', min_size=1, max_size=30), min_size=1, max_size=12)


@given(events_st, st.lists(st.integers(min_value=0, max_value=2000), max_size=40))
def test_any_split_of_a_chunked_stream_gives_its_events_stamped_by_the_read_that_completed_them(
    datas: list[str], cuts: list[int]
) -> None:
    payloads = [f"data: {d}\n\n".encode() for d in datas]
    raw = HEAD + chunked(payloads)
    reads = split(raw, cuts)
    response = decode_response(reads, closed_cleanly=True)
    assert response is not None and response.status == 200 and response.complete
    assert b"".join(d for _, d in response.body) == b"".join(payloads)
    events = sse_events(response.body)
    assert [e.data for e in events] == datas
    # Expected stamp: the read holding the newline that ends the event's data line.
    offsets = list(itertools.accumulate(len(d) for _, d in reads))
    position = len(HEAD)
    for event, payload in zip(events, payloads, strict=True):
        position += len(b"%x\r\n" % len(payload))
        newline = position + payload.index(b"\n")
        assert event.t == float(next(i for i, end in enumerate(offsets) if newline < end))
        position += len(payload) + 2


@given(events_st, st.integers(min_value=1, max_value=400))
def test_a_stream_cut_short_is_incomplete_whatever_the_cut(datas: list[str], keep: int) -> None:
    raw = HEAD + chunked([f"data: {d}\n\n".encode() for d in datas])
    cut = raw[: min(keep, len(raw) - 1)]
    response = decode_response([(0.0, cut)], closed_cleanly=True)
    assert response is None or not response.complete


def test_content_length_and_close_delimited_bodies() -> None:
    error = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 11\r\n\r\nhello world"
    response = decode_response(split(error, [40, 50]), closed_cleanly=False)
    assert response is not None and response.status == 500 and response.complete and response.text == "hello world"
    short = decode_response([(0.0, error[:-3])], closed_cleanly=True)
    assert short is not None and not short.complete
    close_delimited = b"HTTP/1.0 200 OK\r\n\r\nall of it"
    assert decode_response([(0.0, close_delimited)], closed_cleanly=True).complete  # type: ignore[union-attr]
    assert not decode_response([(0.0, close_delimited)], closed_cleanly=False).complete  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", "malformed chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", "malformed Content-Length"),
    ],
)
def test_malformed_http_raises_a_transport_error(raw: bytes, message: str) -> None:
    with pytest.raises(TransportError, match=message):
        decode_response([(0.0, raw)], closed_cleanly=True)


def test_a_head_that_never_finished_is_none() -> None:
    assert decode_response([(0.0, b"HTTP/1.1 200 OK\r\nContent-")], closed_cleanly=False) is None
    assert decode_response([], closed_cleanly=True) is None


@pytest.mark.parametrize(
    ("url", "origin", "host_header"),
    [
        ("http://127.0.0.1:30000", Origin("127.0.0.1", 30000, False, ""), "127.0.0.1:30000"),
        ("https://llm.example/sglang/", Origin("llm.example", 443, True, "/sglang"), "llm.example"),
        ("http://[::1]:8000", Origin("::1", 8000, False, ""), "[::1]:8000"),
        ("http://box", Origin("box", 80, False, ""), "box"),
    ],
)
def test_origin_of_a_base_url(url: str, origin: Origin, host_header: str) -> None:
    assert Origin.of(url) == origin
    assert origin.host_header == host_header


@pytest.mark.parametrize("url", ["ftp://box", "box:30000", "http://box:99999", "http://"])
def test_origin_refuses_what_it_cannot_reach(url: str) -> None:
    with pytest.raises(TransportError, match=r"URL|port"):
        Origin.of(url)


def test_a_response_cut_off_for_its_size_says_so() -> None:
    workload = Workload(id="w", prompts=Path("p.jsonl"), output_len=256)
    session = meter._Session("http://127.0.0.1:9", workload, None, 5.0, 5.0, "default")
    assert session.limit_bytes == meter.response_limit_bytes(256) == 16 * 2**20 + 32 * 256**2
    cut = Exchange(0.0, ((0.1, b"HTTP/1.1 200 OK\r\n"),), Ending.TOO_LARGE)
    message = session._interrupted(cut, "after 3 stream events")
    assert message.startswith("the response outgrew 18 MiB for 256 tokens and was cut off (after 3 stream events)")
    asyncio.run(session.close())
