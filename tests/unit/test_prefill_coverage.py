"""Prefill graph coverage: each workload's longest prompt (in tokens, or bounded by bytes), cut to the
chunked prefill size, held against the captured token sizes; the request spelled per release; the
measured rounds' eager prefill lines split at the largest captured size."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from sglperf.judge import batch_evidence, coverage, live_evidence
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import load
from sglperf.model.graph_coverage import CapturedSizes, WorkloadPrefill, graph_needs
from sglperf.model.intent_names import PREFILL_CUDA_GRAPH
from sglperf.model.prompts import TEMPLATE_TOKENS_PER_MESSAGE, Message, Prompt, load_prompts
from sglperf.model.resolution import EffectiveArgs, Write
from sglperf.model.server_facts import ServerFacts
from sglperf.model.verdict import Status, Verdict
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.flags import launch_plan
from sglperf.sglang.intents import PREFILL_GRAPH

from ..support.project import ROOT, one_24gb_gpu_deployment

# 0.5.23's Llama-2 rule (memory_hook.py), as its probe records the write.
LLAMA2_WRITE = Write(
    field="cuda_graph_config.prefill.max_bs",
    new=4096,
    rule="handle_gpu_memory_settings",
    where="memory_hook.py:261",
    code="prefill_cuda_graph_config.max_bs = min(",
    comment="For Llama2 series models, max_bs is limited to 4096.",
    conditions=('if "llama-2" in cfg.model_path.lower()',),
)
SIZES_4096 = [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]

WORKLOADS = """
[[workloads]]
id = "long"
synthetic = { kind = "random", count = 4, input_len = 6000 }
output_len = 16

[[workloads]]
id = "rag"
synthetic = { kind = "shared-prefix", prefixes = 2, suffixes = 2, prefix_len = 9000, input_len = 300 }
output_len = 16
"""
CHAT = """
[[workloads]]
id = "chat"
prompts = "chat.jsonl"
max_prompts = 3
output_len = 16
"""


def _project(tmp_path: Path, workloads: str, variants: str = '[[variants]]\nid = "defaults"\n') -> Deployment:
    (tmp_path / "config.json").write_text((ROOT / "models" / "tiny-qwen3" / "config.json").read_text())
    shutil.copy(ROOT / "data" / "prompts" / "chat.jsonl", tmp_path / "chat.jsonl")
    path = tmp_path / "cov.toml"
    path.write_text(one_24gb_gpu_deployment("config.json", variants + workloads))
    return load(path)


def _verdict() -> Verdict:
    return Verdict("cov", "defaults", PREFILL_CUDA_GRAPH, "on", "on", Status.PASS, "read", "0.5.23")


def _args(sizes: list[int], chunk: int = 8192) -> EffectiveArgs:
    prefill = {"backend": "breakable", "max_bs": max(sizes), "bs": sizes}
    return EffectiveArgs(
        {"cuda_graph_config": {"prefill": prefill}, "chunked_prefill_size": chunk}, writes=(LLAMA2_WRITE,)
    )


def test_a_prompt_file_is_bounded_by_its_bytes_and_template() -> None:
    prompt = Prompt("p", (Message("system", "be brief"), Message("user", "héllo")))
    assert prompt.token_bound == len(b"be brief") + len("héllo".encode()) + 2 * TEMPLATE_TOKENS_PER_MESSAGE


def test_workload_prefills_synthetic_in_tokens_and_files_in_bytes(tmp_path: Path) -> None:
    needs = {n.workload: n for n in graph_needs(_project(tmp_path, WORKLOADS + CHAT)).prefills}
    assert needs["long"] == WorkloadPrefill("long", 6000, True, "random prompts of up to 6000 tokens")
    # A cached prefix is not prefilled again: the suffix is what a steady round computes.
    assert needs["rag"].tokens == 300 and needs["rag"].exact
    chat = load_prompts(tmp_path / "chat.jsonl").prompts[:3]
    assert needs["chat"].tokens == max(p.token_bound for p in chat) and not needs["chat"].exact


def test_an_exact_prefill_above_the_captured_size_fails_quoting_the_rule(tmp_path: Path) -> None:
    deployment = _project(tmp_path, WORKLOADS)
    args = _args(SIZES_4096)
    verdict = coverage.judge_prefill_coverage(
        _verdict(),
        coverage.captured_in_args(args, PREFILL_GRAPH),
        coverage.prefill_needs(deployment, args.fields),
        how_to_raise="raise it",
    )
    assert verdict.status == Status.FAIL and verdict.actual == "on, up to 4096 tokens: eager above"
    line = verdict.detail.splitlines()[-1].strip()
    assert line.startswith(
        "long's prefills of 6000 tokens (random prompts of up to 6000 tokens) run eager: SGLang 0.5.23 captures the "
        "prefill graph up to 4096 tokens, set by handle_gpu_memory_settings (memory_hook.py:261)"
    ), line
    assert "Llama2" in line and line.endswith("; raise it")
    assert "rag" not in verdict.detail  # 300 tokens are covered


def test_the_chunked_prefill_size_bounds_every_prefill(tmp_path: Path) -> None:
    deployment = _project(tmp_path, WORKLOADS)
    args = _args(SIZES_4096, chunk=4096)
    needs = coverage.prefill_needs(deployment, args.fields)
    assert needs[0].tokens == 4096 and needs[0].how.endswith("prefilled in chunks of chunked_prefill_size = 4096")
    verdict = coverage.judge_prefill_coverage(_verdict(), coverage.captured_in_args(args, PREFILL_GRAPH), needs)
    assert verdict.status == Status.PASS and verdict.actual == "on, up to 4096 tokens"


def test_a_byte_bound_above_the_size_is_unproven_not_passed(tmp_path: Path) -> None:
    deployment = _project(tmp_path, CHAT)
    args = _args([4, 8, 16])
    verdict = coverage.judge_prefill_coverage(
        _verdict(), coverage.captured_in_args(args, PREFILL_GRAPH), coverage.prefill_needs(deployment, args.fields)
    )
    assert verdict.status == Status.UNPROVEN and not verdict.status.failed
    assert "chat's prefills of up to" in verdict.detail and "may run eager" in verdict.detail


def test_off_or_unknown_sizes_are_left_alone(tmp_path: Path) -> None:
    deployment = _project(tmp_path, WORKLOADS)
    needs = coverage.prefill_needs(deployment, {})
    off = Verdict("cov", "defaults", PREFILL_CUDA_GRAPH, "off", "off", Status.PASS, "", "0.5.23")
    captured = CapturedSizes((4, 8), "cuda_graph_config.prefill.bs", Write("cuda_graph_config.prefill.max_bs", 8, "r"))
    assert coverage.judge_prefill_coverage(off, captured, needs) == off
    assert coverage.judge_prefill_coverage(_verdict(), None, needs) == _verdict()


def _parser(version: str, *flags: str, **options: Option) -> ParserInfo:
    known = dict.fromkeys(flags, Option(dest="x")) | {"--tp-size": Option(dest="tp_size")}
    return ParserInfo(version, known | {f"--{k.replace('_', '-')}": o for k, o in options.items()})


@given(st.integers(min_value=1, max_value=200_000))
def test_a_raised_size_is_one_sglang_captures_and_covers_the_need(tokens: int) -> None:
    flag, value = PREFILL_GRAPH.coverage_flags(tokens, _parser("0.5.23", "--cuda-graph-max-bs-prefill"))
    assert flag == "--cuda-graph-max-bs-prefill"
    assert tokens <= int(value) < tokens + PREFILL_GRAPH.CAPTURE_STEP and int(value) % PREFILL_GRAPH.CAPTURE_STEP == 0


def test_the_request_spells_the_size_per_release_and_only_for_tokens_it_knows(tmp_path: Path) -> None:
    variants = '[[variants]]\nid = "asked"\nrequest = { prefill_cuda_graph = true }\n'
    old = _parser("0.5.13", "--enforce-piecewise-cuda-graph", "--piecewise-cuda-graph-max-tokens")
    new = _parser(
        "0.5.23",
        "--cuda-graph-max-bs-prefill",
        cuda_graph_backend_prefill=Option(dest="x", choices=("breakable", "disabled")),
    )
    architectures = ("Qwen3ForCausalLM",)
    deployment = _project(tmp_path, WORKLOADS, variants)
    plan = launch_plan(deployment, deployment.variants[0], new, str(tmp_path), architectures)
    assert plan.argv[-2:] == ("--cuda-graph-max-bs-prefill", "6144")
    plan = launch_plan(deployment, deployment.variants[0], old, str(tmp_path), architectures)
    assert plan.argv[-2:] == ("--piecewise-cuda-graph-max-tokens", "6144")
    # A prompt file is known in bytes only: SGLang's own size stands.
    (tmp_path / "mixed").mkdir()
    mixed = _project(tmp_path / "mixed", WORKLOADS + CHAT, variants)
    plan = launch_plan(mixed, mixed.variants[0], new, str(tmp_path), architectures)
    assert "--cuda-graph-max-bs-prefill" not in plan.argv


def _prefill_line(new_seq: int, tokens: int, graph: bool) -> str:
    return (
        f"[2026-12-05] Prefill batch, #new-seq: {new_seq}, #new-token: {tokens}, #cached-token: 0, token usage: 0.01, "
        f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: {graph}, input throughput (token/s): 9.0"
    )


def test_eager_prefill_lines_fail_on_both_sides_of_the_largest_captured_size() -> None:
    log = "\n".join(
        [
            _prefill_line(1, 300, True),
            _prefill_line(1, 900, False),
            _prefill_line(1, 6000, False),
            _prefill_line(8, 7000, False),  # a round's ramp: several prompts together, not one
        ]
    )
    evidence = batch_evidence.collect("s.log", {0: log}, 40)
    assert evidence.eager_prefill_tokens == {900: 1, 6000: 1}
    problems, _ = batch_evidence.judge(evidence, {PREFILL_CUDA_GRAPH: True}, (), SIZES_4096)
    covered, above = problems
    assert covered.startswith(
        "prefill_cuda_graph: 1 of the 4 prefill batches logged in 1 measured rounds ran eager at token sizes the graph "
        "was captured for (tokens 900; captured up to 4096): SGLang logged 'Prefill batch, #new-seq: 1, #new-token: 900"
    ), covered
    assert above.startswith(
        "prefill_cuda_graph: 1 of the 4 prefill batches logged in 1 measured rounds ran eager above the largest "
        "captured token size 4096 (tokens 6000): SGLang logged 'Prefill batch, #new-seq: 1, #new-token: 6000"
    ), above
    assert "a prompt longer than the graph's sizes prefills eager" in above
    # Sizes not known: the share is a note, as before.
    problems, notes = batch_evidence.judge(evidence, {PREFILL_CUDA_GRAPH: True})
    assert not problems and any("prefill_cuda_graph: 1 of the 4 prefill batches" in n for n in notes)


def test_the_live_server_args_are_held_against_the_same_prompts(tmp_path: Path) -> None:
    deployment = _project(tmp_path, WORKLOADS)
    fields: dict[str, Any] = {
        "cuda_graph_config": {"prefill": {"backend": "breakable", "bs": SIZES_4096}},
        "chunked_prefill_size": 8192,
    }
    wanted = live_evidence.LiveCoverage((), None, coverage.prefill_needs(deployment, fields), None)
    facts = ServerFacts("http://127.0.0.1:1", "0.5.23", fields, (), {}, emulated=False)
    verdict = live_evidence._prefill_coverage(_verdict(), facts, wanted)
    assert verdict.status == Status.FAIL and verdict.actual == "on, up to 4096 tokens: eager above"
    assert "read from /server_info cuda_graph_config.prefill.bs" in verdict.detail
