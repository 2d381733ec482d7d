from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from sglperf.model.process_exit import describe_exit


def test_an_exit_code_is_said_as_such() -> None:
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(3) == "exited with code 3"


def test_a_real_sigill_is_named_with_its_usual_cause() -> None:
    """A child killed by SIGILL, as one that loads a kernel built for AVX-512 on an AVX2 CPU is."""
    code = "import os, signal; signal.signal(signal.SIGILL, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGILL)"
    proc = subprocess.run([sys.executable, "-c", code])
    assert describe_exit(proc.returncode) == (
        "killed by SIGILL (Illegal instruction): likely a native module uses instructions this CPU lacks "
        "(a build for AVX-512 on a CPU without it, say)"
    )


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
