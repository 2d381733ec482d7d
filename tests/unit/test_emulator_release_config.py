"""--emulator-config's "releases" table: timing of one SGLang release's servers, applied before "variants"."""

from __future__ import annotations

import json

import pytest

from sglperf.runtime.server import ServerStartError
from sglperf.session.live_session import emulator_config_for

GIVEN = {
    "decode_step_s": 0.004,
    "variants": {"fast": {"decode_slowdown": 0.9}},
    "releases": {"0.5.22": {"decode_slowdown": 1.1}, "0.5.23": {"variants": {"fast": {"noise_cv": 0.0}}}},
}


def _for(version: str, variant: str) -> dict[str, object]:
    return emulator_config_for(json.dumps(GIVEN), version, variant)


def test_a_release_table_applies_to_that_release_only() -> None:
    assert _for("0.5.22", "plain") == {"decode_step_s": 0.004, "decode_slowdown": 1.1}
    assert _for("0.5.21", "plain") == {"decode_step_s": 0.004}
    assert _for("0.5.21", "fast") == {"decode_step_s": 0.004, "decode_slowdown": 0.9}


def test_a_variant_wins_over_its_release_and_a_release_variants_table_replaces_the_top_one() -> None:
    assert _for("0.5.22", "fast") == {"decode_step_s": 0.004, "decode_slowdown": 0.9}
    assert _for("0.5.23", "fast") == {"decode_step_s": 0.004, "noise_cv": 0.0}


@pytest.mark.parametrize("bad", [[1], {"0.5.22": 1.1}])
def test_a_releases_table_of_the_wrong_shape_is_one_line(bad: object) -> None:
    with pytest.raises(ServerStartError, match='--emulator-config: "releases" must map SGLang versions to objects'):
        emulator_config_for(json.dumps({"releases": bad}), "0.5.22", "plain")
