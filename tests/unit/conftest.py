"""Fixtures shared by the fast tier's modules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Figure]]:
    """Every figure plots.py closes, kept for inspection (closed afterwards)."""
    seen: list[Figure] = []
    close = plt.close

    def keep(fig: Any = None) -> None:
        seen.append(fig)

    monkeypatch.setattr(plt, "close", keep)
    yield seen
    for fig in seen:
        close(fig)
