"""The metric names each SGLang release defines, read from its own code (AST, no import), held against
the names a real 0.5.23 server printed and the series the suite watches."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf.sglang import envs, metrics_catalogue
from sglperf.sglang.metrics_catalogue import WATCHED, counter_series, parse_exposition

pytestmark = pytest.mark.needs_sglang

REAL = Path(__file__).resolve().parents[1] / "data" / "sglang-0.5.23-cpu-metrics.txt"
RELEASES = ("0.5.13", "0.5.19", "0.5.23")


@pytest.mark.parametrize("version", RELEASES)
def test_every_watched_series_is_defined_by_the_release(version: str) -> None:
    definitions = metrics_catalogue.catalogue(str(envs.ensure_env(version).python))
    assert len(definitions) > 100, "the AST reading found almost nothing: has SGLang moved its metrics?"
    assert metrics_catalogue.missing_watched(definitions) == []
    retract = definitions["sglang:num_retracted_requests_total"]
    assert retract.kind == "counter" and retract.source.startswith("srt/observability/")
    assert metrics_catalogue.watched_counters(definitions) == {w.series for w in WATCHED if w.per_round}


def test_the_catalogue_names_nearly_all_a_real_server_printed() -> None:
    definitions = metrics_catalogue.catalogue(str(envs.ensure_env("0.5.23").python))
    known = {d.name for d in definitions.values()} | counter_series(definitions)
    scrape = parse_exposition(REAL.read_text(), 0.0)
    printed = set(scrape.counters) | set(scrape.gauges)
    unknown = sorted(printed - known)
    # Two gauges whose names SGLang builds at run time (routing_key_*): the only ones the AST cannot read.
    assert all(name.startswith("sglang:routing_key_") for name in unknown), unknown
    assert len(printed & known) > 50
