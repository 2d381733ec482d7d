"""Reading a running server's introspection endpoints into `ServerFacts`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from sglperf.model.server_facts import ServerFacts
from sglperf.sglang.server_api import MODEL_INFO_PATHS, NOT_ARGS, SERVER_INFO_PATHS


class LiveError(RuntimeError):
    """The server's introspection endpoints failed; the message names server and endpoint."""


def _get_json(client: httpx.Client, base_url: str, paths: Sequence[str]) -> dict[str, Any]:
    problems = []
    for path in paths:
        try:
            response = client.get(base_url + path)
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
    with httpx.Client(timeout=timeout_s, headers=dict(headers or {})) as client:
        info = _get_json(client, base_url, SERVER_INFO_PATHS)
        model = _get_json(client, base_url, MODEL_INFO_PATHS)
    return ServerFacts.from_server_info(base_url, info, model, NOT_ARGS)
