"""A GET with a wall-clock deadline and a size cap, for the server's control endpoints.

httpx's timeouts bound each read, not the request: a server that drips a byte every few seconds (a
wedged one does) would keep any caller waiting forever. Here the whole exchange (connect, headers,
body) runs under ``asyncio.wait_for``, which cancels it at the deadline wherever it is, and a body
beyond ``limit_bytes`` is refused rather than kept. Either failure names the URL and what arrived.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

DEFAULT_LIMIT_BYTES = 16 * 2**20  # /server_info of a real server is tens of kB


class DeadlineError(httpx.TimeoutException):
    """No complete answer by the deadline; the message says how much had arrived."""


class TooLargeError(httpx.HTTPError):
    """The answer outgrew its cap."""


@dataclass(frozen=True)
class Reply:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class _Progress:
    headers: bool = False
    received: int = 0


async def _get(url: str, headers: Mapping[str, str], limit_bytes: int, seen: _Progress) -> Reply:
    async with (
        httpx.AsyncClient(headers=dict(headers), timeout=None) as client,
        client.stream("GET", url) as response,
    ):
        seen.headers = True
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body += chunk
            seen.received = len(body)
            if len(body) > limit_bytes:
                raise TooLargeError(f"{url}: answered more than {limit_bytes} bytes; refusing the rest")
        return Reply(response.status_code, bytes(body))


def get_within(
    url: str, seconds: float, headers: Mapping[str, str] | None = None, limit_bytes: int = DEFAULT_LIMIT_BYTES
) -> Reply:
    """GET ``url``, complete within ``seconds`` of wall time, at most ``limit_bytes`` of body. Raises
    httpx errors (DeadlineError, TooLargeError, connection errors) with the URL in the message."""
    seen = _Progress()
    started = time.monotonic()
    try:
        return asyncio.run(asyncio.wait_for(_get(url, headers or {}, limit_bytes, seen), max(0.0, seconds)))
    except TimeoutError:
        so_far = f"{seen.received} bytes of body" if seen.headers else "no complete headers"
        raise DeadlineError(
            f"{url}: no complete answer within {seconds:.3g} s ({so_far} after {time.monotonic() - started:.1f} s)"
        ) from None
