"""How a real child's end is said: one killed by SIGILL (the exit codes and signals themselves:
tests/unit/test_process_exit.py)."""

from __future__ import annotations

import subprocess
import sys

from sglperf.model.process_exit import describe_exit


def test_a_real_sigill_is_named_with_its_usual_cause() -> None:
    """A child killed by SIGILL, as one that loads a kernel built for AVX-512 on an AVX2 CPU is."""
    code = "import os, signal; signal.signal(signal.SIGILL, signal.SIG_DFL); os.kill(os.getpid(), signal.SIGILL)"
    proc = subprocess.run([sys.executable, "-c", code])
    assert describe_exit(proc.returncode) == (
        "killed by SIGILL (Illegal instruction): likely a native module uses instructions this CPU lacks "
        "(a build for AVX-512 on a CPU without it, say)"
    )
