"""How much CPU does sglperf's meter spend per streamed token, next to SGLang's own bench_serving?

Both clients stream the same work from the same server, each in a process of its own: N requests of
exactly ``--output-len`` tokens over the native ``/generate`` endpoint (``bench_serving --backend
sglang``), ``--concurrency`` in flight, greedy, ``ignore_eos``. The server is the emulator (plain and
MTP, at ``--rate`` tok/s per stream, 10x a real 27B's 70) and/or (``--servers``) a real SGLang
0.5.23 server on this CPU serving the tiny Qwen3 (variants ``plain`` and ``eagle3`` of
``deployments/tiny-cpu.toml``, launched as the suite launches them).

CPU time is ``time.process_time()`` of the client's process (all its threads) around its
measuring phase: the meter's ``measure()`` call, and bench_serving's ``benchmark()`` coroutine (a
wrapper replaces the module's function with one that times the original; nothing else changes).
Both phases hold a client's whole work for its requests: sending, receiving, parsing and its
statistics (bench_serving also re-tokenizes every output), but not the imports or the loading of a
tokenizer. Fixed costs inside the phase (bench_serving's warm-up request, the meter's final
``/server_info`` read) are cancelled by running each client twice, with ``--small`` and ``--large``
requests: CPU per token = (CPU of the large run - CPU of the small run) / (tokens of the large -
tokens of the small). ``--pairs`` such differences per client, the clients alternating; the table
shows their median and range, and the ratio of the medians (meter / bench_serving; <= 1 is the target).

The meter's accuracy at these rates is measured by ``bench/meter_overhead.py``. The meter runs its
rounds back to back without flushing the prefix cache (bench_serving never flushes), and its
per-round flush and ``/server_info`` read are not in the work.

Prints a markdown table headed by the command line; exits 1 if a ratio is above ``--target``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sglperf.runtime import server
from sglperf.sglang import bench_client, cpu_envs, envs
from sglperf.sglang.intents import Speculative
from sglperf.testing.emulator.config import CONFIG_ENV
from sglperf.testing.emulator.timing import expected_accept_length

if TYPE_CHECKING:  # mypy resolves the modules beside this script from the repository root
    from bench import _docs_table, tiny_cpu
else:  # `python bench/<script>.py` puts bench/ itself on the path
    import _docs_table
    import tiny_cpu

SGLANG_VERSION = tiny_cpu.SGLANG_VERSION
SPEC_STEPS, ACCEPT_PROB = 3, 0.7
SPEC_ARGV = tuple(
    arg
    for key, value in {
        "algorithm": "NEXTN",
        "num_steps": SPEC_STEPS,
        "num_draft_tokens": SPEC_STEPS + 1,
        "eagle_topk": 1,
    }.items()
    for arg in (Speculative.FLAGS[key], str(value))
)
# The meter as the suite runs it, in a process of its own: one round per `concurrency` requests.
METER_CLIENT = """
import json, sys, time
from pathlib import Path
from sglperf.measure.meter import measure
from sglperf.model.prompts import Message, Prompt, PromptSet
from sglperf.model.workload import Workload
url, requests, concurrency, output_len = sys.argv[1], *map(int, sys.argv[2:5])
prompts = tuple(
    Prompt(f"p{i}", (Message("user", f"Prompt {i}: describe a lighthouse at dusk."),)) for i in range(concurrency)
)
workload = Workload(
    id="cpu", prompts=Path("<generated>"), output_len=output_len, warmup=0, repeats=requests // concurrency,
    api="native", reuse_prefix_cache=True,
)
prompt_set = PromptSet("bench", Path("<generated>"), prompts, "generated")
started = time.process_time()
result = measure(url, workload, prompt_set, concurrency=concurrency)
cpu_s = time.process_time() - started
print(json.dumps({"tokens": sum(s.completion_tokens for s in result.samples), "cpu_s": cpu_s}))
"""
# bench_serving as `python -m <its module>` runs it, with its benchmark() phase timed.
BENCH_SERVING_CLIENT = """
import importlib, sys, time
sys.argv[0] = sys.argv.pop(1)
serving = importlib.import_module(sys.argv[0])
inner = serving.benchmark
async def benchmark(*args, **kwargs):
    started = time.process_time()
    try:
        return await inner(*args, **kwargs)
    finally:
        print("SGLPERF_PHASE_CPU_S", time.process_time() - started, flush=True)
serving.benchmark = benchmark
serving.cli_main()
"""


@dataclass(frozen=True)
class Target:
    """A running server and what the clients need to talk to it."""

    label: str
    url: str
    tokenizer: Path  # bench_serving needs one to make its random-ids prompts and count its outputs


@dataclass(frozen=True)
class Run:
    cpu_s: float
    tokens: int


@dataclass(frozen=True)
class Row:
    target: str
    client: str
    per_token_us: tuple[float, ...]  # one per pair of runs

    @property
    def median(self) -> float:
        return float(np.median(self.per_token_us))


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a client to its end and return its stdout; fails loudly if it failed."""
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    if proc.returncode != 0:
        client = f"{argv[0]} -c <client> {' '.join(argv[3:6])} ..."  # the script itself would bury the error
        raise RuntimeError(f"{client} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def run_meter(target: Target, requests: int, args: argparse.Namespace, tmp: Path) -> Run:
    argv = [sys.executable, "-c", METER_CLIENT, target.url, str(requests), str(args.concurrency), str(args.output_len)]
    record = json.loads(_run(argv, dict(os.environ), tmp).strip().splitlines()[-1])
    return Run(record["cpu_s"], record["tokens"])


def run_bench_serving(target: Target, requests: int, args: argparse.Namespace, tmp: Path) -> Run:
    result = tmp / f"bench-serving-{requests}.jsonl"
    result.unlink(missing_ok=True)
    argv = [
        args.sglang_python,
        "-c",
        BENCH_SERVING_CLIENT,
        args.bench_serving_module,
        "--backend",
        "sglang",
        "--base-url",
        target.url,
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        "32",
        "--random-output-len",
        str(args.output_len),
        "--random-range-ratio",
        "1",
        "--num-prompts",
        str(requests),
        "--max-concurrency",
        str(args.concurrency),
        "--request-rate",
        "inf",
        "--tokenizer",
        str(target.tokenizer),
        "--disable-tqdm",
        "--output-file",
        str(result),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = _run(argv, env, tmp)
    phase = [line.split()[1] for line in out.splitlines() if line.startswith("SGLPERF_PHASE_CPU_S ")]
    if len(phase) != 1:
        raise RuntimeError(f"bench_serving's benchmark() was not timed once (changed in this release?):\n{out[-1500:]}")
    record = json.loads(result.read_text().splitlines()[-1])
    if record.get("completed") != requests:
        raise RuntimeError(f"bench_serving completed {record.get('completed')} of {requests} requests:\n{out[-1500:]}")
    return Run(float(phase[0]), int(record["total_output_tokens"]))


CLIENTS = {"sglperf meter": run_meter, "bench_serving": run_bench_serving}


def measure_target(target: Target, args: argparse.Namespace) -> list[Row]:
    per_token: dict[str, list[float]] = {name: [] for name in CLIENTS}
    with tempfile.TemporaryDirectory() as tmp:
        for client in CLIENTS.values():  # once unmeasured: the first start compiles and caches files
            client(target, args.small, args, Path(tmp))
        for pair in range(args.pairs):
            for name, client in CLIENTS.items():
                small = client(target, args.small, args, Path(tmp))
                large = client(target, args.large, args, Path(tmp))
                value = (large.cpu_s - small.cpu_s) / (large.tokens - small.tokens) * 1e6
                per_token[name].append(value)
                print(f"  {target.label} pair {pair}: {name}: {value:.1f} us/token", file=sys.stderr)
    return [Row(target.label, name, tuple(per_token[name])) for name in CLIENTS]


@contextmanager
def emulator(spec: bool, rate: float, tokenizer: Path, log_dir: Path) -> Iterator[Target]:
    per_step = expected_accept_length(ACCEPT_PROB, SPEC_STEPS) if spec else 1.0
    config = {"startup_s": 0.1, "noise_cv": 0.0, "accept_prob": ACCEPT_PROB, "decode_step_s": per_step / rate}
    label = f"emulator, {'MTP' if spec else 'plain'}, {rate:g} tok/s per stream"
    spec_ = server.ServerSpec(
        name="emulator",
        python=sys.executable,
        argv=("--model-path", str(tokenizer), *(SPEC_ARGV if spec else ())),
        env={CONFIG_ENV: json.dumps(config)},
        log_path=log_dir / f"emulator-{int(spec)}.log",
        emulated=True,
    )
    running = server.launch(spec_)
    try:
        yield Target(label, running.base_url, tokenizer)
    finally:
        running.stop()


@contextmanager
def real_cpu_server(variant: str, models: Path, python: str, results: Path) -> Iterator[Target]:
    """The tiny-cpu deployment's variant, launched the way the suite launches it (preflight included)."""
    with tiny_cpu.running(tiny_cpu.deployment(), variant, python, results) as running:
        yield Target(
            f"real SGLang {SGLANG_VERSION} CPU server, tiny Qwen3, {variant}",
            running.server.base_url,
            models / "tiny-qwen3",
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=700.0, help="emulator decode tok/s per stream")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--small", type=int, default=16, help="requests in the short run of a pair")
    parser.add_argument("--large", type=int, default=144, help="requests in the long run of a pair")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--servers", default="emulator", help="emulator, real-cpu or both, comma-separated")
    parser.add_argument("--target", type=float, default=1.0, help="largest meter / bench_serving ratio allowed")
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    servers = set(args.servers.split(","))
    if not servers or servers - {"emulator", "real-cpu"}:
        parser.error("--servers takes emulator, real-cpu or both")
    if args.large % args.concurrency or args.small % args.concurrency:
        parser.error("--small and --large must be multiples of --concurrency (the meter runs whole rounds)")
    args.sglang_python = str(envs.ensure_env(SGLANG_VERSION).python)
    args.bench_serving_module = bench_client.bench_serving_module(args.sglang_python)
    cpu_python = str(cpu_envs.ensure_cpu_env(SGLANG_VERSION).python) if "real-cpu" in servers else None
    _, models = tiny_cpu.set_up(cpu_python or args.sglang_python)

    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as logs:
        for spec in (False, True) if "emulator" in servers else ():
            with emulator(spec, args.rate, models / "tiny-qwen3", Path(logs)) as target:
                rows += measure_target(target, args)
        if cpu_python is not None:
            for variant in ("plain", "eagle3"):
                with real_cpu_server(variant, models, cpu_python, Path(logs) / "results") as target:
                    rows += measure_target(target, args)

    command = _docs_table.command(__file__, argv)
    print(
        f"`{command}` ({os.cpu_count()} CPUs; {args.concurrency} streams, {args.output_len} tokens per request, "
        f"{args.small} and {args.large} requests per pair, {args.pairs} pairs)\n"
    )
    print("| server | client | CPU per token, median | range | meter / bench_serving |")
    print("|---|---|---:|---:|---:|")
    failed = []
    for meter_row, bench_row in zip(rows[::2], rows[1::2], strict=True):
        ratio = meter_row.median / bench_row.median
        for row in (meter_row, bench_row):
            lo, hi = min(row.per_token_us), max(row.per_token_us)
            cell = f"{ratio:.2f}" if row is meter_row else ""
            print(f"| {row.target} | {row.client} | {row.median:.1f} us | {lo:.1f}-{hi:.1f} | {cell} |")
        if ratio > args.target:
            failed.append(f"{meter_row.target}: ratio {ratio:.2f} > {args.target}")
    for line in failed:
        print(f"\nTARGET MISSED: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_docs_table.run_script(__file__, main))
