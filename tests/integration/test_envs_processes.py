"""Managed environments against the machine, for real: a read-only SGLPERF_HOME (a bind mount made read-only
in a user namespace of its own), and a build cut by Ctrl-C or SIGTERM while its pip step waits on an
index that never answers. One line each, nothing half-built kept, no child left running."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from sglperf.sglang import envs

SGLPERF = str(Path(sys.executable).with_name("sglperf"))
SRC = Path(envs.__file__).parents[2]


def _user_namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    return subprocess.run([unshare, "-rm", "true"], capture_output=True, timeout=30).returncode == 0


def _read_only(home: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``code`` run by this Python with SGLPERF_HOME=home mounted read-only (in a namespace of its own)."""
    script = f'mount --bind {home} {home} && mount -o remount,bind,ro {home} && exec {sys.executable} -c "$0"'
    env = {**os.environ, "SGLPERF_HOME": str(home), "PYTHONPATH": str(SRC)}
    return subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, code], capture_output=True, text=True, timeout=120, env=env
    )


def _whole_env(home: Path, version: str) -> envs.SGLangEnv:
    """A release environment as a build leaves it, but for SGLang itself: marker, interpreter, torch's .pth."""
    env = envs.SGLangEnv(version, home / "envs" / f"sglang-{version}")
    site = env.path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (env.path / "bin").mkdir()
    (env.path / "bin" / "python").symlink_to(sys.executable)
    (home / "torch-site" / "torch").mkdir(parents=True)
    (site / "zz_sglperf_torch.pth").write_text(f"{home / 'torch-site'}\n")
    (env.path / envs.READY_MARKER).write_text(envs.recipe_digest(version) + "\n")
    return env


ENSURE = (
    "from sglperf.sglang import envs\n"
    "try:\n"
    "    print(envs.ensure_env('0.5.23').python)\n"
    "except envs.EnvBuildError as exc:\n"
    "    print('EnvBuildError:', exc)\n"
)


@pytest.mark.skipif(not _user_namespaces_work(), reason="no user namespaces here (unshare -rm) to mount read-only")
def test_a_read_only_home_with_a_ready_environment_uses_it(tmp_path: Path) -> None:
    """Issue 53's audit: a read-only SGLPERF_HOME with ready environments was a 38-line traceback (the lock
    file could not be created) on every --sglang-version. (The .pth's name is written out, not
    envs.TORCH_PTH, so that this runs on the code before the fix as well.)"""
    home = tmp_path / "home"
    env = _whole_env(home, "0.5.23")
    done = _read_only(home, ENSURE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(env.python), done.stdout + done.stderr
    assert not (home / "envs" / "sglang-0.5.23.lock").exists()


@pytest.mark.skipif(not _user_namespaces_work(), reason="no user namespaces here (unshare -rm) to mount read-only")
def test_a_read_only_home_without_the_environment_is_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "envs").mkdir(parents=True)
    done = _read_only(home, ENSURE)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    said = done.stdout.strip()
    assert said.startswith("EnvBuildError: the SGLang 0.5.23 environment in") and "\n" not in said, said
    assert "(Read-only file system (EROFS)): set SGLPERF_HOME to a writable folder" in said, said


@pytest.fixture
def silent_index() -> Iterator[str]:
    """A package index that accepts connections and never answers: pip waits on it."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}/simple"
    finally:
        server.close()


def _waiting_build(tmp_path: Path, index: str) -> tuple[subprocess.Popen[str], list[int]]:
    """`sglperf env build 0.5.23` started against ``index``; returns it once its pip step is waiting, with
    the pids of that step's processes."""
    env = {
        **os.environ,
        "SGLPERF_HOME": str(tmp_path / "home"),
        "PYTHONPATH": str(SRC),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index,
        "PIP_FIND_LINKS": "",
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_DEFAULT_TIMEOUT": "600",
        "PIP_RETRIES": "0",
    }
    build = subprocess.Popen([SGLPERF, "env", "build", "0.5.23"], stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = psutil.Process(build.pid).children(recursive=True)
        if children:
            time.sleep(1.0)  # pip is up and has asked the index
            return build, [c.pid for c in psutil.Process(build.pid).children(recursive=True)]
        time.sleep(0.1)
    build.kill()
    raise AssertionError("the build never started its pip step")


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return True
        time.sleep(0.1)
    for pid in alive:  # what the build left behind: not ours to keep running past the test
        os.kill(pid, signal.SIGKILL)
    return False


@pytest.mark.parametrize("sent", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_build_cut_short_is_one_line_and_ends_its_steps(tmp_path: Path, silent_index: str, sent: int) -> None:
    """Issue 53's audit: Ctrl-C during a build was a traceback, and SIGTERM (a CI cancel) left the build's
    children (compileall's workers; here, pip waiting on its index) running after sglperf had gone."""
    build, children = _waiting_build(tmp_path, silent_index)
    assert children
    build.send_signal(sent)
    _, err = build.communicate(timeout=60)
    assert _gone(children), f"{signal.Signals(sent).name} left the build's processes running"
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("sglperf:")]
    how = "Ctrl-C" if sent == signal.SIGINT else "SIGTERM"
    assert "Traceback" not in err and lines == [f"sglperf: interrupted ({how})"], err
    assert build.returncode == 130
    assert not (tmp_path / "home" / "envs" / "sglang-0.5.23").exists()
