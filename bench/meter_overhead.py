"""How exactly does ``sglperf.measure.meter`` recover decode speed, at rates far above a real server's?

Against the emulator (one subprocess per decoding mode and rate, noise_cv=0, seeded), each
request's truth is exact: the emulator draws each request's plan from
``default_rng([seed, request_index])``, so this script redraws the plans of every index a cell used
(warm-up included) and pairs each measured request with the plan whose tokens-per-chunk sequence it
streamed (with speculative decoding the sequence is random, so it identifies the plan; without, all
plans are equal). Truth = tokens after the first chunk / (last chunk time - first chunk time) in the
plan.

Relative error = measured / truth - 1, per request; the table shows its median and largest absolute
value per cell. It includes the emulator's own lateness (a Python thread per stream, woken by
``time.sleep``; on a small machine several streams compete for the GIL and the CPUs), so it is an
upper bound on the meter's. To separate the two, the emulator runs under a wrapper that records when
each chunk actually left it (``perf_counter`` is one clock across processes on Linux); the "meter
only" columns compare with the rate realised by those send times.

``--gpu-probe`` runs the GPU telemetry thread (`sglperf.runtime.gpu_telemetry`, sampling every 100 ms)
during every cell, against a fake NVML of two GPUs with a process each (`sglperf.testing.fake_nvml`):
what the sampler's Python costs the meter's stamps. A real NVML call also waits on the driver, with
the GIL released; that part is not measured here.

Prints a markdown table headed by the command line; exits 1 if a cell at ``--target-rate`` misses
``--target`` (median |error| against the plan).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np

from sglperf.measure.meter import GpuGuard, measure
from sglperf.measure.samples import RequestSample
from sglperf.model.gpu_telemetry import GpuLimits
from sglperf.model.prompts import Message, Prompt, PromptSet
from sglperf.model.workload import Workload
from sglperf.runtime.gpu_telemetry import open_probe
from sglperf.testing.emulator.config import CONFIG_ENV, EmulatorConfig
from sglperf.testing.emulator.timing import chunk_plan, expected_accept_length, plan_request, prompt_tokens_of_text
from sglperf.testing.fake_nvml import FakeGpu, FakeNvml

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table

REPO = Path(__file__).resolve().parents[1]
SPEC_STEPS = 3
ACCEPT_PROB = 0.7
# Runs the emulator, logging per request the time each chunk's bytes were written. Relies on two
# emulator internals (_Handler._after_tokens runs right after a chunk is sent; EmulatorState.end_run).
WRAPPER = """
import json, os, sys, time
from sglperf.testing.emulator import server as E
log = open(sys.argv.pop(1), "a", buffering=1)
sent = {}
after_tokens, end_run = E._Handler._after_tokens, E.EmulatorState.end_run
def _after_tokens(self, run, n, streaming):
    if n:
        sent.setdefault(run.rid, []).append(time.perf_counter())
    after_tokens(self, run, n, streaming)
def _end_run(self, run, completed):
    end_run(self, run, completed)
    log.write(json.dumps([run.rid, sent.pop(run.rid, [])]) + "\\n")
E._Handler._after_tokens, E.EmulatorState.end_run = _after_tokens, _end_run
os._exit(E.main())
"""
SPEC_ARGV = (
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    str(SPEC_STEPS),
    "--speculative-num-draft-tokens",
    str(SPEC_STEPS + 1),
    "--speculative-eagle-topk",
    "1",
)


@dataclass(frozen=True)
class Cell:
    spec: bool
    rate: float  # target decode tok/s
    api: str
    concurrency: int


@dataclass(frozen=True)
class CellResult:
    cell: Cell
    errors: tuple[float, ...]  # measured / plan truth - 1, one per request
    meter_errors: tuple[float, ...]  # measured / rate realised by the emulator's send times - 1
    tokens_per_chunk: float

    @property
    def median_abs(self) -> float:
        return float(np.median(np.abs(self.errors)))


def emulator_config(spec: bool, rate: float) -> EmulatorConfig:
    per_step = expected_accept_length(ACCEPT_PROB, SPEC_STEPS) if spec else 1.0
    return EmulatorConfig(
        startup_s=0.1, noise_cv=0.0, accept_prob=ACCEPT_PROB, decode_step_s=per_step / rate, prefill_s_per_token=0.00001
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Emulator:
    url: str
    send_log: Path

    def send_times(self) -> dict[str, list[float]]:
        """Server request id -> perf_counter time each token-carrying chunk was written."""
        return dict(map(json.loads, self.send_log.read_text().splitlines()))


@contextmanager
def emulator(config: EmulatorConfig, spec: bool, send_log: Path) -> Iterator[Emulator]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLPERF_EMULATOR")}
    env[CONFIG_ENV] = json.dumps(
        {
            k: getattr(config, k)
            for k in ("startup_s", "noise_cv", "accept_prob", "decode_step_s", "prefill_s_per_token")
        }
    )
    argv = [sys.executable, "-c", WRAPPER, str(send_log), "--port", str(port), *(SPEC_ARGV if spec else ())]
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"emulator did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
            time.sleep(0.05)
        yield Emulator(url, send_log)
    finally:
        proc.kill()
        proc.wait(timeout=10)


def prompt_set(n: int) -> PromptSet:
    prompts = tuple(
        Prompt(f"p{i:02d}", (Message("user", f"Prompt {i}: describe a lighthouse at dusk."),)) for i in range(n)
    )
    return PromptSet("bench", Path("<generated>"), prompts, "generated")


def plan_truths(config: EmulatorConfig, spec: bool, indices: range, output_len: int) -> dict[tuple[int, ...], float]:
    """Tokens-per-chunk sequence -> exact decode rate, for each request index the emulator used."""
    truths: dict[tuple[int, ...], float] = {}
    tokens = prompt_tokens_of_text("x")  # prefill shifts every chunk equally; the rate does not depend on it
    for index in indices:
        plan = plan_request(
            config, SPEC_STEPS if spec else None, tokens, output_len, np.random.default_rng([config.seed, index])
        )
        chunks = chunk_plan(plan, config.stream_interval)
        sizes = (chunks[0].end, *(b.end - a.end for a, b in itertools.pairwise(chunks)))
        truths[sizes] = (chunks[-1].end - chunks[0].end) / (chunks[-1].at_s - chunks[0].at_s)
    return truths


def truth_of(sample: RequestSample, truths: dict[tuple[int, ...], float]) -> float:
    key = tuple(c.tokens for c in sample.chunks)
    if key not in truths:
        raise RuntimeError(f"request {sample.prompt_id}: its chunks match no emulator plan (chunks merged or lost?)")
    return truths[key]


def realised_rate(sample: RequestSample, sends: dict[str, list[float]]) -> float:
    times = sends[(sample.server_request_id or "").rsplit("-", 1)[-1]]  # OpenAI ids carry a prefix
    if len(times) != len(sample.chunks):
        raise RuntimeError(f"request {sample.server_request_id}: {len(times)} chunks sent, {len(sample.chunks)} seen")
    return (sample.completion_tokens - sample.chunks[0].tokens) / (times[-1] - times[0])


def run_cell(
    emu: Emulator,
    config: EmulatorConfig,
    cell: Cell,
    first_index: int,
    requests: int,
    output_len: int,
    gpu: GpuGuard | None = None,
) -> tuple[CellResult, int]:
    warmup = cell.concurrency
    # Validated like a deployment file's workload: --apis is free text until here.
    workload = Workload.model_validate(
        {
            "id": "overhead",
            "prompts": Path("<generated>"),
            "output_len": output_len,
            "warmup": warmup,
            "repeats": 1,
            "api": cell.api,
            "reuse_prefix_cache": True,
        }
    )
    result = measure(emu.url, workload, prompt_set(requests), concurrency=cell.concurrency, gpu=gpu)
    used = range(first_index, first_index + warmup + requests)
    truths = plan_truths(config, cell.spec, used, output_len)
    sends = emu.send_times()
    measured = [(s, s.decode_tok_s) for s in result.samples if s.decode_tok_s]
    errors = tuple(rate / truth_of(s, truths) - 1 for s, rate in measured)
    meter_errors = tuple(rate / realised_rate(s, sends) - 1 for s, rate in measured)
    per_chunk = float(np.mean([s.completion_tokens / len(s.chunks) for s in result.samples]))
    return CellResult(cell, errors, meter_errors, per_chunk), used.stop


def _pct(errors: tuple[float, ...], reduce: Callable[[np.ndarray], float]) -> str:
    return f"{float(reduce(np.abs(errors))):.3%}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="70,700,3000", help="decode tok/s per request, comma-separated")
    parser.add_argument("--apis", default="native,openai-chat")
    parser.add_argument("--concurrency", default="1,8")
    parser.add_argument("--requests", type=int, default=16, help="measured requests per cell")
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--target-rate", type=float, default=700.0)
    parser.add_argument("--gpu-probe", action="store_true", help="sample a fake NVML during every cell")
    parser.add_argument("--target", type=float, default=0.01, help="median |relative error| allowed at --target-rate")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    apis = args.apis.split(",")
    levels = [int(c) for c in args.concurrency.split(",")]

    gpu = None
    if args.gpu_probe:
        fake = FakeNvml([FakeGpu(uuid="GPU-bench-0", processes=[(os.getpid(), 2**30)]), FakeGpu(uuid="GPU-bench-1")])
        fake.install()
        gpu = GpuGuard(open_probe(None), GpuLimits(max_throttle=1.0, foreign_processes=False))
    results: list[CellResult] = []
    for spec in (False, True):
        for rate in rates:
            config = emulator_config(spec, rate)
            with tempfile.TemporaryDirectory() as tmp, emulator(config, spec, Path(tmp) / "sends.jsonl") as emu:
                index = 0
                for api in apis:
                    for concurrency in levels:
                        cell = Cell(spec, rate, api, concurrency)
                        res, index = run_cell(emu, config, cell, index, args.requests, args.output_len, gpu)
                        results.append(res)
                        print(f"  {cell}: median |error| {res.median_abs:.3%}", file=sys.stderr)

    command = _docs_table.command(__file__, argv)
    print(
        f"`{command}` ({os.cpu_count()} CPUs, output_len {args.output_len}, {args.requests} requests per cell, "
        f"emulator noise_cv=0, spec: {SPEC_STEPS} steps, accept_prob {ACCEPT_PROB}"
        f"{'; GPU telemetry sampled from a fake NVML' if args.gpu_probe else ''})\n"
    )
    print(
        "| decoding | tok/chunk | decode tok/s | api | concurrency | n | vs plan: median abs error | max "
        "| meter only: median | max |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        c = r.cell
        print(
            f"| {'MTP' if c.spec else 'plain'} | {r.tokens_per_chunk:.2f} | {c.rate:g} | {c.api} | {c.concurrency} "
            f"| {len(r.errors)} | {_pct(r.errors, np.median)} | {_pct(r.errors, np.max)} "
            f"| {_pct(r.meter_errors, np.median)} | {_pct(r.meter_errors, np.max)} |"
        )
    missed = [r for r in results if r.cell.rate == args.target_rate and r.median_abs >= args.target]
    for r in missed:
        print(f"\nTARGET MISSED at {r.cell}: median |error| {r.median_abs:.3%} >= {args.target:.1%}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
