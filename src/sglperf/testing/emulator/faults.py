"""Fault injection: every decision to break the emulated server, driven by :class:`EmulatorConfig`.

Start-up faults (``exit_during_startup``, ``never_healthy``), per-path ``http_5xx_paths``, and the
token-count faults of one request (``crash_after_tokens``, ``stall_after_tokens``,
``malformed_json_after_tokens``), which fire once the request has sent that many tokens.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from sglperf.testing.emulator.config import EmulatorConfig
from sglperf.testing.emulator.console import log

MALFORMED_EVENT = "{not json"


class Stalled(Exception):
    """The stall fault fired; the connection stays open until the server stops."""


# ---------------------------------------------------------------------------------------------
# Start-up and per-path faults


def exit_if_startup_fails(config: EmulatorConfig) -> None:
    """``exit_during_startup``: log the failure as SGLang's scheduler would, then exit with that code (or, when
    negative, die by that signal, as a native module with an illegal instruction does: no Python handler runs)."""
    code = config.exit_during_startup
    if code is None:
        return
    log(f"Scheduler hit an exception: RuntimeError: emulated startup failure (exit_during_startup={code})", rank=True)
    if code < 0:
        # To this thread, so it is delivered before the next line (Python leaves SIGILL, SIGSEGV, ... at their
        # default action: the whole process dies, as with a native fault).
        signal.pthread_kill(threading.get_ident(), -code)
    os._exit(code)


def never_healthy(config: EmulatorConfig) -> bool:
    """``never_healthy``: start-up hangs in warmup, /health never answers 200."""
    return config.never_healthy


def http_5xx_message(config: EmulatorConfig, path: str) -> str | None:
    """The error message when ``path`` must answer 500 (``http_5xx_paths``), else None."""
    if path in config.http_5xx_paths:
        return f"emulated server error on {path} (http_5xx_paths)"
    return None


# ---------------------------------------------------------------------------------------------
# Token-count faults of one request


@dataclass
class TokenFaults:
    """One request's token-count faults; each fires once the request has sent that many tokens."""

    crash_after: int | None = None
    stall_after: int | None = None
    malformed_after: int | None = None  # streaming only, once
    malformed_sent: bool = False

    @classmethod
    def of(cls, config: EmulatorConfig) -> TokenFaults:
        return cls(config.crash_after_tokens, config.stall_after_tokens, config.malformed_json_after_tokens)

    @property
    def split_points(self) -> tuple[int, ...]:
        """Token counts where a chunk must end, so that a fault fires exactly there."""
        points = (self.crash_after, self.stall_after, self.malformed_after)
        return tuple(p for p in points if p is not None)

    def after_tokens(
        self, sent: int, streaming: bool, send_event: Callable[[str], None], stopping: threading.Event
    ) -> None:
        """Fire the faults due once ``sent`` tokens are out (crash exits; stall raises :class:`Stalled`)."""
        if self._malformed_due(sent, streaming):
            self.malformed_sent = True
            send_event(MALFORMED_EVENT)
        if _reached(sent, self.crash_after):
            log(f"Scheduler hit an exception: emulated crash after {sent} tokens (crash_after_tokens)", rank=True)
            os._exit(1)
        if _reached(sent, self.stall_after):
            stopping.wait()
            raise Stalled()

    def _malformed_due(self, sent: int, streaming: bool) -> bool:
        return streaming and not self.malformed_sent and _reached(sent, self.malformed_after)


def _reached(sent: int, threshold: int | None) -> bool:
    return threshold is not None and sent >= threshold
