"""Monte Carlo quality of variant effects (``sglperf.baselines.variant_effects``): how often an A/A pair (two
variants that differ by nothing) is called better or worse, how often it is cleared as "no effect", and how
often a real 5% or 10% difference is detected, at the default rounds.

Noise model as bench/stats_quality.py: each round's value is ``true * exp(N(-s**2/2, s))``, log-normal with
the given CV, the reference's and the variant's rounds drawn independently (they run one after the other,
not paired). "Faster by d" multiplies a higher-is-better metric by ``1 + d`` (a latency by ``1 - d``).
Each cell is the share of trials with that verdict; the rest of a row's trials were "undecided" (or, for the
A/A columns, the other way). Prints a markdown table for docs/benchmarks.md, headed by its command.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines.stats import DEFAULT_SAMPLES, compare_samples
from sglperf.baselines.variant_effects import effect_verdict
from sglperf.model.metrics import METRICS, Direction
from sglperf.model.variant_effect import EffectVerdict

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

CVS = (0.01, 0.02, 0.05)
EFFECTS = (0.05, 0.10)


def verdict_shares(
    cv: float, effect: float, metric: str, samples: int, trials: int, seed: int
) -> dict[EffectVerdict, float]:
    rng = np.random.default_rng(seed)
    sigma = math.sqrt(math.log1p(cv**2))
    better = 1.0 + effect if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else 1.0 - effect
    reference = np.exp(rng.normal(-(sigma**2) / 2, sigma, (trials, samples)))
    variant = np.exp(rng.normal(-(sigma**2) / 2, sigma, (trials, samples))) * better
    counts = dict.fromkeys(EffectVerdict, 0)
    for ref, var in zip(reference, variant):
        counts[effect_verdict(compare_samples(metric, ref, var))] += 1
    return {verdict: n / trials for verdict, n in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4000, help="Monte Carlo trials per cell")
    parser.add_argument("--samples", type=int, default=DEFAULT_SAMPLES, help="rounds per variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="decode_tok_s", choices=sorted(METRICS))
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    floor = METRICS[args.metric].default_threshold
    started = time.perf_counter()
    print(
        f"Command: `python bench/effect_quality.py --trials {args.trials} --samples {args.samples} "
        f"--seed {args.seed} --metric {args.metric}`"
    )
    print()
    print(
        f"{args.metric}, floor {floor:g} (its default threshold), {args.samples} rounds per variant, log-normal noise, "
        f"{args.trials} trials per cell."
    )
    print()
    header = ["noise CV", "A/A: called better or worse", "A/A: no effect", "A/A: undecided"]
    header += [f"{e:.0%} better: detected" for e in EFFECTS]
    print("| " + " | ".join(header) + " |")
    print("|" + "---:|" * len(header))
    for i, cv in enumerate(CVS):
        same = verdict_shares(cv, 0.0, args.metric, args.samples, args.trials, args.seed + 100 * i)
        moved = same[EffectVerdict.BETTER] + same[EffectVerdict.WORSE]
        cells = [
            f"{cv:.0%}",
            f"{moved:.2%}",
            f"{same[EffectVerdict.NO_EFFECT]:.1%}",
            f"{same[EffectVerdict.UNDECIDED]:.1%}",
        ]
        for j, effect in enumerate(EFFECTS, 1):
            shares = verdict_shares(cv, effect, args.metric, args.samples, args.trials, args.seed + 100 * i + j)
            cells.append(f"{shares[EffectVerdict.BETTER]:.1%}")
        print("| " + " | ".join(cells) + " |")
    print()
    print(
        f"95% Monte Carlo half-width <= {1.96 * math.sqrt(0.25 / args.trials):.1%} per cell; "
        f"ran in {time.perf_counter() - started:.1f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
