"""The meter's HTTP/1.1 client: decoding recorded reads, and how a connection's ending is reported."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

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
    post_streamed,
)
from sglperf.model.deployment import Workload

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


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _against(handler: Handler, **timeouts: float) -> tuple[Ending, bytes, str | None]:
    """Run one post_streamed against a server on loopback that answers with ``handler``."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await reader.readuntil(b"\r\n\r\n"))
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        options = {"timeout_s": 5.0, "chunk_timeout_s": 5.0, **timeouts}
        exchange = await post_streamed(
            Origin("127.0.0.1", port, False, "/p"), "/generate", b"{}", {"Authorization": "Bearer k"}, **options
        )
    finally:
        srv.close()
    assert received and received[0].startswith(b"POST /p/generate HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in received[0] and b"\r\nConnection: close\r\n" in received[0]
    assert all(t >= 0 for t, _ in exchange.reads)
    return exchange.ending, b"".join(d for _, d in exchange.reads), exchange.detail


@pytest.mark.parametrize("split_at", [0, 1, 3])  # bytes of the terminator that arrive in a later read
def test_a_whole_stream_ends_closed_and_complete_without_waiting_for_the_server(split_at: int) -> None:
    whole = HEAD + chunked([b"data: {}\n\n", b"data: [DONE]\n\n"])
    cut = len(whole) - split_at

    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(whole[:cut])
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(whole[cut:])
        await writer.drain()
        await asyncio.sleep(3)  # the client closes on the last chunk without waiting for us

    ending, raw, _ = asyncio.run(asyncio.wait_for(_against(answer), 2))
    response = decode_response([(0.0, raw)], closed_cleanly=ending is Ending.CLOSED)
    assert ending is Ending.CLOSED and response is not None and response.complete


def test_silence_is_a_stall_and_a_slow_trickle_a_timeout() -> None:
    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + b"a\r\ndata: {}\n\n\r\n")
        await asyncio.sleep(2)

    async def trickle(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for _chunk in range(40):
            writer.write(b"a\r\ndata: {}\n\n\r\n")
            await asyncio.sleep(0.05)

    ending, raw, _ = asyncio.run(_against(silent, chunk_timeout_s=0.3))
    assert ending is Ending.STALLED and raw.endswith(b"data: {}\n\n\r\n")
    ending, _, _ = asyncio.run(_against(trickle, chunk_timeout_s=0.3, timeout_s=0.5))
    assert ending is Ending.TIMED_OUT


def test_a_server_gone_mid_stream_leaves_an_incomplete_body() -> None:
    async def crash(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD + b"a\r\ndata: {}\n\n\r\n")
        await writer.drain()
        writer.transport.abort()  # a reset, as when the server process dies

    ending, raw, detail = asyncio.run(_against(crash))
    response = decode_response([(0.0, raw)], closed_cleanly=ending is Ending.CLOSED)
    assert response is not None and not response.complete
    assert ending is Ending.CLOSED or (ending is Ending.LOST and detail)


def test_nobody_listening_is_cannot_connect() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(TransportError, match="cannot connect: ConnectionRefusedError"):
            asyncio.run(
                post_streamed(Origin("127.0.0.1", port, False, ""), "/", b"", {}, timeout_s=1, chunk_timeout_s=1)
            )


def test_a_flooding_server_is_cut_off_at_the_limit() -> None:
    """A /generate that streams megabytes without end: the reads kept stay near the limit and the
    exchange ends at once as TOO_LARGE (the audit's run grew to 11 GB)."""
    block = b"x" * 2**20

    async def flood(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(HEAD)
        for _chunk in range(200):  # 200 MiB if nobody stops it
            writer.write(b"%x\r\n%s\r\n" % (len(block), block))
            await writer.drain()

    ending, raw, _ = asyncio.run(asyncio.wait_for(_against(flood, limit_bytes=4 * 2**20), 10))
    assert ending is Ending.TOO_LARGE
    assert 4 * 2**20 < len(raw) < 4 * 2**20 + 4 * len(block)


def test_a_response_cut_off_for_its_size_says_so() -> None:
    workload = Workload(id="w", prompts="p.jsonl", output_len=256)
    session = meter._Session("http://127.0.0.1:9", workload, None, 5.0, 5.0, "default")
    assert session.limit_bytes == meter.response_limit_bytes(256) == 16 * 2**20 + 32 * 256**2
    cut = Exchange(0.0, ((0.1, b"HTTP/1.1 200 OK\r\n"),), Ending.TOO_LARGE)
    message = session._interrupted(cut, "after 3 stream events")
    assert message.startswith("the response outgrew 18 MiB for 256 tokens and was cut off (after 3 stream events)")
    asyncio.run(session.close())
