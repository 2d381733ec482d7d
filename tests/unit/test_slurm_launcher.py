"""The Slurm launcher against stand-in Slurm commands: shell scripts on PATH that print what Slurm 22.05 prints.

No Slurm needed; tests/integration/test_slurm_steps.py runs the same code against a real cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from sglperf.runtime.slurm import SlurmAllocation, SlurmError, SlurmStep, StepWatch, parse_steps, slurm_problem

# What each stand-in does unless a test says otherwise: answer like a cluster with nothing queued.
QUIET = {
    "salloc": 'echo "salloc: Granted job allocation 42" >&2',
    "srun": "exit 0",
    "scancel": "exit 0",
    "squeue": "exit 0",
    "sinfo": 'echo "debug*"',
}


class FakeSlurm:
    """A folder of stand-in Slurm commands first on PATH; each one appends its argv to calls.log."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.folder = folder
        self.log = folder / "calls.log"
        folder.mkdir()
        for name, body in QUIET.items():
            self.script(name, body)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")

    def script(self, name: str, body: str) -> None:
        path = self.folder / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{self.log}"\n{body}\n')
        path.chmod(0o755)

    def calls(self, name: str) -> list[str]:
        if not self.log.exists():
            return []
        return [line for line in self.log.read_text().splitlines() if line.split(" ", 1)[0] == name]


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    return FakeSlurm(tmp_path / "bin", monkeypatch)


def _one_line(exc: pytest.ExceptionInfo[SlurmError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and "Traceback" not in text
    return text


# -- salloc ---------------------------------------------------------------------------------------


def test_a_grant_gives_the_job_id_and_salloc_is_asked_without_a_shell(slurm: FakeSlurm) -> None:
    said: list[str] = []
    allocation = SlurmAllocation.allocate("group", tasks=2, cpus_per_task=3, timeout_s=4.2, progress=said.append)
    assert allocation.job_id == "42" and allocation.cpus_per_task == 3
    assert slurm.calls("salloc") == ["salloc --no-shell --job-name=group -n2 -c3 --immediate=5"]
    assert said[-1] == "slurm: job 42 granted for job 'group' (2 task(s) x 3 CPU(s))"


def test_the_grant_is_found_among_salloc_s_other_lines(slurm: FakeSlurm) -> None:
    slurm.script(
        "salloc",
        'printf "salloc: Pending job allocation 7\\nsalloc: job 7 queued and waiting for resources\\n'
        'salloc: job 7 has been allocated resources\\nsalloc: Granted job allocation 7\\n" >&2',
    )
    assert SlurmAllocation.allocate("group", 1, 1, 10).job_id == "7"
    assert slurm.calls("scancel") == []


def test_a_refusal_is_one_line_with_slurm_s_reason(slurm: FakeSlurm) -> None:
    slurm.script(
        "salloc",
        'echo "salloc: error: Job submit/allocate failed: Requested node configuration is not available" >&2; exit 1',
    )
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("group", 64, 1, 10)
    assert _one_line(exc) == (
        "salloc refused job 'group' (64 task(s) x 1 CPU(s)): Job submit/allocate failed: Requested node "
        "configuration is not available: ask for what the partition has (`sinfo -o '%P %c %D'`)"
    )


def test_no_grant_within_the_timeout_is_one_line_and_what_was_queued_is_cancelled(slurm: FakeSlurm) -> None:
    slurm.script(
        "salloc",
        'printf "salloc: Pending job allocation 43\\nsalloc: job 43 queued and waiting for resources\\n'
        'salloc: error: Unable to allocate resources: Connection timed out\\n" >&2; exit 1',
    )
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("group", 2, 1, 3)
    assert _one_line(exc) == (
        "Slurm did not grant job 'group' (2 task(s) x 1 CPU(s)) within 3 s (Unable to allocate resources: "
        "Connection timed out): free the CPUs other jobs hold (`squeue`) or wait longer"
    )
    assert slurm.calls("scancel") == ["scancel 43"]


def test_cpus_held_by_other_jobs_are_no_grant_either(slurm: FakeSlurm) -> None:
    # What salloc --immediate says when the controller sees at once that the CPUs are taken.
    slurm.script("salloc", 'echo "salloc: error: Unable to allocate resources: Requested nodes are busy" >&2; exit 1')
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("group", 1, 1, 1)
    assert _one_line(exc).startswith("Slurm did not grant job 'group' (1 task(s) x 1 CPU(s)) within 1 s (Unable")
    assert slurm.calls("scancel") == []


def test_no_controller_is_one_line(slurm: FakeSlurm) -> None:
    slurm.script(
        "salloc",
        'echo "salloc: error: Job submit/allocate failed: Unable to contact slurm controller (connect failure)" >&2;'
        " exit 1",
    )
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("group", 1, 1, 3)
    assert _one_line(exc) == (
        "salloc could not reach the Slurm controller for job 'group' (1 task(s) x 1 CPU(s)) (Job submit/allocate "
        "failed: Unable to contact slurm controller (connect failure)): start slurmctld"
    )


def test_no_salloc_on_path_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation.allocate("group", 1, 1, 3)
    assert _one_line(exc).startswith("`salloc` is not on PATH: install Slurm's client commands")


@pytest.mark.parametrize(("tasks", "cpus", "name"), [(0, 1, "g"), (1, 0, "g"), (1, 1, " ")])
def test_an_impossible_request_is_refused_before_slurm_is_asked(
    slurm: FakeSlurm, tasks: int, cpus: int, name: str
) -> None:
    with pytest.raises(SlurmError):
        SlurmAllocation.allocate(name, tasks, cpus, 3)
    assert slurm.calls("salloc") == []


# -- steps ----------------------------------------------------------------------------------------


def test_the_step_prefix_runs_one_task_on_the_job_s_cpus_and_ties_it_to_its_step() -> None:
    assert SlurmAllocation("42", "group", 3).step_prefix("decode") == (
        "srun",
        "--jobid=42",
        "--job-name=decode",
        "-n1",
        "-c3",
        "--exact",
        "--kill-on-bad-exit=1",
        "--unbuffered",
    )


def test_squeue_step_lines_are_read_with_a_bar_in_a_name() -> None:
    text = "42.0|RUNNING|prefill|\n42.1|COMPLETING|decode|a|b|\n\n"
    assert parse_steps(text) == [
        SlurmStep("42.0", "prefill", "RUNNING"),
        SlurmStep("42.1", "decode|a|b", "COMPLETING"),
    ]


def test_a_step_line_of_another_shape_is_one_line() -> None:
    with pytest.raises(SlurmError) as exc:
        parse_steps("42.0 prefill\n")
    assert _one_line(exc) == "squeue printed a step line this version cannot read: '42.0 prefill'"


def test_steps_asks_squeue_for_the_job_s_steps(slurm: FakeSlurm) -> None:
    slurm.script("squeue", 'printf "42.0|RUNNING|prefill|\\n42.1|RUNNING|decode|\\n"')
    assert [step.name for step in SlurmAllocation("42", "group", 1).steps()] == ["prefill", "decode"]
    assert slurm.calls("squeue") == ["squeue -h -s --jobs=42 -O StepId:|,StepState:|,StepName:|"]


def test_a_forgotten_job_has_no_steps_and_is_not_alive(slurm: FakeSlurm) -> None:
    slurm.script("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    allocation = SlurmAllocation("42", "group", 1)
    assert allocation.steps() == [] and not allocation.alive()


@pytest.mark.parametrize(("state", "alive"), [("RUNNING", True), ("PENDING", True), ("COMPLETING", False)])
def test_alive_is_pending_or_running(slurm: FakeSlurm, state: str, alive: bool) -> None:
    slurm.script("squeue", f"echo {state}")
    assert SlurmAllocation("42", "group", 1).alive() is alive


def test_squeue_without_a_controller_is_one_line(slurm: FakeSlurm) -> None:
    slurm.script(
        "squeue", 'echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1'
    )
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation("42", "group", 1).steps()
    assert _one_line(exc).startswith("`squeue -h -s --jobs=42 -O StepId:|,StepState:|,StepName:|` failed (")
    assert "Unable to contact slurm controller" in str(exc.value)


# -- cancel ---------------------------------------------------------------------------------------


def test_cancel_ends_the_job_once(slurm: FakeSlurm) -> None:
    allocation = SlurmAllocation("42", "group", 1)
    allocation.cancel("done")
    allocation.cancel()
    assert slurm.calls("scancel") == ["scancel 42"]


def test_cancelling_a_job_that_already_ended_is_quiet(slurm: FakeSlurm) -> None:
    slurm.script("scancel", 'echo "scancel: error: Kill job error on job id 42: Invalid job id specified" >&2; exit 1')
    SlurmAllocation("42", "group", 1).cancel()


def test_cancel_waits_for_the_job_to_leave_the_queue(slurm: FakeSlurm) -> None:
    # Listed (as ending) for the first two questions, then gone.
    counter = slurm.folder / "asked"
    slurm.script("squeue", f'echo x >> "{counter}"; [ "$(wc -l < "{counter}")" -le 2 ] && echo COMPLETING; exit 0')
    SlurmAllocation("42", "group", 1).cancel()
    assert len(slurm.calls("squeue")) == 3


def test_a_job_still_listed_after_the_deadline_is_one_line(slurm: FakeSlurm) -> None:
    slurm.script("squeue", "echo COMPLETING")
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation("42", "group", 1).cancel(deadline_s=0.3)
    assert _one_line(exc) == (
        "slurm job 42 still COMPLETING 0.3 s after scancel: its steps may still run; see `scontrol show job 42` "
        "and the node's slurmd log"
    )


def test_scancel_without_a_controller_is_one_line(slurm: FakeSlurm) -> None:
    slurm.script(
        "scancel",
        'echo "scancel: error: Kill job error on job id 42: Unable to contact slurm controller (connect failure)"'
        " >&2; exit 1",
    )
    with pytest.raises(SlurmError) as exc:
        SlurmAllocation("42", "group", 1).cancel()
    assert _one_line(exc) == (
        "`scancel 42` failed (Kill job error on job id 42: Unable to contact slurm controller (connect failure)): "
        "check that slurmctld runs (`sinfo`)"
    )


# -- the watch ------------------------------------------------------------------------------------


def _poll(codes: dict[str, int | None], name: str) -> Callable[[], int | None]:
    return lambda: codes[name]


def test_a_step_that_ends_cancels_the_whole_job(slurm: FakeSlurm) -> None:
    codes: dict[str, int | None] = {"prefill": None, "decode": None}
    watch = StepWatch(
        SlurmAllocation("42", "group", 1),
        {name: _poll(codes, name) for name in codes},
        interval_s=0.05,
    )
    try:
        assert not watch.wait(0.2)
        watch.check()
        codes["decode"] = 3
        assert watch.wait(30)
        assert watch.failure == "slurm step decode of job 42 ended (exit code 3): cancelled job 42, every step of it"
        with pytest.raises(SlurmError, match=r"^slurm step decode of job 42 ended"):
            watch.check()
        assert slurm.calls("scancel") == ["scancel 42"]
    finally:
        watch.stop()


def test_a_killed_srun_client_is_said_by_its_signal(slurm: FakeSlurm) -> None:
    with StepWatch(SlurmAllocation("42", "group", 1), {"prefill": lambda: -9}, interval_s=0.05) as watch:
        assert watch.wait(30)
    assert watch.failure == (
        "slurm step prefill of job 42 ended (its srun killed by SIGKILL): cancelled job 42, every step of it"
    )


def test_a_failed_cancel_is_in_the_failure_line(slurm: FakeSlurm) -> None:
    slurm.script("scancel", 'echo "scancel: error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
    with StepWatch(SlurmAllocation("42", "group", 1), {"prefill": lambda: 1}, interval_s=0.05) as watch:
        assert watch.wait(30)
    assert watch.failure is not None and watch.failure.startswith(
        "slurm step prefill of job 42 ended (exit code 1); `scancel 42` failed (Unable to contact slurm controller"
    )


def test_a_stopped_watch_cancels_nothing(slurm: FakeSlurm) -> None:
    watch = StepWatch(SlurmAllocation("42", "group", 1), {"prefill": lambda: None}, interval_s=0.05)
    watch.stop()
    assert watch.failure is None and not watch.wait(0.1)
    watch.check()
    assert slurm.calls("scancel") == []


# -- slurm_problem --------------------------------------------------------------------------------


def test_no_slurm_on_path_is_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm_problem() == (
        "Slurm's salloc, srun, scancel, squeue, sinfo not on PATH: install Slurm's client commands "
        "(Debian: slurm-client) or add them to PATH"
    )


def test_a_controller_that_answers_is_no_problem(slurm: FakeSlurm) -> None:
    assert slurm_problem() is None


def test_a_controller_that_does_not_answer_is_the_problem(slurm: FakeSlurm) -> None:
    slurm.script(
        "sinfo", 'echo "slurm_load_partitions: Unable to contact slurm controller (connect failure)" >&2; exit 1'
    )
    assert slurm_problem() == (
        "sinfo failed (slurm_load_partitions: Unable to contact slurm controller (connect failure)): "
        "check that slurmctld runs"
    )
