"""The meter's HTTP/1.1 client for streamed POSTs: each network read is stamped as it arrives and
nothing else happens until the stream has ended.

Why not httpx, which sglperf uses everywhere else: for every network read httpx runs httpcore and
h11 (HTTP parsing in pure Python) and a chain of async generators. Measured on the emulator at
700 tok/s with 8 streams, that cost the meter about three times the CPU per token of SGLang's own
``bench_serving`` (aiohttp, whose parser is C), on the very host whose server it measures. Here a
read costs one protocol callback that appends ``(perf_counter(), bytes)``; the status line, headers
and chunked framing are decoded by :func:`decode_response` once the stream has ended.
``bench/meter_cpu.py`` measures both clients on the same server and work.

One connection per request (``Connection: close``), opened before the clock's zero: the zero is
taken right before the request is written, so TTFT holds no TCP (or TLS) handshake. Proxies from
the environment are not used: a proxy between the meter and the server would be part of every
number.
"""

from __future__ import annotations

import asyncio
import enum
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast
from urllib.parse import urlsplit

from sglperf.errors import SglperfError

CONNECT_TIMEOUT_S = 30.0
DEFAULT_LIMIT_BYTES = 64 * 2**20
_LAST_CHUNK = b"0\r\n\r\n"  # a chunked body's end: the zero-size chunk, no trailers


class TransportError(SglperfError):
    """The request could not be sent, or its response could not be read as HTTP/1.1."""


@dataclass(frozen=True)
class Origin:
    """Where requests go: the parts of a base URL such as ``http://host:30000`` or ``https://h/prefix``."""

    host: str
    port: int
    tls: bool
    prefix: str  # path before the endpoint's, without a trailing slash

    @classmethod
    def of(cls, base_url: str) -> Origin:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"{base_url}: not an http:// or https:// URL with a host")
        try:
            port = parts.port
        except ValueError:
            raise TransportError(f"{base_url}: the port is not a number from 0 to 65535") from None
        tls = parts.scheme == "https"
        return cls(parts.hostname, port or (443 if tls else 80), tls, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == (443 if self.tls else 80) else f"{host}:{self.port}"


class Ending(enum.Enum):
    """How reading a response stopped."""

    CLOSED = "closed"  # the server closed the connection, or a chunked body's last chunk arrived
    LOST = "lost"  # the connection broke (reset, TLS error)
    STALLED = "stalled"  # no data for chunk_timeout_s
    TIMED_OUT = "timed out"  # the whole request took longer than timeout_s
    TOO_LARGE = "too large"  # the response outgrew limit_bytes (a flooding server)


@dataclass(frozen=True)
class Exchange:
    """One request's raw answer: every network read, stamped, and how the connection ended."""

    sent_at: float  # perf_counter right before the request was written: the zero of the stamps
    reads: tuple[tuple[float, bytes], ...]  # (seconds since sent_at, the bytes of one read)
    ending: Ending
    detail: str | None = None  # the error behind Ending.LOST
    last_chunk_seen: bool = False  # a chunked body's last chunk arrived: the usual, whole, stream


class _Recorder(asyncio.Protocol):
    """Appends each read with its arrival time; closes when a chunked body's last chunk arrives."""

    def __init__(self, closed: asyncio.Future[None], limit_bytes: int) -> None:
        self.reads: list[tuple[float, bytes]] = []
        self.limit_bytes = limit_bytes
        self.size = 0
        self.closed = closed
        self.transport: asyncio.Transport | None = None
        self.ending = Ending.CLOSED
        self.detail: str | None = None
        self.last_chunk_seen = False
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # create_connection makes a stream transport

    def data_received(self, data: bytes) -> None:
        self.reads.append((time.perf_counter(), data))
        self.size += len(data)
        if self.size > self.limit_bytes:
            self.abort(Ending.TOO_LARGE)
            return
        # The server closes too (Connection: close); not waiting for it frees the slot sooner. A false
        # match cannot pass unnoticed: decode_response would then find the body incomplete. The tail
        # of the previous read counts too: the terminator may arrive split over two reads.
        self.tail = (self.tail + data)[-len(_LAST_CHUNK) :]
        if self.tail == _LAST_CHUNK and self.transport is not None:
            self.last_chunk_seen = True
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is not None and self.ending is Ending.CLOSED:
            self.ending, self.detail = Ending.LOST, f"{type(exc).__name__}: {exc}"
        if not self.closed.done():
            self.closed.set_result(None)

    def abort(self, ending: Ending) -> None:
        self.ending = ending
        if self.transport is not None:
            self.transport.abort()


async def post_streamed(
    origin: Origin,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_s: float,
    chunk_timeout_s: float,
    limit_bytes: int = DEFAULT_LIMIT_BYTES,
) -> Exchange:
    """POST ``body`` and record the response until the server closes, it stalls, time runs out or it
    outgrows ``limit_bytes`` (then it is cut off: memory stays bounded whatever the server sends).

    A failure to connect raises :class:`TransportError`; how reading ended is in the returned
    :attr:`Exchange.ending`, with whatever was read until then.
    """
    loop = asyncio.get_running_loop()
    closed: asyncio.Future[None] = loop.create_future()
    recorder = _Recorder(closed, limit_bytes)
    context = ssl.create_default_context() if origin.tls else None
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT_S):
            await loop.create_connection(lambda: recorder, origin.host, origin.port, ssl=context)
    except (OSError, TimeoutError) as exc:
        raise TransportError(f"cannot connect: {type(exc).__name__}: {exc}") from None
    transport = recorder.transport
    assert transport is not None
    lines = [
        f"POST {origin.prefix}{path} HTTP/1.1",
        f"Host: {origin.host_header}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        "Accept: text/event-stream",
        "Connection: close",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
    sent_at = time.perf_counter()
    deadline = sent_at + timeout_s
    timer: asyncio.TimerHandle | None = None

    def watch() -> None:
        # One timer per chunk_timeout_s rather than one per read: re-arming a timer on every read
        # would cost as much as the read itself.
        now = time.perf_counter()
        last = recorder.reads[-1][0] if recorder.reads else sent_at
        if now - last >= chunk_timeout_s:
            recorder.abort(Ending.STALLED)
        elif now >= deadline:
            recorder.abort(Ending.TIMED_OUT)
        else:
            nonlocal timer
            timer = loop.call_at(loop.time() + min(last + chunk_timeout_s, deadline) - now, watch)

    timer = loop.call_at(loop.time() + min(chunk_timeout_s, timeout_s), watch)
    try:
        transport.write(request)
        await closed
    finally:
        if timer is not None:
            timer.cancel()
        if not transport.is_closing():
            transport.abort()
    reads = tuple((t - sent_at, data) for t, data in recorder.reads)
    return Exchange(sent_at, reads, recorder.ending, recorder.detail, recorder.last_chunk_seen)


@dataclass(frozen=True)
class Response:
    """A decoded HTTP/1.1 response whose body keeps the stamps of the reads that carried it."""

    status: int
    headers: Mapping[str, str]  # names in lower case
    body: tuple[tuple[float, bytes], ...]  # (stamp of the read, the body bytes it completed)
    complete: bool  # the body ended as its framing says (or the server closed a close-delimited body)

    @property
    def text(self) -> str:
        return b"".join(data for _, data in self.body).decode("utf-8", errors="replace")


def decode_response(reads: Sequence[tuple[float, bytes]], closed_cleanly: bool) -> Response | None:
    """The response in ``reads``, or None if not even its head arrived; malformed HTTP raises
    :class:`TransportError`. Chunked, Content-Length and close-delimited bodies are understood."""
    raw = b"".join(data for _, data in reads)
    head_end = raw.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    status_line, *header_lines = raw[:head_end].decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if not version.startswith("HTTP/1.") or not code.isdigit():
        raise TransportError(f"not an HTTP/1.x status line: {status_line[:80]!r}")
    headers: dict[str, str] = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if not sep:
            raise TransportError(f"malformed header line: {line[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    spans, complete = _body_spans(raw, head_end + 4, headers, closed_cleanly)
    return Response(int(code), headers, _stamped(reads, raw, spans), complete)


def _body_spans(
    raw: bytes, start: int, headers: Mapping[str, str], closed_cleanly: bool
) -> tuple[list[tuple[int, int]], bool]:
    """(start, end) offsets in ``raw`` of the body's bytes, and whether the body is complete."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        spans: list[tuple[int, int]] = []
        pos = start
        while (line_end := raw.find(b"\r\n", pos)) >= 0:
            size_field = raw[pos:line_end].split(b";", 1)[0].strip()
            try:
                size = int(size_field, 16)
            except ValueError:
                raise TransportError(f"malformed chunk size {size_field[:20]!r} at byte {pos}") from None
            if size == 0:  # the last chunk; complete once the (empty) trailer section has ended
                return spans, raw.find(b"\r\n\r\n", line_end) >= 0
            data_start = line_end + 2
            spans.append((data_start, min(data_start + size, len(raw))))
            pos = data_start + size + 2
        return spans, False
    length = headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise TransportError(f"malformed Content-Length {length[:20]!r}")
        end = start + int(length)
        return [(start, min(end, len(raw)))], len(raw) >= end
    return [(start, len(raw))], closed_cleanly


def _stamped(
    reads: Sequence[tuple[float, bytes]], raw: bytes, spans: Sequence[tuple[int, int]]
) -> tuple[tuple[float, bytes], ...]:
    """The body bytes each read delivered, stamped with that read's time (reads without any are left out)."""
    out: list[tuple[float, bytes]] = []
    i = 0
    read_end = 0
    for t, data in reads:
        read_start, read_end = read_end, read_end + len(data)
        parts = []
        while i < len(spans) and spans[i][0] < read_end:
            a, b = max(spans[i][0], read_start), min(spans[i][1], read_end)
            if a < b:
                parts.append(raw[a:b])
            if spans[i][1] > read_end:
                break
            i += 1
        if parts:
            out.append((t, b"".join(parts)))
    return tuple(out)
