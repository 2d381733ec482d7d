"""The emulator's server-wide state: configuration, effective args, readiness, counters, requests in flight."""

from __future__ import annotations

import dataclasses
import json
import mmap
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.testing.emulator.config import (
    DECODE_GRAPH_GB,
    GPU_MEM_GB,
    KV_BYTES_PER_TOKEN,
    PREFILL_GRAPH_GB,
    EmulatorConfig,
    LaunchArgs,
    graph_on,
    read_architectures,
)
from sglperf.testing.emulator.console import decode_batch_line, log, prefill_batch_line
from sglperf.testing.emulator.faults import TokenFaults
from sglperf.testing.emulator.timing import (
    Chunk,
    Plan,
    chunk_plan,
    expected_decode_tok_s,
    plan_request,
    speculative_steps,
)

EOS_TOKEN_ID = 2
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")


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
    decode_steps: int = 0  # every request's, for the decode batch lines

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
    faults: TokenFaults = field(default_factory=TokenFaults)

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
    started: float = field(default_factory=time.time)
    shared_memory: mmap.mmap | None = None  # config.shared_memory_bytes, kept mapped until exit

    def __post_init__(self) -> None:
        self.spec_steps = speculative_steps(self.effective)
        self.prefill_graph = graph_on(PREFILL_CUDA_GRAPH, self.effective, default=False)
        self.decode_graph = graph_on(DECODE_CUDA_GRAPH, self.effective, default=True)  # on in every release
        model_path = self.effective.get("model_path") or self.launch.model_path
        self.model_path = str(model_path) if model_path else None
        self.architectures = read_architectures(self.model_path)
        served = self.launch.served_model_name or self.effective.get("served_model_name")
        self.model_name = str(served or self.model_path or "default")

    @property
    def weight_gb(self) -> float:
        return self.config.weight_gb_per_gpu + self.config.vision_weight_gb_per_gpu

    def memory_usage(self) -> dict[str, Any]:
        # SGLang 0.5.17+ reports one entry per graph phase; with speculative decoding the target's
        # decode graph is its verify graph.
        decode_phase = "target_verify" if self.spec_steps is not None else "decode"
        graph = dict.fromkeys(GRAPH_PHASES, 0.0)
        graph["prefill"] = PREFILL_GRAPH_GB if self.prefill_graph else 0.0
        graph[decode_phase] = DECODE_GRAPH_GB if self.decode_graph else 0.0
        fraction = float(self.effective.get("mem_fraction_static") or 0.88)
        kv = round(max(0.5, GPU_MEM_GB * fraction - self.weight_gb - sum(graph.values())), 2)
        return {
            "weight": round(self.weight_gb, 2),
            "kvcache": kv,
            "startup_available": round(GPU_MEM_GB - 1.0, 2),
            "token_capacity": int(kv * 2**30 / KV_BYTES_PER_TOKEN),
            "token_capacity_swa": None,
            "graph": graph,
        }

    def decode_graph_batch_sizes(self) -> list[int]:
        """The batch sizes a decode graph was captured for (``internal_states[..].decode_cuda_graph_bs``):
        none when the graph is off, which on a CPU server means without --enable-torch-compile, whatever
        ``cuda_graph_config.decode.backend`` says (``graph_on`` reads it as SGLang decides)."""
        if not self.decode_graph:
            return []
        decode = (self.effective.get("cuda_graph_config") or {}).get("decode") or {}
        sizes = decode.get("bs") if isinstance(decode, dict) else None
        return [int(b) for b in sizes] if isinstance(sizes, list) and sizes else list(range(1, 9))

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
        faults = TokenFaults.of(cfg)
        chunks = chunk_plan(plan, cfg.stream_interval, faults.split_points)
        spec = self.spec_steps is not None
        return Run(uuid.uuid4().hex, t0, req.prompt_tokens, plan, chunks, finish, spec, faults)

    @property
    def graph_label(self) -> str:
        return "cpu graph" if self.effective.get("device") == "cpu" else "cuda graph"

    def log_prefill(self, run: Run) -> None:
        """SGLang's line for the prefill batch of ``run`` (one request per batch here)."""
        with self.lock:
            running = self.stats.running - 1
        ran = self.prefill_graph and self.config.graph_replayed
        tok_s = run.prompt_tokens / run.plan.prefill_s if run.plan.prefill_s > 0 else 0.0
        log(prefill_batch_line(run.prompt_tokens, running, self.graph_label, ran, tok_s), rank=self.launch.tp_size > 1)

    def log_decode_steps(self, run: Run, steps: int, tokens: int) -> None:
        """Count ``steps`` decode steps of ``run`` (``tokens`` generated so far); a line at every
        ``decode_log_interval``-th step of the server, as SGLang logs them (here per request, not per batch)."""
        interval = self.launch.decode_log_interval
        with self.lock:
            before = self.stats.decode_steps
            self.stats.decode_steps += steps
            running = self.stats.running
        if steps <= 0 or (before + steps) // interval == before // interval:
            return
        plan = run.plan
        accept = (plan.completion_tokens / max(1, plan.verify_steps), run.accept_rate) if run.spec else None
        ran = self.decode_graph and self.config.graph_replayed
        tok_s = expected_decode_tok_s(self.config, self.spec_steps)
        line = decode_batch_line(running, run.prompt_tokens + tokens, accept, self.graph_label, ran, tok_s)
        log(line, rank=self.launch.tp_size > 1)

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
        memory = self.memory_usage()
        state: dict[str, Any] = {
            "last_gen_throughput": stats.last_gen_throughput,
            "memory_usage": memory,
            "decode_cuda_graph_bs": self.decode_graph_batch_sizes(),
            "decode_cuda_graph_memory_gb": DECODE_GRAPH_GB if self.decode_graph else 0.0,
        }
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

    def models(self) -> dict[str, Any]:
        """``/v1/models``: the one served model, as SGLang lists it."""
        context = self.effective.get("context_length") or 4096
        card = {
            "id": self.model_name,
            "object": "model",
            "created": int(self.started),
            "owned_by": "sglang",
            "root": self.model_name,
            "parent": None,
            "max_model_len": int(context),
        }
        return {"object": "list", "data": [card]}

    def model_info(self) -> dict[str, Any]:
        archs = self.architectures
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.effective.get("tokenizer_path") or self.model_path,
            "is_generation": True,
            "architectures": archs,
            "has_image_understanding": any(a.endswith("ForConditionalGeneration") for a in archs or ()),
            # As SGLang 0.5.23 answers (its "embedding" capability block is not emulated).
            "has_audio_understanding": False,
            "model_type": self.model_type,
            "weight_version": "default",
            "served_model_name": self.model_name,
            "load_format": str(self.effective.get("load_format") or "auto"),
            "disaggregation_mode": str(self.effective.get("disaggregation_mode") or "null"),
            "preferred_sampling_params": self.effective.get("preferred_sampling_params"),
            "reasoning_parser": self.effective.get("reasoning_parser"),
            "tool_call_parser": self.effective.get("tool_call_parser"),
        }

    @property
    def model_type(self) -> str:
        try:
            return str(json.loads((Path(str(self.model_path)) / "config.json").read_text()).get("model_type") or "")
        except (OSError, ValueError, AttributeError):
            return ""

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
