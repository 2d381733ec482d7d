"""One test run's shared state, usable without pytest: the plugin only maps items onto these objects."""

from sglperf.session.live_session import LiveSession
from sglperf.session.preflight_session import PreflightSession
from sglperf.session.running import LiveOptions, LiveSkip

__all__ = ["LiveOptions", "LiveSession", "LiveSkip", "PreflightSession"]
