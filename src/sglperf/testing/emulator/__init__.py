"""The SGLang emulator: a test double of an SGLang HTTP server (overview in `server`, timing model in `timing`).

Modules: `config` (configuration, launch argv, effective args), `timing` (the timing model and its
truth), `state` (server-wide state and requests in flight), `faults` (fault injection), `protocol`
(request parsing, response bodies), `console` (log lines), `metrics` (``/metrics`` in SGLang's format),
`server` (HTTP server, start-up, `main`).
"""

from sglperf.testing.emulator.config import CONFIG_ENV, EFFECTIVE_ENV, ConfigError, EmulatorConfig
from sglperf.testing.emulator.console import READY_LINE
from sglperf.testing.emulator.server import EmulatorServer, main
from sglperf.testing.emulator.state import EmulatorState
from sglperf.testing.emulator.timing import (
    chunk_plan,
    expected_accept_length,
    expected_decode_tok_s,
    plan_request,
    prompt_tokens_of_text,
)

__all__ = [
    "CONFIG_ENV",
    "EFFECTIVE_ENV",
    "READY_LINE",
    "ConfigError",
    "EmulatorConfig",
    "EmulatorServer",
    "EmulatorState",
    "chunk_plan",
    "expected_accept_length",
    "expected_decode_tok_s",
    "main",
    "plan_request",
    "prompt_tokens_of_text",
]
