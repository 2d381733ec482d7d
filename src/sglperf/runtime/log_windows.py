"""What a launched server logged during each measured round, by byte offsets into its log file.

The server appends to its own log (`sglperf.runtime.server`), so the file's size when a round starts
marks where that round's lines begin; a round ends where the next one starts, and the last where the
workload ended (after a `/server_info` call has passed through the scheduler, so its last batch
lines are written). Warm-up and cache flushes fall outside every window. Only appended bytes are
read, at most ``limit_bytes`` per round, so a flooding log cannot exhaust memory.
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_LIMIT_BYTES = 8 * 2**20


class RoundLogWindows:
    """Round starts as log offsets (the meter's ``RoundMarks``), then the text of each round."""

    def __init__(self, path: Path, limit_bytes: int = DEFAULT_LIMIT_BYTES) -> None:
        self.path = path
        self.limit_bytes = limit_bytes
        self._starts: list[tuple[int, int]] = []  # (round index, offset)
        self._end: int | None = None
        self.truncated: list[int] = []  # rounds whose text was cut at limit_bytes

    def _size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    def begin(self, index: int) -> None:
        self._starts.append((index, self._size()))

    def end(self) -> None:
        self._end = self._size()

    def texts(self, rounds: set[int] | None = None) -> dict[int, str]:
        """Round index -> what the log gained during it (only ``rounds``, when given)."""
        bounds = [offset for _, offset in self._starts[1:]] + [self._end if self._end is not None else self._size()]
        out: dict[int, str] = {}
        try:
            with open(self.path, "rb") as log:
                for (index, start), stop in zip(self._starts, bounds, strict=True):
                    if rounds is not None and index not in rounds:
                        continue
                    size = max(0, stop - start)
                    if size > self.limit_bytes:
                        self.truncated.append(index)
                        size = self.limit_bytes
                    log.seek(start)
                    out[index] = log.read(size).decode(errors="replace")
        except OSError:
            return {}
        return out
