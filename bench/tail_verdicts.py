"""False alarms and detection of the tail and goodput verdicts, from real rounds on the emulator.

The central metrics' floors come from bench/stats_quality.py's log-normal model; a round's p90, p99
and goodput share have no such model worth trusting (a p99 of 16 requests is its slowest one or two;
a share of 16 moves in steps of 1/16). So this bench measures their noise instead of assuming it, and
resamples what it measured (an empirical round bootstrap): a few minutes of real rounds, then
thousands of verdicts in seconds.

Pools: the meter runs an open-loop workload (``--rate`` req/s, Poisson arrivals on a seeded schedule,
the same every round as in the suite; ``--requests`` requests of the chat prompts per round,
``--output-len`` tokens each, an slo) against the emulator standing in for qwen36 with MTP (3 draft
steps), for ``--rounds`` rounds in each of four sessions, each a fresh emulator with its own noise
seed: the unchanged server twice (sessions A and B) and two mild scheduler regressions made with the
emulator's load knobs. The unchanged server already slows down under load (each decode step gains
``step_s_per_running_request`` per other request decoding beside it; ``prefill_slots`` prefills at a
time, FIFO), as a real one does; a regression makes one of those costs larger. Noise model: the
emulator's log-normal step noise (``noise_cv`` 0.02, per request) plus whatever this machine adds (the
meter and the emulator share its CPUs); the arrival schedule never changes. `regression.round_samples`
turns each session into per-round values of every metric, exactly what a run stores as its samples.

Trials: each draws ``n`` baseline rounds and ``n`` current rounds (no round twice) and applies
``compare_samples`` with the metric's default floor and alpha, for each ``n`` of ``--samples``:

* false alarms, one session: baseline and current from the same unchanged session, disjoint;
* false alarms, two sessions: baseline from one unchanged session, current from the other, which is
  how a baseline is used (recorded by an earlier run, against another server start);
* detection: baseline from an unchanged session, current from a regression's session.

The unchanged session of the baseline is drawn per trial, so neither session's offset favours a
direction. Every metric of a trial sees the same rounds, as in one run: "any tail or goodput" counts
the trials where at least one of the six failed, the workload's verdict. A second table scans floors
(exact: a verdict at floor f is the verdict at floor 0 restricted to changes worse than f), giving the
narrowest one whose two-session false alarms stay <= 1% at every ``n``.

The rates are conditional on the pools: trials resample ``--rounds`` real rounds per session, so a
rare slow round weighs as often as it was met. The Monte Carlo half-width bounds the resampling error
only; the pools' own sampling error is larger for the rarest events (``--save-pools`` keeps the rounds,
``--load-pools`` draws new trials from them without measuring). The emulator's prefill has no noise of
its own and the schedule is fixed, so its TTFT tails are quieter than a GPU server's: a floor found
ample for them here is a lower bound, not a recommendation. Prints markdown headed by the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sglperf.baselines import regression
from sglperf.baselines.stats import DEFAULT_ALPHA, DEFAULT_SAMPLES, compare_samples
from sglperf.measure import meter
from sglperf.model.metrics import METRICS, Direction, MetricOutcome
from sglperf.model.prompts import load_prompts
from sglperf.model.workload import Workload
from sglperf.runtime.server import ServerSpec, launch
from sglperf.testing.emulator.config import CONFIG_ENV

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

REPO = Path(__file__).resolve().parents[1]
PROMPTS = REPO / "data" / "prompts" / "chat.jsonl"
SPEC_ARGV = ("--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "4")
# The e2e tests' fast timing (tests/support/emulator_runs.py) plus a server that already feels its load.
UNCHANGED: dict[str, Any] = {
    "decode_step_s": 0.003,
    "prefill_s_per_token": 0.0005,
    "noise_cv": 0.02,
    "step_s_per_running_request": 0.0005,
    "prefill_slots": 3,
}
# Mild scheduler regressions: a costlier batch (decode steps), a costlier prefill queue.
REGRESSIONS: dict[str, dict[str, Any]] = {
    "R1": {"step_s_per_running_request": 0.0007},
    "R2": {"prefill_slots": 2},
}
TAILS_AND_GOODPUT = ("ttft_p90_s", "ttft_p99_s", "itl_p90_s", "itl_p99_s", "goodput_share", "goodput_req_s")
REFERENCE = ("ttft_s", "itl_s")  # the central metrics (round means), for comparison
SHOWN = TAILS_AND_GOODPUT + REFERENCE
ANY = "any tail or goodput"
FLOORS = (0.02, 0.03, 0.05, 0.075, 0.10, 0.15, 0.20, 0.25, 0.30, 0.40)
TARGET_FALSE_ALARMS = 0.01
SESSIONS = ("A", "B")  # the unchanged server's two sessions


@dataclass(frozen=True)
class Pool:
    """One emulator session's rounds: per metric, one value per round."""

    label: str
    values: Mapping[str, np.ndarray]
    rounds: int
    dropped: int  # rounds the meter dropped as behind schedule (and ran again)
    seconds: float


@dataclass(frozen=True)
class Cell:
    """One (n, draw) cell: per metric and trial, the verdict at the default floor and the log change."""

    regression: Mapping[str, np.ndarray]  # bool per trial, at the metric's default floor
    worse_at_zero: Mapping[str, np.ndarray]  # bool per trial: a regression at floor 0
    worse_by: Mapping[str, np.ndarray]  # per trial, log of how much worse the median got (> 0: worse)
    insufficient: int

    def rate(self, metric: str) -> float:
        if metric == ANY:
            return float(np.mean(np.any([self.regression[m] for m in TAILS_AND_GOODPUT], axis=0)))
        return float(np.mean(self.regression[metric]))

    def regressed_at(self, metric: str, floor: float) -> np.ndarray:
        """Per trial, the verdict had the metric's floor been ``floor`` (see the module docstring)."""
        return self.worse_at_zero[metric] & (self.worse_by[metric] > _bound(metric, floor))

    def rate_at(self, metric: str, floor: float) -> float:
        return float(np.mean(self.regressed_at(metric, floor)))


def _bound(metric: str, floor: float) -> float:
    """compare_samples' regression bound in log space for a floor."""
    return -math.log1p(-floor) if METRICS[metric].direction is Direction.HIGHER_IS_BETTER else math.log1p(floor)


def workload(args: argparse.Namespace, rounds: int) -> Workload:
    return Workload.model_validate(
        {
            "id": "tail-verdicts",
            "prompts": PROMPTS,
            "output_len": args.output_len,
            "rate": args.rate,
            "arrival": "poisson",
            "seed": args.seed,
            "requests": args.requests,
            "slo": {"ttft_s": args.slo_ttft, "itl_s": args.slo_itl},
            "warmup": 2,
            "repeats": rounds,
            "sequential": False,
        }
    )


def collect(label: str, config: Mapping[str, Any], load: Workload) -> Pool:
    """``load.repeats`` rounds against a fresh emulator configured with ``config``."""
    started = time.perf_counter()
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
            result = meter.measure(server.base_url, load, load_prompts(PROMPTS), concurrency=load.requests or 1)
        finally:
            server.stop()
    per_round = regression.round_samples(result)
    values = {m: np.asarray(per_round.get(m, ()), dtype=float) for m in SHOWN}
    short = {m: len(v) for m, v in values.items() if len(v) != len(result.rounds)}
    if short:
        raise RuntimeError(f"session {label}: metrics without a value in every round: {short}")
    seconds = time.perf_counter() - started
    print(
        f"session {label}: {len(result.rounds)} rounds ({len(result.dropped_rounds)} dropped) in {seconds:.0f} s",
        file=sys.stderr,
    )
    return Pool(label, values, len(result.rounds), len(result.dropped_rounds), seconds)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What shapes the rounds: a saved pool is only reused with the same."""
    measured = ("rounds", "rate", "requests", "output_len", "slo_ttft", "slo_itl", "seed")
    return {**{k: getattr(args, k) for k in measured}, "unchanged": UNCHANGED, "regressions": REGRESSIONS}


def save_pools(path: Path, pools: Mapping[str, Pool], shaped_by: Mapping[str, Any]) -> None:
    arrays: dict[str, Any] = {f"{p.label}/{m}": v for p in pools.values() for m, v in p.values.items()}
    meta = {"settings": shaped_by, "pools": {p.label: [p.rounds, p.dropped, p.seconds] for p in pools.values()}}
    np.savez(path, meta=np.array(json.dumps(meta)), **arrays)


def load_pools(path: Path, shaped_by: Mapping[str, Any]) -> dict[str, Pool]:
    """Pools saved by ``save_pools``; ValueError unless they were measured with ``shaped_by``."""
    with np.load(path) as saved:
        meta = json.loads(str(saved["meta"]))
        if meta["settings"] != json.loads(json.dumps(shaped_by)):
            raise ValueError(f"{path} was measured with other settings: {meta['settings']}")
        return {
            label: Pool(label, {m: saved[f"{label}/{m}"] for m in SHOWN}, int(rounds), int(dropped), float(seconds))
            for label, (rounds, dropped, seconds) in meta["pools"].items()
        }


def pick(rng: np.random.Generator, size: int, n: int) -> np.ndarray:
    """``n`` distinct round indices below ``size``."""
    return rng.permutation(size)[:n]


def run_cell(pools: Mapping[str, Pool], current: str | None, n: int, trials: int, rng: np.random.Generator) -> Cell:
    """Trials with the baseline from session A or B (drawn per trial) and the current run from
    ``current``: None for the same session (disjoint rounds), "other" for the other unchanged session,
    or a regression's label."""
    regressed: dict[str, list[bool]] = {m: [] for m in SHOWN}
    worse0: dict[str, list[bool]] = {m: [] for m in SHOWN}
    worse_by: dict[str, list[float]] = {m: [] for m in SHOWN}
    insufficient = 0
    for side in rng.integers(0, 2, trials):
        base_pool = pools[SESSIONS[side]]
        if current is None:
            both = pick(rng, base_pool.rounds, 2 * n)
            cur_pool, base_idx, cur_idx = base_pool, both[:n], both[n:]
        else:
            cur_pool = pools[SESSIONS[1 - side]] if current == "other" else pools[current]
            base_idx = pick(rng, base_pool.rounds, n)
            cur_idx = pick(rng, cur_pool.rounds, n)
        for metric in SHOWN:
            baseline, now = base_pool.values[metric][base_idx], cur_pool.values[metric][cur_idx]
            verdict = compare_samples(metric, baseline, now)
            at_zero = compare_samples(metric, baseline, now, threshold=0.0)
            insufficient += verdict.outcome is MetricOutcome.INSUFFICIENT
            regressed[metric].append(verdict.outcome is MetricOutcome.REGRESSION)
            worse0[metric].append(at_zero.outcome is MetricOutcome.REGRESSION)
            sign = 1.0 if METRICS[metric].direction is Direction.LOWER_IS_BETTER else -1.0
            # As compare_samples computes it, so a change exactly at a floor falls on the same side.
            worse_by[metric].append(sign * (math.log(at_zero.current_median) - math.log(at_zero.baseline_median)))
    cell = Cell(
        {m: np.array(v) for m, v in regressed.items()},
        {m: np.array(v) for m, v in worse0.items()},
        {m: np.array(v) for m, v in worse_by.items()},
        insufficient,
    )
    for metric in SHOWN:  # the floor scan's shortcut must reproduce compare_samples at the default floor
        if not np.array_equal(cell.regressed_at(metric, METRICS[metric].default_threshold), cell.regression[metric]):
            raise AssertionError(f"{metric}: the floor-0 shortcut disagrees with compare_samples")
    return cell


def cv(values: np.ndarray) -> float:
    return float(np.std(values, ddof=1) / np.mean(values))


def median_change(pools: Mapping[str, Pool], label: str, metric: str) -> float:
    """How much worse ``label``'s median is than the unchanged server's (both sessions pooled)."""
    unchanged = np.concatenate([pools[s].values[metric] for s in SESSIONS])
    ratio = float(np.median(pools[label].values[metric]) / np.median(unchanged))
    return ratio - 1.0 if METRICS[metric].direction is Direction.LOWER_IS_BETTER else 1.0 - ratio


def describe(config: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in config.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50, help="rounds per session (>= 2 x the largest n)")
    parser.add_argument("--rate", type=float, default=50.0, help="requests per second")
    parser.add_argument("--requests", type=int, default=16, help="requests per round")
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--slo-ttft", type=float, default=0.038, help="slo TTFT target, s")
    parser.add_argument("--slo-itl", type=float, default=0.0024, help="slo ITL target, s")
    parser.add_argument("--samples", type=int, nargs="+", default=[6, 8, DEFAULT_SAMPLES], help="rounds per side")
    parser.add_argument("--trials", type=int, default=3000, help="trials per cell")
    parser.add_argument("--seed", type=int, default=0, help="the arrival schedule's and the trials' seed")
    parser.add_argument("--save-pools", type=Path, help="also write the measured rounds to this .npz file")
    parser.add_argument(
        "--load-pools", type=Path, help="draw the trials from rounds saved by --save-pools instead of measuring"
    )
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    if args.rounds < 2 * max(args.samples):
        parser.error(f"--rounds {args.rounds}: one session must hold 2 x {max(args.samples)} distinct rounds")

    started = time.perf_counter()
    load = workload(args, args.rounds)
    configs = {
        "A": {**UNCHANGED, "seed": 1},
        "B": {**UNCHANGED, "seed": 2},
        **{label: {**UNCHANGED, **change, "seed": 3 + i} for i, (label, change) in enumerate(REGRESSIONS.items())},
    }
    if args.load_pools is not None:
        try:
            pools = load_pools(args.load_pools, settings(args))
        except (OSError, ValueError, KeyError) as exc:
            parser.error(f"--load-pools: {exc}")
    else:
        pools = {label: collect(label, config, load) for label, config in configs.items()}
    if args.save_pools is not None:
        save_pools(args.save_pools, pools, settings(args))
    measured = time.perf_counter() - started

    draws_of = {"one session": None, "two sessions": "other", **{label: label for label in REGRESSIONS}}
    streams = iter(np.random.SeedSequence(args.seed).spawn(len(args.samples) * len(draws_of)))
    cells: dict[tuple[int, str], Cell] = {}
    for n in args.samples:
        for name, current in draws_of.items():
            cells[n, name] = run_cell(pools, current, n, args.trials, np.random.default_rng(next(streams)))
    elapsed = time.perf_counter() - started

    print(f"`{_docs_table.command(__file__, argv)}`")
    print()
    print(
        f"Emulator standing in for qwen36 with MTP, unchanged: {describe(UNCHANGED)}; "
        + "; ".join(f"{label}: {describe(change)}" for label, change in REGRESSIONS.items())
        + f". Open loop at {args.rate:g} req/s, Poisson, {args.requests} chat requests of {args.output_len} tokens "
        f"per round, slo TTFT <= {args.slo_ttft * 1e3:g} ms and ITL <= {args.slo_itl * 1e3:g} ms; "
        f"{args.rounds} rounds per session (dropped as behind schedule and run again: "
        + ", ".join(f"{p.label} {p.dropped}" for p in pools.values())
        + ")."
    )
    print()
    _print_pools(pools)
    print()
    _print_verdicts(cells, args.samples, args.trials)
    print()
    _print_floors(cells, args.samples)
    print()
    earlier = sum(p.seconds for p in pools.values())
    half = 1.96 * math.sqrt(0.25 / args.trials)
    rare = 1.96 * math.sqrt(TARGET_FALSE_ALARMS * (1 - TARGET_FALSE_ALARMS) / args.trials)
    print(
        f"{args.trials} trials per cell, alpha {DEFAULT_ALPHA:g}: 95% Monte Carlo half-width <= {half:.1%} "
        f"(+-{rare:.2%} near 1%), resampling error only (the module docstring says why the pools add more). "
        + (
            f"Ran in {elapsed:.0f} s, {measured:.0f} s of it measuring."
            if args.load_pools is None
            else f"Ran in {elapsed:.0f} s on rounds measured earlier (in {earlier:.0f} s)."
        )
    )
    return 0


def _print_pools(pools: Mapping[str, Pool]) -> None:
    print(
        "| metric | default floor | unchanged median | round-to-round CV | B vs A | "
        + " | ".join(f"{label} worse by" for label in REGRESSIONS)
        + " |"
    )
    print("|---|---:|---:|---:|---:|" + "---:|" * len(REGRESSIONS))
    for metric in SHOWN:
        unchanged = np.concatenate([pools[s].values[metric] for s in SESSIONS])
        unit = METRICS[metric].unit
        median = float(np.median(unchanged))
        shown = f"{median * 1e3:.2f} ms" if unit == "s" else f"{median:.3g} {unit}"
        within = float(np.mean([cv(pools[s].values[metric]) for s in SESSIONS]))
        shift = float(np.median(pools["B"].values[metric]) / np.median(pools["A"].values[metric])) - 1.0
        changes = " | ".join(f"{median_change(pools, label, metric):+.1%}" for label in REGRESSIONS)
        print(
            f"| {metric} | {METRICS[metric].default_threshold:.0%} | {shown} | {within:.1%} | {shift:+.1%} | "
            f"{changes} |"
        )
    print()
    print(
        "Round-to-round CV: standard deviation over mean of one session's rounds (A's and B's averaged); B vs A: "
        "the ratio of the two unchanged sessions' medians, less 1; worse by: a regression's median against both "
        "unchanged sessions' rounds, positive when worse."
    )


def _print_verdicts(cells: Mapping[tuple[int, str], Cell], samples: Sequence[int], trials: int) -> None:
    print(
        "| metric | n | false alarms, one session | false alarms, two sessions | "
        + " | ".join(f"detects {label}" for label in REGRESSIONS)
        + " |"
    )
    print("|---|---:|---:|---:|" + "---:|" * len(REGRESSIONS))
    for metric in (*SHOWN, ANY):
        for n in samples:
            rates = [cells[n, name].rate(metric) for name in ("one session", "two sessions", *REGRESSIONS)]
            print(
                f"| {metric} | {n} | "
                + " | ".join([f"{r:.2%}" for r in rates[:2]] + [f"{r:.1%}" for r in rates[2:]])
                + " |"
            )
    insufficient = sum(c.insufficient for c in cells.values())
    print()
    print(
        f"Cells: how often `compare` reports a REGRESSION at the metric's default floor, n rounds per side; "
        f"INSUFFICIENT verdicts: {insufficient} of {trials * len(cells) * len(SHOWN)}."
    )


def narrowest_floor(cells: Mapping[tuple[int, str], Cell], samples: Sequence[int], metric: str) -> float | None:
    """The narrowest floor of the scan whose two-session false alarms stay within the target at every n."""
    ok = [f for f in FLOORS if all(cells[n, "two sessions"].rate_at(metric, f) <= TARGET_FALSE_ALARMS for n in samples)]
    return ok[0] if ok else None


def _print_floors(cells: Mapping[tuple[int, str], Cell], samples: Sequence[int]) -> None:
    ns = "/".join(str(n) for n in samples)
    print(
        f"| metric | default floor | narrowest floor, two-session false alarms <= {TARGET_FALSE_ALARMS:.0%} | "
        f"its false alarms (n = {ns}) | " + " | ".join(f"detects {label} (n = {ns})" for label in REGRESSIONS) + " |"
    )
    print("|---|---:|---:|---:|" + "---:|" * len(REGRESSIONS))
    floors = {m: narrowest_floor(cells, samples, m) for m in SHOWN}

    def regressed(n: int, name: str, metric: str) -> np.ndarray:
        if metric == ANY:  # the workload's verdict, every tail and goodput metric at its floor above
            return np.asarray(np.any([regressed(n, name, m) for m in TAILS_AND_GOODPUT], axis=0))
        return cells[n, name].regressed_at(metric, floors[metric] or FLOORS[-1])

    def rates(name: str, pct: str, metric: str) -> str:
        return "/".join(f"{float(np.mean(regressed(n, name, metric))):{pct}}" for n in samples)

    for metric in (*SHOWN, ANY):
        floor = floors.get(metric)
        default = f"{METRICS[metric].default_threshold:.0%}" if metric in METRICS else ""
        narrowest = "the floors above" if metric == ANY else f"> {FLOORS[-1]:.0%}" if floor is None else f"{floor:.1%}"
        print(
            f"| {metric} | {default} | {narrowest} | {rates('two sessions', '.2%', metric)} | "
            + " | ".join(rates(label, ".0%", metric) for label in REGRESSIONS)
            + " |"
        )
    print()
    print(
        "Floors scanned: " + ", ".join(f"{f:.3g}" for f in FLOORS) + " (relative); a verdict at floor f is the "
        "verdict at floor 0 restricted to medians worse by more than f, so every floor sees the same trials."
    )


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
