"""The emulator's configuration, its launch argv and the effective args it answers with.

Environment: ``SGLPERF_EMULATOR_EFFECTIVE`` (path to ``{"sglang_version", "effective"}`` from the
suite's preflight; without it effective args are built from argv) and ``SGLPERF_EMULATOR_CONFIG``
(JSON, or ``@file``, for :class:`EmulatorConfig`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglperf.errors import SglperfError
from sglperf.model.files import os_problem, read_input
from sglperf.sglang.batch_log import (
    DECODE_LOG_INTERVAL_FIELD,
    DECODE_LOG_INTERVAL_FLAG,
    DEFAULT_DECODE_LOG_INTERVAL,
)
from sglperf.sglang.flags import API_KEY_FLAG, HOST_FLAG, LOAD_FORMAT_FLAG, MODEL_PATH_FLAG, PORT_FLAG, TP_FLAG
from sglperf.sglang.intents import INTENTS, DecodeCudaGraph, Speculative

CONFIG_ENV = "SGLPERF_EMULATOR_CONFIG"
EFFECTIVE_ENV = "SGLPERF_EMULATOR_EFFECTIVE"

DEFAULT_SPEC_STEPS = 3  # what argv-only mode assumes when steps are not given

# Made-up but plausible memory figures for /server_info and the load log (the GPU's own memory and the
# weights are EmulatorConfig's: the suite sets them from the runner and the model build).
PREFILL_GRAPH_GB = 0.6
DECODE_GRAPH_GB = 0.4
KV_BYTES_PER_TOKEN = 64 * 1024


class ConfigError(SglperfError, ValueError):
    """The emulator's configuration or effective-args file is unusable."""


# ---------------------------------------------------------------------------------------------
# Configuration


@dataclass(frozen=True)
class EmulatorConfig:
    """Behaviour of the emulator: timing model and injected faults (all times in seconds)."""

    startup_s: float = 0.3  # /health answers 503 until then
    prefill_s_per_token: float = 0.0001
    decode_step_s: float = 0.035
    accept_prob: float = 0.7  # per-draft acceptance probability
    noise_cv: float = 0.02  # CV of the multiplicative log-normal noise on each step time
    seed: int = 0
    weight_gb_per_gpu: float = 27.5  # GiB, as SGLang's own figure (the suite: the model as the release builds it)
    vision_weight_gb_per_gpu: float = 0.0  # > 0 emulates "vision tower loaded"
    gpu_memory_gb: float = 48.0  # each GPU's memory, GiB: the KV pool is what the weights and graphs leave of it
    decode_slowdown: float = 1.0  # multiplier on step time, for regression scenarios
    # Multiplier on a decode step that runs eager: the decode graph off, or more requests decoding at the
    # step's start than the largest batch the graph was captured for (timing.py, "Under load"). 1.0: eager
    # costs nothing, as before this existed; a GPU's eager decode is slower (the launches a graph saves).
    eager_step_factor: float = 1.0
    stream_interval: int = 1  # decode steps per streamed chunk
    eos_after_tokens: int | None = None  # without ignore_eos, stop ("stop" finish) after this many
    # > 0: at weight loading, map a file of this many bytes in /dev/shm and never unlink it, as
    # SGLang's CPU backend does with its allreduce buffer (what runtime/server_ledger cleans up after).
    shared_memory_bytes: int = 0
    # Faults (acted on in faults.py).
    never_healthy: bool = False
    # after startup_s / 2, never healthy: an exit code, or -N to be killed by signal N (subprocess's convention)
    exit_during_startup: int | None = None
    # Token-count faults act per request once it has produced that many tokens (a chunk is cut
    # there); crash and stall also hit non-streaming requests, malformed JSON only streams.
    crash_after_tokens: int | None = None  # os._exit(1)
    stall_after_tokens: int | None = None  # stop sending, keep the connection open
    http_5xx_paths: tuple[str, ...] = ()  # these paths answer 500
    malformed_json_after_tokens: int | None = None  # one `data: {not json` event, then go on
    # False: graphs are captured (start-up memory says so) but every batch line says it ran eager, as
    # in SGLang releases whose decode ran eager with the graph captured.
    graph_replayed: bool = True
    # Retraction, as SGLang retracts decoding requests when the KV cache pool is full: this share of
    # requests (drawn per request from its seeded rng) is retracted once, after a token drawn
    # uniformly from its decode; it waits retract_pause_s in the queue, holding no KV, then is
    # re-prefilled (prompt + tokens so far) and decodes on (timing.py).
    retract_fraction: float = 0.0
    retract_pause_s: float = 0.35  # 10 decode steps at the default decode_step_s
    # Load (timing.py, "Under load"); the defaults leave every request on its own step loop, unslowed.
    # Seconds each decode step of every decoding request gains per other request decoding beside it.
    step_s_per_running_request: float = 0.0
    # How many prefills run at once, taken FIFO in arrival order; None: each request prefills on arrival.
    prefill_slots: int | None = None
    # Drift (timing.py, "Drift"): every step and prefill lasts 1 + drift_per_min x the minutes of wall
    # clock since drift_epoch (a Unix time, time.time(), the same for every server of a run; None: this
    # emulator process's start) when it begins. 0: none.
    drift_per_min: float = 0.0
    drift_epoch: float | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, str(f.type), getattr(self, f.name))
        for name in ("accept_prob", "retract_fraction"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name} must be within [0, 1], got {getattr(self, name)}")
        if min(self.decode_step_s, self.decode_slowdown, self.eager_step_factor, self.gpu_memory_gb) <= 0:
            raise ConfigError("decode_step_s, decode_slowdown, eager_step_factor and gpu_memory_gb must be > 0")
        if self.shared_memory_bytes < 0:
            raise ConfigError(f"shared_memory_bytes must be >= 0, got {self.shared_memory_bytes}")
        if self.prefill_slots is not None and self.prefill_slots < 1:
            raise ConfigError(f"prefill_slots must be >= 1 (or null: no queue), got {self.prefill_slots}")
        if self.stream_interval < 1:
            raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")
        for name in ("drift_per_min", "drift_epoch"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value}")
        code = self.exit_during_startup
        if code is not None and not -64 <= code <= 255:
            raise ConfigError(f"exit_during_startup must be an exit code 0..255 or a signal -1..-64, got {code}")

    @property
    def contended(self) -> bool:
        """Whether requests slow each other down (the load knobs are on, or eager steps cost more: the
        batch a step runs in decides both)."""
        return self.step_s_per_running_request > 0 or self.prefill_slots is not None or self.eager_step_factor != 1.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> EmulatorConfig:
        allowed = [f.name for f in dataclasses.fields(cls)]
        for key in data:
            if key not in allowed:
                raise ConfigError(f"unknown emulator config key {key!r}; allowed: {', '.join(allowed)}")
        values = dict(data)
        if isinstance(values.get("http_5xx_paths"), list):
            values["http_5xx_paths"] = tuple(values["http_5xx_paths"])
        return cls(**values)

    @classmethod
    def from_env(cls, value: str | None) -> EmulatorConfig:
        """Parse ``SGLPERF_EMULATOR_CONFIG``: JSON text, or ``@path`` to a JSON file; empty = defaults."""
        if not value or not value.strip():
            return cls()
        text = value
        if value.startswith("@"):
            try:
                text = read_input(Path(value[1:])).decode("utf-8", errors="replace")
            except OSError as exc:
                raise ConfigError(f"{CONFIG_ENV}: cannot read {value[1:]}: {os_problem(exc)}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{CONFIG_ENV} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{CONFIG_ENV} must be a JSON object, got {type(data).__name__}")
        return cls.from_mapping(data)


SIGNED_FIELDS = frozenset({"exit_during_startup"})  # checked for range in __post_init__


def _check_type(name: str, type_: str, value: Any) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    signed = name in SIGNED_FIELDS
    ok = {
        "bool": isinstance(value, bool),
        "int": is_int and value >= 0,
        "float": (is_int or isinstance(value, float)) and value >= 0,
        "int | None": value is None or (is_int and (signed or value >= 0)),
        "float | None": value is None or ((is_int or isinstance(value, float)) and value >= 0),
        "tuple[str, ...]": isinstance(value, tuple) and all(isinstance(v, str) for v in value),
    }.get(type_)
    if ok is None:
        raise AssertionError(f"no validator for {type_}")  # a field was added without one
    if not ok:
        raise ConfigError(f"emulator config {name} must be {type_} (non-negative), got {value!r}")


# ---------------------------------------------------------------------------------------------
# Launch arguments and effective args


@dataclass(frozen=True)
class LaunchArgs:
    """The part of SGLang's argv the emulator reads; everything else is ignored."""

    model_path: str | None
    host: str
    port: int
    api_key: str | None
    tp_size: int
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_num_draft_tokens: int | None
    speculative_eagle_topk: int | None
    load_format: str | None
    served_model_name: str | None
    enable_metrics: bool
    disable_cuda_graph: bool
    decode_log_interval: int


def parse_launch_args(argv: list[str] | None = None) -> LaunchArgs:
    # The spellings are the suite's (flags.py, intents.py): the emulator answers the argv sglperf emits.
    parser = argparse.ArgumentParser(prog="python -m sglperf.testing.emulator", add_help=False)
    parser.add_argument(MODEL_PATH_FLAG, "--model", dest="model_path")
    parser.add_argument(HOST_FLAG, dest="host", default="127.0.0.1")
    parser.add_argument(PORT_FLAG, dest="port", type=int, default=30000)
    parser.add_argument(API_KEY_FLAG, dest="api_key")
    parser.add_argument(TP_FLAG, "--tp", dest="tp_size", type=int, default=1)
    for key, flag in Speculative.FLAGS.items():
        parser.add_argument(flag, dest=Speculative.FIELDS[key], type=str if key == "algorithm" else int)
    parser.add_argument(LOAD_FORMAT_FLAG, dest="load_format")
    parser.add_argument("--served-model-name", dest="served_model_name")
    parser.add_argument("--enable-metrics", dest="enable_metrics", action="store_true")
    parser.add_argument(DecodeCudaGraph.DISABLE_FLAG, dest=DecodeCudaGraph.DISABLE_FIELD, action="store_true")
    parser.add_argument(
        DECODE_LOG_INTERVAL_FLAG, dest=DECODE_LOG_INTERVAL_FIELD, type=int, default=DEFAULT_DECODE_LOG_INTERVAL
    )
    known, _unknown = parser.parse_known_args(argv)  # real validation is SGLang's, in preflight
    return LaunchArgs(**vars(known))


def argv_effective(launch: LaunchArgs) -> dict[str, Any]:
    """Minimal effective args when no preflight result is given (aliases rewritten as SGLang does)."""
    algorithm = launch.speculative_algorithm
    if algorithm is not None:
        algorithm = Speculative.ALIASES.get(algorithm.upper(), algorithm.upper())
    steps = launch.speculative_num_steps
    topk = launch.speculative_eagle_topk
    drafts = launch.speculative_num_draft_tokens
    if algorithm is not None:
        steps = DEFAULT_SPEC_STEPS if steps is None else steps
        topk = 1 if topk is None else topk
        drafts = steps + 1 if drafts is None else drafts
    spec = {"algorithm": algorithm, "num_steps": steps, "num_draft_tokens": drafts, "eagle_topk": topk}
    return {
        "model_path": launch.model_path,
        "tokenizer_path": launch.model_path,
        "host": launch.host,
        "port": launch.port,
        "tp_size": launch.tp_size,
        **{Speculative.FIELDS[key]: value for key, value in spec.items()},
        "load_format": launch.load_format or "auto",
        "served_model_name": launch.served_model_name or launch.model_path,
        "enable_metrics": launch.enable_metrics,
        DecodeCudaGraph.DISABLE_FIELD: launch.disable_cuda_graph,
    }


def load_effective(path: str | None, launch: LaunchArgs) -> tuple[dict[str, Any], str, str]:
    """(effective args, SGLang version, source: "preflight" or "argv")."""
    if not path:
        return argv_effective(launch), "unknown", "argv"
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{EFFECTIVE_ENV}: cannot read {path}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("effective"), dict):
        raise ConfigError(f'{EFFECTIVE_ENV}: {path} must hold {{"sglang_version": ..., "effective": {{...}}}}')
    return data["effective"], str(data.get("sglang_version", "unknown")), "preflight"


def graph_on(intent: str, effective: Mapping[str, Any], default: bool) -> bool:
    """Whether the effective args turn a CUDA-graph intent on (``default`` when the release lacks it)."""
    try:
        return bool(INTENTS[intent].read(effective).value)
    except KeyError:
        return default


def read_architectures(model_path: str | None) -> list[str] | None:
    if not model_path:
        return None
    try:
        archs = json.loads((Path(model_path) / "config.json").read_text()).get("architectures")
    except (OSError, ValueError, AttributeError):
        return None
    return [str(a) for a in archs] if isinstance(archs, list) else None
