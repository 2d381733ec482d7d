"""Whose numbers a measurement's are: GPUs', a CPU server's, or the emulator's (a test double).

A person must never read a test double's number, or a CPU's, as a GPU result, so every surface that
shows numbers says whose they are. `NumbersSource.of` is the one place that decides; each surface then
prints its own words for the answer (`NumbersWords`), the words it has always printed: a CPU server is
named only where one ever was (the effects' caption, a measurement's note), elsewhere it says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class NumbersWords:
    """What each surface prints for a source; "" where it prints nothing."""

    caption: str = ""  # after the title of a section of numbers: the console's tables, `compare --variants`
    item_section: str = ""  # after a pytest item's report section name ("measurement", "capacity")
    figure_line: str = ""  # a plot title's last line, with the newline before it
    banner: str = ""  # report.md's paragraph before the counts
    tag: str = ""  # after a baseline's one-line summary (`sglperf baseline show`)
    flag: str = ""  # among a stored run's flags (`sglperf history list`)
    note: str = ""  # the first note of each of its measurement records


class NumbersSource(Enum):
    GPU = "gpu"
    CPU_SERVER = "cpu server"
    EMULATOR = "emulator"

    @classmethod
    def of(cls, *, emulated: bool, gpu_count: int | None = None, device: str | None = None) -> NumbersSource:
        """The one decision. A record knows the GPUs it ran on (none: a CPU server); a running server, its
        device; anything else (a baseline's or a stored run's flag) only whether the emulator served it."""
        if emulated:
            return cls.EMULATOR
        if gpu_count == 0 or device == "cpu":
            return cls.CPU_SERVER
        return cls.GPU

    @classmethod
    def of_all(cls, sources: Iterable[NumbersSource]) -> NumbersSource:
        """Of several measurements shown together: the emulator's when any is (one test double's number
        makes the whole table suspect), a CPU server's when every one is, else GPUs'."""
        found = set(sources)
        if cls.EMULATOR in found:
            return cls.EMULATOR
        return cls.CPU_SERVER if found == {cls.CPU_SERVER} else cls.GPU

    @property
    def words(self) -> NumbersWords:
        return _WORDS[self]


_WORDS = {
    NumbersSource.GPU: NumbersWords(),
    NumbersSource.CPU_SERVER: NumbersWords(
        caption=" (CPU server: CPU numbers, not GPU results)",
        note="CPU server (device cpu): CPU numbers, not GPU results",
    ),
    NumbersSource.EMULATOR: NumbersWords(
        caption=" (EMULATOR: a test double, not GPU results)",
        item_section=" (EMULATOR, not GPU results)",
        figure_line="\n[EMULATOR: test double, not GPU results]",
        banner="> Live numbers below come from the **SGLang emulator, a test double**: they are not GPU results.",
        tag=" [EMULATOR]",
        flag=" emulator",
    ),
}
