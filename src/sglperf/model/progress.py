"""Progress lines: long steps (environment builds, server start-up, GPU waits) report through one of these."""

from collections.abc import Callable

Progress = Callable[[str], None]


def silent(_message: str) -> None:
    """The default when nobody listens."""
