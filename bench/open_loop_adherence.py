"""How closely the meter keeps an open-loop schedule on this machine, up to where it cannot.

The emulator stands in for qwen36 with MTP on 2x A6000 (about 80 tok/s per stream: 30 ms verify steps
of 2.5 accepted tokens, 256-token answers of ~3 s), so the meter streams as many requests at once as
such a server would hold at each rate. The rates: the shipped qwen36 ``chat-at-rate`` workload's
(0.5 req/s), ten times it (what the issue asks the meter to keep), and higher ones, to find where a
2-CPU client, sharing the machine with the server it measures, falls behind. Poisson arrivals, seeded;
``--seconds`` of sends per round.

Per request, the send lag: how long after it was due the meter sent it (`sglperf.measure.samples`).
The table gives its distribution over all requests of a rate, the meter's limit for that rate (a round
whose p90 lag exceeds it is dropped as client-bound, `sglperf.measure.meter`), and how many rounds
were over it. Nothing is dropped here: the bench lifts the limit to see every lag. Prints markdown
headed by the command line.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sglperf.measure import meter
from sglperf.model.prompts import Message, Prompt, PromptSet
from sglperf.model.workload import Workload
from sglperf.runtime.server import ServerSpec, launch
from sglperf.sglang.intents import Speculative
from sglperf.testing.emulator.config import CONFIG_ENV

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

QWEN36_RATE = 0.5  # deployments/qwen36.toml, chat-at-rate
EMULATOR = {"decode_step_s": 0.03, "prefill_s_per_token": 0.0002, "noise_cv": 0.02, "accept_prob": 0.7}
# The flag names from the one place that spells them (sglperf.sglang.intents).
SPEC_ARGV = tuple(
    arg
    for key, value in {"algorithm": "NEXTN", "num_steps": 3, "num_draft_tokens": 4}.items()
    for arg in (Speculative.FLAGS[key], str(value))
)


def prompt_set(n: int) -> PromptSet:
    prompts = tuple(
        Prompt(f"p{i}", (Message("user", f"Question {i}: " + "why is the sky blue? " * 20),)) for i in range(n)
    )
    return PromptSet("bench", Path("<bench>"), prompts, "bench")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=float, nargs="+", default=[QWEN36_RATE, 10 * QWEN36_RATE, 20.0, 50.0])
    parser.add_argument("--seconds", type=float, default=8.0, help="of sends per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output-len", type=int, default=256)
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    limits = {rate: meter.send_lag_limit_s(rate) for rate in args.rates}
    meter.SEND_LAG_FLOOR_S = math.inf  # see every lag: no round dropped as behind schedule
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        spec = ServerSpec(
            name="emulator",
            python=sys.executable,
            argv=("--model-path", "qwen36-stand-in", *SPEC_ARGV),
            env={CONFIG_ENV: json.dumps(EMULATOR)},
            log_path=Path(tmp) / "emulator.log",
            emulated=True,
        )
        server = launch(spec)
        try:
            for rate in args.rates:
                requests = max(2, round(rate * args.seconds))
                workload = Workload.model_validate(
                    {
                        "id": f"r{rate:g}",
                        "prompts": Path("<bench>"),
                        "output_len": args.output_len,
                        "rate": rate,
                        "requests": requests,
                        "warmup": 1,
                        "repeats": args.rounds,
                        "sequential": False,
                    }
                )
                result = meter.measure(server.base_url, workload, prompt_set(8), concurrency=requests)
                lags = np.array([s.send_lag_s for s in result.samples if s.send_lag_s is not None]) * 1e3
                behind = sum(1 for r in result.rounds if (r.send_lag_p90_s or 0.0) > limits[rate])
                in_flight = rate * float(np.median([s.e2e_s for s in result.samples]))
                p50, p90, p99 = np.percentile(lags, [50, 90, 99])
                rows.append(
                    f"| {rate:g} | {rate / QWEN36_RATE:g}x | {in_flight:.0f} | {len(lags)} | {p50:.2f} | {p90:.2f} | "
                    f"{p99:.2f} | {lags.max():.1f} | {limits[rate] * 1e3:.0f} | {behind} of {len(result.rounds)} |"
                )
        finally:
            server.stop()
    command = _docs_table.command(__file__, argv)
    print(
        f"`{command}` (emulator standing in for qwen36 with MTP, ~{args.output_len}-token answers, Poisson "
        f"arrivals, {args.rounds} rounds of {args.seconds:g} s of sends per rate, on this machine)\n"
    )
    print(
        "| rate req/s | x qwen36 | in flight (median) | requests | lag p50 ms | p90 ms | p99 ms | max ms | limit ms "
        "| rounds over |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
