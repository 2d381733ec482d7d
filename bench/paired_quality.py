"""Monte Carlo quality of paired ABBA comparisons (``sglperf.baselines.paired``) against today's sequential
design (all of the reference's rounds, then all of the variant's), with the machine drifting in between.

Noise model as bench/effect_quality.py: each round's value is ``true * exp(N(-s**2/2, s))``, log-normal with
the given CV, every round drawn independently. On top, the machine slows down: a round at ``t`` minutes
after the run began measures ``value / (1 + drift * t)``. Sessions last ``--session-min`` minutes with
``--gap-min`` minutes between them for the next server's start, ``--rounds`` rounds evenly spread over a
session, each round timed at its middle.

Designs, judged at the metric's default floor and alpha 0.01:

* "A then B": one session each, ``compare_samples`` + ``effect_verdict`` (what a variant effect does today);
* "ABBA, 1 block": sessions A1 B1 B2 A2, ``abba_log_ratios`` + ``compare_paired`` on its pairs;
* "ABBA, adaptive": as one block, and when that left the answer undecided, a second block A3 B3 B4 A4,
  judged on all pairs of both.

All designs of a row see the same draws (common random numbers): "A then B" uses the first two sessions.
A/A: both variants identical; "5% lower": the variant's true value is 5% lower, worse for a rate. Prints a
markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines.paired import abba_log_ratios, compare_paired
from sglperf.baselines.stats import DEFAULT_ALPHA, DEFAULT_SAMPLES, compare_samples
from sglperf.baselines.variant_effects import effect_verdict
from sglperf.model.metrics import METRICS, Direction
from sglperf.model.variant_effect import EffectVerdict

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

DRIFTS = (0.0, 0.05, 0.10)
DESIGNS = ("A then B", "ABBA, 1 block", "ABBA, adaptive")
ORDER = "ABBAABBA"  # the adaptive design's two blocks; the others use a prefix of these sessions


def simulate(
    *,
    drift: float,
    effect: float,
    cv: float,
    rounds: int,
    session_min: float,
    gap_min: float,
    metric: str,
    trials: int,
    seed: int,
) -> dict[str, tuple[dict[EffectVerdict, float], float]]:
    """For each design: (share of trials per verdict, mean sessions used)."""
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(cv**2))
    floor = METRICS[metric].default_threshold
    worse = 1.0 - effect if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else 1.0 + effect
    starts = np.arange(len(ORDER)) * (session_min + gap_min)
    minutes = starts[:, None] + (np.arange(rounds) + 0.5) * session_min / rounds  # (session, round)
    true = np.array([worse if side == "B" else 1.0 for side in ORDER])[:, None]
    slowdown = 1.0 / (1.0 + drift * minutes)
    counts = {design: dict.fromkeys(EffectVerdict, 0) for design in DESIGNS}
    sessions_used = dict.fromkeys(DESIGNS, 0)
    for _ in range(trials):
        values = true * slowdown * np.exp(rng.normal(-(sigma**2) / 2, sigma, (len(ORDER), rounds)))
        a = [values[s].tolist() for s, side in enumerate(ORDER) if side == "A"]
        b = [values[s].tolist() for s, side in enumerate(ORDER) if side == "B"]

        sequential = effect_verdict(compare_samples(metric, a[0], b[0], threshold=floor, alpha=DEFAULT_ALPHA))
        counts["A then B"][sequential] += 1
        sessions_used["A then B"] += 2

        one = compare_paired(metric, abba_log_ratios(a[:2], b[:2]), floor, DEFAULT_ALPHA).verdict
        counts["ABBA, 1 block"][one] += 1
        sessions_used["ABBA, 1 block"] += 4

        adaptive = one
        if one in (EffectVerdict.UNDECIDED, EffectVerdict.NOT_JUDGED):
            adaptive = compare_paired(metric, abba_log_ratios(a, b), floor, DEFAULT_ALPHA).verdict
            sessions_used["ABBA, adaptive"] += 8
        else:
            sessions_used["ABBA, adaptive"] += 4
        counts["ABBA, adaptive"][adaptive] += 1
    return {
        design: ({v: n / trials for v, n in counts[design].items()}, sessions_used[design] / trials)
        for design in DESIGNS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="Monte Carlo trials per cell")
    parser.add_argument("--rounds", type=int, default=DEFAULT_SAMPLES, help="rounds per session")
    parser.add_argument("--cv", type=float, default=0.02, help="per-round log-normal noise CV")
    parser.add_argument("--effect", type=float, default=0.05, help="planted effect, the worse way")
    parser.add_argument("--session-min", type=float, default=1.0, help="minutes per session")
    parser.add_argument("--gap-min", type=float, default=0.2, help="minutes between sessions (server start)")
    parser.add_argument("--metric", default="decode_tok_s", choices=sorted(METRICS))
    parser.add_argument("--seed", type=int, default=0)
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    floor = METRICS[args.metric].default_threshold
    started = time.perf_counter()
    print(
        f"{args.metric}, floor {floor:g}, alpha {DEFAULT_ALPHA:g}, {args.rounds} rounds per session, "
        f"log-normal noise CV {args.cv:.0%}, sessions of {args.session_min:g} min {args.gap_min:g} min apart, "
        f"{args.trials} trials per cell. Drift: a round t minutes into the run measures value / (1 + drift * t)."
    )
    print()
    header = [
        "design",
        "drift / min",
        "sessions (A/A; 5% lower)" if args.effect == 0.05 else f"sessions (A/A; {args.effect:.0%} lower)",
        "A/A: called different",
        "A/A: called same",
        "A/A: not yet known",
        f"{args.effect:.0%} lower: detected worse",
    ]
    rows: dict[tuple[str, float], list[str]] = {}
    for i, drift in enumerate(DRIFTS):
        common = {
            "drift": drift,
            "cv": args.cv,
            "rounds": args.rounds,
            "session_min": args.session_min,
            "gap_min": args.gap_min,
            "metric": args.metric,
            "trials": args.trials,
        }
        same = simulate(effect=0.0, seed=args.seed + 100 * i, **common)
        moved = simulate(effect=args.effect, seed=args.seed + 100 * i + 1, **common)
        for design in DESIGNS:
            aa, aa_sessions = same[design]
            planted, planted_sessions = moved[design]
            rows[design, drift] = [
                design,
                f"{drift:.0%}",
                f"{aa_sessions:.2f}; {planted_sessions:.2f}",
                f"{aa[EffectVerdict.BETTER] + aa[EffectVerdict.WORSE]:.2%}",
                f"{aa[EffectVerdict.NO_EFFECT]:.1%}",
                f"{aa[EffectVerdict.UNDECIDED] + aa[EffectVerdict.NOT_JUDGED]:.1%}",
                f"{planted[EffectVerdict.WORSE]:.1%}",
            ]
    print("| " + " | ".join(header) + " |")
    print("|---|" + "---:|" * (len(header) - 1))
    for design in DESIGNS:
        for drift in DRIFTS:
            print("| " + " | ".join(rows[design, drift]) + " |")
    print()
    print(
        f"95% Monte Carlo half-width <= {1.96 * math.sqrt(0.25 / args.trials):.1%} per cell; "
        f"ran in {time.perf_counter() - started:.1f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
