"""The emulator's stdout: SGLang-like log lines, which the suite reads as it reads SGLang's."""

from __future__ import annotations

import time

BANNER = (
    "sglperf emulator: an SGLang-compatible TEST DOUBLE, not SGLang and not a GPU; "
    "no model runs, tokens follow a stated timing model"
)
READY_LINE = "The server is fired up and ready to roll!"


def log(message: str, rank: bool = False) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' TP0' if rank else ''}] {message}", flush=True)
