"""Running an interpreter we were given (the user's --python, SGLang's environments) for a short
answer: in a process group of its own, so that a timeout ends everything it started.

``subprocess.run(timeout=...)`` kills only its direct child; a grandchild that holds the output pipes
(a shell script's ``sleep``, a daemon) keeps ``run`` waiting and outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any

REAP_S = 5.0  # after the group is killed, for its pipes to close


def run_bounded(cmd: Sequence[str], timeout_s: float | None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)``, in a new session;
    on the timeout (TimeoutExpired is raised, as by ``run``), on Ctrl-C (or any exception while it runs)
    and after a normal exit alike, whatever is left of its process group is killed."""
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kwargs
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=REAP_S)
        raise
    finally:
        kill_group(proc.pid)  # what it left behind after exiting (nothing, for a well-behaved program)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)


def kill_group(pgid: int) -> None:
    """SIGKILL to every process of the group (a session leader's pid is its group id)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
