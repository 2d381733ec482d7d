"""`sglperf.model.files`: results JSON that strict parsers read, names confined to their folder."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sglperf.model.files import strict_json

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


def _refuse(token: str) -> Any:
    raise ValueError(f"non-standard JSON token {token}")


@given(JSON_VALUES)
def test_every_value_becomes_standard_json(value: Any) -> None:
    text = strict_json(value, sort_keys=True)
    back = json.loads(text, parse_constant=_refuse)  # NaN, Infinity, -Infinity would raise

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, float) and not math.isfinite(a):
            return b is None
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)

    assert same(value, back)


def test_a_measurement_with_an_infinite_rate_is_written_as_null() -> None:
    assert json.loads(strict_json({"decode_tok_s": [float("inf"), 1.5], "p": float("nan")})) == {
        "decode_tok_s": [None, 1.5],
        "p": None,
    }
