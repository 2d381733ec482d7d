"""A JSON-schema response still validates after an upgrade (grammar-constrained decoding)."""

from __future__ import annotations

import json
import os

import pytest

from sglperf import ServerHandle

DEPLOYMENT = os.environ.get("SGLPERF_EXAMPLE_DEPLOYMENT", "qwen36")
SCHEMA = {
    "type": "object",
    # Bounded values keep a real model's answer short.
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "population": {"type": "integer", "minimum": 0, "maximum": 1_000_000_000},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.mark.sglang(DEPLOYMENT)
def test_json_schema_response_validates(sglang_server: ServerHandle) -> None:
    if sglang_server.emulated:
        pytest.skip("the emulator has no grammar backend: run against SGLang (CPU or GPU)")
    if sglang_server.effective_args.get("load_format") == "dummy":
        # Seen on the CPU tier: random weights pick the whitespace the grammar allows, forever.
        pytest.skip("random weights (--load-format dummy) never finish a JSON object: run with the checkpoint")
    client = sglang_server.openai_client()
    reply = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Name a large city and its population as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA}},
        max_tokens=128,
        temperature=0,
    )
    assert reply.choices[0].finish_reason == "stop", reply.choices[0]
    data = json.loads(reply.choices[0].message.content or "")
    assert set(data) == {"city", "population"}
    assert isinstance(data["city"], str) and isinstance(data["population"], int)
