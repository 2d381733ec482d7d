"""The emulator's timing model, as pure functions: the truth the suite's statistics are checked against.

Timing model (one request; by default requests are independent: each runs its own step loop, whereas
a real server batches them, so concurrency slows nothing down unless the load knobs are on, below):

* TTFT = ``prefill_s_per_token * prompt_tokens`` plus one decode step; the first token comes from
  prefill and is never a verify step. Prompt tokens are ``len(input_ids)``, else
  ``max(1, len(text.encode()) // 4)`` (chat: the messages' text joined by newlines).
* Then repeated decode (verify) steps. Without speculative decoding a step yields 1 token. With it
  (effective ``speculative_algorithm`` set, S = ``speculative_num_steps``; top-k is treated as 1)
  a step accepts k drafts, k = consecutive Bernoulli(``accept_prob``) successes capped at S, and
  yields k + 1 tokens (the bonus token), capped by the tokens still to generate.
* Step time = ``decode_step_s * decode_slowdown`` times log-normal noise of mean 1 and CV
  ``noise_cv``, drawn from ``numpy.random.default_rng([seed, request_index])``: runs reproduce.
* Retraction (``retract_fraction``, drawn after the steps, so they are the same as without it): a
  retracted request stops after a pass drawn uniformly from all but its last, waits
  ``retract_pause_s`` in the queue, is re-prefilled (``prefill_s_per_token`` * (prompt + tokens so
  far): its KV was freed) and decodes on: a gap in its token stream, every later pass shifted by it.
* Chunks are sent at absolute ``time.perf_counter`` deadlines (no accumulated sleep error); the first
  token is sent alone, then each chunk carries all tokens of ``stream_interval`` steps.
* Truth: :func:`expected_accept_length` and :func:`expected_decode_tok_s`. As in SGLang, a request's
  ``spec_accept_length`` = completion_tokens / spec_verify_ct counts the prefill token too, so it
  exceeds the per-step expectation by about 1 / spec_verify_ct.

Under load (``step_s_per_running_request`` = k and ``prefill_slots``, both off by default). Without
them a rate or a concurrency test cannot fail on the emulator, whereas on a real server it fails in
two ways this emulates and no more: one forward pass serves the whole decode batch, so each step gets
longer with every request decoding beside it (per-stream decode falls); and newly arrived requests
are prefilled a batch at a time, so a burst waits in the queue (TTFT's tail grows while the median of
a request alone stays put). So:

* A request waits for one of ``prefill_slots`` prefills, FIFO in arrival order. The wait is reserved
  at arrival from the prefills ahead (:class:`PrefillSlots`): prefill times are known up front, so no
  thread has to hand a slot over and the queue does not depend on thread scheduling.
* Each decode step, drawn as above (TTFT's one included), lasts ``(decode_step_s * decode_slowdown +
  k * (running - 1)) * noise`` (:func:`loaded_step_s`), where running counts the requests in their
  decode loop (past prefill, not waiting after a retraction, not finished) when the step starts,
  itself included.
* The plan (passes, drafts, retraction) is still drawn up front, so token counts, acceptance and the
  noise draws are the same under load; only when passes happen moves, by a delay per request that the
  server adds to as each step starts (``EmulatorState.await_chunk``). A request alone (running 1, an
  empty queue) is timed exactly as its plan says, and with the knobs off the server does not even
  keep that delay: every chunk goes out at its plan's deadline, as in the model above.
* Eager steps (``eager_step_factor``, 1.0 by default): a step whose batch (``running`` above) is larger
  than the largest size the decode graph was captured for, or any step with the decode graph off, lasts
  that much longer, as SGLang's can_run_graph sends such a batch eager. A knob of its own turns on the
  per-step timing above, so the batch a step really runs in decides.
* Not emulated: a prefill stalling the others' decode, a re-prefill after retraction queueing for a
  slot, a batch-size limit. Truth: :func:`expected_decode_tok_s` with ``running`` for a steady batch
  of that many streams; a burst of n equal prompts at once waits 0, p, 2p, ... (n - 1)p for prefill
  with one slot (p = ``prefill_s_per_token`` * prompt tokens).

Drift (``drift_per_min``, off by default). A real server can get slower as a run goes on (clocks
throttling as the GPU heats, memory fragmenting), so the measurements late in a run are worse than
the early ones, whatever the variant: a suite that compares variants measured at different times,
or checks that a run stayed steady, needs a server that does this on request to be tested against.
So every step and prefill lasts ``1 + drift_per_min * minutes`` times its time above, minutes being
the wall clock (``time.time``) from ``drift_epoch`` to when it begins (before the epoch: none).

* The epoch is a Unix time, not the emulator's own: a run starts one server per variant, one after
  another, and they must drift as one machine would, not each afresh (None: this process's start).
* Only the draws are seeded; the drift depends on when a request arrives, so a drifting run's times
  do not reproduce, while its token counts, acceptance and noise do. Without drift the factor is an
  exact 1.0: every time is bit for bit what it was before drift existed.
* The plan is drawn at arrival, each step drifted as of its start on the plan's clock (a retraction's
  gap included). Under load a request runs later than its plan, so the server drifts each step, and
  a prefill that waited for its slot, as of when it really starts (``EmulatorState.await_chunk``; the
  load's extra time is drifted with its step, as it shares its noise); a re-prefill after a
  retraction keeps the drift of its start on the plan's clock, early by the request's delay.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sglperf.sglang.intents import Speculative
from sglperf.testing.emulator.config import DEFAULT_SPEC_STEPS, EmulatorConfig


def speculative_steps(effective: Mapping[str, Any]) -> int | None:
    """S for speculative decoding, or None when it is off."""
    algorithm = effective.get(Speculative.FIELDS["algorithm"])
    if algorithm in (None, "", "NONE", "None"):
        return None
    steps = effective.get(Speculative.FIELDS["num_steps"])
    return DEFAULT_SPEC_STEPS if steps is None else int(steps)


def expected_accept_length(accept_prob: float, num_steps: int) -> float:
    """Expected tokens per verify step: sum_{i=0..S} p^i (the bonus token included)."""
    return sum(accept_prob**i for i in range(num_steps + 1))


def expected_decode_tok_s(
    config: EmulatorConfig, num_steps: int | None, running: int = 1, since_epoch_s: float = 0.0
) -> float:
    """Expected decode rate of one stream, tokens/s, ignoring the max_new_tokens cap, while ``running``
    requests decode together (1: alone, whatever the load knobs say), ``since_epoch_s`` after the
    drift epoch."""
    per_step = 1.0 if num_steps is None else expected_accept_length(config.accept_prob, num_steps)
    step_s = config.decode_step_s * config.decode_slowdown
    # k * 0 adds an exact 0.0: a stream alone keeps the rate it had before the load knobs existed; the
    # drift's factor is an exact 1.0 without drift.
    loaded_s = step_s + config.step_s_per_running_request * (running - 1)
    return per_step / (loaded_s * drift_factor(config, since_epoch_s))


def drift_factor(config: EmulatorConfig, since_epoch_s: float) -> float:
    """What a step or prefill beginning ``since_epoch_s`` seconds after the drift epoch is slowed by:
    ``1 + drift_per_min`` x minutes (none before the epoch; exactly 1.0 without drift)."""
    return 1.0 + config.drift_per_min * (max(0.0, since_epoch_s) / 60.0)


def loaded_step_s(config: EmulatorConfig, drawn_s: float, running: int) -> float:
    """How long a decode step drawn as ``drawn_s`` (step time x noise, :func:`plan_request`) lasts while
    ``running`` requests decode, itself included: the load's extra time is under the same noise."""
    extra = config.step_s_per_running_request * (running - 1)
    if extra <= 0:
        return drawn_s  # alone, or the knob off: the plan's own time, not a rounding of it
    return drawn_s * (1.0 + extra / (config.decode_step_s * config.decode_slowdown))


@dataclass
class PrefillSlots:
    """``prefill_slots``: when the prefill of each arriving request starts, FIFO in arrival order."""

    slots: int | None  # None: no queue, every prefill starts on arrival
    busy_until: list[float] = field(default_factory=list)  # a min-heap: when each taken slot is free again

    def admit(self, arrival: float, prefill_s: float | Callable[[float], float]) -> float:
        """Reserve a slot for a request arriving at ``arrival`` (after every request admitted before it):
        the time its prefill starts. ``prefill_s``: how long the prefill lasts, or that as a function of
        when it starts (drift)."""
        if self.slots is None:
            return arrival
        if len(self.busy_until) < self.slots:
            start = arrival
        else:
            start = max(arrival, heapq.heappop(self.busy_until))  # the slot that frees first
        heapq.heappush(self.busy_until, start + (prefill_s(start) if callable(prefill_s) else prefill_s))
        return start


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
    retract_after: int | None = None  # the pass after which the request is retracted, if it is
    retract_s: float = 0.0  # the gap that retraction leaves: the pause, then the re-prefill
    retract_pause_s: float = 0.0  # the part of it spent waiting in the queue

    @property
    def completion_tokens(self) -> int:
        return sum(p.tokens for p in self.passes)

    @property
    def verify_steps(self) -> int:
        return max(0, len(self.passes) - 1)

    @property
    def retract_tokens(self) -> int | None:
        """Tokens out when the request is retracted (its output tokens then)."""
        if self.retract_after is None:
            return None
        return sum(p.tokens for p in self.passes[: self.retract_after + 1])

    def waiting(self, elapsed_s: float) -> bool:
        """Whether the request sits retracted in the waiting queue ``elapsed_s`` after its arrival."""
        if self.retract_after is None:
            return False
        at = self.passes[self.retract_after].at_s
        return at <= elapsed_s < at + self.retract_pause_s


def plan_request(
    config: EmulatorConfig,
    spec_steps: int | None,
    prompt_tokens: int,
    n_tokens: int,
    rng: np.random.Generator,
    since_epoch_s: float = 0.0,
) -> Plan:
    """Draw the passes producing ``n_tokens`` tokens under the timing model, for a request arriving
    ``since_epoch_s`` after the drift epoch (:func:`drift_factor`)."""
    sigma = math.sqrt(math.log1p(config.noise_cv**2))
    mu = -sigma * sigma / 2  # makes the log-normal's mean exactly 1

    def noise() -> float:
        return float(rng.lognormal(mu, sigma)) if sigma > 0 else 1.0

    def lasting(base_s: float, start_s: float) -> float:
        """``base_s`` drifted as of ``start_s`` after arrival (an exact ``* 1.0`` without drift)."""
        return base_s * drift_factor(config, since_epoch_s + start_s)

    prefill_s = lasting(config.prefill_s_per_token * prompt_tokens, 0.0)
    if n_tokens <= 0:
        return Plan(prefill_s, ())
    # The draws first, in the order they always had (retraction last), then the times: a step's drift
    # depends on when it starts, which a retraction's gap moves.
    noises, tokens = [noise()], [1]
    done, accepted, proposed = 1, 0, 0
    while done < n_tokens:
        noises.append(noise())
        drafts = 0
        if spec_steps is not None:
            while drafts < spec_steps and rng.random() < config.accept_prob:
                drafts += 1
            proposed += spec_steps
        emitted = min(drafts + 1, n_tokens - done)
        accepted += emitted - 1
        tokens.append(emitted)
        done += emitted
    after = _retract_after(config, len(tokens), rng)
    step_s = config.decode_step_s * config.decode_slowdown
    passes: list[Pass] = []
    t, gap = prefill_s, 0.0  # t on the clock of the plan without its retraction; gap: what that adds
    for i, (drawn, emitted) in enumerate(zip(noises, tokens, strict=True)):
        t += lasting(step_s, t + gap) * drawn
        passes.append(Pass(t + gap, emitted))
        if i == after:
            held = prompt_tokens + sum(tokens[: after + 1])  # its KV was freed: prompt and tokens so far
            pause = config.retract_pause_s
            gap = pause + lasting(config.prefill_s_per_token * held, t + pause)
    plan = Plan(prefill_s, tuple(passes), accepted, proposed)
    if after is None:
        return plan
    return dataclasses.replace(plan, retract_after=after, retract_s=gap, retract_pause_s=config.retract_pause_s)


def _retract_after(config: EmulatorConfig, n_passes: int, rng: np.random.Generator) -> int | None:
    """The pass after which the request is retracted: for ``retract_fraction`` of requests with a decode
    step to retract before, a pass drawn uniformly from all but the last; else None."""
    if config.retract_fraction <= 0 or n_passes < 2 or rng.random() >= config.retract_fraction:
        return None
    return int(rng.integers(0, n_passes - 1))


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
        # The tokens before a retraction go out before its gap.
        if i % stream_interval == 0 or i in (last, plan.retract_after):
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
