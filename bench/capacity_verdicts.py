"""How often the capacity search says "fell" for nothing, and how often it sees a real fall, from real rounds.

The capacity verdict (`sglperf.baselines.capacity`) is a sign test per rate on the rounds' goodput
shares. Its false alarms and power depend on how a round's share is spread around the goodput target,
which no model gives, so this bench measures rounds and resamples them, as bench/tail_verdicts.py
does for the tails.

Pools: the meter runs an open-loop workload at each rate of ``--rates`` (Poisson arrivals on a seeded
schedule, ``--requests`` chat requests of ``--output-len`` tokens per round, an slo) against the
emulator standing in for qwen36 with MTP, ``--rounds`` rounds per rate, in three sessions, each a fresh
emulator with its own noise seed: the unchanged server twice (A and B; it already slows down under
load, as tail_verdicts' does) and once with a scheduler regression (R) that lowers its capacity.

Trials: each draws ``n`` rounds per rate for the baseline and ``n`` for the current run (disjoint when
both come from one session), builds both ladders as a run does (the current one stops at its first
rate that misses) and applies ``compare`` at the goodput target:

* false falls, one session: baseline and current from the same unchanged session;
* false falls, two sessions: baseline from one unchanged session, current from the other (how a
  baseline is used: recorded against another server start);
* detection: baseline from an unchanged session, current from R.

It also shows what capacity each draw finds (the search's answer, "unclear" rates included), so the
cost of the sign test's caution is visible: a rate whose rounds straddle the target is never called a
fall, and never counted as capacity either. Resampling error only (see tail_verdicts' docstring for
why the pools add more). Prints markdown headed by the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sglperf.baselines import capacity, regression
from sglperf.measure import meter
from sglperf.model.metrics import GOODPUT_SHARE
from sglperf.model.prompts import load_prompts
from sglperf.model.workload import Workload
from sglperf.runtime.server import ServerSpec, launch
from sglperf.testing.emulator.config import CONFIG_ENV

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tail_verdicts
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tail_verdicts

PROMPTS, SPEC_ARGV = tail_verdicts.PROMPTS, tail_verdicts.SPEC_ARGV
# bench/tail_verdicts.py's unchanged server, and a regression that a capacity search should see.
UNCHANGED: dict[str, Any] = tail_verdicts.UNCHANGED
REGRESSION: dict[str, Any] = {"step_s_per_running_request": 0.001, "prefill_slots": 1}
SESSIONS = {"A": {**UNCHANGED, "seed": 1}, "B": {**UNCHANGED, "seed": 2}, "R": {**UNCHANGED, **REGRESSION, "seed": 3}}


@dataclass(frozen=True)
class Pool:
    """One session's rounds: per rate, one goodput share per round."""

    label: str
    shares: Mapping[float, np.ndarray]
    dropped: int
    seconds: float


def workload(args: argparse.Namespace, rate: float) -> Workload:
    return Workload.model_validate(
        {
            "id": "capacity-verdicts",
            "prompts": PROMPTS,
            "output_len": args.output_len,
            "rate": rate,
            "seed": args.seed,
            "requests": args.requests,
            "slo": {"ttft_s": args.slo_ttft, "itl_s": args.slo_itl},
            "warmup": 2,
            "repeats": args.rounds,
            "sequential": False,
        }
    )


def collect(label: str, config: Mapping[str, Any], args: argparse.Namespace) -> Pool:
    """``--rounds`` rounds at every rate against one fresh emulator configured with ``config``."""
    started = time.perf_counter()
    shares: dict[float, np.ndarray] = {}
    dropped = 0
    with tempfile.TemporaryDirectory() as tmp:
        spec = ServerSpec(
            name=f"emulator-{label}",
            python=sys.executable,
            argv=("--model-path", "qwen36-stand-in", *SPEC_ARGV),
            env={CONFIG_ENV: json.dumps(dict(config))},
            log_path=Path(tmp) / "emulator.log",
            emulated=True,
        )
        server = launch(spec)
        try:
            for rate in args.rates:
                load = workload(args, rate)
                result = meter.measure(server.base_url, load, load_prompts(PROMPTS), concurrency=args.requests)
                shares[rate] = np.asarray(regression.round_samples(result)[GOODPUT_SHARE], dtype=float)
                dropped += len(result.dropped_rounds)
        finally:
            server.stop()
    seconds = time.perf_counter() - started
    print(f"session {label}: {len(args.rates)} rates x {args.rounds} rounds in {seconds:.0f} s", file=sys.stderr)
    return Pool(label, shares, dropped, seconds)


def draw(pool: Pool, rows: Mapping[float, np.ndarray], target: float, stop_at_miss: bool) -> capacity.Ladder:
    steps = []
    for rate in sorted(pool.shares):
        step = capacity.RateStep(rate, tuple(float(x) for x in pool.shares[rate][rows[rate]]), target)
        steps.append(step)
        if stop_at_miss and step.level is capacity.Level.MISSES:
            break
    return capacity.ladder(steps)


@dataclass
class Tally:
    fell: int = 0
    found: Counter[str] = field(default_factory=Counter)  # the capacity each trial's current ladder found


def run_cell(pools: Mapping[str, Pool], current: str, n: int, trials: int, target: float, seed: int) -> Tally:
    """``current``: "one session", "two sessions", or a pool's label (baseline from A or B)."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    for _ in range(trials):
        base_label = "AB"[int(rng.integers(2))]
        base, rows_b, rows_c = pools[base_label], {}, {}
        for rate, values in base.shares.items():
            order = rng.permutation(len(values))
            rows_b[rate], rows_c[rate] = order[:n], order[n : 2 * n]
        if current == "one session":
            now = base
        else:
            now = pools["BA"["AB".index(base_label)]] if current == "two sessions" else pools[current]
            rows_c = {rate: rng.permutation(len(v))[:n] for rate, v in now.shares.items()}
        found = draw(now, rows_c, target, stop_at_miss=True)
        tally.fell += capacity.compare(found, draw(base, rows_b, target, stop_at_miss=False)).fell
        tally.found[found.describe().split(" (")[0]] += 1
    return tally


def describe(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in config.items() if k not in ("seed", "noise_cv"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[20.0, 40.0, 80.0, 160.0], help="the ladder, req/s")
    parser.add_argument("--rounds", type=int, default=30, help="rounds per rate and session (>= 2 x the largest n)")
    parser.add_argument("--requests", type=int, default=16, help="requests per round")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--slo-ttft", type=float, default=0.038, help="slo TTFT target, s")
    parser.add_argument("--slo-itl", type=float, default=0.0024, help="slo ITL target, s")
    parser.add_argument("--goodput", type=float, default=0.9, help="the capacity's goodput target")
    parser.add_argument("--samples", type=int, nargs="+", default=[7, 12], help="rounds per rate and side")
    parser.add_argument("--trials", type=int, default=3000, help="trials per cell")
    parser.add_argument("--seed", type=int, default=0, help="the arrival schedule's and the trials' seed")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    if args.rounds < 2 * max(args.samples):
        parser.error(f"--rounds {args.rounds}: one session must hold 2 x {max(args.samples)} distinct rounds")
    args.rates = sorted(set(args.rates))

    started = time.perf_counter()
    pools = {label: collect(label, config, args) for label, config in SESSIONS.items()}
    cells = {
        (n, name): run_cell(pools, name, n, args.trials, args.goodput, args.seed + i)
        for i, (n, name) in enumerate((n, name) for n in args.samples for name in ("one session", "two sessions", "R"))
    }
    elapsed = time.perf_counter() - started

    print(f"`{_docs_table.command(__file__, argv)}`")
    print()
    print(
        f"Emulator standing in for qwen36 with MTP, unchanged: {describe(UNCHANGED)}; regression R: "
        f"{describe(REGRESSION)}. Open loop, Poisson, {args.requests} chat requests of {args.output_len} tokens per "
        f"round, slo TTFT <= {args.slo_ttft * 1e3:g} ms and ITL <= {args.slo_itl * 1e3:g} ms, goodput target "
        f"{args.goodput:g}; {args.rounds} rounds per rate and session (dropped as behind schedule and run again: "
        + ", ".join(f"{p.label} {p.dropped}" for p in pools.values())
        + ")."
    )
    print()
    print("Rounds that kept the goodput target, per rate and session (the pools):")
    print()
    print("| session | " + " | ".join(f"{r:g} req/s" for r in args.rates) + " |")
    print("|---|" + "---:|" * len(args.rates))
    for pool in pools.values():
        cells_text = (
            f"{int(np.sum(pool.shares[r] >= args.goodput))}/{len(pool.shares[r])} "
            f"(median {np.median(pool.shares[r]):.2f})"
            for r in args.rates
        )
        print(f"| {pool.label} | " + " | ".join(cells_text) + " |")
    print()
    print("| rounds per rate | current from | capacity fell | capacity found (share of trials) |")
    print("|---:|---|---:|---|")
    for (n, name), tally in cells.items():
        found = ", ".join(f"{k}: {v / args.trials:.0%}" for k, v in tally.found.most_common())
        print(f"| {n} | {name} | {tally.fell / args.trials:.2%} | {found} |")
    print()
    half = 1.96 * math.sqrt(0.25 / args.trials)
    measuring = sum(p.seconds for p in pools.values())
    print(
        f"{args.trials} trials per cell, alpha {capacity.ALPHA:g} per rate: 95% Monte Carlo half-width <= {half:.1%}, "
        f"resampling error only. Ran in {elapsed:.0f} s, {measuring:.0f} s of it measuring."
    )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
