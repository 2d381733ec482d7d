"""decode tok/s = verify steps/s x tokens per step: the per-request identity, the failure line's split
into kernels and acceptance, and verify steps/s taking decode tok/s's floor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.baselines.regression import split_decode_change
from sglperf.measure.samples import Chunk, RequestSample, decode_tok_s
from sglperf.model.metrics import with_inherited_floors


@given(
    steps=st.lists(st.tuples(st.floats(1e-4, 1.0), st.integers(1, 8)), min_size=1, max_size=64),
    ttft=st.floats(1e-3, 10.0),
)
def test_decode_rate_is_verify_rate_times_tokens_per_step(steps: list[tuple[float, int]], ttft: float) -> None:
    """Chunk k after the first is verify step k; the first carries prefill's token."""
    chunks, t = [Chunk(ttft, 1)], ttft
    for gap, tokens in steps:
        t += gap
        chunks.append(Chunk(t, tokens))
    completion = sum(c.tokens for c in chunks)
    sample = RequestSample("p", 0, ttft, None, None, t, completion, tuple(chunks), len(steps), None, None)
    decode = decode_tok_s(sample.chunks)
    assert decode is not None and sample.verify_steps_s is not None
    assert decode == pytest.approx(sample.verify_steps_s * (completion - 1) / len(steps), rel=1e-9)


def test_without_speculative_decoding_there_is_no_verify_rate() -> None:
    chunks = (Chunk(0.1, 1), Chunk(0.2, 1), Chunk(0.3, 1))
    assert RequestSample("p", 0, 0.1, 10.0, 0.1, 0.3, 3, chunks, None, None, None).verify_steps_s is None


def _rounds(decode: float, steps: float, accept: float) -> dict[str, list[float]]:
    return {"decode_tok_s": [decode] * 3, "verify_steps_s": [steps] * 3, "accept_length": [accept] * 3}


@pytest.mark.parametrize(
    ("now", "cause"),
    [
        (
            _rounds(93.9, 30.0 * 0.94, 3.13 * 0.999),
            "-6.1%: verify steps/s -6.0%, accept length -0.1%: the kernels, not the drafter",
        ),
        (
            _rounds(90.0, 30.0, 3.0),
            "verify steps/s +0.0%, accept length -4.2%: acceptance (the drafter or the prompts), not the kernels",
        ),
        (_rounds(90.0, 29.0, 3.03), "verify steps/s -3.3%, accept length -3.2%: both the kernels and acceptance"),
    ],
)
def test_the_failure_line_says_which_half_moved(now: dict[str, list[float]], cause: str) -> None:
    split = split_decode_change(_rounds(100.0, 30.0, 3.13), now)
    assert split is not None and cause in split and split.startswith("decode_tok_s ")


def test_no_split_without_both_halves_on_both_sides() -> None:
    plain = {"decode_tok_s": [100.0, 101.0]}
    assert split_decode_change(plain, plain) is None
    assert split_decode_change(_rounds(1, 1, 1), {**_rounds(1, 1, 1), "verify_steps_s": []}) is None
    assert split_decode_change(_rounds(1, 0, 1), _rounds(1, 1, 1)) is None


@given(st.dictionaries(st.sampled_from(["decode_tok_s", "ttft_s", "verify_steps_s"]), st.floats(0.01, 0.9)))
def test_verify_steps_take_decodes_floor_unless_given(thresholds: dict[str, float]) -> None:
    out = with_inherited_floors(thresholds)
    assert {k: out[k] for k in thresholds} == thresholds  # what is set stays
    if "verify_steps_s" not in thresholds:
        assert out.get("verify_steps_s") == thresholds.get("decode_tok_s")
