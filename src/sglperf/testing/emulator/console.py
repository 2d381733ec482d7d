"""The emulator's stdout: SGLang-like log lines, which the suite reads as it reads SGLang's."""

from __future__ import annotations

import sys
import threading
import time

BANNER = (
    "sglperf emulator: an SGLang-compatible TEST DOUBLE, not SGLang and not a GPU; "
    "no model runs, tokens follow a stated timing model"
)
READY_LINE = "The server is fired up and ready to roll!"


_WRITING = threading.Lock()


def log(message: str, rank: bool = False) -> None:
    """One whole line at a time: print() writes a line and its end apart, and two request threads then ran
    their lines together ('...#queue-req: 0[2026-12-07 19:02:36] Prefill batch, ...'), which no reader parses."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with _WRITING:
        sys.stdout.write(f"[{stamp}{' TP0' if rank else ''}] {message}\n")
        sys.stdout.flush()


def prefill_batch_line(
    prompt_tokens: int, running: int, graph_label: str, graph: bool, tok_s: float, queued: int = 0
) -> str:
    """SGLang's prefill batch line (0.5.13-0.5.23 metrics_reporter.report_prefill_stats), one request per batch."""
    return (
        f"Prefill batch, #new-seq: 1, #new-token: {prompt_tokens}, #cached-token: 0, token usage: 0.00, "
        f"#running-req: {running}, #queue-req: {queued}, #pending-token: 0, {graph_label}: {graph}, "
        f"input throughput (token/s): {tok_s:.2f}"
    )


def decode_batch_line(
    running: int,
    tokens: int,
    accept: tuple[float, float] | None,
    graph_label: str,
    graph: bool,
    tok_s: float,
    queued: int = 0,
) -> str:
    """SGLang's decode batch line (report_decode_stats); ``accept``: (accept len, accept rate) with
    speculative decoding."""
    spec = f"accept len: {accept[0]:.2f}, accept rate: {accept[1]:.2f}, " if accept else ""
    return (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: 0.00, {spec}"
        f"{graph_label}: {graph}, gen throughput (token/s): {tok_s:.2f}, #queue-req: {queued}"
    )


def retract_line(retracted: int, tokens_gained: int, old_ratio: float, new_ratio: float) -> str:
    """SGLang's warning when decoding requests are retracted because the KV cache pool is full
    (0.5.13-0.5.23 scheduler.update_running_batch)."""
    return (
        f"KV cache pool is full. Retract requests. #retracted_reqs: {retracted}, "
        f"#new_tokens_gained: {tokens_gained}, #new_token_ratio: {old_ratio:.4f} -> {new_ratio:.4f}"
    )
