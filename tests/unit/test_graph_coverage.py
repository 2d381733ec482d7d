"""Decode graph coverage: captured sizes held against the workloads' batches, the rule quoted, the request
spelled per release, and the measured rounds' eager lines split at the largest captured batch."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sglperf.judge import batch_evidence, coverage
from sglperf.judge.intent import judge
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.graph_coverage import CapturedSizes, WorkloadBatch, graph_needs
from sglperf.model.intent_names import DECODE_CUDA_GRAPH
from sglperf.model.resolution import EffectiveArgs, Write
from sglperf.model.verdict import Status, Verdict
from sglperf.preflight import probe
from sglperf.sglang.argv import Option, ParsedArgv, ParserInfo
from sglperf.sglang.flags import launch_plan
from sglperf.sglang.intents import DECODE_GRAPH

from ..support.project import ROOT, one_24gb_gpu_deployment

# 0.5.19's generate_decode_cuda_graph_batch_sizes without speculative decoding, max_bs 24.
SIZES_24 = [1, 2, 4, 8, 12, 16, 24]
# What 0.5.19's probe records on a 24 GB GPU at TP 1 (the phase tracer's write, then the generated list).
CAP_WRITE = Write(
    field="cuda_graph_config.decode.max_bs",
    new=24,
    rule="handle_gpu_memory_settings",
    where="memory_hook.py:85",
    code="decode_cuda_graph_config.max_bs = 24",
    comment="A10, 4090, 5090 (chunked_prefill_size 2k, max_bs 24 if tp < 4 else 80)",
    conditions=(
        "if gpu_mem is not None",
        "elif gpu_mem < 35 * 1024",
        "if decode_cuda_graph_config.max_bs is None",
        "if cfg.tp_size < 4",
    ),
)
LIST_WRITE = Write(
    field="cuda_graph_config.decode.bs",
    new=SIZES_24,
    rule="handle_gpu_memory_settings",
    where="memory_hook.py:155",
    code="decode_cuda_graph_config.bs = generate_decode_cuda_graph_batch_sizes(",
)


def _args(sizes: list[int], writes: tuple[Write, ...] = (CAP_WRITE, LIST_WRITE), **fields: Any) -> EffectiveArgs:
    decode = {"backend": "full", "max_bs": max(sizes), "bs": sizes}
    return EffectiveArgs({"cuda_graph_config": {"decode": decode}, **fields}, writes=writes)


def _project(tmp_path: Path, workloads: str, variants: str = '[[variants]]\nid = "defaults"\n') -> Deployment:
    (tmp_path / "config.json").write_text((ROOT / "models" / "tiny-qwen3" / "config.json").read_text())
    shutil.copy(ROOT / "data" / "prompts" / "chat.jsonl", tmp_path / "chat.jsonl")
    path = tmp_path / "cov.toml"
    path.write_text(one_24gb_gpu_deployment("config.json", variants + workloads))
    return load(path)


CHAT_32 = """
[[workloads]]
id = "chat"
prompts = "chat.jsonl"
output_len = 64
concurrency = [1, 32]

[[workloads]]
id = "at-rate"
prompts = "chat.jsonl"
output_len = 64
rate = 2.0
requests = 16  # enough to reach the cap (11 prompts, taken in turn): fewer is refused at load
max_concurrency = 16

[[workloads]]
id = "unbounded"
prompts = "chat.jsonl"
output_len = 64
rate = 2.0
"""


def _decode_verdict(args: EffectiveArgs, version: str = "0.5.19") -> Verdict:
    return judge("tiny", "defaults", DECODE_GRAPH, True, args, version)


def test_a_workload_above_the_captured_sizes_fails_naming_cap_rule_workload_and_the_request(tmp_path: Path) -> None:
    deployment = _project(tmp_path, CHAT_32)
    args = _args(SIZES_24)
    batches = coverage.workload_batches(deployment, args.fields)
    # An open loop without max_concurrency bounds nothing: there is no batch to hold the graph against.
    assert [(b.workload, b.batch) for b in batches] == [("chat", 1), ("chat", 32), ("at-rate", 16)]
    captured = coverage.captured_in_args(args)
    assert captured is not None and captured.largest == 24 and captured.rule is not None
    assert captured.rule.where == "memory_hook.py:85"  # the cap, not the line that generated the list
    verdict = coverage.judge_coverage(
        _decode_verdict(args), captured, batches, how_to_raise="raise it: request = { decode_cuda_graph = true }"
    )
    assert verdict.status == Status.FAIL and verdict.actual == "on, up to batch 24: eager above"
    (line,) = verdict.detail.splitlines()[1:]
    assert line.strip() == (
        "chat at concurrency 32 decodes eager: SGLang 0.5.19 captures the decode graph up to batch 24, below the "
        "workload's 32, set by handle_gpu_memory_settings (memory_hook.py:85), under `if gpu_mem is not None` and "
        '`elif gpu_mem < 35 * 1024` and `if cfg.tp_size < 4`, "A10, 4090, 5090 (chunked_prefill_size 2k, max_bs 24 '
        'if tp < 4 else 80)"; raise it: request = { decode_cuda_graph = true }'
    )
    assert "Status.FAIL" not in verdict.message() and "chat at concurrency 32" in verdict.message()


def test_covered_workloads_pass_with_the_size_shown_and_max_running_requests_bounds_the_batch(tmp_path: Path) -> None:
    deployment = _project(tmp_path, CHAT_32)
    sizes = [*SIZES_24, 32]
    args = _args(sizes, writes=())
    verdict = coverage.judge_coverage(
        _decode_verdict(args), coverage.captured_in_args(args), coverage.workload_batches(deployment, {})
    )
    assert verdict.status == Status.PASS and verdict.actual == "on, up to batch 32"
    # SGLang bounds the decode batch by max_running_requests whatever the load (it resets it for MTP).
    bounded = _args(SIZES_24, max_running_requests=20)
    batches = coverage.workload_batches(deployment, bounded.fields)
    assert WorkloadBatch("chat", "concurrency 32", 20, "max_running_requests = 20") in batches
    verdict = coverage.judge_coverage(_decode_verdict(bounded), coverage.captured_in_args(bounded), batches)
    assert verdict.status == Status.PASS and verdict.actual == "on, up to batch 24"


def test_an_off_graph_or_unknown_sizes_leave_the_verdict_alone(tmp_path: Path) -> None:
    deployment = _project(tmp_path, CHAT_32)
    off = EffectiveArgs({"cuda_graph_config": {"decode": {"backend": "disabled", "bs": SIZES_24}}})
    verdict = judge("tiny", "defaults", DECODE_GRAPH, False, off, "0.5.19")
    assert coverage.judge_coverage(
        verdict, coverage.captured_in_args(off), coverage.workload_batches(deployment, {})
    ) == (verdict)
    unknown = EffectiveArgs({"cuda_graph_config": {"decode": {"backend": "full", "bs": None}}})
    assert coverage.captured_in_args(unknown) is None


@given(
    sizes=st.lists(st.integers(1, 512), min_size=1, max_size=20),
    batches=st.lists(st.integers(1, 600), max_size=6),
)
def test_the_verdict_fails_exactly_when_a_batch_outgrows_the_largest_size(sizes: list[int], batches: list[int]) -> None:
    args = _args(sizes, writes=())
    needs = [WorkloadBatch(f"w{i}", f"concurrency {b}", b) for i, b in enumerate(batches)]
    verdict = coverage.judge_coverage(_decode_verdict(args), coverage.captured_in_args(args), needs)
    over = [b for b in batches if b > max(sizes)]
    assert (verdict.status == Status.FAIL) == bool(over)
    assert len(verdict.detail.splitlines()) == 1 + len(over)
    assert verdict.actual is not None and f"up to batch {max(sizes)}" in verdict.actual


def test_the_rule_falls_back_to_the_releases_own_record_and_describes_in_one_line() -> None:
    declared = Write(
        field="cuda_graph_config",
        new={"decode": {"backend": "full", "bs": SIZES_24, "max_bs": 24}},
        rule="_handle_gpu_memory_settings",
    )
    rule = coverage.capture_rule(_args(SIZES_24, writes=(declared,)), 24)
    assert rule == declared
    # A value the release declared (no line) after the traced statement: the statement is quoted.
    cpu_cap = Write(field="torch_compile_max_bs", new=24, rule="_handle_gpu_memory_settings")
    rule = coverage.capture_rule(_args(SIZES_24, writes=(CAP_WRITE, LIST_WRITE, cpu_cap)), 24)
    assert rule is not None and rule.where == "memory_hook.py:85"
    assert coverage.capture_rule(_args(SIZES_24, writes=()), 24) is None
    long = Write("cuda_graph_max_bs", 24, "r", "f.py:1", comment="word " * 100, conditions=("else",))
    text = long.describe()
    assert text.startswith('r (f.py:1), "word') and text.endswith(' ..."') and len(text) < 200


def _parser(version: str, *flags: str) -> ParserInfo:
    return ParserInfo(version, dict.fromkeys(flags, Option(dest="x")) | {"--tp-size": Option(dest="tp_size")})


def test_a_request_for_the_decode_graph_captures_up_to_the_workloads_largest_batch(tmp_path: Path) -> None:
    asking = '[[variants]]\nid = "covered"\nrequest = { decode_cuda_graph = true }\n'
    deployment = _project(tmp_path, CHAT_32, asking)
    assert graph_needs(deployment).largest_in_flight() == 32
    variant = deployment.variant("covered")
    per_phase = _parser("0.5.20", "--cuda-graph-max-bs-decode")
    argv = launch_plan(deployment, variant, per_phase, "/m", ()).argv
    assert argv[-2:] == ("--cuda-graph-max-bs-decode", "32")
    older = _parser("0.5.13", "--cuda-graph-max-bs")
    assert launch_plan(deployment, variant, older, "/m", ()).argv[-2:] == ("--cuda-graph-max-bs", "32")
    assert DECODE_GRAPH.coverage_flags(8, _parser("0.5.23", "--torch-compile-max-bs"), cpu=True) == [
        "--torch-compile-max-bs",
        "8",
    ]
    # The variant's own sizes win: nothing is added, and the failure names them.
    own = (
        '[[variants]]\nid = "own"\nrequest = { decode_cuda_graph = true }\n'
        'flags = ["--cuda-graph-bs-decode", "1", "2"]\n'
    )
    deployment = _project(tmp_path, CHAT_32, own)
    parser = _parser("0.5.20", "--cuda-graph-max-bs-decode", "--cuda-graph-bs-decode")
    argv = launch_plan(deployment, deployment.variant("own"), parser, "/m", ()).argv
    assert "--cuda-graph-max-bs-decode" not in argv
    assert DECODE_GRAPH.own_size_flags(ParsedArgv(argv, parser)) == "--cuda-graph-bs-decode 1 2"


def test_the_probe_finds_the_branch_and_comment_above_a_size_rule(tmp_path: Path) -> None:
    source = tmp_path / "memory_hook.py"
    source.write_text(
        textwrap.dedent(
            """\
            def handle_gpu_memory_settings(cfg, gpu_mem, decode):
                if gpu_mem is not None:
                    if gpu_mem < 20 * 1024:
                        # T4, 4080
                        decode.max_bs = 8
                    elif gpu_mem < 35 * 1024:
                        # A10, 4090, 5090
                        # (chunked_prefill_size 2k, max_bs 24 if tp < 4 else 80)
                        if cfg.chunked_prefill_size is None:
                            declare(
                                cfg,
                                chunked_prefill_size=2048,
                            )
                        if (
                            decode.max_bs is None
                        ):
                            if cfg.tp_size < 4:
                                decode.max_bs = 24
            """
        )
    )
    lineno = next(i for i, ln in enumerate(source.read_text().splitlines(), 1) if "max_bs = 24" in ln)
    conditions, comment = probe._branch_context(str(source), lineno)
    assert conditions == [
        "if gpu_mem is not None",
        "elif gpu_mem < 35 * 1024",
        "if (decode.max_bs is None)",
        "if cfg.tp_size < 4",
    ]
    assert comment == "A10, 4090, 5090 (chunked_prefill_size 2k, max_bs 24 if tp < 4 else 80)"


def _decode_line(running: int, graph: bool) -> str:
    return (
        f"[2026-12-05] Decode batch, #running-req: {running}, #token: 80, token usage: 0.00, cpu graph: {graph}, "
        "gen throughput (token/s): 9.0, #queue-req: 0"
    )


def test_eager_decode_lines_fail_on_both_sides_of_the_largest_captured_batch() -> None:
    log = "\n".join([_decode_line(1, True), _decode_line(2, False), _decode_line(4, False), _decode_line(4, False)])
    evidence = batch_evidence.collect("s.log", {0: log}, 40)
    assert evidence.eager_decode_batches == {2: 1, 4: 2}
    problems, _ = batch_evidence.judge(evidence, {DECODE_CUDA_GRAPH: True}, (1, 2))
    covered, above = problems
    assert covered.startswith(
        "decode_cuda_graph: 1 of the 4 decode batches logged in 1 measured rounds ran eager at batches the graph was "
        "captured for (batch 2; captured up to 2): SGLang logged 'Decode batch, #running-req: 2,"
    )
    assert above.startswith(
        "decode_cuda_graph: 2 of the 4 decode batches logged in 1 measured rounds ran eager above the largest "
        "captured batch 2 (batch 4): SGLang logged 'Decode batch, #running-req: 4,"
    )
    # Every eager batch above the sizes, none below: one failure, the one preflight predicts.
    problems, _ = batch_evidence.judge(evidence, {DECODE_CUDA_GRAPH: True}, (1,))
    assert len(problems) == 1 and "ran eager above the largest captured batch 1 (batch 2, 4)" in problems[0]
    # Sizes not known: the share is a note, as before.
    problems, notes = batch_evidence.judge(evidence, {DECODE_CUDA_GRAPH: True})
    assert not problems and any("decode_cuda_graph: 1 of the 4 decode batches" in n for n in notes)


def test_captured_sizes_read_both_eras() -> None:
    assert DECODE_GRAPH.captured_sizes({"cuda_graph_bs": [4, 1, 2]}) == ((1, 2, 4), "cuda_graph_bs")
    assert DECODE_GRAPH.captured_sizes({"cuda_graph_config": {"decode": {"bs": [1, 8]}}}) == (
        (1, 8),
        "cuda_graph_config.decode.bs",
    )
    assert DECODE_GRAPH.captured_sizes({"cuda_graph_bs": []}) is None
    assert CapturedSizes((1, 2), "x").covers(2) and not CapturedSizes((1, 2), "x").covers(3)
