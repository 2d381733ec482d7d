"""One test run's shared state, usable without pytest: the plugin only maps items onto these objects."""

from sglperf.session.live_session import LiveOptions, LiveSession, LiveSkip
from sglperf.session.preflight_session import PreflightSession

__all__ = ["LiveOptions", "LiveSession", "LiveSkip", "PreflightSession"]
