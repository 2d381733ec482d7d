"""Monte Carlo quality of ``sglperf.baselines.sequential``: error rates and rounds used.

Noise model as in bench/stats_quality.py: every round is ``true_value * exp(N(-s**2/2, s))`` with
``s = sqrt(log(1 + CV**2))``. The baseline holds ``--baseline`` rounds (the fixed budget, 12); the
current run draws rounds one at a time and asks the plan after each whether to stop, up to
``--max-rounds``. "Worse by d" means ``x (1 - d)`` for a higher-is-better metric, ``x (1 + d)`` for a
lower-is-better one. The outlier column keeps the current run unchanged but makes its first round a
stall (x0.7 throughput, or /0.7 latency): the worst place, since an early stop sees it at weight 1/3.

Prints a markdown table (how often the run ends in REGRESSION, and the median and p90 rounds it
used), headed by the command that reproduces it; for a higher-is-better metric exits 1 if the
targets are missed (at 2% CV: false alarms <= 1%, 5% drop detected >= 95%, median rounds <= 4 both
with no change and with a 5% drop).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines.sequential import DEFAULT_FUTILITY, DEFAULT_MIN_ROUNDS, SequentialPlan
from sglperf.baselines.stats import DEFAULT_ALPHA, DEFAULT_SAMPLES
from sglperf.model.metrics import METRICS, Direction, MetricOutcome

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

CVS = (0.01, 0.02, 0.05)
DROPS = (0.03, 0.05, 0.10)
OUTLIER = 0.7
TARGET_CV, TARGET_FALSE_ALARMS, TARGET_DROP, TARGET_DETECTION, TARGET_MEDIAN = 0.02, 0.01, 0.05, 0.95, 4


@dataclass(frozen=True)
class Scenario:
    cv: float
    drop: float = 0.0
    outlier: bool = False


@dataclass(frozen=True)
class Cell:
    regression_rate: float
    median_rounds: float
    p90_rounds: float


def run_cell(
    scenario: Scenario, plan: SequentialPlan, metric: str, trials: int, baseline_n: int, seed: np.random.SeedSequence
) -> Cell:
    rng = np.random.default_rng(seed)
    direction = METRICS[metric].direction
    sigma = math.sqrt(math.log1p(scenario.cv**2))
    factor = (1.0 - scenario.drop) if direction is Direction.HIGHER_IS_BETTER else (1.0 + scenario.drop)
    stall = OUTLIER if direction is Direction.HIGHER_IS_BETTER else 1.0 / OUTLIER
    baselines = np.exp(rng.normal(-(sigma**2) / 2, sigma, (trials, baseline_n)))
    currents = np.exp(rng.normal(-(sigma**2) / 2, sigma, (trials, plan.max_rounds))) * factor
    if scenario.outlier:
        currents[:, 0] *= stall
    hits, rounds = 0, []
    for base, cur in zip(baselines, currents):
        for n in range(1, plan.max_rounds + 1):
            decision = plan.decide(metric, base, cur[:n])
            if decision.stop:
                break
        hits += decision.outcome is MetricOutcome.REGRESSION
        rounds.append(n)
    return Cell(hits / trials, float(np.median(rounds)), float(np.percentile(rounds, 90)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000, help="Monte Carlo trials per cell")
    parser.add_argument("--baseline", type=int, default=DEFAULT_SAMPLES, help="baseline rounds")
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_SAMPLES)
    parser.add_argument("--min-rounds", type=int, default=DEFAULT_MIN_ROUNDS)
    parser.add_argument("--futility", type=float, default=DEFAULT_FUTILITY)
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="false alarms over all looks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric", default="decode_tok_s", choices=sorted(METRICS))
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    plan = SequentialPlan(
        min_rounds=args.min_rounds, max_rounds=args.max_rounds, alpha=args.alpha, futility=args.futility
    )
    command = (
        f"python bench/sequential_quality.py --trials {args.trials} --baseline {args.baseline} "
        f"--max-rounds {args.max_rounds} --min-rounds {args.min_rounds} --futility {args.futility:g} "
        f"--alpha {args.alpha:g} --seed {args.seed} --metric {args.metric}"
    )
    started = time.perf_counter()
    level, last = plan.nominal_alpha(args.baseline), plan.nominal_alpha(args.baseline, plan.max_rounds)
    streams = iter(np.random.SeedSequence(args.seed).spawn(len(CVS) * (2 + len(DROPS))))
    rows: dict[float, list[Cell]] = {}
    for cv in CVS:
        scenarios = [Scenario(cv), Scenario(cv, outlier=True), *(Scenario(cv, d) for d in DROPS)]
        rows[cv] = [run_cell(s, plan, args.metric, args.trials, args.baseline, next(streams)) for s in scenarios]
    elapsed = time.perf_counter() - started

    metric = METRICS[args.metric]
    word = "drop" if metric.direction is Direction.HIGHER_IS_BETTER else "rise"
    stall = OUTLIER if metric.direction is Direction.HIGHER_IS_BETTER else 1.0 / OUTLIER
    print(f"Command: `{command}`")
    print()
    print(
        f"{args.metric} ({metric.direction.value} is better), threshold {metric.default_threshold:g}, "
        f"alpha {plan.alpha:g} over all looks (level {level:.4f} at interim looks, {last:.4f} at the last), "
        f"futility {plan.futility:g}, "
        f"looks at rounds {plan.min_rounds}..{plan.max_rounds} against {args.baseline} baseline rounds, "
        f"log-normal noise, {args.trials} trials per cell. Cells: how often the run ends in REGRESSION; "
        "rounds used, median / p90 (the fixed design always uses "
        f"{plan.max_rounds})."
    )
    print()
    heads = ["no change", f"1 outlier x{stall:.3g}", *(f"{d:.0%} {word}" for d in DROPS)]
    print("| noise CV | " + " | ".join(f"{h}: regression | {h}: rounds" for h in heads) + " |")
    print("|" + "---:|" * (1 + 2 * len(heads)))
    for cv, cells in rows.items():
        out = []
        for i, cell in enumerate(cells):
            rate = f"{cell.regression_rate:.2%}" if i < 2 else f"{cell.regression_rate:.1%}"
            out += [rate, f"{cell.median_rounds:g} / {cell.p90_rounds:g}"]
        print(f"| {cv:.0%} | " + " | ".join(out) + " |")
    print()
    print(f"95% Monte Carlo half-width <= {1.96 * math.sqrt(0.25 / args.trials):.1%} per cell; ran in {elapsed:.1f} s.")
    if metric.direction is not Direction.HIGHER_IS_BETTER:
        return 0
    cells = rows[TARGET_CV]
    none, drop = cells[0], cells[2 + DROPS.index(TARGET_DROP)]
    met = (
        none.regression_rate <= TARGET_FALSE_ALARMS
        and drop.regression_rate >= TARGET_DETECTION
        and none.median_rounds <= TARGET_MEDIAN
        and drop.median_rounds <= TARGET_MEDIAN
    )
    print(
        f"Targets at {TARGET_CV:.0%} CV: false alarms <= {TARGET_FALSE_ALARMS:.0%} (got {none.regression_rate:.2%}), "
        f"{TARGET_DROP:.0%} {word} detected >= {TARGET_DETECTION:.0%} (got {drop.regression_rate:.2%}), "
        f"median rounds <= {TARGET_MEDIAN} (got {none.median_rounds:g} with no change, {drop.median_rounds:g} "
        f"with a {TARGET_DROP:.0%} {word}; fixed design {plan.max_rounds}): {'met' if met else 'MISSED'}."
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
