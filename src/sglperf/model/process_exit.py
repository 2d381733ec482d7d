"""How a child process ended, in words: its exit code, or the signal that killed it and what usually sends it.

A probe or server killed by a signal leaves no Python traceback and often no output at all; the signal
is then the only clue, and its usual cause is what the user needs to read first.
"""

from __future__ import annotations

import signal

LIKELY_CAUSE = {
    signal.SIGILL: "a native module uses instructions this CPU lacks (a build for AVX-512 on a CPU without it, say)",
    signal.SIGKILL: "the kernel's out-of-memory killer, or a kill -9",
    signal.SIGSEGV: "a crash in native code",
    signal.SIGBUS: "a crash in native code, or /dev/shm full",
    signal.SIGABRT: "native code aborted (a failed assertion, or a C++ exception nobody caught)",
}


def describe_exit(returncode: int) -> str:
    """``subprocess`` return code -> "exited with code 3" or "killed by SIGILL (Illegal instruction): likely ..."."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        sig = signal.Signals(-returncode)
    except ValueError:
        return f"killed by signal {-returncode}"
    text = f"killed by {sig.name} ({signal.strsignal(sig)})"
    cause = LIKELY_CAUSE.get(sig)
    return f"{text}: likely {cause}" if cause else text
