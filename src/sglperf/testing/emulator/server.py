"""SGLang emulator: a test double of an SGLang HTTP server, for machines without a GPU.

Start it with the argv one would give SGLang: ``python -m sglperf.testing.emulator --model-path ... --port N``.
It runs no model and touches no GPU; it speaks the subset of SGLang's HTTP API the suite uses
(health, server/model info, flush_cache, metrics, native /generate, OpenAI chat/completions) and
emits tokens on a stated timing model, so the suite's clients and statistics can be checked against
a known truth.

Timing model (one request; requests are independent: each runs its own step loop, whereas a real
server batches them, so concurrency does not slow anything down here):

* TTFT = ``prefill_s_per_token * prompt_tokens`` plus one decode step; the first token comes from
  prefill and is never a verify step. Prompt tokens are ``len(input_ids)``, else
  ``max(1, len(text.encode()) // 4)`` (chat: the messages' text joined by newlines).
* Then repeated decode (verify) steps. Without speculative decoding a step yields 1 token. With it
  (effective ``speculative_algorithm`` set, S = ``speculative_num_steps``; top-k is treated as 1)
  a step accepts k drafts, k = consecutive Bernoulli(``accept_prob``) successes capped at S, and
  yields k + 1 tokens (the bonus token), capped by the tokens still to generate.
* Step time = ``decode_step_s * decode_slowdown`` times log-normal noise of mean 1 and CV
  ``noise_cv``, drawn from ``numpy.random.default_rng([seed, request_index])``: runs reproduce.
* Chunks are sent at absolute ``time.perf_counter`` deadlines (no accumulated sleep error); the first
  token is sent alone, then each chunk carries all tokens of ``stream_interval`` steps.
* Truth: :func:`expected_accept_length` and :func:`expected_decode_tok_s`. As in SGLang, a request's
  ``spec_accept_length`` = completion_tokens / spec_verify_ct counts the prefill token too, so it
  exceeds the per-step expectation by about 1 / spec_verify_ct.

Environment: ``SGLPERF_EMULATOR_EFFECTIVE`` (path to ``{"sglang_version", "effective"}`` from the
suite's preflight; without it effective args are built from argv) and ``SGLPERF_EMULATOR_CONFIG``
(JSON, or ``@file``, for :class:`EmulatorConfig`). Not emulated: batching, real tokenisation,
tree drafts (top-k > 1), ``return_meta_info``, batch requests.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.sglang.flags import API_KEY_FLAG, HOST_FLAG, LOAD_FORMAT_FLAG, MODEL_PATH_FLAG, PORT_FLAG, TP_FLAG
from sglperf.sglang.intents import INTENTS, DecodeCudaGraph, Speculative

CONFIG_ENV = "SGLPERF_EMULATOR_CONFIG"
EFFECTIVE_ENV = "SGLPERF_EMULATOR_EFFECTIVE"
BANNER = (
    "sglperf emulator: an SGLang-compatible TEST DOUBLE, not SGLang and not a GPU; "
    "no model runs, tokens follow a stated timing model"
)
READY_LINE = "The server is fired up and ready to roll!"

DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's native default; also used for chat
DEFAULT_COMPLETION_MAX_TOKENS = 16  # the OpenAI completions default
DEFAULT_SPEC_STEPS = 3  # what argv-only mode assumes when steps are not given
FIRST_TOKEN_ID = 1000
EOS_TOKEN_ID = 2
OPEN_PATHS = frozenset({"/health", "/health_generate"})  # no API key needed, as in SGLang

# Made-up but plausible memory figures for /server_info and the load log.
GPU_MEM_GB = 48.0
PREFILL_GRAPH_GB = 0.6
DECODE_GRAPH_GB = 0.4
KV_BYTES_PER_TOKEN = 64 * 1024


class ConfigError(ValueError):
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
    weight_gb_per_gpu: float = 27.5
    vision_weight_gb_per_gpu: float = 0.0  # > 0 emulates "vision tower loaded"
    decode_slowdown: float = 1.0  # multiplier on step time, for regression scenarios
    stream_interval: int = 1  # decode steps per streamed chunk
    eos_after_tokens: int | None = None  # without ignore_eos, stop ("stop" finish) after this many
    # Faults.
    never_healthy: bool = False
    exit_during_startup: int | None = None  # exit code, after startup_s / 2, never healthy
    # Token-count faults act per request once it has produced that many tokens (a chunk is cut
    # there); crash and stall also hit non-streaming requests, malformed JSON only streams.
    crash_after_tokens: int | None = None  # os._exit(1)
    stall_after_tokens: int | None = None  # stop sending, keep the connection open
    http_5xx_paths: tuple[str, ...] = ()  # these paths answer 500
    malformed_json_after_tokens: int | None = None  # one `data: {not json` event, then go on

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _check_type(f.name, str(f.type), getattr(self, f.name))
        if not 0.0 <= self.accept_prob <= 1.0:
            raise ConfigError(f"accept_prob must be within [0, 1], got {self.accept_prob}")
        if self.decode_step_s <= 0 or self.decode_slowdown <= 0:
            raise ConfigError("decode_step_s and decode_slowdown must be > 0")
        if self.stream_interval < 1:
            raise ConfigError(f"stream_interval must be >= 1, got {self.stream_interval}")
        code = self.exit_during_startup
        if code is not None and not 0 <= code <= 255:
            raise ConfigError(f"exit_during_startup must be an exit code 0..255, got {code}")

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
                text = Path(value[1:]).read_text()
            except OSError as exc:
                raise ConfigError(f"{CONFIG_ENV}: cannot read {value[1:]}: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{CONFIG_ENV} is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{CONFIG_ENV} must be a JSON object, got {type(data).__name__}")
        return cls.from_mapping(data)


def _check_type(name: str, type_: str, value: Any) -> None:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    ok = {
        "bool": isinstance(value, bool),
        "int": is_int and value >= 0,
        "float": (is_int or isinstance(value, float)) and value >= 0,
        "int | None": value is None or (is_int and value >= 0),
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


def speculative_steps(effective: Mapping[str, Any]) -> int | None:
    """S for speculative decoding, or None when it is off."""
    algorithm = effective.get(Speculative.FIELDS["algorithm"])
    if algorithm in (None, "", "NONE", "None"):
        return None
    steps = effective.get(Speculative.FIELDS["num_steps"])
    return DEFAULT_SPEC_STEPS if steps is None else int(steps)


def _graph_on(intent: str, effective: Mapping[str, Any], default: bool) -> bool:
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


# ---------------------------------------------------------------------------------------------
# The truth: timing model as pure functions


def expected_accept_length(accept_prob: float, num_steps: int) -> float:
    """Expected tokens per verify step: sum_{i=0..S} p^i (the bonus token included)."""
    return sum(accept_prob**i for i in range(num_steps + 1))


def expected_decode_tok_s(config: EmulatorConfig, num_steps: int | None) -> float:
    """Expected single-stream decode rate, tokens/s, ignoring the max_new_tokens cap."""
    per_step = 1.0 if num_steps is None else expected_accept_length(config.accept_prob, num_steps)
    return per_step / (config.decode_step_s * config.decode_slowdown)


def prompt_tokens_of_text(text: str) -> int:
    return max(1, len(text.encode()) // 4)


def token_text(index: int) -> str:
    return f" tok{index}"


@dataclass(frozen=True)
class Pass:
    """One forward pass: when its tokens are ready (seconds after arrival) and how many."""

    at_s: float
    tokens: int


@dataclass(frozen=True)
class Plan:
    """All forward passes of one request, drawn up front so the truth does not depend on timing."""

    prefill_s: float
    passes: tuple[Pass, ...]  # passes[0] is prefill's first token; the rest are verify steps
    accepted_drafts: int = 0
    proposed_drafts: int = 0

    @property
    def completion_tokens(self) -> int:
        return sum(p.tokens for p in self.passes)

    @property
    def verify_steps(self) -> int:
        return max(0, len(self.passes) - 1)


def plan_request(
    config: EmulatorConfig, spec_steps: int | None, prompt_tokens: int, n_tokens: int, rng: np.random.Generator
) -> Plan:
    """Draw the passes producing ``n_tokens`` tokens under the timing model."""
    step_s = config.decode_step_s * config.decode_slowdown
    sigma = math.sqrt(math.log1p(config.noise_cv**2))
    mu = -sigma * sigma / 2  # makes the log-normal's mean exactly 1

    def step_time() -> float:
        return step_s * (float(rng.lognormal(mu, sigma)) if sigma > 0 else 1.0)

    prefill_s = config.prefill_s_per_token * prompt_tokens
    if n_tokens <= 0:
        return Plan(prefill_s, ())
    t = prefill_s + step_time()
    passes = [Pass(t, 1)]
    done, accepted, proposed = 1, 0, 0
    while done < n_tokens:
        t += step_time()
        drafts = 0
        if spec_steps is not None:
            while drafts < spec_steps and rng.random() < config.accept_prob:
                drafts += 1
            proposed += spec_steps
        emitted = min(drafts + 1, n_tokens - done)
        accepted += emitted - 1
        passes.append(Pass(t, emitted))
        done += emitted
    return Plan(prefill_s, tuple(passes), accepted, proposed)


@dataclass(frozen=True)
class Chunk:
    """One streamed chunk: when it is sent and the cumulative counts it reports."""

    at_s: float
    end: int  # cumulative tokens once sent
    verify_ct: int  # cumulative verify steps
    final: bool = False


def chunk_plan(plan: Plan, stream_interval: int, splits: tuple[int, ...] = ()) -> list[Chunk]:
    """Group passes into chunks; ``splits`` are token counts where a chunk must end (fault points)."""
    if not plan.passes:
        return [Chunk(plan.prefill_s, 0, 0, final=True)]
    done = plan.passes[0].tokens
    chunks = [Chunk(plan.passes[0].at_s, done, 0)]  # the first token is streamed alone
    last = len(plan.passes) - 1
    for i, p in enumerate(plan.passes[1:], start=1):
        done += p.tokens
        if i % stream_interval == 0 or i == last:
            chunks.append(Chunk(p.at_s, done, i))
    chunks[-1] = dataclasses.replace(chunks[-1], final=True)
    for point in sorted(set(splits)):
        for idx, c in enumerate(chunks):
            start = chunks[idx - 1].end if idx else 0
            if start < point < c.end:
                chunks.insert(idx, Chunk(c.at_s, point, c.verify_ct))
                break
    return chunks


def sleep_until(deadline: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > 0:
        time.sleep(remaining)


# ---------------------------------------------------------------------------------------------
# Server state


@dataclass
class Stats:
    """Server-wide counters (guarded by EmulatorState.lock)."""

    request_index: int = 0
    requests_total: int = 0
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    running: int = 0
    spec_completion_tokens: int = 0
    spec_verify_steps: int = 0
    last_gen_throughput: float = 0.0
    flush_count: int = 0

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.spec_completion_tokens / self.spec_verify_steps if self.spec_verify_steps else None


@dataclass
class Run:
    """One generation request in flight."""

    rid: str
    t0: float
    prompt_tokens: int
    plan: Plan
    chunks: list[Chunk]
    finish: dict[str, Any]
    spec: bool
    malformed_sent: bool = False

    @property
    def accept_rate(self) -> float:
        return self.plan.accepted_drafts / self.plan.proposed_drafts if self.plan.proposed_drafts else 0.0


@dataclass(frozen=True)
class GenRequest:
    """What the timing model needs from any generation endpoint's body."""

    prompt_tokens: int
    max_new_tokens: int
    ignore_eos: bool
    stream: bool


@dataclass
class EmulatorState:
    """Everything the handlers share: configuration, effective args, readiness and counters."""

    config: EmulatorConfig
    launch: LaunchArgs
    effective: dict[str, Any]
    version: str
    effective_source: str
    ready: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stats: Stats = field(default_factory=Stats)
    # Derived from the effective args once.
    spec_steps: int | None = field(init=False)
    prefill_graph: bool = field(init=False)
    decode_graph: bool = field(init=False)
    model_path: str | None = field(init=False)
    architectures: list[str] | None = field(init=False)
    model_name: str = field(init=False)

    def __post_init__(self) -> None:
        self.spec_steps = speculative_steps(self.effective)
        self.prefill_graph = _graph_on(PREFILL_CUDA_GRAPH, self.effective, default=False)
        self.decode_graph = _graph_on(DECODE_CUDA_GRAPH, self.effective, default=True)  # on in every release
        model_path = self.effective.get("model_path") or self.launch.model_path
        self.model_path = str(model_path) if model_path else None
        self.architectures = read_architectures(self.model_path)
        served = self.launch.served_model_name or self.effective.get("served_model_name")
        self.model_name = str(served or self.model_path or "default")

    @property
    def weight_gb(self) -> float:
        return self.config.weight_gb_per_gpu + self.config.vision_weight_gb_per_gpu

    def memory_usage(self) -> dict[str, Any]:
        graph = {
            "prefill": PREFILL_GRAPH_GB if self.prefill_graph else 0.0,
            "decode": DECODE_GRAPH_GB if self.decode_graph else 0.0,
        }
        fraction = float(self.effective.get("mem_fraction_static") or 0.88)
        kv = round(max(0.5, GPU_MEM_GB * fraction - self.weight_gb - sum(graph.values())), 2)
        return {
            "weight": round(self.weight_gb, 2),
            "kvcache": kv,
            "token_capacity": int(kv * 2**30 / KV_BYTES_PER_TOKEN),
            "graph": graph,
        }

    def start_run(self, req: GenRequest) -> Run:
        t0 = time.perf_counter()
        with self.lock:
            index = self.stats.request_index
            self.stats.request_index += 1
            self.stats.running += 1
        cfg = self.config
        n_tokens, finish = req.max_new_tokens, {"type": "length", "length": req.max_new_tokens}
        if not req.ignore_eos and cfg.eos_after_tokens is not None and cfg.eos_after_tokens < n_tokens:
            n_tokens, finish = cfg.eos_after_tokens, {"type": "stop", "matched": EOS_TOKEN_ID}
        rng = np.random.default_rng([cfg.seed, index])
        plan = plan_request(cfg, self.spec_steps, req.prompt_tokens, n_tokens, rng)
        points = (cfg.crash_after_tokens, cfg.stall_after_tokens, cfg.malformed_json_after_tokens)
        chunks = chunk_plan(plan, cfg.stream_interval, tuple(p for p in points if p is not None))
        return Run(uuid.uuid4().hex, t0, req.prompt_tokens, plan, chunks, finish, self.spec_steps is not None)

    def end_run(self, run: Run, completed: bool) -> None:
        plan = run.plan
        with self.lock:
            self.stats.running -= 1
            if not completed:
                return
            self.stats.requests_total += 1
            self.stats.prompt_tokens_total += run.prompt_tokens
            self.stats.generation_tokens_total += plan.completion_tokens
            if run.spec and plan.verify_steps:
                self.stats.spec_completion_tokens += plan.completion_tokens
                self.stats.spec_verify_steps += plan.verify_steps
            if len(plan.passes) > 1:
                span = plan.passes[-1].at_s - plan.passes[0].at_s
                self.stats.last_gen_throughput = (plan.completion_tokens - 1) / span

    def server_info(self) -> dict[str, Any]:
        with self.lock:
            stats = dataclasses.replace(self.stats)
        state: dict[str, Any] = {"last_gen_throughput": stats.last_gen_throughput, "memory_usage": self.memory_usage()}
        if stats.avg_spec_accept_length is not None:
            state["avg_spec_accept_length"] = stats.avg_spec_accept_length
        return {
            **self.effective,
            "version": self.version,
            "emulated": True,
            "effective_source": self.effective_source,
            "flush_count": stats.flush_count,
            "emulator_config": dataclasses.asdict(self.config),
            "internal_states": [state],
        }

    def model_info(self) -> dict[str, Any]:
        archs = self.architectures
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.effective.get("tokenizer_path") or self.model_path,
            "is_generation": True,
            "architectures": archs,
            "has_image_understanding": any(a.endswith("ForConditionalGeneration") for a in archs or ()),
        }

    def metrics(self) -> str:
        with self.lock:
            s = dataclasses.replace(self.stats)
        name = str(self.model_name).replace('"', '\\"')
        label = f'{{model_name="{name}"}}'
        rows = [
            ("num_requests_total", "counter", s.requests_total),
            ("prompt_tokens_total", "counter", s.prompt_tokens_total),
            ("generation_tokens_total", "counter", s.generation_tokens_total),
            ("num_running_reqs", "gauge", s.running),
            ("gen_throughput", "gauge", s.last_gen_throughput),
            ("spec_accept_length", "gauge", s.avg_spec_accept_length or 0.0),
        ]
        lines = []
        for name, kind, value in rows:
            lines += [f"# TYPE sglang:{name} {kind}", f"sglang:{name}{label} {float(value)}"]
        return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Request parsing


class HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _get(body: Mapping[str, Any], key: str, types: tuple[type, ...], default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    # bool is an int subclass; only accept it where bool is asked for
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise HttpError(400, f"{key} must be {' or '.join(t.__name__ for t in types)}, got {value!r}")
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0:
        raise HttpError(400, f"{key} must be >= 0, got {value!r}")
    return value


def _count_prompt(value: Any, what: str) -> int:
    if isinstance(value, str):
        return prompt_tokens_of_text(value)
    if isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return len(value)
    if isinstance(value, list) and len(value) == 1:
        return _count_prompt(value[0], what)
    raise HttpError(400, f"{what} must be one string or one non-empty list of token ids (batches are not emulated)")


def parse_native(body: Mapping[str, Any]) -> GenRequest:
    sampling = _get(body, "sampling_params", (dict,), {})
    if body.get("input_ids") is not None:
        prompt = _count_prompt(body["input_ids"], "input_ids")
    elif body.get("text") is not None:
        prompt = _count_prompt(body["text"], "text")
    else:
        raise HttpError(400, "one of text or input_ids is required")
    _get(sampling, "temperature", (int, float), 1.0)
    return GenRequest(
        prompt,
        _get(sampling, "max_new_tokens", (int,), DEFAULT_MAX_NEW_TOKENS),
        _get(sampling, "ignore_eos", (bool,), False),
        _get(body, "stream", (bool,), False),
    )


def _openai_common(body: Mapping[str, Any], prompt: int, default_max: int) -> GenRequest:
    _get(body, "temperature", (int, float), 1.0)
    if _get(body, "n", (int,), 1) != 1:
        raise HttpError(400, "only n=1 is emulated")
    max_tokens = _get(body, "max_completion_tokens", (int,), None)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", (int,), default_max)
    ignore_eos, stream = _get(body, "ignore_eos", (bool,), False), _get(body, "stream", (bool,), False)
    return GenRequest(prompt, max_tokens, ignore_eos, stream)


def parse_chat(body: Mapping[str, Any]) -> GenRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise HttpError(400, "messages must be a non-empty list of objects")
    texts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
        elif content is not None:
            raise HttpError(400, "message content must be a string or a list of parts")
    _get(body, "logprobs", (bool,), False)
    _get(body, "stream_options", (dict,), {})
    return _openai_common(body, prompt_tokens_of_text("\n".join(texts)), DEFAULT_MAX_NEW_TOKENS)


def parse_completion(body: Mapping[str, Any]) -> GenRequest:
    if body.get("prompt") is None:
        raise HttpError(400, "prompt is required")
    _get(body, "logprobs", (int,), None)
    _get(body, "stream_options", (dict,), {})
    return _openai_common(body, _count_prompt(body["prompt"], "prompt"), DEFAULT_COMPLETION_MAX_TOKENS)


# ---------------------------------------------------------------------------------------------
# HTTP


def log(message: str, rank: bool = False) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}{' TP0' if rank else ''}] {message}", flush=True)


class _Stalled(Exception):
    """The stall fault fired; the connection stays open until the server stops."""


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True  # streams must not delay shutdown
    request_queue_size = 128  # the suite opens many concurrent streams

    def __init__(self, address: tuple[str, int], state: EmulatorState) -> None:
        self.state = state
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sglperf-emulator"
    disable_nagle_algorithm = True  # small SSE writes must leave at once
    server: EmulatorServer

    GET = {
        "/health": "health",
        "/health_generate": "health",
        "/server_info": "server_info",
        "/get_server_info": "server_info",
        "/model_info": "model_info",
        "/get_model_info": "model_info",
        "/metrics": "metrics",
        "/flush_cache": "flush",
    }
    POST = {
        "/generate": "generate",
        "/v1/chat/completions": "chat",
        "/v1/completions": "completions",
        "/flush_cache": "flush",
    }

    def log_message(self, format: str, *args: Any) -> None:
        pass  # per-request lines would fill an undrained stdout pipe and block the server

    def do_GET(self) -> None:
        self._dispatch(self.GET, b"")

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            self.close_connection = True
            self._send_json(400, _error_body(400, "a request body needs a valid Content-Length"))
            return
        self._dispatch(self.POST, self.rfile.read(length))

    def _dispatch(self, table: dict[str, str], body: bytes) -> None:
        state = self.server.state
        path = urlsplit(self.path).path
        self._streaming = False
        try:
            if path not in self.GET and path not in self.POST:
                raise HttpError(404, "Not Found", "NotFoundError")
            if path not in table:
                raise HttpError(405, "Method Not Allowed", "MethodNotAllowed")
            key = state.launch.api_key
            if key and path not in OPEN_PATHS and self.headers.get("Authorization") != f"Bearer {key}":
                self._send_json(401, {"error": "Unauthorized"})
                return
            if path in state.config.http_5xx_paths:
                raise HttpError(500, f"emulated server error on {path} (http_5xx_paths)", "InternalServerError")
            getattr(self, "_" + table[path])(body)
        except HttpError as exc:
            if not self._streaming:
                self._send_json(exc.status, _error_body(exc.status, exc.message, exc.kind))
        except (ConnectionError, TimeoutError, _Stalled):
            self.close_connection = True
        except Exception as exc:  # a bug here must cost one request, not the server
            self.close_connection = True
            if not self._streaming:
                self._send_json(500, _error_body(500, f"{type(exc).__name__}: {exc}", "InternalServerError"))

    # -- plain responses --

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _health(self, body: bytes) -> None:
        self._send(200 if self.server.state.ready.is_set() else 503, b"", "text/plain")

    def _server_info(self, body: bytes) -> None:
        self._send_json(200, self.server.state.server_info())

    def _model_info(self, body: bytes) -> None:
        self._send_json(200, self.server.state.model_info())

    def _metrics(self, body: bytes) -> None:
        state = self.server.state
        if not state.launch.enable_metrics and not state.effective.get("enable_metrics"):
            raise HttpError(404, "Not Found (start with --enable-metrics)", "NotFoundError")
        self._send(200, state.metrics().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def _flush(self, body: bytes) -> None:
        state = self.server.state
        with state.lock:
            state.stats.flush_count += 1
        self._send(200, b"Cache flushed.", "text/plain")

    # -- generation --

    def _json_body(self, body: bytes) -> dict[str, Any]:
        try:
            data = json.loads(body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise HttpError(400, f"request body is not valid JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise HttpError(400, "request body must be a JSON object")
        if not self.server.state.ready.is_set():
            raise HttpError(503, "the server is still starting", "ServiceUnavailable")
        return data

    def _generate(self, body: bytes) -> None:
        req = parse_native(self._json_body(body))
        ids: list[int] = []
        text: list[str] = []

        def render(run: Run, chunk: Chunk) -> dict[str, Any]:
            for i in range(len(ids), chunk.end):
                ids.append(FIRST_TOKEN_ID + i)
                text.append(token_text(i))
            meta: dict[str, Any] = {
                "id": run.rid,
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": chunk.end,
                "cached_tokens": 0,
                "finish_reason": None,
            }
            if run.spec:
                meta["spec_verify_ct"] = chunk.verify_ct
            if chunk.final:
                meta["finish_reason"] = run.finish
                meta["e2e_latency"] = time.perf_counter() - run.t0
                if run.spec:
                    meta["spec_accept_length"] = chunk.end / max(1, chunk.verify_ct)
                    meta["spec_accept_rate"] = run.accept_rate
            return {"text": "".join(text), "output_ids": list(ids), "meta_info": meta}

        self._serve_run(req, lambda run, chunk: [render(run, chunk)], lambda run: [], render)

    def _chat(self, body: bytes) -> None:
        data = self._json_body(body)
        req = parse_chat(data)
        want_logprobs = bool(data.get("logprobs"))
        usage_chunk = bool((data.get("stream_options") or {}).get("include_usage"))
        model = data.get("model") or self.server.state.model_name
        created = int(time.time())
        sent = [0]

        def head(run: Run) -> dict[str, Any]:
            return {"id": "chatcmpl-" + run.rid, "object": "chat.completion.chunk", "created": created, "model": model}

        def events(run: Run, chunk: Chunk) -> list[dict[str, Any]]:
            out = []
            if sent[0] == 0 and chunk.end > 0:  # OpenAI streams open with a role-only chunk
                out.append(
                    {
                        **head(run),
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ],
                        "usage": None,
                    }
                )
            tokens = [token_text(i) for i in range(sent[0], chunk.end)]
            sent[0] = chunk.end
            choice = {
                "index": 0,
                "delta": {"content": "".join(tokens)},
                "logprobs": {"content": _chat_logprobs(tokens)} if want_logprobs else None,
                "finish_reason": _openai_finish(run) if chunk.final else None,
            }
            return [*out, {**head(run), "choices": [choice], "usage": None}]

        def tail(run: Run) -> list[dict[str, Any]]:
            return [{**head(run), "choices": [], "usage": _usage(run)}] if usage_chunk else []

        def whole(run: Run, chunk: Chunk) -> dict[str, Any]:
            tokens = [token_text(i) for i in range(chunk.end)]
            return {
                "id": "chatcmpl-" + run.rid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "".join(tokens)},
                        "logprobs": {"content": _chat_logprobs(tokens)} if want_logprobs else None,
                        "finish_reason": _openai_finish(run),
                    }
                ],
                "usage": _usage(run),
            }

        self._serve_run(req, events, tail, whole)

    def _completions(self, body: bytes) -> None:
        data = self._json_body(body)
        req = parse_completion(data)
        logprobs = data.get("logprobs")
        usage_chunk = bool((data.get("stream_options") or {}).get("include_usage"))
        model = data.get("model") or self.server.state.model_name
        created = int(time.time())
        sent = [0]

        def choice(run: Run, start: int, end: int, final: bool) -> dict[str, Any]:
            tokens = [token_text(i) for i in range(start, end)]
            return {
                "index": 0,
                "text": "".join(tokens),
                "logprobs": _completion_logprobs(tokens, logprobs) if logprobs is not None else None,
                "finish_reason": _openai_finish(run) if final else None,
            }

        def head(run: Run) -> dict[str, Any]:
            return {"id": "cmpl-" + run.rid, "object": "text_completion", "created": created, "model": model}

        def events(run: Run, chunk: Chunk) -> list[dict[str, Any]]:
            start, sent[0] = sent[0], chunk.end
            return [{**head(run), "choices": [choice(run, start, chunk.end, chunk.final)], "usage": None}]

        def tail(run: Run) -> list[dict[str, Any]]:
            return [{**head(run), "choices": [], "usage": _usage(run)}] if usage_chunk else []

        def whole(run: Run, chunk: Chunk) -> dict[str, Any]:
            return {**head(run), "choices": [choice(run, 0, chunk.end, True)], "usage": _usage(run)}

        self._serve_run(req, events, tail, whole)

    def _serve_run(
        self,
        req: GenRequest,
        events: Callable[[Run, Chunk], list[dict[str, Any]]],
        tail: Callable[[Run], list[dict[str, Any]]],
        whole: Callable[[Run, Chunk], dict[str, Any]],
    ) -> None:
        """Run one request on the timing model: stream its chunks as SSE events, or answer once at the end."""
        state = self.server.state
        run = state.start_run(req)
        completed = False
        try:
            if req.stream:
                self._start_stream()
            self._after_tokens(run, 0, req.stream)
            for chunk in run.chunks:
                sleep_until(run.t0 + chunk.at_s)
                if req.stream:
                    for event in events(run, chunk):
                        self._send_event(json.dumps(event))
                self._after_tokens(run, chunk.end, req.stream)
            completed = True
            if req.stream:
                for event in tail(run):
                    self._send_event(json.dumps(event))
                self._send_event("[DONE]")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._send_json(200, whole(run, run.chunks[-1]))
        finally:
            state.end_run(run, completed)

    def _after_tokens(self, run: Run, sent: int, streaming: bool) -> None:
        """Fire the token-count faults once ``sent`` tokens are out."""
        cfg = self.server.state.config
        if (
            streaming
            and not run.malformed_sent
            and cfg.malformed_json_after_tokens is not None
            and sent >= cfg.malformed_json_after_tokens
        ):
            run.malformed_sent = True
            self._send_event("{not json")
        if cfg.crash_after_tokens is not None and sent >= cfg.crash_after_tokens:
            log(f"Scheduler hit an exception: emulated crash after {sent} tokens (crash_after_tokens)", rank=True)
            os._exit(1)
        if cfg.stall_after_tokens is not None and sent >= cfg.stall_after_tokens:
            self.server.state.stopping.wait()
            raise _Stalled()

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True

    def _send_event(self, data: str) -> None:
        payload = f"data: {data}\n\n".encode()
        # one write per event: header, payload and trailer must not be split across TCP segments
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))


def _error_body(status: int, message: str, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def _usage(run: Run) -> dict[str, int]:
    done = run.plan.completion_tokens
    return {"prompt_tokens": run.prompt_tokens, "completion_tokens": done, "total_tokens": run.prompt_tokens + done}


def _openai_finish(run: Run) -> str:
    return "length" if run.finish["type"] == "length" else "stop"


def _chat_logprobs(tokens: list[str]) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": 0.0, "bytes": None, "top_logprobs": []} for t in tokens]


def _completion_logprobs(tokens: list[str], top: int) -> dict[str, Any]:
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    return {
        "tokens": tokens,
        "token_logprobs": [0.0] * len(tokens),
        "top_logprobs": [{t: 0.0} if top else {} for t in tokens],
        "text_offset": offsets,
    }


# ---------------------------------------------------------------------------------------------
# Process


def _start_up(state: EmulatorState) -> None:
    """Emulate model loading: SGLang-like log lines, then ready (or a startup fault)."""
    cfg = state.config
    t0 = time.perf_counter()
    avail = GPU_MEM_GB - 1.0
    log(f"Load weight begin. avail mem={avail:.2f} GB", rank=True)
    sleep_until(t0 + cfg.startup_s / 2)
    if cfg.exit_during_startup is not None:
        log(
            f"Scheduler hit an exception: RuntimeError: emulated startup failure "
            f"(exit_during_startup={cfg.exit_during_startup})",
            rank=True,
        )
        os._exit(cfg.exit_during_startup)
    arch = (state.architectures or ["unknown"])[0]
    avail -= state.weight_gb
    log(
        f"Load weight end. elapsed={cfg.startup_s / 2:.2f} s, type={arch}, dtype=torch.bfloat16, "
        f"avail mem={avail:.2f} GB, mem usage={state.weight_gb:.2f} GB.",
        rank=True,
    )
    memory = state.memory_usage()
    log(f"KV Cache is allocated. #tokens: {memory['token_capacity']}, KV size: {memory['kvcache']:.2f} GB", rank=True)
    if state.decode_graph:
        avail -= DECODE_GRAPH_GB
        log(
            f"Capture cuda graph end. Time elapsed: 0.00 s. mem usage={DECODE_GRAPH_GB:.2f} GB. "
            f"avail mem={avail:.2f} GB.",
            rank=True,
        )
    if state.prefill_graph:
        avail -= PREFILL_GRAPH_GB
        log(
            f"Capture prefill cuda graph end (piecewise). Time elapsed: 0.00 s. "
            f"mem usage={PREFILL_GRAPH_GB:.2f} GB. avail mem={avail:.2f} GB.",
            rank=True,
        )
    sleep_until(t0 + cfg.startup_s)
    if cfg.never_healthy:
        return  # a hung warmup logs nothing more
    state.ready.set()
    log(READY_LINE)


class _Shutdown(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT to leave serve_forever."""


def _raise_shutdown(signum: int, frame: Any) -> None:
    raise _Shutdown(signum)


def main(argv: list[str] | None = None) -> int:
    launch = parse_launch_args(argv)
    try:
        config = EmulatorConfig.from_env(os.environ.get(CONFIG_ENV))
        effective, version, source = load_effective(os.environ.get(EFFECTIVE_ENV), launch)
    except ConfigError as exc:
        print(f"sglperf emulator: {exc}", file=sys.stderr, flush=True)
        return 2
    state = EmulatorState(config, launch, effective, version, source)
    log(BANNER)
    log(
        f"effective args from {source} (SGLang {version}); speculative steps={state.spec_steps}, "
        f"prefill graph={'on' if state.prefill_graph else 'off'}"
    )
    try:
        server = EmulatorServer((launch.host, launch.port), state)
    except OSError as exc:
        log(f"cannot listen on {launch.host}:{launch.port}: {exc}")
        return 1
    signal.signal(signal.SIGTERM, _raise_shutdown)
    signal.signal(signal.SIGINT, _raise_shutdown)
    threading.Thread(target=_start_up, args=(state,), daemon=True, name="startup").start()
    log(f"Uvicorn running on http://{launch.host}:{launch.port} (Press CTRL+C to quit)")
    try:
        server.serve_forever(poll_interval=0.1)
    except _Shutdown:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not interrupt the cleanup
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        state.stopping.set()
        server.server_close()
    log("Shutting down.")
    return 0
