"""Where the plugin keeps the run's sessions on the pytest config."""

from __future__ import annotations

from typing import Any

import pytest

from sglperf.model.progress import Progress
from sglperf.session import LiveSession, PreflightSession
from sglperf.session.counterbalance import Counterbalanced

PREFLIGHT_KEY = pytest.StashKey[PreflightSession]()
LIVE_KEY = pytest.StashKey[LiveSession]()
COUNTERBALANCED_KEY = pytest.StashKey[Counterbalanced]()  # the run's effect sessions beyond the first
SIGTERM_KEY = pytest.StashKey[Any]()
PROGRESS_KEY = pytest.StashKey[Progress]()
# (tier, deployment, variant, release) whose effective config this process already wrote.
CONFIGS_WRITTEN_KEY = pytest.StashKey[set[tuple[str, str, str, str]]]()


def xdist_worker(config: pytest.Config) -> str | None:
    """This process's xdist worker id (gw0, ...), or None: from xdist's own worker input, not the
    PYTEST_XDIST_WORKER variable, which a pytest started inside a worker inherits."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    return str(worker) if worker else None
