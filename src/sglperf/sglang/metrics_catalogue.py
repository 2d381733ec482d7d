"""SGLang's Prometheus metrics by release: the flag, the path, the names a release defines, and the few
the suite names when a measurement fails.

Names change between releases (0.5.19 added ``sglang:spec_block_accept_length``; a retraction
counter, ``sglang:num_retracted_requests_total``, sits beside an older gauge its code calls "maybe
remove"), so the names a release defines are read from its own code: every
``Counter``/``Gauge``/``Histogram``/``Summary`` call with a constant ``name="sglang:..."`` in its
package (:func:`catalogue`, by AST, without importing it). The exposition itself is parsed with
prometheus-client's parser, the library SGLang renders it with.
"""

from __future__ import annotations

import ast
import functools
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sglperf.errors import SglperfError
from sglperf.model.server_metrics import MAX_SUFFIX, ServerScrape

METRICS_FLAG = "--enable-metrics"
METRICS_FIELD = "enable_metrics"  # the server arg the flag sets
METRICS_PATH = "/metrics"
PREFIX = "sglang:"

MetricKind = Literal["counter", "gauge", "histogram", "summary"]
_CONSTRUCTORS: dict[str, MetricKind] = {
    "Counter": "counter",
    "Gauge": "gauge",
    "Histogram": "histogram",
    "Summary": "summary",
}


class ExpositionError(SglperfError, ValueError):
    """A ``/metrics`` answer prometheus-client cannot parse."""


@dataclass(frozen=True)
class MetricDefinition:
    name: str  # as written in the release's code, e.g. "sglang:num_retracted_requests_total"
    kind: MetricKind
    documentation: str
    source: str  # file (relative to the package) and line


@dataclass(frozen=True)
class WatchedSeries:
    """A series named in a failing measurement's line when it moved beyond noise."""

    series: str  # a `model.server_metrics` series name
    label: str  # what it is, for the line
    per_round: bool = False  # a counter's rise per round (else a gauge reading)


# The server metrics that explain a slower round. Each exists in 0.5.13, 0.5.19 and 0.5.23
# (tests/sglang/test_metrics_catalogue.py reads their code); a release without one says so once.
WATCHED: tuple[WatchedSeries, ...] = (
    WatchedSeries("sglang:num_retracted_requests_total", "retracted requests", per_round=True),
    WatchedSeries("sglang:num_aborted_requests_total", "aborted requests", per_round=True),
    WatchedSeries("sglang:num_queue_reqs" + MAX_SUFFIX, "longest queue"),
    WatchedSeries("sglang:num_running_reqs" + MAX_SUFFIX, "most running requests"),
    WatchedSeries("sglang:token_usage" + MAX_SUFFIX, "highest KV token usage"),
    WatchedSeries("sglang:cache_hit_rate" + MAX_SUFFIX, "prefix cache hit rate"),
    WatchedSeries("sglang:spec_accept_length" + MAX_SUFFIX, "server's accept length"),
    WatchedSeries("sglang:gen_throughput" + MAX_SUFFIX, "server's generation tok/s"),
)


def _definition(node: ast.Call, relative: str) -> MetricDefinition | None:
    func = node.func
    ctor = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    kind = _CONSTRUCTORS.get(ctor)
    if kind is None:
        return None
    args = {k.arg: k.value for k in node.keywords if k.arg}
    name = args.get("name", node.args[0] if node.args else None)
    doc = args.get("documentation", node.args[1] if len(node.args) > 1 else None)
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str) and name.value.startswith(PREFIX)):
        return None
    text = doc.value if isinstance(doc, ast.Constant) and isinstance(doc.value, str) else ""
    return MetricDefinition(name.value, kind, text, f"{relative}:{node.lineno}")


def read_catalogue(package: Path) -> dict[str, MetricDefinition]:
    """Every metric SGLang's package at ``package`` defines with a constant name (first definition wins)."""
    found: dict[str, MetricDefinition] = {}
    for path in sorted(package.rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if f'"{PREFIX}' not in text:
            continue
        try:
            tree = ast.parse(text, str(path))
        except SyntaxError:
            continue
        relative = str(path.relative_to(package))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (found_one := _definition(node, relative)):
                found.setdefault(found_one.name, found_one)
    return found


@functools.cache
def package_dir(python: str) -> Path | None:
    """Where ``python`` would import SGLang from, found without importing it; None if it has none."""
    code = (
        "import importlib.util, json; s = importlib.util.find_spec('sglang'); "
        "print(json.dumps(list(s.submodule_search_locations or []) if s else []))"
    )
    try:
        proc = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
        places = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        return None
    return Path(places[0]) if places else None


@functools.cache
def catalogue(python: str) -> dict[str, MetricDefinition]:
    """The metrics the SGLang that ``python`` runs defines; empty when it has none to read."""
    package = package_dir(python)
    return read_catalogue(package) if package else {}


def counter_series(definitions: Mapping[str, MetricDefinition]) -> frozenset[str]:
    """The counter series a release defines (a histogram's as ``_count`` and ``_sum``)."""
    out: set[str] = set()
    for d in definitions.values():
        if d.kind == "counter":
            out.add(d.name if d.name.endswith("_total") else d.name + "_total")
        elif d.kind in ("histogram", "summary"):
            out |= {d.name + "_count", d.name + "_sum"}
    return frozenset(out)


def watched_counters(definitions: Mapping[str, MetricDefinition]) -> frozenset[str]:
    """The watched counters a release defines: each reads 0 until SGLang first prints it."""
    return counter_series(definitions) & {w.series for w in WATCHED if w.per_round}


def missing_watched(definitions: Mapping[str, MetricDefinition]) -> list[str]:
    """Watched series whose metric the release does not define (none read: the catalogue is empty)."""
    if not definitions:
        return []
    names = {d.name for d in definitions.values()} | counter_series(definitions)
    return [w.series for w in WATCHED if w.series.split(MAX_SUFFIX)[0] not in names]


def parse_exposition(text: str, at_s: float) -> ServerScrape:
    """Counters (with histograms' ``_count``/``_sum``) and gauges named ``sglang:...``, summed over labels."""
    from prometheus_client.parser import text_string_to_metric_families

    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            if not family.name.startswith(PREFIX):
                continue
            for sample in family.samples:
                if family.type == "gauge":
                    gauges[sample.name] = gauges.get(sample.name, 0.0) + sample.value
                elif (family.type == "counter" and sample.name.endswith("_total")) or (
                    family.type in ("histogram", "summary") and sample.name.endswith(("_count", "_sum"))
                ):
                    counters[sample.name] = counters.get(sample.name, 0.0) + sample.value
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(f"not Prometheus text ({exc})") from None
    return ServerScrape(at_s, counters, gauges)
