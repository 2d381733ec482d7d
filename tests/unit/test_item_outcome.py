"""A failed item's line in report.md: the item's own failure, never a pytest object's repr."""

from __future__ import annotations

import pytest

from sglperf.model.item_outcome import MAX_REASON_CHARS, ItemOutcome, fit_reason

pytestmark = pytest.mark.selftest

NODE = "deployments/gemma-3-12b-it.toml::defaults::gemma-3-12b-it-defaults-decode-chat-c1"
FRAME = """cls = <class '_pytest.runner.CallInfo'>
func = <function call_and_report.<locals>.<lambda> at 0x7f9915fe00e0>
when = 'call'

    @classmethod
    def from_call(
"""
ENDING = """
>           raise ValueError(f"config.json: model_type {model_type!r} is not supported")
E           ValueError: config.json: model_type 'gemma3' is not supported

src/sglperf/model/checkpoint.py:161: ValueError"""


def test_a_long_traceback_keeps_its_message_and_the_line_is_the_exceptions() -> None:
    traceback = FRAME + "    x = 1\n" * 1000 + ENDING
    kept = fit_reason(traceback)
    assert len(kept) == MAX_REASON_CHARS and kept.startswith("cls = <class") and kept.endswith(ENDING)
    outcome = ItemOutcome(NODE, "call", kept, 0.2)
    assert outcome.headline == "ValueError: config.json: model_type 'gemma3' is not supported"


def test_the_exceptions_own_message_wins_and_round_trips() -> None:
    outcome = ItemOutcome(NODE, "setup", FRAME, 0.2, "ServerStartError: the emulator cannot size\n  more")
    assert outcome.headline == "ServerStartError: the emulator cannot size"
    assert ItemOutcome.from_record(outcome.to_record()) == outcome
    assert "message" not in ItemOutcome(NODE, "call", "E boom", 0.1).to_record()  # older readers see no change
    with pytest.raises(TypeError):
        ItemOutcome.from_record({**outcome.to_record(), "message": 3})


def test_a_record_that_kept_only_a_tracebacks_start_never_shows_its_frame() -> None:
    """The issue's report.md: `cls = <class '_pytest.runner.CallInfo'>` was the item's only reason."""
    old = ItemOutcome(NODE, "call", FRAME + "    x = 1\n" * 1000, 0.2)
    assert "cls =" not in old.headline and "the pytest output" in old.headline
    with_entry = ItemOutcome(NODE, "call", FRAME + "\nsrc/sglperf/x.py:3: ValueError\n" + "    x\n" * 900, 0.2)
    assert with_entry.headline.startswith("ValueError at src/sglperf/x.py:3; its message is in the pytest output")


def test_an_item_that_words_its_failure_is_read_past_its_name() -> None:
    reason = "qwen36-mtp3-defaults-decode-chat-c1:\n  decode_tok_s regressed: 846.3 tok/s -> 736 tok/s (-13.0%)\n"
    outcome = ItemOutcome(
        "deployments/qwen36.toml::mtp3-defaults::qwen36-mtp3-defaults-decode-chat-c1", "call", reason, 5
    )
    assert outcome.headline == "decode_tok_s regressed: 846.3 tok/s -> 736 tok/s (-13.0%)"
    assert ItemOutcome("t.py::test_x", "call", "host stayed busy", 1).headline == "host stayed busy"
    assert ItemOutcome("t.py::test_x", "call", "\n\n", 1).headline == "(no message)"
