"""Live effective args: what a running server says about itself, checked with the preflight's code.

The same intents and the same judge as preflight, on `/server_info`, plus evidence only a running
server has: per-phase CUDA graph memory, the server's log lines, and weight memory per GPU compared
with the model's text-only and full sizes (a flag is not proof that the vision tower was skipped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from sglperf import modelsize
from sglperf.intents import INTENTS, PREFILL_CUDA_GRAPH, VISION_WEIGHTS_SKIPPED, Intent, Speculative
from sglperf.preflight import LogLine, Resolution
from sglperf.verdict import Status, Verdict, judge

SERVER_INFO_PATHS = ("/server_info", "/get_server_info")  # the latter on releases before 0.5.6
MODEL_INFO_PATHS = ("/model_info", "/get_model_info")
# /server_info keys that are not server args.
NOT_ARGS = frozenset({"version", "internal_states", "emulated", "effective_source", "flush_count", "emulator_config"})
# Differences between live and predicted args that say nothing about the prediction.
EXPECTED_DRIFT = frozenset({"host", "port", "api_key", "model_path", "tokenizer_path", "served_model_name",
                            "skip_tokenizer_init", "launch_command", "random_seed", "base_gpu_id", "nccl_port",
                            "log_level", "mem_fraction_static", "max_total_tokens", "load_format"})
LOG_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")


class LiveError(RuntimeError):
    """The server's introspection endpoints failed; the message names server and endpoint."""


@dataclass(frozen=True)
class ServerFacts:
    base_url: str
    version: str
    effective: dict[str, Any]
    internal_states: tuple[dict[str, Any], ...]
    model_info: dict[str, Any]
    emulated: bool

    @property
    def graph_memory(self) -> dict[str, float] | None:
        """Per-phase CUDA graph memory (GB) of the first rank, on releases that report it (0.5.17+)."""
        for state in self.internal_states:
            graph = (state.get("memory_usage") or {}).get("graph")
            if isinstance(graph, Mapping):
                return {str(k): float(v) for k, v in graph.items() if isinstance(v, (int, float))}
        return None

    @property
    def weight_gib(self) -> float | None:
        for state in self.internal_states:
            weight = (state.get("memory_usage") or {}).get("weight")
            if isinstance(weight, (int, float)):
                return float(weight)
        return None


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
    states = info.get("internal_states") or []
    return ServerFacts(
        base_url=base_url, version=str(info.get("version", "unknown")),
        effective={k: v for k, v in info.items() if k not in NOT_ARGS},
        internal_states=tuple(s for s in states if isinstance(s, dict)),
        model_info=model, emulated=bool(info.get("emulated", False)),
    )


def parse_log(text: str) -> tuple[LogLine, ...]:
    lines = []
    for raw in text.splitlines():
        if raw.startswith("# sglperf:"):
            continue  # our own launch/stop notes, not the server's words
        level = LOG_LEVEL.search(raw)
        lines.append(LogLine(level.group(1) if level else "INFO", "server-log", raw.strip()))
    return tuple(lines)


def _prefill_graph_evidence(verdict: Verdict, facts: ServerFacts) -> Verdict:
    graph = facts.graph_memory
    if graph is None or "prefill" not in graph:
        return replace(verdict, reasons=(*verdict.reasons, "no per-phase graph memory on this release (0.5.17+ reports it)"))
    evidence = f"internal_states[0].memory_usage.graph.prefill = {graph['prefill']:.2f} GB"
    if verdict.status == Status.PASS and verdict.expected == "on" and graph["prefill"] <= 0:
        return replace(verdict, status=Status.FAIL, actual="on in args, no graph captured",
                       detail=f"{verdict.detail}; but {evidence}: the prefill CUDA graph was never captured")
    return replace(verdict, detail=f"{verdict.detail}; {evidence}")


def _vision_evidence(verdict: Verdict, facts: ServerFacts, config: Mapping[str, Any], tp: int,
                     mtp_loaded: bool) -> Verdict:
    measured = facts.weight_gib
    if measured is None:
        return replace(verdict, status=Status.UNPROVEN if verdict.status != Status.FAIL else verdict.status,
                       detail=f"{verdict.detail}; the server reports no weight memory")
    try:
        size = modelsize.model_size(dict(config))
    except ValueError as exc:
        return replace(verdict, detail=f"{verdict.detail}; cannot size the model from config.json: {exc}")
    evidence = modelsize.classify_weight_memory(measured, size, tp, mtp_loaded=mtp_loaded)
    if evidence.verdict == "skipped":
        status, actual = (Status.PASS, "skipped (weight memory)") if verdict.expected == "on" else (Status.FAIL, "skipped")
    elif evidence.verdict == "loaded":
        status, actual = (Status.FAIL, "loaded (weight memory)") if verdict.expected == "on" else (Status.PASS, "loaded")
        if verdict.expected == "on" and verdict.actual and verdict.actual.startswith("on"):
            actual = "flag set, but the vision tower was loaded"
    else:
        status, actual = Status.UNPROVEN, "unclear"
    return replace(verdict, status=status, actual=actual, detail=f"{verdict.detail}; {evidence.detail}")


def check(deployment_key: str, variant_id: str, expectations: Mapping[str, Any], facts: ServerFacts,
          log_text: str, *, config: Mapping[str, Any], tp: int, requested: Sequence[str] = (),
          warnings: Sequence[str] = ()) -> list[Verdict]:
    """Judge every expected intent on a running server, adding live evidence where SGLang offers it."""
    resolution = Resolution(argv=(), env={}, effective=facts.effective, logs=parse_log(log_text))
    verdicts = []
    for name, expected in expectations.items():
        intent: Intent = INTENTS[name]
        verdict = judge(deployment_key, variant_id, intent, expected, resolution, facts.version,
                        requested=name in requested, warnings=warnings,
                        tier="live (emulator)" if facts.emulated else "live")
        if verdict.status != Status.ERROR:
            if name == PREFILL_CUDA_GRAPH:
                verdict = _prefill_graph_evidence(verdict, facts)
            elif name == VISION_WEIGHTS_SKIPPED:
                mtp = facts.effective.get(Speculative.FIELDS["algorithm"]) is not None
                verdict = _vision_evidence(verdict, facts, config, tp, mtp)
        verdicts.append(verdict)
    return verdicts


@dataclass(frozen=True)
class Drift:
    """Live effective args against the preflight prediction for the same variant."""

    intent_fields: tuple[str, ...]  # differences in fields an intent reads: the prediction was wrong
    other_fields: tuple[str, ...]

    def describe(self, live: Mapping[str, Any], predicted: Mapping[str, Any]) -> list[str]:
        return [f"{f}: predicted {predicted.get(f)!r}, live {live.get(f)!r}"[:300]
                for f in (*self.intent_fields, *self.other_fields)]


def drift(live: Mapping[str, Any], predicted: Mapping[str, Any]) -> Drift:
    intent_fields = {f for intent in INTENTS.values() for f in intent.fields}
    differing = sorted(f for f in set(live) & set(predicted)
                       if f not in EXPECTED_DRIFT and live[f] != predicted[f])
    return Drift(tuple(f for f in differing if f in intent_fields),
                 tuple(f for f in differing if f not in intent_fields))


def load_config(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
