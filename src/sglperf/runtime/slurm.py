"""Run servers as the job steps of one Slurm allocation, and take the whole allocation down when one step dies.

Slurm ties together only the tasks of one step (and only with ``--kill-on-bad-exit``). When one step of an
allocation ends, is cancelled, or loses its srun client (even to ``kill -9``), the other steps and the
allocation run on: a prefill server would outlive its decode partner, holding CPUs and GPUs nobody frees.
Only ``scancel JOBID`` ends every step. So :class:`StepWatch` polls the srun clients and cancels the job as
soon as one exits, and :meth:`SlurmAllocation.cancel` waits until Slurm no longer lists the job.
"""

from __future__ import annotations

import contextlib
import math
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

import psutil

from sglperf.errors import SglperfError
from sglperf.model.progress import Progress, silent

COMMANDS = ("salloc", "srun", "scancel", "squeue", "sinfo")
SINFO_TIMEOUT_S = 5.0
# squeue and scancel retry an unreachable controller for about 9 s each attempt (seen with Slurm 22.05).
COMMAND_TIMEOUT_S = 30.0
# Past salloc's own --immediate: the controller's answer, and its retries when it is slow to answer.
SALLOC_GRACE_S = 20.0
# Slurm's default KillWait is 30 s between a step's SIGTERM and its SIGKILL; the job is listed until then.
CANCEL_DEADLINE_S = 60.0
CANCEL_POLL_S = 0.2
WATCH_INTERVAL_S = 0.5

_JOB_ID = re.compile(r"job allocation (\d+)")
_GRANTED = re.compile(r"Granted job allocation (\d+)")
_NO_CONTROLLER = "Unable to contact slurm controller"
# What salloc says when --immediate runs out: either the job was queued (then relinquished), or the
# controller saw at once that the CPUs are held by other jobs.
_BUSY = ("Requested nodes are busy", "Connection timed out")
# What scancel says of a job that has already ended: nothing left to cancel, so not a failure.
_ALREADY_ENDED = ("Invalid job id", "already completing or completed")
# Job states squeue can list for a job that holds no running steps any more.
_ENDED_STATES = frozenset(
    {
        "COMPLETING",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "SPECIAL_EXIT",
        "REVOKED",
    }
)


class SlurmError(SglperfError, RuntimeError):
    """Slurm refused, timed out or could not be reached: one line saying what failed and what to do."""


@dataclass(frozen=True)
class SlurmStep:
    step_id: str  # "JOB.STEP", e.g. "42.0"
    name: str
    state: str  # as squeue says it: RUNNING, COMPLETING, ...


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _shown(argv: Sequence[str]) -> str:
    return " ".join(argv)


def _reason(output: str, returncode: int | None) -> str:
    """The line of a Slurm command's output that says why it failed, without the command's own prefix."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    if errors:
        return _one_line(errors[-1].split("error:", 1)[1])
    if lines:
        return _one_line(lines[-1])
    return "no output" if returncode is None else f"exit code {returncode}, no output"


def _run(argv: Sequence[str], timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise SlurmError(
            f"`{argv[0]}` is not on PATH: install Slurm's client commands (Debian: slurm-client) or add them to PATH"
        ) from None
    except subprocess.TimeoutExpired:
        raise SlurmError(
            f"`{_shown(argv)}` did not answer within {timeout_s:g} s: check that slurmctld runs and answers (`sinfo`)"
        ) from None


def slurm_problem() -> str | None:
    """Why Slurm cannot be used here, in one line; None when its commands are there and the controller answers."""
    missing = [name for name in COMMANDS if shutil.which(name) is None]
    if missing:
        return (
            f"Slurm's {', '.join(missing)} not on PATH: install Slurm's client commands (Debian: slurm-client) "
            "or add them to PATH"
        )
    try:
        done = _run(["sinfo", "-h", "-o", "%P"], SINFO_TIMEOUT_S)
    except SlurmError as exc:
        return str(exc)
    if done.returncode != 0:
        return f"sinfo failed ({_reason(done.stderr + done.stdout, done.returncode)}): check that slurmctld runs"
    return None


def _job_state(job_id: str) -> str:
    """The job's state as squeue lists it; "" once squeue no longer lists it (ended, or forgotten)."""
    argv = ["squeue", "-h", f"--jobs={job_id}", "-o", "%T"]
    done = _run(argv)
    if done.returncode != 0:
        reason = _reason(done.stderr + done.stdout, done.returncode)
        if "Invalid job id" in reason:
            return ""
        raise SlurmError(f"`{_shown(argv)}` failed ({reason}): check that slurmctld runs (`sinfo`)")
    lines = done.stdout.split()
    return lines[0] if lines else ""


def parse_steps(text: str) -> list[SlurmStep]:
    """``squeue -h -s -O StepId:|,StepState:|,StepName:|`` output -> steps (the name last: it may hold a ``|``)."""
    steps: list[SlurmStep] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.strip().split("|", 2)
        if len(parts) != 3:
            raise SlurmError(f"squeue printed a step line this version cannot read: {line.strip()!r}")
        step_id, state, name = parts
        steps.append(SlurmStep(step_id.strip(), name.removesuffix("|").strip(), state.strip()))
    return steps


class SlurmAllocation:
    """One Slurm job holding the CPUs of a server group: each server runs as one step of it."""

    def __init__(self, job_id: str, name: str, cpus_per_task: int, progress: Progress = silent) -> None:
        self.job_id = job_id
        self.name = name
        self.cpus_per_task = cpus_per_task
        self._progress = progress
        self._lock = threading.Lock()
        self._gone = False

    def __repr__(self) -> str:
        return f"SlurmAllocation(job_id={self.job_id!r}, name={self.name!r}, cpus_per_task={self.cpus_per_task})"

    @classmethod
    def allocate(
        cls, name: str, tasks: int, cpus_per_task: int, timeout_s: float, progress: Progress = silent
    ) -> SlurmAllocation:
        """Ask for ``tasks`` x ``cpus_per_task`` CPUs as job ``name``; waits at most ``timeout_s`` for the grant."""
        if not name.strip():
            raise SlurmError("a Slurm job needs a name: got an empty one")
        if tasks < 1 or cpus_per_task < 1:
            raise SlurmError(f"a Slurm job needs at least 1 task of 1 CPU: got {tasks} x {cpus_per_task} for {name!r}")
        what = f"job {name!r} ({tasks} task(s) x {cpus_per_task} CPU(s))"
        immediate = max(1, math.ceil(timeout_s))
        argv = [
            "salloc",
            "--no-shell",
            f"--job-name={name}",
            f"-n{tasks}",
            f"-c{cpus_per_task}",
            f"--immediate={immediate}",
        ]
        progress(f"slurm: asking for {what}")
        try:
            child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        except FileNotFoundError:
            raise SlurmError(
                "`salloc` is not on PATH: install Slurm's client commands (Debian: slurm-client) or add them to PATH"
            ) from None
        try:
            output, _ = child.communicate(timeout=immediate + SALLOC_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            output, _ = child.communicate()
            queued = _JOB_ID.search(output)
            left = "nothing was queued"
            if queued:
                cls(queued.group(1), name, cpus_per_task, progress).cancel_quietly()
                left = f"cancelled job {queued.group(1)} it had queued"
            raise SlurmError(
                f"salloc did not answer within {immediate + SALLOC_GRACE_S:g} s for {what} ({left}): "
                "check that slurmctld runs and answers (`sinfo`)"
            ) from None
        granted = _GRANTED.search(output)
        if child.returncode == 0 and granted:
            allocation = cls(granted.group(1), name, cpus_per_task, progress)
            progress(f"slurm: job {allocation.job_id} granted for {what}")
            return allocation
        queued = _JOB_ID.search(output)
        if queued:
            # salloc relinquishes what it queued when --immediate expires; this covers any other way it quits.
            cls(queued.group(1), name, cpus_per_task, progress).cancel_quietly()
        reason = _reason(output, child.returncode)
        if _NO_CONTROLLER in output:
            raise SlurmError(f"salloc could not reach the Slurm controller for {what} ({reason}): start slurmctld")
        if queued or any(text in output for text in _BUSY):
            raise SlurmError(
                f"Slurm did not grant {what} within {immediate} s ({reason}): "
                "free the CPUs other jobs hold (`squeue`) or wait longer"
            )
        raise SlurmError(f"salloc refused {what}: {reason}: ask for what the partition has (`sinfo -o '%P %c %D'`)")

    def step_prefix(self, step_name: str) -> tuple[str, ...]:
        """The argv prefix that runs a command as one step of this job, on ``cpus_per_task`` CPUs of its own.

        ``--exact``: without it a one-task step takes every CPU of the job and the next step waits for them.
        The step gets srun's environment and working directory (srun exports its whole environment).
        """
        return (
            "srun",
            f"--jobid={self.job_id}",
            f"--job-name={step_name}",
            "-n1",
            f"-c{self.cpus_per_task}",
            "--exact",
            "--kill-on-bad-exit=1",
            "--unbuffered",
        )

    def steps(self) -> list[SlurmStep]:
        """The job's steps as squeue lists them now; [] once the job has ended."""
        argv = ["squeue", "-h", "-s", f"--jobs={self.job_id}", "-O", "StepId:|,StepState:|,StepName:|"]
        done = _run(argv)
        if done.returncode != 0:
            reason = _reason(done.stderr + done.stdout, done.returncode)
            if "Invalid job id" in reason:
                return []
            raise SlurmError(f"`{_shown(argv)}` failed ({reason}): check that slurmctld runs (`sinfo`)")
        return parse_steps(done.stdout)

    def alive(self) -> bool:
        """Whether the job is still pending or running (not ending, not ended)."""
        state = _job_state(self.job_id)
        return bool(state) and state not in _ENDED_STATES

    def cancel(self, reason: str | None = None, deadline_s: float = CANCEL_DEADLINE_S) -> None:
        """End the job and every step of it, and wait until squeue no longer lists it.

        Idempotent, and quiet about a job that has already ended; raises SlurmError when the controller
        cannot be reached or the job is still listed after ``deadline_s``.
        """
        with self._lock:
            if self._gone:
                return
            self._progress(f"slurm: cancelling job {self.job_id}" + (f": {reason}" if reason else ""))
            argv = ["scancel", self.job_id]
            done = _run(argv)
            if done.returncode != 0:
                why = _reason(done.stderr + done.stdout, done.returncode)
                if not any(text in why for text in _ALREADY_ENDED):
                    raise SlurmError(f"`{_shown(argv)}` failed ({why}): check that slurmctld runs (`sinfo`)")
            deadline = time.monotonic() + deadline_s
            state = _job_state(self.job_id)
            while state:
                if time.monotonic() > deadline:
                    raise SlurmError(
                        f"slurm job {self.job_id} still {state} {deadline_s:g} s after scancel: its steps may "
                        f"still run; see `scontrol show job {self.job_id}` and the node's slurmd log"
                    )
                time.sleep(CANCEL_POLL_S)
                state = _job_state(self.job_id)
            self._gone = True

    def cancel_quietly(self, reason: str | None = None) -> str | None:
        """:meth:`cancel`, returning its failure line instead of raising: for paths already reporting one."""
        try:
            self.cancel(reason)
        except SlurmError as exc:
            return str(exc)
        return None


def _ended_how(returncode: int) -> str:
    if returncode >= 0:
        return f"exit code {returncode}"
    try:
        return f"its srun killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"its srun killed by signal {-returncode}"


class StepWatch:
    """Cancels the whole allocation as soon as the srun client of any step exits, until :meth:`stop`.

    ``clients`` maps each step's name to a zero-argument callable that returns the exit code of that step's
    srun client, or None while it runs (``Popen.poll``). The srun client exits when its step ends; the
    other steps would run on, so the watch cancels the job: every step, and the CPUs it holds.
    """

    def __init__(
        self,
        allocation: SlurmAllocation,
        clients: Mapping[str, Callable[[], int | None]],
        interval_s: float = WATCH_INTERVAL_S,
        progress: Progress = silent,
    ) -> None:
        self.allocation = allocation
        self.failure: str | None = None
        self._clients = dict(clients)
        self._interval_s = interval_s
        self._progress = progress
        self._stopped = threading.Event()
        self._failed = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name=f"slurm-watch-{allocation.job_id}", daemon=True)
        self._thread.start()

    def __enter__(self) -> StepWatch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _first_ended(self) -> tuple[str, str] | None:
        for name, poll in self._clients.items():
            try:
                code = poll()
            except Exception as exc:  # a broken poll must not leave the group running unwatched
                return name, f"its srun client could not be polled: {_one_line(str(exc))}"
            if code is not None:
                return name, _ended_how(code)
        return None

    def _watch(self) -> None:
        while True:
            ended = self._first_ended()
            if ended is not None:
                with self._lock:
                    if not self._stopped.is_set():
                        self._fail(*ended)
                return
            if self._stopped.wait(self._interval_s):
                return

    def _fail(self, name: str, how: str) -> None:
        job = self.allocation.job_id
        what = f"slurm step {name} of job {job} ended ({how})"
        problem = self.allocation.cancel_quietly(what)
        self.failure = f"{what}: cancelled job {job}, every step of it" if problem is None else f"{what}; {problem}"
        self._failed.set()
        self._progress(self.failure)

    def wait(self, timeout_s: float) -> bool:
        """Whether a step ended (and the job was cancelled) within ``timeout_s``."""
        return self._failed.wait(timeout_s)

    def stop(self) -> None:
        """End the watch without cancelling anything: the caller cancels at teardown. Waits for a cancel
        the watch has already begun, so that the job is either cancelled or left to the caller, not both."""
        with self._lock:
            self._stopped.set()
        self._thread.join()

    def check(self) -> None:
        """Raise SlurmError with the failure line if a step ended while watched."""
        if self.failure is not None:
            raise SlurmError(self.failure)


def step_daemons(job_id: str) -> list[int]:
    """This machine's ``slurmstepd`` processes of one job's steps (their children are the steps' tasks)."""
    prefix = f"slurmstepd: [{job_id}."
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if " ".join(proc.info["cmdline"] or ()).startswith(prefix):
                found.append(proc.pid)
    return found
