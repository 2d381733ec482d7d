"""Sequential stopping on the emulator at concurrency 1 and 8: rounds used, and which metric held the plan open.

Per concurrency, ``--sessions`` fresh emulators (``noise_cv`` 2%, MTP, each its own seed: independent
noise, as a new server session has) each measure ``--rounds`` rounds: every prompt once per round,
``concurrency`` in flight, through ``sglperf.measure.meter.measure``, one value per metric and round by
``regression.round_samples``, as the session computes them. Nothing changes between sessions, so every
ordered pair (baseline session, current session) is an unchanged run against a stored baseline: the
plan's decision is replayed after every round of the current session (``SequentialPlan.decide_all``,
the call the session makes from its ``on_round``), giving the rounds a sequential run would use and the
watched metrics still pending at its last look before stopping ("held open by"). Every pair is replayed
twice on the same rounds: with this plan, and with ``rule_out_improvements`` (the rule before: an
unchanged metric settles only once an improvement past its threshold is ruled out too).

Then, without the emulator, what the change costs: how often a real improvement is still reported
(log-normal rounds as in bench/sequential_quality.py, decode tok/s, 3% threshold).

``--seeds same`` gives every session the same seed: the emulator then replays its per-request draws
(acceptance, step noise) whenever the request sequence matches, as a suite rerun does at c=1.
``--save``/``--load`` keep the measured rounds, to replay them without measuring again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines import regression
from sglperf.baselines.sequential import SequentialPlan
from sglperf.measure.meter import measure
from sglperf.model.metrics import METRICS, MetricOutcome
from sglperf.model.prompts import Message, Prompt, PromptSet
from sglperf.model.workload import Workload
from sglperf.runtime.server import ServerSpec, launch
from sglperf.sglang.intents import Speculative
from sglperf.testing.emulator.config import CONFIG_ENV

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

SPEC_STEPS, ACCEPT_PROB = 3, 0.7
SPEC_ARGV = tuple(
    arg
    for key, value in {"algorithm": "NEXTN", "num_steps": SPEC_STEPS, "num_draft_tokens": SPEC_STEPS + 1}.items()
    for arg in (Speculative.FLAGS[key], str(value))
)
PLANS = {"this plan": False, "rule before": True}  # name -> rule_out_improvements
GAINS, GAIN_CVS, GAIN_TRIALS = (0.03, 0.05, 0.10), (0.02, 0.05), 500
Rounds = dict[str, list[float]]  # metric -> one value per round


@contextmanager
def emulator(args: argparse.Namespace, seed: int) -> Iterator[str]:
    """A fresh emulator (one server session), started as the suite starts servers, stopped on exit;
    yields its URL."""
    config = {
        "startup_s": 0.05,
        "noise_cv": args.noise_cv,
        "decode_step_s": args.decode_step_s,
        "prefill_s_per_token": args.prefill_s_per_token,
        "accept_prob": ACCEPT_PROB,
        "seed": seed,
    }
    with tempfile.TemporaryDirectory() as tmp:
        spec = ServerSpec(
            name="emulator",
            python=sys.executable,
            argv=("--model-path", "stand-in", *(SPEC_ARGV if args.spec else ())),
            env={CONFIG_ENV: json.dumps({**config, **json.loads(args.emulator_config)})},
            log_path=Path(tmp) / "emulator.log",
            emulated=True,
        )
        server = launch(spec)
        try:
            yield server.base_url
        finally:
            server.stop()


def prompt_set(n: int, tokens: int) -> PromptSet:
    """``n`` prompts of 0.5x to 1.5x ``tokens`` emulator prompt tokens (4 bytes each): a mix of lengths."""
    sizes = np.linspace(0.5, 1.5, n) * tokens if n > 1 else np.array([float(tokens)])
    phrase = "describe a lighthouse at dusk. "
    prompts = tuple(
        Prompt(f"p{i:02d}", (Message("user", (phrase * (1 + int(4 * size) // len(phrase)))[: int(4 * size)]),))
        for i, size in enumerate(sizes)
    )
    return PromptSet("bench", Path("<generated>"), prompts, "generated")


def measure_session(args: argparse.Namespace, concurrency: int, seed: int) -> Rounds:
    """``--rounds`` rounds on a fresh emulator, one value per metric and round as the session computes them."""
    workload = Workload(
        id="seq", prompts=Path("<generated>"), output_len=args.output_len, warmup=2, repeats=args.rounds, api="native"
    )
    prompts = prompt_set(args.prompts, args.prompt_tokens)
    with emulator(args, seed) as url:
        result = measure(url, workload, prompts, concurrency=concurrency, chunk_timeout_s=30.0)
    return regression.round_samples(result)


@dataclass(frozen=True)
class Replay:
    rounds: int  # what a sequential run would have used
    held: tuple[str, ...]  # watched metrics pending at its last look before stopping (none: stopped at the first)
    reason: str  # the plan's reason at the stop


def replay(plan: SequentialPlan, baseline: Mapping[str, Sequence[float]], run: Mapping[str, Sequence[float]]) -> Replay:
    held: tuple[str, ...] = ()
    for n in range(plan.min_rounds, plan.max_rounds + 1):
        current = {m: list(v[:n]) for m, v in run.items()}
        decision = plan.decide_all(baseline, current)
        if decision.stop:
            return Replay(n, held, decision.reason)
        watched = [m for m in plan.metrics if m in baseline and m in current]
        held = tuple(m for m in watched if not plan.decide(m, baseline[m], current[m]).stop)
    raise AssertionError(f"the plan did not stop by its budget of {plan.max_rounds} rounds")


def _spread(values: Sequence[float]) -> float:
    """The standard deviation of the logs: ~ the CV of the rounds."""
    return float(np.std(np.log(values), ddof=1))


def improvements_reported(
    plan: SequentialPlan, cv: float, gain: float, rng: np.random.Generator
) -> tuple[float, float]:
    """(share of runs ending in IMPROVEMENT, median rounds) for decode tok/s improved by ``gain``."""
    sigma = math.sqrt(math.log1p(cv**2))
    hits, used = 0, []
    for _ in range(GAIN_TRIALS):
        base = np.exp(rng.normal(-(sigma**2) / 2, sigma, plan.max_rounds))
        cur = np.exp(rng.normal(-(sigma**2) / 2, sigma, plan.max_rounds)) * (1 + gain)
        for n in range(plan.min_rounds, plan.max_rounds + 1):
            decision = plan.decide("decode_tok_s", base.tolist(), cur[:n].tolist())
            if decision.stop:
                break
        hits += decision.outcome is MetricOutcome.IMPROVEMENT
        used.append(n)
    return hits / GAIN_TRIALS, float(np.median(used))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=6, help="emulator sessions per concurrency (>= 2)")
    parser.add_argument("--rounds", type=int, default=12, help="rounds per session: the baseline's and the budget")
    parser.add_argument("--concurrency", default="1,8", help="comma-separated")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per round")
    parser.add_argument("--prompt-tokens", type=int, default=20, help="mean emulator prompt tokens")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--decode-step-s", type=float, default=0.003)
    parser.add_argument("--prefill-s-per-token", type=float, default=0.0002)
    parser.add_argument("--noise-cv", type=float, default=0.02)
    parser.add_argument("--emulator-config", default="{}", help="more emulator config, JSON (e.g. its load knobs)")
    parser.add_argument("--spec", action=argparse.BooleanOptionalAction, default=True, help="MTP (accept_length)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seeds", choices=("distinct", "same"), default="distinct", help="one seed per session, or one for all"
    )
    parser.add_argument("--save", type=Path, help="write the measured rounds here (JSON)")
    parser.add_argument("--load", type=Path, help="replay the rounds in this file instead of measuring")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    if args.sessions < 2:
        parser.error("--sessions must be >= 2: a baseline and a run")
    started = time.perf_counter()
    sessions: dict[str, list[Rounds]]
    if args.load:
        sessions = json.loads(args.load.read_text())
    else:
        sessions = {}
        for i, level in enumerate(int(x) for x in args.concurrency.split(",")):
            print(f"c={level}: {args.sessions} sessions of {args.rounds} rounds", file=sys.stderr)
            seeds = [args.seed + (0 if args.seeds == "same" else 100 * i + k) for k in range(args.sessions)]
            sessions[str(level)] = [measure_session(args, level, s) for s in seeds]
        if args.save:
            args.save.write_text(json.dumps(sessions))
    measured_s = time.perf_counter() - started

    plans = {name: SequentialPlan(max_rounds=args.rounds, rule_out_improvements=both) for name, both in PLANS.items()}
    plan = plans["this plan"]
    pairs = args.sessions * (args.sessions - 1)
    print(
        f"Emulator noise_cv {args.noise_cv:g}{', MTP' if args.spec else ''}, {args.prompts} prompts of ~"
        f"{args.prompt_tokens} tokens x {args.output_len} output tokens per round, decode step "
        f"{args.decode_step_s * 1e3:g} ms, prefill {args.prefill_s_per_token * 1e3:g} ms/token, "
        f"{args.seeds} seeds; {args.sessions} sessions of {args.rounds} rounds per concurrency, each a fresh "
        f"emulator; every ordered pair ({pairs}) replayed as (baseline, unchanged run), rounds {plan.min_rounds}.."
        f"{plan.max_rounds}. Held open by: the watched metrics pending at the last look before the stop, "
        "in how many pairs. The rule before: rule_out_improvements."
    )
    print()
    print("| concurrency | plan | rounds used: median / p90 | stopped before the budget | held open by |")
    print("|---:|---|---:|---:|---|")
    budget_reasons: dict[str, list[str]] = {}
    for c, runs in sessions.items():
        for name, p in plans.items():
            results = [replay(p, runs[b], runs[r]) for b in range(len(runs)) for r in range(len(runs)) if b != r]
            used = [x.rounds for x in results]
            held = Counter(m for x in results for m in x.held)
            holders = ", ".join(f"{m} {k}" for m, k in held.most_common()) or "-"
            early = sum(n < p.max_rounds for n in used)
            print(
                f"| {c} | {name} | {np.median(used):g} / {np.percentile(used, 90):g} | {early}/{len(used)} | "
                f"{holders} |"
            )
            if p is plan:
                budget_reasons[c] = [x.reason for x in results if x.rounds >= p.max_rounds]
    print()
    print("Each watched metric's rounds (both sides of every pair are the same unchanged server):")
    print()
    print("| concurrency | metric | threshold | rounds' spread (CV) per session: median [min, max] | session medians |")
    print("|---:|---|---:|---|---|")
    for c, runs in sessions.items():
        for m in plan.metrics:
            if not all(m in run for run in runs):
                continue
            spreads = [_spread(run[m]) for run in runs]
            medians = np.array([np.median(run[m]) for run in runs])
            offsets = medians / np.median(medians) - 1
            print(
                f"| {c} | {m} | {METRICS[m].default_threshold:.0%} | {np.median(spreads):.1%} "
                f"[{min(spreads):.1%}, {max(spreads):.1%}] | {offsets.min():+.1%} .. {offsets.max():+.1%} "
                "of their median |"
            )
    print()
    for c, reasons in budget_reasons.items():
        if reasons:
            print(f"At c={c} with this plan, e.g. (pairs that used the budget): `{reasons[0]}`")
            print()

    rng = np.random.default_rng(args.seed)
    print(
        f"What it costs, without the emulator: decode tok/s improved by a given share, {GAIN_TRIALS} trials per cell "
        "(12 baseline rounds, log-normal rounds): how often the run ends in IMPROVEMENT, and median rounds."
    )
    print()
    print("| noise CV | plan | " + " | ".join(f"+{g:.0%}: improvement / rounds" for g in GAINS) + " |")
    print("|---:|---|" + "---:|" * len(GAINS))
    for cv in GAIN_CVS:
        for name, p in plans.items():
            cells = [improvements_reported(p, cv, g, rng) for g in GAINS]
            print(f"| {cv:.0%} | {name} | " + " | ".join(f"{share:.1%} / {n:g}" for share, n in cells) + " |")
    print()
    print(f"Measured in {measured_s:.0f} s; ran in {time.perf_counter() - started:.0f} s.")
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
