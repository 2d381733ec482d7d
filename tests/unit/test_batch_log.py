"""SGLang's batch log lines: the parser against lines recorded from real SGLang 0.5.23 CPU servers
(tests/data, so it runs on every CPU), the emulator's lines round-tripped, and the judge's verdicts."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sglperf.judge import batch_evidence
from sglperf.model.batch_evidence import BatchEvidence
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, PREFILL_CUDA_GRAPH
from sglperf.sglang.batch_log import decode_log_interval_for, parse_batch_line, parse_batch_lines
from sglperf.testing.emulator.console import decode_batch_line, prefill_batch_line

RECORDED = Path(__file__).resolve().parent.parent / "data" / "sglang-0.5.23-cpu-batch-lines.log"


def recorded() -> dict[str, str]:
    """Variant -> its recorded log lines."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in RECORDED.read_text().splitlines():
        if line.startswith("## "):
            current = line[3:]
            out[current] = []
        elif current and not line.startswith("#"):
            out[current].append(line)
    return {variant: "\n".join(lines) for variant, lines in out.items()}


def test_real_lines_say_which_batches_ran_the_cpu_graph() -> None:
    logs = recorded()
    assert set(logs) == {"plain", "torch-compile", "eagle3"}
    for variant, text in logs.items():
        lines = parse_batch_lines(text)
        decode = [b for b in lines if b.kind == "decode"]
        prefill = [b for b in lines if b.kind == "prefill"]
        assert len(decode) == 4 and len(prefill) == 6, variant  # the Uvicorn line is not a batch
        assert {b.graph_label for b in lines} == {"cpu graph"}
        assert all(b.graph is False for b in prefill)  # SGLang has no prefill graph on the CPU
        assert all(b.graph is (variant == "torch-compile") for b in decode), variant
        assert all(b.running_req == 1 and b.queue_req == 0 for b in decode)
        assert all((b.accept_len == 1.0) if variant == "eagle3" else (b.accept_len is None) for b in decode)
        assert decode[0].text.startswith("Decode batch, #running-req: 1, #token: ")


def test_other_lines_and_a_release_without_the_graph_field() -> None:
    assert parse_batch_line("[2026-12-02 11:52:46] INFO:     Uvicorn running on http://127.0.0.1:37055") is None
    assert parse_batch_line("Load weight begin. avail mem=1.00 GB") is None
    old = parse_batch_line(
        "[2026-12-02 11:52:50 TP0] Decode batch, #running-req: 3, #token: 80, gen throughput (token/s): 8.69"
    )
    assert old is not None and old.graph is None and old.graph_label is None and old.running_req == 3
    iters = parse_batch_line("[x] Decode batch [1234], #running-req: 2, cuda graph: True, #queue-req: 5")
    assert iters is not None and iters.graph is True and iters.queue_req == 5


@given(
    running=st.integers(0, 4096),
    tokens=st.integers(0, 10**7),
    accept=st.none() | st.tuples(st.floats(1, 16), st.floats(0, 1)),
    label=st.sampled_from(["cuda graph", "cpu graph", "npu graph"]),
    graph=st.booleans(),
    tok_s=st.floats(0, 1e6),
)
def test_emulator_decode_lines_parse_back(
    running: int, tokens: int, accept: tuple[float, float] | None, label: str, graph: bool, tok_s: float
) -> None:
    line = parse_batch_line(
        "[2026-12-02 11:52:50 TP0] " + decode_batch_line(running, tokens, accept, label, graph, tok_s)
    )
    assert line is not None and line.kind == "decode"
    assert (line.running_req, line.queue_req, line.graph, line.graph_label) == (running, 0, graph, label)
    assert line.accept_len == (None if accept is None else round(accept[0], 2))


def test_emulator_lines_have_the_real_fields_in_order() -> None:
    real = {b.kind: b.fields for b in parse_batch_lines(recorded()["plain"])}
    real_spec = next(b.fields for b in parse_batch_lines(recorded()["eagle3"]) if b.kind == "decode")
    emulated = {
        "prefill": parse_batch_line(prefill_batch_line(20, 0, "cpu graph", False, 18.6)),
        "decode": parse_batch_line(decode_batch_line(1, 80, None, "cpu graph", False, 8.7)),
        "spec": parse_batch_line(decode_batch_line(1, 84, (1.0, 0.0), "cpu graph", False, 10.3)),
    }
    assert {k: v.fields for k, v in emulated.items() if v} == {
        "prefill": real["prefill"],
        "decode": real["decode"],
        "spec": real_spec,
    }


@given(output=st.integers(1, 100_000), per_step=st.integers(1, 16))
def test_every_request_of_the_shortest_output_logs_decode_lines(output: int, per_step: int) -> None:
    interval = decode_log_interval_for(output, per_step)
    assert 1 <= interval <= 40
    if interval > 1:  # as many lines as wanted, unless every step is already logged
        assert output // per_step // interval >= 4


def _evidence(variant: str) -> BatchEvidence:
    return batch_evidence.collect("server.log", {0: recorded()[variant]}, 40)


def test_graph_expected_on_where_the_real_log_says_eager_fails_quoting_it() -> None:
    problems, _ = batch_evidence.judge(_evidence("plain"), {DECODE_CUDA_GRAPH: True, PREFILL_CUDA_GRAPH: False})
    (problem,) = problems
    assert problem.startswith("decode_cuda_graph expected on, but none of the 4 decode batches logged in 1 measured")
    assert "'Decode batch, #running-req: 1, #token: 80, token usage: 0.00, cpu graph: False," in problem


def test_the_real_logs_pass_their_own_expectations() -> None:
    for variant, decode in (("plain", False), ("torch-compile", True), ("eagle3", False)):
        problems, notes = batch_evidence.judge(
            _evidence(variant), {DECODE_CUDA_GRAPH: decode, PREFILL_CUDA_GRAPH: False}
        )
        assert not problems and not notes, (variant, problems, notes)
    problems, _ = batch_evidence.judge(_evidence("torch-compile"), {DECODE_CUDA_GRAPH: False})
    assert (
        problems and "expected off, but 4 of the 4 decode batches" in problems[0] and "cpu graph: True" in problems[0]
    )


def test_a_partial_share_is_a_note_and_no_lines_prove_nothing() -> None:
    mixed = recorded()["plain"] + "\n" + recorded()["torch-compile"]
    problems, notes = batch_evidence.judge(batch_evidence.collect("s.log", {0: mixed}, 40), {DECODE_CUDA_GRAPH: True})
    (note,) = notes
    assert not problems and "decode_cuda_graph: 4 of the 8 decode batches" in note and "cpu graph: False" in note
    problems, notes = batch_evidence.judge(
        batch_evidence.collect("s.log", {0: "", 1: "x"}, 40), {DECODE_CUDA_GRAPH: True}
    )
    assert not problems and notes == ["s.log: no batch lines in the measured rounds: whether a graph ran is not proven"]
