"""The JSON a command prints with --json: one style for every command, so tools can diff and parse any
of them alike: two-space indent, keys sorted, and a value JSON has no type for (a path) as its text."""

from __future__ import annotations

import json
from typing import Any


def json_text(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
