"""Progress lines: long steps (environment builds, server start-up, GPU waits) report through one of these."""

from collections.abc import Callable

Progress = Callable[[str], None]


def silent(_message: str) -> None:
    """The default when nobody listens."""


_SAID: set[str] = set()


def say_once(progress: Progress, message: str) -> None:
    """Say ``message`` only the first time this process says it: for facts about the machine, which every
    deployment and resolver would otherwise repeat."""
    if message not in _SAID:
        _SAID.add(message)
        progress(message)
