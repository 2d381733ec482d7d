"""Reading a running server's introspection endpoints into `ServerFacts`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from sglperf.errors import SglperfError
from sglperf.model.server_facts import ServerFacts
from sglperf.runtime.http_deadline import get_within
from sglperf.sglang.server_api import INTERNAL_STATES_KEY, MODEL_INFO_PATHS, NOT_ARGS, SERVER_INFO_PATHS


class LiveError(SglperfError, RuntimeError):
    """The server's introspection endpoints failed; the message names server and endpoint."""


def _get_json(base_url: str, paths: Sequence[str], deadline: float, headers: Mapping[str, str]) -> dict[str, Any]:
    problems = []
    for path in paths:
        try:
            response = get_within(base_url + path, deadline - time.monotonic(), headers)
        except httpx.HTTPError as exc:
            raise LiveError(f"{base_url}{path}: {exc}") from None
        if response.status_code == 404:
            problems.append(f"{path}: 404")
            continue
        if response.status_code != 200:
            raise LiveError(f"{base_url}{path} answered {response.status_code}: {response.text[:300]}")
        try:
            data = response.json()
        except json.JSONDecodeError:
            raise LiveError(f"{base_url}{path} returned malformed JSON: {response.text[:300]!r}") from None
        if not isinstance(data, dict):
            raise LiveError(f"{base_url}{path} returned {type(data).__name__}, not an object")
        return data
    raise LiveError(f"{base_url}: none of {', '.join(paths)} exists ({'; '.join(problems)})")


def read_facts(base_url: str, headers: Mapping[str, str] | None = None, timeout_s: float = 30.0) -> ServerFacts:
    """Both endpoints within ``timeout_s`` of wall time in all."""
    deadline = time.monotonic() + timeout_s
    info = _get_json(base_url, SERVER_INFO_PATHS, deadline, headers or {})
    states = info.get(INTERNAL_STATES_KEY)
    if states is not None and not (isinstance(states, list) and all(isinstance(s, dict) for s in states)):
        # SGLang answers a list of objects, one per rank; anything else would silently drop the evidence.
        raise LiveError(
            f"{base_url}/server_info: {INTERNAL_STATES_KEY} is {type(states).__name__}, not a list of objects: "
            "not an answer SGLang gives; its live evidence cannot be read"
        )
    model = _get_json(base_url, MODEL_INFO_PATHS, deadline, headers or {})
    return ServerFacts.from_server_info(base_url, info, model, NOT_ARGS)
