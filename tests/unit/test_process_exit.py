from __future__ import annotations

import signal

import pytest

from sglperf.model.process_exit import describe_exit


def test_an_exit_code_is_said_as_such() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(3) == "exited with code 3"


@pytest.mark.parametrize(
    ("sig", "words"),
    [(signal.SIGKILL, "out-of-memory killer"), (signal.SIGSEGV, "crash in native code"), (signal.SIGTERM, "")],
)
def test_other_signals(sig: signal.Signals, words: str) -> None:
    text = describe_exit(-int(sig))
    assert text.startswith(f"killed by {sig.name} (") and words in text
    assert (": likely" in text) == bool(words)


def test_a_signal_number_python_does_not_know() -> None:
    assert describe_exit(-99) == "killed by signal 99"
