"""Where the plugin keeps the run's sessions on the pytest config."""

from __future__ import annotations

from typing import Any

import pytest

from sglperf.model.progress import Progress
from sglperf.session import LiveSession, PreflightSession

PREFLIGHT_KEY = pytest.StashKey[PreflightSession]()
LIVE_KEY = pytest.StashKey[LiveSession]()
SIGTERM_KEY = pytest.StashKey[Any]()
PROGRESS_KEY = pytest.StashKey[Progress]()
