"""Monte Carlo quality of ``sglperf.baselines.changepoint.drift``: drifts found, dated, and false alarms.

Synthetic histories of a higher-is-better metric (decode tok/s): ``--nights`` per-night values, each
``exp(N(-s**2/2, s))`` with ``s = sqrt(log(1 + CV**2))`` times the true level. The true level is flat,
or from night ``k`` on (0-based, the first night below) falls by ``--rate`` per night
(multiplicatively: night k is 1% down, k+1 2%, ...). Each row runs ``--trials`` seeded histories:

* found: a drift is reported;
* dated within 2: reported, and its start is within 2 nights of ``k``;
* for flat histories, the share with no drift reported (target >= 99%);
* oracle: how often a least-squares hinge fit (flat, then a straight line) over the whole history,
  told that exactly one drift exists, dates it within 2 nights: about the best any method can do
  at this noise, for comparison.

Prints a markdown table headed by the command that reproduces it; exits 1 if a target is missed
(drifts with >= 10 nights to run: dated within 2 nights in >= 85% of histories; flat: >= 99% clean).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from sglperf.baselines.changepoint import DEFAULT_ALPHA, DEFAULT_PERMUTATIONS, drift, hinge_start

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

TARGET_DATED, TARGET_CLEAN, TOLERANCE = 0.85, 0.99, 2


def history(rng: np.random.Generator, nights: int, cv: float, start: int | None, rate: float) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv**2))
    noise = np.exp(rng.normal(-(sigma**2) / 2, sigma, nights))
    level = np.ones(nights)
    if start is not None:
        steps = np.maximum(np.arange(nights) - start + 1, 0)
        level = (1.0 - rate) ** steps
    return 100.0 * level * noise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--cv", type=float, default=0.02)
    parser.add_argument("--rate", type=float, default=0.01, help="relative drop per night once the drift starts")
    parser.add_argument("--starts", default="10,15,20,25", help="nights the drift starts at (0-based)")
    parser.add_argument("--seed", type=int, default=0)
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    starts = [int(s) for s in args.starts.split(",")]
    command = (
        f"python bench/changepoint_quality.py --trials {args.trials} --nights {args.nights} --cv {args.cv:g} "
        f"--rate {args.rate:g} --starts {args.starts} --seed {args.seed}"
    )
    labels = [f"night-{i:02d}" for i in range(args.nights)]
    began = time.perf_counter()
    streams = iter(np.random.SeedSequence(args.seed).spawn(len(starts) + 1))
    rows = []
    for start in [None, *starts]:
        rng = np.random.default_rng(next(streams))
        found = dated = oracle = 0
        errors = []
        for trial in range(args.trials):
            values = history(rng, args.nights, args.cv, start, args.rate)
            if start is not None:
                oracle += abs(hinge_start(np.log(values), 1, args.nights - 3) - start) <= TOLERANCE
            result = drift("decode_tok_s", values.tolist(), labels, seed=trial)
            if result is None:
                continue
            found += 1
            if start is not None:
                errors.append(result.start - start)
                dated += abs(result.start - start) <= TOLERANCE
        rows.append((start, found / args.trials, dated / args.trials, errors, oracle / args.trials))
    elapsed = time.perf_counter() - began

    print(f"Command: `{command}`")
    print()
    print(
        f"decode_tok_s histories of {args.nights} nights, log-normal noise {args.cv:.0%} CV, "
        f"drift {args.rate:.0%}/night from its start to the last night; E-divisive, alpha {DEFAULT_ALPHA:g}, "
        f"{DEFAULT_PERMUTATIONS} permutations, "
        f"{args.trials} histories per row."
    )
    print()
    heads = (
        "history",
        "drift at the last night",
        "drift reported",
        "dated within 2 nights",
        "start error: median [p10, p90]",
        "oracle hinge fit: within 2",
    )
    print("| " + " | ".join(heads) + " |")
    print("|---|---:|---:|---:|---|---:|")
    met = True
    for start, found, dated, errors, oracle in rows:
        if start is None:
            print(f"| flat | 0% | {found:.1%} (false) | - | - | - |")
            met &= 1.0 - found >= TARGET_CLEAN
            continue
        total = 1.0 - (1.0 - args.rate) ** (args.nights - start)
        spread = (
            f"{np.median(errors):+g} [{np.percentile(errors, 10):+g}, {np.percentile(errors, 90):+g}]"
            if errors
            else "-"
        )
        print(f"| drift from night {start} | -{total:.1%} | {found:.1%} | {dated:.1%} | {spread} | {oracle:.1%} |")
        if args.nights - start >= 10:
            met &= dated >= TARGET_DATED
    print()
    print(f"95% Monte Carlo half-width <= {1.96 * math.sqrt(0.25 / args.trials):.1%} per cell; ran in {elapsed:.1f} s.")
    print(
        f"Targets: drifts with >= 10 nights to run dated within {TOLERANCE} nights in >= {TARGET_DATED:.0%}, "
        f"flat histories clean in >= {TARGET_CLEAN:.0%}: {'met' if met else 'MISSED'}."
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
