"""A server that could not bind the HTTP port sglperf gave it says so in its log and stays up serving nothing
(SGLang 0.5.20 on the CPU, seen in a bisect): the start fails at once on that line, not at the deadline."""

from __future__ import annotations

from sglperf.runtime.server import port_taken_line

SEEN = (
    "[2026-12-07 15:15:28] INFO:     Application startup complete.\n"
    "[2026-12-07 15:15:28] ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 36781): "
    "address already in use\n"
    "[2026-12-07 15:15:28] INFO:     Waiting for application shutdown.\n"
)


def test_the_bind_failure_on_our_port_is_found() -> None:
    line = port_taken_line(SEEN, 36781)
    assert line is not None and line.endswith("('127.0.0.1', 36781): address already in use")


def test_another_port_or_no_failure_is_not_a_bind_failure_of_ours() -> None:
    assert port_taken_line(SEEN, 3678) is None  # a prefix of the port is not the port
    assert port_taken_line(SEEN, 30000) is None
    assert port_taken_line("[x] INFO:     Application startup complete.", 36781) is None
