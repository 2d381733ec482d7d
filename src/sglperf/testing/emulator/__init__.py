"""The SGLang emulator: a test double of an SGLang HTTP server (see `server` for its timing model)."""

from sglperf.testing.emulator.server import *  # noqa: F403
from sglperf.testing.emulator.server import (
    CONFIG_ENV,
    EFFECTIVE_ENV,
    EmulatorConfig,
    expected_accept_length,
    expected_decode_tok_s,
    main,
    prompt_tokens_of_text,
)

__all__ = [
    "CONFIG_ENV",
    "EFFECTIVE_ENV",
    "EmulatorConfig",
    "expected_accept_length",
    "expected_decode_tok_s",
    "main",
    "prompt_tokens_of_text",
]
