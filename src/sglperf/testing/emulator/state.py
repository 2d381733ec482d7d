"""The emulator's server-wide state: configuration, effective args, readiness, counters, requests in flight."""

from __future__ import annotations

import copy
import dataclasses
import json
import mmap
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.model.server_facts import DECODE_GRAPH_SIZES_FIELD
from sglperf.sglang.intents import PREFILL_GRAPH
from sglperf.testing.emulator.config import (
    DECODE_GRAPH_GB,
    KV_BYTES_PER_TOKEN,
    PREFILL_GRAPH_GB,
    EmulatorConfig,
    LaunchArgs,
    graph_on,
    read_architectures,
)
from sglperf.testing.emulator.console import decode_batch_line, log, prefill_batch_line, retract_line
from sglperf.testing.emulator.faults import TokenFaults
from sglperf.testing.emulator.metrics import Retractions, Served, Snapshot, engine_type, render
from sglperf.testing.emulator.timing import (
    Chunk,
    Plan,
    PrefillSlots,
    chunk_plan,
    drift_factor,
    expected_decode_tok_s,
    loaded_step_s,
    plan_request,
    sleep_until,
    speculative_steps,
)

EOS_TOKEN_ID = 2
GRAPH_PHASES = ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend")

# SGLang's new-token ratio (its env defaults, schedule_conservativeness 1), for the retraction line:
# it decays from INIT to MIN over DECAY_STEPS decode batches, a retraction re-estimates it from the
# requests left running, an idle scheduler resets it.
RATIO_INIT = 0.7
RATIO_MIN = RATIO_INIT * 0.14
RATIO_DECAY_STEPS = 600
RETRACT_DECODE_STEPS = 20


@dataclass
class NewTokenRatio:
    value: float = RATIO_INIT
    since: float = field(default_factory=time.perf_counter)  # when it was last set

    def at(self, now: float, step_s: float) -> float:
        # A decode batch here is a decode step's time: the emulator's requests do not share batches.
        steps = (now - self.since) / step_s
        return max(self.value - (RATIO_INIT - RATIO_MIN) / RATIO_DECAY_STEPS * steps, RATIO_MIN)

    def set(self, value: float, now: float) -> None:
        self.value, self.since = value, now


@dataclass
class Stats:
    """Server-wide counters (guarded by EmulatorState.lock)."""

    request_index: int = 0
    served: dict[bool, Served] = field(default_factory=lambda: {False: Served(), True: Served()})  # by is_streaming
    aborted: int = 0  # ended before their last token (the client went away)
    spec_completion_tokens: int = 0
    spec_verify_steps: int = 0
    last_gen_throughput: float = 0.0
    flush_count: int = 0
    decode_steps: int = 0  # every request's, for the decode batch lines
    retractions: Retractions = field(default_factory=Retractions)
    # SGLang's num_retracted_reqs gauge: the retractions since the stats report before the last one
    # (a report is a batch line); the scheduler publishes its count at each report, then zeroes it.
    retracted_unreported: int = 0
    retracted_reported: int = 0
    new_token_ratio: NewTokenRatio = field(default_factory=NewTokenRatio)

    @property
    def avg_spec_accept_length(self) -> float | None:
        return self.spec_completion_tokens / self.spec_verify_steps if self.spec_verify_steps else None

    def report(self) -> None:
        """A stats report (SGLang's at every batch line): publish the retractions since the last."""
        self.retracted_reported, self.retracted_unreported = self.retracted_unreported, 0


@dataclass
class Run:
    """One generation request in flight."""

    rid: str
    t0: float
    prompt_tokens: int
    max_new_tokens: int
    stream: bool
    plan: Plan
    chunks: list[Chunk]
    finish: dict[str, Any]
    spec: bool
    faults: TokenFaults = field(default_factory=TokenFaults)
    since_epoch_s: float = 0.0  # wall-clock seconds from the drift epoch to t0 (timing.py, "Drift")
    tokens_out: int = 0  # sent so far
    retracted: bool = False  # its retraction is counted and logged
    resumed: bool = False  # its re-prefill is logged
    finished: bool = False  # its last token is out and counted
    # Under load (timing.py), set by EmulatorState.await_chunk; all stay 0 with the load knobs off.
    queue_s: float = 0.0  # waited for a prefill slot
    delay_s: float = 0.0  # how much later than its plan its passes run: the queue, then the steps' stretch
    first_delay_s: float = 0.0  # delay_s once its first token is out
    next_pass: int = 0  # the first pass whose start has not been reached yet
    decoding: bool = False  # counted in EmulatorState.decoding

    def since_epoch_at(self, now: float) -> float:
        """Wall-clock seconds from the drift epoch to ``now`` (a perf_counter time)."""
        return self.since_epoch_s + (now - self.t0)

    def waiting(self, now: float) -> bool:
        """Retracted and waiting in the queue (holding no KV) at ``now``."""
        # On the plan's clock: its delay so far does not move while it waits (await_chunk adds the
        # next step's stretch only after the gap).
        return self.plan.waiting(now - self.t0 - self.delay_s)

    def queued(self, now: float) -> bool:
        """In the waiting queue at ``now`` (holding no KV): before its prefill slot, or retracted."""
        return (self.queue_s > 0 and now < self.t0 + self.queue_s) or self.waiting(now)

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
    runs: dict[str, Run] = field(default_factory=dict)  # in flight, by rid
    decoding: int = 0  # requests in their decode loop, with the load knobs on (timing.py): the batch
    prefill_slots: PrefillSlots = field(init=False)
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
        self.prefill_slots = PrefillSlots(self.config.prefill_slots)
        self.spec_steps = speculative_steps(self.effective)
        self.prefill_graph = graph_on(PREFILL_CUDA_GRAPH, self.effective, default=False)
        self.decode_graph = graph_on(DECODE_CUDA_GRAPH, self.effective, default=True)  # on in every release
        model_path = self.effective.get("model_path") or self.launch.model_path
        self.model_path = str(model_path) if model_path else None
        self.architectures = read_architectures(self.model_path)
        served = self.launch.served_model_name or self.effective.get("served_model_name")
        self.model_name = str(served or self.model_path or "default")

    @property
    def metrics_enabled(self) -> bool:
        """Started with --enable-metrics (or the effective args say so): /metrics and timing meta_info."""
        return bool(self.launch.enable_metrics or self.effective.get("enable_metrics"))

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
        gpu = self.config.gpu_memory_gb
        kv = round(max(0.5, gpu * fraction - self.weight_gb - sum(graph.values())), 2)
        return {
            "weight": round(self.weight_gb, 2),
            "kvcache": kv,
            "startup_available": round(gpu - 1.0, 2),
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

    def eager(self, running: int) -> bool:
        """Whether a decode step with ``running`` requests in its batch runs eager: the decode graph is off,
        or the batch is above the largest size it was captured for (SGLang's can_run_graph)."""
        sizes = self.decode_graph_batch_sizes()
        return not sizes or running > max(sizes)

    @property
    def drift_epoch(self) -> float:
        """The Unix time drift is counted from: the run's, else this emulator's start."""
        return self.started if self.config.drift_epoch is None else self.config.drift_epoch

    def start_run(self, req: GenRequest) -> Run:
        t0 = time.perf_counter()
        since_epoch_s = time.time() - self.drift_epoch
        with self.lock:
            index = self.stats.request_index
            self.stats.request_index += 1
        cfg = self.config
        n_tokens, finish = req.max_new_tokens, {"type": "length", "length": req.max_new_tokens}
        if not req.ignore_eos and cfg.eos_after_tokens is not None and cfg.eos_after_tokens < n_tokens:
            n_tokens, finish = cfg.eos_after_tokens, {"type": "stop", "matched": EOS_TOKEN_ID}
        rng = np.random.default_rng([cfg.seed, index])
        plan = plan_request(cfg, self.spec_steps, req.prompt_tokens, n_tokens, rng, since_epoch_s)
        faults = TokenFaults.of(cfg)
        chunks = chunk_plan(plan, cfg.stream_interval, faults.split_points)
        run = Run(
            rid=uuid.uuid4().hex,
            t0=t0,
            prompt_tokens=req.prompt_tokens,
            max_new_tokens=req.max_new_tokens,
            stream=req.stream,
            plan=plan,
            chunks=chunks,
            finish=finish,
            spec=self.spec_steps is not None,
            faults=faults,
            since_epoch_s=since_epoch_s,
        )

        def prefill_s(start: float) -> float:
            """Its prefill's time if it starts at ``start``: drifted then, not at arrival as planned."""
            late = drift_factor(cfg, since_epoch_s + (start - t0)) / drift_factor(cfg, since_epoch_s)
            return plan.prefill_s * late  # an exact * 1.0 without drift

        with self.lock:
            if cfg.prefill_slots is not None:
                # Reserved now, in arrival order: the prefills ahead of it are already known.
                start = self.prefill_slots.admit(t0, prefill_s)
                run.queue_s = start - t0
                run.delay_s = run.queue_s + (prefill_s(start) - plan.prefill_s)
            self.runs[run.rid] = run
        return run

    def await_chunk(self, run: Run, chunk: Chunk) -> None:
        """Sleep until ``chunk`` of ``run`` is due: at its plan's time or, under load (timing.py), once
        its queue, its prefill and every pass up to the chunk's have run, each pass stretched by the
        requests decoding when it starts."""
        cfg = self.config
        if not cfg.contended:
            sleep_until(run.t0 + chunk.at_s)
            return
        plan = run.plan
        # A pass is timed at its start, so passes inside one chunk (stream_interval > 1) are each
        # waited for: the batch may change between them.
        while run.next_pass <= chunk.verify_ct and run.next_pass < len(plan.passes):
            i = run.next_pass
            start = plan.passes[i - 1].at_s if i else plan.prefill_s  # on the plan's clock
            sleep_until(run.t0 + run.delay_s + start)
            drawn = plan.passes[i].at_s - start
            if i and plan.retract_after == i - 1:
                # Out of the batch while it waits and is re-prefilled; that gap is not a step, not stretched.
                self._decode(run, False)
                start += plan.retract_s
                sleep_until(run.t0 + run.delay_s + start)
                drawn -= plan.retract_s
            running = self._decode(run, True)
            # The plan drifted the step as of its start on the plan's clock; it starts delay_s later.
            planned = run.since_epoch_s + start
            drifted = drawn * drift_factor(cfg, planned + run.delay_s) / drift_factor(cfg, planned)
            eager = cfg.eager_step_factor if self.eager(running) else 1.0  # exactly 1.0 with the knob off
            run.delay_s += loaded_step_s(cfg, drifted, running) * eager - drawn
            if i == 0:
                run.first_delay_s = run.delay_s
            run.next_pass += 1
        sleep_until(run.t0 + run.delay_s + chunk.at_s)

    def _decode(self, run: Run, on: bool) -> int:
        """Put ``run`` in the decode batch or take it out; the requests decoding then."""
        with self.lock:
            if on and not run.decoding:
                run.decoding = True
                self.decoding += 1
            elif not on:
                self._leave_batch(run)
            return self.decoding

    def _leave_batch(self, run: Run) -> None:
        """Take ``run`` out of the decode batch, if it is in (call under the lock)."""
        if run.decoding:
            run.decoding = False
            self.decoding -= 1

    def _batch(self, now: float, besides: Run | None = None) -> tuple[int, int]:
        """(running, queued): the requests in flight, other than ``besides``, out of the queue and in it
        (call under the lock)."""
        queued = [r.queued(now) for r in self.runs.values() if r is not besides]
        return len(queued) - sum(queued), sum(queued)

    @property
    def graph_label(self) -> str:
        return "cpu graph" if self.effective.get("device") == "cpu" else "cuda graph"

    def log_prefill(self, run: Run) -> None:
        """After the first token of ``run`` is out: its time to first token, and SGLang's line for its
        prefill batch (one request per batch here)."""
        now = time.perf_counter()
        with self.lock:
            self.stats.served[run.stream].ttft.observe(now - run.t0)
            self.stats.report()
            running, queued = self._batch(now, besides=run)
        self._log_prefill_line(run.prompt_tokens, run.plan.prefill_s, running, queued)

    def prefill_graph_token_sizes(self) -> list[int]:
        """The token sizes the prefill graph is captured for, as the effective args say (none: no cap)."""
        found = PREFILL_GRAPH.captured_sizes(self.effective)
        return list(found[0]) if found else []

    def _log_prefill_line(self, tokens: int, prefill_s: float, running: int, queued: int) -> None:
        # As SGLang's piecewise runner: a prefill above the largest captured token size runs eager.
        sizes = self.prefill_graph_token_sizes()
        ran = self.prefill_graph and self.config.graph_replayed and (not sizes or tokens <= max(sizes))
        tok_s = tokens / prefill_s if prefill_s > 0 else 0.0
        line = prefill_batch_line(tokens, running, self.graph_label, ran, tok_s, queued)
        log(line, rank=self.launch.tp_size > 1)

    def log_decode_steps(self, run: Run, steps: int, tokens: int) -> None:
        """After each chunk of ``run`` (``tokens`` out so far, ``steps`` decode steps since the last):
        its re-prefill if it was retracted, its decode steps (a line at every ``decode_log_interval``-th
        step of the server, as SGLang logs them, here per request, not per batch), its retraction when
        its plan has one here, and its finish after the last."""
        self._log_reprefill(run)
        interval = self.launch.decode_log_interval
        now = time.perf_counter()
        with self.lock:
            run.tokens_out = tokens
            before = self.stats.decode_steps
            self.stats.decode_steps += steps
            running, queued = self._batch(now)
            decoding = max(1, self.decoding)  # 0 with the load knobs off: each request alone
            logged = steps > 0 and (before + steps) // interval != before // interval
            if logged:
                self.stats.report()
        if logged:
            plan = run.plan
            accept = (plan.completion_tokens / max(1, plan.verify_steps), run.accept_rate) if run.spec else None
            # As SGLang's can_run_graph: a batch above the largest captured size runs eager.
            ran = self.decode_graph and self.config.graph_replayed and running <= max(self.decode_graph_batch_sizes())
            tok_s = expected_decode_tok_s(self.config, self.spec_steps, decoding, run.since_epoch_at(now))
            line = decode_batch_line(running, run.prompt_tokens + tokens, accept, self.graph_label, ran, tok_s, queued)
            log(line, rank=self.launch.tp_size > 1)
        self._retract_if_due(run, tokens)
        if tokens >= run.plan.completion_tokens and not run.finished:
            self._finish(run)

    def _retract_if_due(self, run: Run, tokens: int) -> None:
        """Count and log the retraction of ``run`` once its plan's retraction point is out, as SGLang's
        scheduler does when the KV cache pool is full (one request per retraction here)."""
        due = run.plan.retract_tokens
        if due is None or tokens < due or run.retracted:
            return
        now = time.perf_counter()
        step_s = self.config.decode_step_s * self.config.decode_slowdown
        with self.lock:
            run.retracted = True
            counts = self.stats.retractions
            counts.requests += 1
            counts.input_tokens += run.prompt_tokens
            counts.output_tokens += tokens
            self.stats.retracted_unreported += 1
            # SGLang re-estimates the ratio from the requests its batch keeps.
            left = [r for r in self.runs.values() if r is not run and not r.queued(now)]
            decoded = sum(r.tokens_out for r in left) + RETRACT_DECODE_STEPS * len(left)
            new_ratio = min(1.0, decoded / (sum(r.max_new_tokens for r in left) + 1))
            old_ratio = self.stats.new_token_ratio.at(now, step_s)
            self.stats.new_token_ratio.set(new_ratio, now)
        log(retract_line(1, run.prompt_tokens + tokens, old_ratio, new_ratio), rank=self.launch.tp_size > 1)

    def _log_reprefill(self, run: Run) -> None:
        """SGLang's prefill line for a retracted request back from the queue: prompt and tokens so far."""
        if not run.retracted or run.resumed:
            return
        now = time.perf_counter()
        with self.lock:
            run.resumed = True
            self.stats.report()
            running, queued = self._batch(now, besides=run)
        tokens = run.prompt_tokens + run.tokens_out
        self._log_prefill_line(tokens, run.plan.retract_s - run.plan.retract_pause_s, running, queued)

    def end_run(self, run: Run, completed: bool) -> None:
        """``run`` is over (``completed``: all of it was sent); one that never got to its last token was aborted."""
        with self.lock:
            self.runs.pop(run.rid, None)
            self._leave_batch(run)  # if its client went away before its finish
            if not self.runs:
                self.stats.new_token_ratio.set(RATIO_INIT, time.perf_counter())  # SGLang resets it when idle
            if not (completed or run.finished):
                self.stats.aborted += 1

    def _finish(self, run: Run) -> None:
        """Count ``run`` as finished once its last token is out and before its answer ends (SGLang's
        tokenizer counts a request when its last output arrives): a client scraping right after its
        answer sees it counted."""
        plan = run.plan
        now = time.perf_counter()
        with self.lock:
            run.finished = True
            self._leave_batch(run)  # its last step is over: the others' next ones no longer wait for it
            served = self.stats.served[run.stream]
            served.requests += 1
            served.prompt_tokens += run.prompt_tokens
            served.generation_tokens += plan.completion_tokens
            served.e2e.observe(now - run.t0)
            if run.spec and plan.verify_steps:
                self.stats.spec_completion_tokens += plan.completion_tokens
                self.stats.spec_verify_steps += plan.verify_steps
            if len(plan.passes) > 1:
                # The load's stretch after the first token counts (an exact 0.0 with the knobs off).
                span = plan.passes[-1].at_s - plan.passes[0].at_s + (run.delay_s - run.first_delay_s)
                self.stats.last_gen_throughput = (plan.completion_tokens - 1) / span

    def server_info(self) -> dict[str, Any]:
        with self.lock:
            stats = dataclasses.replace(self.stats)
        memory = self.memory_usage()
        state: dict[str, Any] = {
            "last_gen_throughput": stats.last_gen_throughput,
            "memory_usage": memory,
            DECODE_GRAPH_SIZES_FIELD: self.decode_graph_batch_sizes(),
            "decode_cuda_graph_memory_gb": DECODE_GRAPH_GB if self.decode_graph else 0.0,
        }
        if stats.avg_spec_accept_length is not None:
            state["avg_spec_accept_length"] = stats.avg_spec_accept_length
        return {
            **self.effective,
            # The preflight resolved the variant's flags; --enable-metrics is the suite's own addition to
            # the launch, and a real server's args say it is on.
            "enable_metrics": self.metrics_enabled,
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
        """``/metrics``: the SGLang metrics the emulator keeps (:mod:`.metrics`), as SGLang exposes them."""
        capacity = self.memory_usage()["token_capacity"]
        now = time.perf_counter()
        with self.lock:
            s = self.stats
            runs = list(self.runs.values())
            waiting = {r.rid for r in runs if r.queued(now)}
            held = sum(r.prompt_tokens + r.tokens_out for r in runs if r.rid not in waiting)  # a queued one holds none
            snapshot = Snapshot(
                model_name=self.model_name,
                engine_type=engine_type(self.effective.get("disaggregation_mode")),
                pid=os.getpid(),
                served=copy.deepcopy(s.served),
                aborted=s.aborted,
                running=len(runs) - len(waiting),
                queued=len(waiting),
                token_usage=held / capacity if capacity else 0.0,
                gen_throughput=s.last_gen_throughput,
                spec_accept_length=s.avg_spec_accept_length or 0.0,
                retracted_reported=s.retracted_reported,
                retractions=dataclasses.replace(s.retractions),
            )
        return render(snapshot)
