"""The meter's HTTP/1.1 client against servers on loopback: how a connection's ending is reported when
the server finishes, falls silent, trickles, dies, floods or is not there (decoding recorded reads:
tests/unit/test_transport.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from sglperf.measure.transport import (
    DEFAULT_LIMIT_BYTES,
    Ending,
    Origin,
    TransportError,
    decode_response,
    post_streamed,
)

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(payloads: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _against(
    handler: Handler, *, timeout_s: float = 5.0, chunk_timeout_s: float = 5.0, limit_bytes: int = DEFAULT_LIMIT_BYTES
) -> tuple[Ending, bytes, str | None]:
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
        exchange = await post_streamed(
            Origin("127.0.0.1", port, False, "/p"),
            "/generate",
            b"{}",
            {"Authorization": "Bearer k"},
            timeout_s=timeout_s,
            chunk_timeout_s=chunk_timeout_s,
            limit_bytes=limit_bytes,
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
