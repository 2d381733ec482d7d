"""Issue 13 and its audits, where a real process, server or pytest run is the input: bad answers and
broken pipes get one clear line naming what to do, never a traceback or a hang, and nothing is left
running (the rest, in this process: tests/unit/test_hardening.py)."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from sglperf import cli
from sglperf.baselines import store
from sglperf.measure import meter
from sglperf.measure.samples import MeterError
from sglperf.model.deployment_file import load
from sglperf.runtime import server, server_info
from sglperf.runtime.http_deadline import TooLargeError, get_within
from sglperf.runtime.server import ServerSpec, ServerStartError

from ..support.baselines import baseline_file, entry, provenance
from ..support.project import QWEN36, ROOT, make_project

pytest_plugins = ["pytester"]

NOT_UTF8 = b'description = "caf\xe9"\n'


# -- 3: the refresh workflow proposes first baselines, never lock files -------------------------------


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def refresh_step(tmp_path: Path) -> Iterator[tuple[Path, Path, str, dict[str, str]]]:
    """A clone of a repository with the shipped baselines/, and the workflow's pull-request step."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    doc = yaml.safe_load((ROOT / "ci" / "workflows" / "refresh-baselines.yml").read_text())
    step = next(s for s in doc["jobs"]["refresh"]["steps"] if "pull request" in s.get("name", ""))
    script = re.sub(r"\$\{\{\s*github\.run_id\s*\}\}", "123", step["run"])
    origin, work, bin_dir = tmp_path / "origin.git", tmp_path / "work", tmp_path / "bin"
    _git(tmp_path, "init", "-q", "--bare", str(origin))
    _git(tmp_path, "clone", "-q", str(origin), str(work))
    shutil.copytree(ROOT / "baselines", work / "baselines")
    _git(work, "add", "baselines")
    _git(work, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    _git(work, "push", "-q", "origin", "HEAD")
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "gh-calls"}\n')
    gh.chmod(gh.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    yield origin, work, script, env


def _run_step(work: Path, script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # GitHub runs `run:` steps with `bash -e`.
    return subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=60)


def test_refresh_workflow_proposes_a_first_baseline_without_its_lock_file(
    refresh_step: tuple[Path, Path, str, dict[str, str]],
) -> None:
    origin, work, script, env = refresh_step
    unchanged = _run_step(work, script, env)
    assert unchanged.returncode == 0 and "no baseline changed" in unchanged.stdout, unchanged.stderr
    assert "sglperf/baselines-123" not in _git(origin, "branch")

    new = work / "baselines" / "2xA6000" / "qwen36" / "mtp1.json"
    store.record(new, "qwen36", "mtp1", provenance(), entry())  # untracked, plus mtp1.json.lock next to it
    assert new.with_name("mtp1.json.lock").exists()
    proposed = _run_step(work, script, env)
    assert proposed.returncode == 0, proposed.stdout + proposed.stderr
    files = _git(origin, "ls-tree", "-r", "--name-only", "sglperf/baselines-123").split()
    assert "baselines/2xA6000/qwen36/mtp1.json" in files
    assert not [f for f in files if f.endswith(".lock")]
    assert "pr create" in (work.parent / "gh-calls").read_text()


# -- 8: the nightly says "report: PATH" only when it wrote one ----------------------------------------


def _stub(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + text)
    path.chmod(0o755)


@pytest.mark.parametrize("report_works", [True, False])
def test_nightly_names_the_report_only_when_written(tmp_path: Path, report_works: bool) -> None:
    (tmp_path / "ci").mkdir()
    shutil.copy(ROOT / "ci" / "nightly.sh", tmp_path / "ci" / "nightly.sh")
    _stub(tmp_path / "ci" / "setup.sh", "exit 0\n")
    _stub(tmp_path / ".venv" / "bin" / "pytest", "exit 0\n")
    report = (
        'if [ "$1" = report ]; then echo "# report" > "$2/report.md"; echo "$2/report.md"; fi\n'
        if report_works
        else 'if [ "$1" = report ]; then echo "sglperf: $2: no sglperf results here" >&2; exit 2; fi\n'
    )
    _stub(tmp_path / ".venv" / "bin" / "sglperf", report + "exit 0\n")
    results = tmp_path / "results"
    results.mkdir()
    if not report_works:
        (results / "report.md").write_text("an earlier run's report\n")  # a reused folder
    summary = tmp_path / "summary.md"
    env = {**os.environ, "SGLANG_PYTHON": "/bin/true", "RESULTS_DIR": str(results), "GITHUB_STEP_SUMMARY": str(summary)}
    proc = subprocess.run(["bash", "ci/nightly.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    if report_works:
        assert proc.returncode == 0, proc.stderr
        assert f"report: {results}/report.md" in proc.stdout
        assert summary.read_text() == "# report\n"
    else:
        assert proc.returncode != 0
        assert "report: " not in proc.stdout
        assert "report: FAILED, no report written" in proc.stderr
        assert "earlier run" not in summary.read_text() and "could not be written" in summary.read_text()


# -- 11: the health wait says what the server last answered -------------------------------------------


class _Answers500(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"error": "scheduler not ready", "detail": "' + b"x" * 400 + b'"}'
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a: object) -> None:
        pass


def test_health_timeout_says_what_was_last_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "POLL_S", 0.05)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers500)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    true = shutil.which("true") or "/bin/true"
    s = server.Server(ServerSpec(name="sick", python=true, argv=(), log_path=tmp_path / "s.log", startup_timeout_s=0.5))
    s.proc.wait()
    s.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    s.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with pytest.raises(ServerStartError) as excinfo:
            s.wait_healthy()
    finally:
        s.stop(grace_s=1.0)
        httpd.shutdown()
    message = str(excinfo.value)
    assert "not healthy within 0 s" in message
    assert '/health_generate last answered 500: {"error": "scheduler not ready", "detail": "xxx' in message
    assert "x" * 300 not in message  # the start of the body, not all of it


# -- audit 2026-12 #1: a server that drips bytes outlives no deadline ---------------------------------


class _Drips(http.server.BaseHTTPRequestHandler):
    """Headers at once, then one body byte every 0.3 s for as long as the client listens (slow-loris)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            while not self.server.stopping.is_set():  # type: ignore[attr-defined]
                self.wfile.write(b"x")
                self.wfile.flush()
                self.server.stopping.wait(0.3)  # type: ignore[attr-defined]
        except OSError:
            pass

    do_POST = do_GET

    def log_message(self, *_a: object) -> None:
        pass


@pytest.fixture
def dripping() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Drips)
    httpd.stopping = threading.Event()  # type: ignore[attr-defined]
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.stopping.set()  # type: ignore[attr-defined]
        httpd.shutdown()


def test_a_dripping_health_endpoint_ends_at_the_startup_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dripping: str
) -> None:
    monkeypatch.setattr(server, "POLL_S", 0.05)
    true = shutil.which("true") or "/bin/true"
    s = server.Server(ServerSpec(name="drip", python=true, argv=(), log_path=tmp_path / "s.log", startup_timeout_s=1.5))
    s.proc.wait()
    s.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    s.base_url = dripping
    started = time.monotonic()
    try:
        with pytest.raises(ServerStartError) as excinfo:
            s.wait_healthy()
    finally:
        s.stop(grace_s=1.0)
    assert time.monotonic() - started < 1.5 + 3.0
    message = str(excinfo.value)
    assert "not healthy within 2 s" in message and "no complete answer within" in message, message
    assert "bytes of body" in message


def test_dripping_introspection_and_control_endpoints_end_in_time(
    dripping: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    with pytest.raises(server_info.LiveError, match="no complete answer within"):
        server_info.read_facts(dripping, timeout_s=1.0)
    assert time.monotonic() - started < 2.5
    monkeypatch.setattr(meter, "CONTROL_DEADLINE_S", 1.0)
    workload = load(QWEN36).workloads[0]
    session = meter._Session(dripping, workload, None, 5.0, 5.0, "default")

    async def flush_then_info() -> tuple[float | None, str | None]:
        try:
            with pytest.raises(MeterError, match="/flush_cache: no complete answer within"):
                await session.flush_cache()
            return await session.server_accept_length()
        finally:
            await session.close()

    started = time.monotonic()
    value, why = asyncio.run(flush_then_info())
    assert value is None and why is not None and "no complete answer within" in why
    assert time.monotonic() - started < 5.0


def test_an_endless_answer_is_refused_at_its_cap(dripping: str) -> None:
    with pytest.raises(TooLargeError, match="answered more than 3 bytes"):
        get_within(dripping + "/server_info", 5.0, limit_bytes=3)


# -- audit 2026-12 #4: write errors are one line, nothing half-written --------------------------------


def test_a_results_dir_that_is_a_file_is_one_usage_error(pytester: pytest.Pytester) -> None:
    make_project(pytester.path)
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    (pytester.path / "results-file").write_text("x")
    result = pytester.runpytest_subprocess("-m", "preflight", f"--results-dir={pytester.path / 'results-file'}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--results-dir: " in result.stderr.str() and "results-file is a file, not a folder" in result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


# -- audit 2026-12 #12: odd /server_info answers are named, never silently dropped or trusted ---------


class _OddServerInfo(http.server.BaseHTTPRequestHandler):
    answer: dict[str, Any] = {}

    def do_GET(self) -> None:
        body = json.dumps(self.answer if self.path == "/server_info" else {"architectures": ["X"]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_a: object) -> None:
        pass


@pytest.mark.parametrize("states", ["oops", {"memory_usage": {}}, [1, 2]])
def test_internal_states_that_are_not_a_list_of_objects_are_an_error(states: Any) -> None:
    handler = type("H", (_OddServerInfo,), {"answer": {"version": "0.5.23", "internal_states": states}})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        with pytest.raises(server_info.LiveError, match=r"internal_states is .*, not a list of objects"):
            server_info.read_facts(url, timeout_s=5.0)
    finally:
        httpd.shutdown()


# -- audit 2026-12 #14: a crashed server's grandchild that left the session is stopped too ------------


ESCAPER = """
import os, sys, time
marker = sys.argv[1]
if os.fork() == 0:  # the middle process
    if os.fork() == 0:  # the grandchild: leaves the session, outlives both
        os.setsid()
        os.execvp("sleep", ["sleep", marker])
    time.sleep(1.0)
    os._exit(0)  # the grandchild is re-parented to init
time.sleep(2.0)
sys.exit(3)  # the server crashes during start-up
"""


def test_a_crashed_servers_grandchild_that_left_the_session_is_stopped(tmp_path: Path) -> None:
    marker = "47.1234"
    true = shutil.which("true") or "/bin/true"
    s = server.Server(ServerSpec(name="crash", python=true, argv=(), log_path=tmp_path / "s.log", startup_timeout_s=30))
    s.proc.wait()
    s.proc = subprocess.Popen([sys.executable, "-c", ESCAPER, marker], start_new_session=True)
    s.base_url = "http://127.0.0.1:9"  # nothing answers: the loop watches the tree until the crash
    try:
        with pytest.raises(ServerStartError, match="server exited with code 3 during startup"):
            s.wait_healthy()
    finally:
        s.stop(grace_s=1.0)
    time.sleep(0.2)
    left = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or [])]
    assert not left, f"the escaped grandchild survived: {left}"


# -- 13: each server start writes a fresh log, keeping the previous one -------------------------------


def test_each_server_start_begins_a_fresh_log_keeping_one_previous(tmp_path: Path) -> None:
    log = tmp_path / "servers" / "qwen36-mtp1.log"
    true = shutil.which("true") or "/bin/true"
    for run in ("first", "second", "third"):
        s = server.Server(ServerSpec(name="x", python=true, argv=(run,), log_path=log))
        s.proc.wait()
        s.stop(grace_s=1.0)
    assert "third" in log.read_text() and "second" not in log.read_text()
    previous = log.with_name("qwen36-mtp1.log.1").read_text()
    assert "second" in previous and "first" not in previous
    assert sorted(p.name for p in log.parent.iterdir()) == ["qwen36-mtp1.log", "qwen36-mtp1.log.1"]


# -- 15: one line and exit 2 (or a quiet exit), never a traceback -------------------------------------


def test_broken_pipe_in_a_real_pipeline_prints_nothing(tmp_path: Path) -> None:
    """`sglperf baseline show FILE | head -0`: the reader is gone before sglperf writes."""
    path = baseline_file(tmp_path / "mtp1.json")
    read_end, write_end = os.pipe()
    os.close(read_end)
    code = "import sys; from sglperf.cli import main; sys.exit(main(sys.argv[1:]))"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, "baseline", "show", str(path)],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == cli.EXIT_BROKEN_PIPE and proc.stderr == ""


def test_non_utf8_deployment_file_under_pytest_is_one_collection_error(pytester: pytest.Pytester) -> None:
    make_project(pytester.path)
    (pytester.path / "deployments" / "broken.toml").write_bytes(NOT_UTF8)
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    result = pytester.runpytest("-m", "preflight")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*broken.toml: not UTF-8 text (byte 0xe9 at offset 18)"])
    assert "Traceback" not in result.stdout.str() and "UnicodeDecodeError" not in result.stdout.str()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--sglang-version=x/../.."], "--sglang-version: SGLang version 'x/../..': not a release version"),
        (["--sglang-version=0.5.23", "--sglang-python=/usr/bin/python3"], "--sglang-python and --sglang-version"),
    ],
)
def test_option_mistakes_are_one_usage_error_before_any_item(
    pytester: pytest.Pytester, args: list[str], said: str
) -> None:
    make_project(pytester.path)
    pytester.makeini("[pytest]\ntestpaths = deployments\n")
    result = pytester.runpytest_subprocess("-m", "preflight", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in result.stderr.str(), result.stderr.str()
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert len(result.stdout.str() + result.stderr.str()) < 1000
