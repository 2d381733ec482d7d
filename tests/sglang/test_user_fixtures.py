"""Users' own tests (examples/) on the suite's fixtures, end to end against the emulator: one server
per variant shared with the built-in items, ids that -k selects, baselines like the built-in items,
the same under xdist; and attach mode against a server started outside pytest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from sglperf.runtime.server import free_port

from ..support.project import NEW_SGLANG, ROOT, SglangPython, make_project, with_workloads
from ..support.quiet_host import QUIET_WAIT, skip_if_the_host_stayed_busy

# The tests that measure run alone under pytest-xdist (quiet_host, tests/conftest.py); collection and
# the live checks of an attached server run beside other tests.

pytest_plugins = ["pytester"]
VARIANTS = ("mtp1", "mtp3-defaults", "mtp3-full", "mtp3-prefill-graph")
# Prefill long enough that TTFT (about 20 ms) dwarfs the jitter of a busy 2-CPU box: at 1e-5 s per
# token TTFT was 2.6 ms, and a CI run saw +5.4% and +11.7% between two unchanged runs (threshold 5%).
FAST = {"decode_step_s": 0.002, "prefill_s_per_token": 0.0005, "startup_s": 0.2}


@dataclass
class Project:
    """A pytest run in the project folder, as a user runs it, into the results folder it names."""

    pytester: pytest.Pytester
    python: str

    @property
    def path(self) -> Path:
        return self.pytester.path

    def __call__(self, results: str, *args: str) -> pytest.RunResult:
        result = self.pytester.runpytest_subprocess(
            f"--sglang-python={self.python}",
            f"--results-dir={self.path / results}",
            f"--baselines-dir={self.path / 'baselines'}",
            f"--emulator-config={json.dumps(FAST)}",
            "-p",
            "no:cacheprovider",
            "-rA",
            QUIET_WAIT,
            *args,
            timeout=600,
        )
        skip_if_the_host_stayed_busy(result)
        return result


@pytest.fixture
def project(pytester: pytest.Pytester, sglang_python: SglangPython, monkeypatch: pytest.MonkeyPatch) -> Project:
    """The repository's layout with qwen36 (no built-in workloads) and the examples as user tests."""
    monkeypatch.delenv("SGLPERF_SIMULATED_GPUS", raising=False)
    monkeypatch.setenv("SGLPERF_EXAMPLE_OUTPUT_LEN", "16")
    monkeypatch.setenv("SGLPERF_EXAMPLE_REPEATS", "5")
    # Without the inert single-batch overlap request, every item of every variant can pass.
    make_project(pytester.path, with_workloads("").replace("single_batch_overlap = true, ", ""))
    shutil.copytree(ROOT / "examples", pytester.path / "examples")
    pytester.makeini("[pytest]\ntestpaths = deployments examples\n")
    return Project(pytester, sglang_python(NEW_SGLANG))


def _launches(results: Path) -> dict[str, int]:
    """Server starts per variant, from every log the runs kept (a restart keeps the previous as .log.1)."""
    counts: dict[str, int] = {}
    for log in (results / "servers").glob("*.log*"):
        if log.suffix == ".json":
            continue
        name = log.name.split(".log")[0]
        counts[name] = counts.get(name, 0) + log.read_text().count("# sglperf: started at")
    return counts


@pytest.mark.quiet_host
def test_examples_share_one_server_per_variant_and_record_then_compare(project: Project) -> None:
    recorded = project("r1", "--emulator", "-k", "qwen36", "--update-baselines")
    outcomes = recorded.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("error", 0) == 0, recorded.stdout.str()[-3000:]
    recorded.stdout.fnmatch_lines(
        [
            "PASSED examples/test_custom_workload.py::test_short_answers_do_not_regress[[]qwen36-mtp1[]]",
            "SKIPPED*the emulator has no grammar backend*",
        ]
    )
    assert _launches(project.path / "r1") == {f"qwen36-{v}": 1 for v in VARIANTS}
    assert (project.path / "baselines" / "emulator").rglob("*.json")

    compared = project("r2", "--emulator", "-k", "short_answers")
    compared.assert_outcomes(passed=4)
    record = json.loads((project.path / "r2" / "measurements" / "qwen36-mtp1-short-answers-c1.json").read_text())
    assert record["baseline_status"] == "compared" and record["comparisons"]


def test_ids_select_user_tests_with_the_built_in_items(project: Project) -> None:
    result = project("r1", "--emulator", "-k", "mtp3-prefill-graph", "--collect-only", "-q")
    lines = [ln for ln in result.stdout.lines if "::" in ln]
    assert lines and all("mtp3-prefill-graph" in ln for ln in lines)
    assert any(ln.startswith("examples/") for ln in lines) and any(ln.startswith("deployments/") for ln in lines)


@pytest.mark.quiet_host
def test_xdist_loadscope_keeps_a_variants_user_tests_with_its_server(project: Project) -> None:
    result = project("r1", "--emulator", "-k", "qwen36 and not structured", "-n", "2", "--dist", "loadscope")
    assert result.parseoutcomes().get("passed", 0) > 0
    assert _launches(project.path / "r1") == {f"qwen36-{v}": 1 for v in VARIANTS}


def _wait_for(url: str, within_s: float = 30.0) -> None:
    """Until ``url`` answers 200 (a server still starting refuses connections); a test then fails on what
    the server said, not on this."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


@pytest.fixture
def outside_server(
    project: Project, sglang_python: SglangPython, tmp_path: Path
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """An emulator started outside pytest, serving what preflight resolves for qwen36/mtp1."""
    from sglperf import preflight
    from sglperf.model.deployment_file import load
    from sglperf.sglang.flags import launch_plan

    deployment = load(project.path / "deployments" / "qwen36.toml")
    resolver = preflight.Resolver(sglang_python(NEW_SGLANG), deployment.runner, cache_dir=tmp_path / "cache")
    check = next(c for c in preflight.check(deployment, resolver) if c.variant.id == "mtp1")
    release = resolver.release()
    resolver.close()
    effective = tmp_path / "effective.json"
    assert check.resolution is not None
    effective.write_text(json.dumps({"sglang_version": release.version, "effective": check.resolution.effective}))
    argv = launch_plan(
        deployment, check.variant, release.parser, str(deployment.config_path.parent), deployment.architectures
    )
    port = free_port()
    env = {
        **os.environ,
        "SGLPERF_EMULATOR_EFFECTIVE": str(effective),
        "SGLPERF_EMULATOR_CONFIG": json.dumps({**FAST, "weight_gb_per_gpu": 25.49}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglperf.testing.emulator", *argv.argv, "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    _wait_for(f"{url}/health")
    yield url, proc
    proc.kill()
    proc.wait()


def test_attach_checks_a_running_server_and_leaves_it_running(
    project: Project, outside_server: tuple[str, subprocess.Popen[bytes]]
) -> None:
    url, proc = outside_server
    # An attached emulator is measured as one only with --emulator (the server's word alone never picks
    # the baseline store); without it the run refuses it.
    mistaken = project("r0", "-m", "live", "-k", "qwen36-mtp1-prefill", f"--sglang-url={url}")
    mistaken.stdout.fnmatch_lines(["*says it is the emulator, but this run expects SGLang (pass --emulator*"])
    result = project("r1", "--emulator", "-m", "live", "-k", "qwen36-mtp1", f"--sglang-url={url}")
    # prefill, decode, overlap, speculative, live-vs-preflight, and the examples' live test; structured output skips
    result.assert_outcomes(passed=6, skipped=1)
    result.stdout.fnmatch_lines([f"*attached to {url}*"])
    assert proc.poll() is None, "the attached server was stopped"
    assert not (project.path / "r1" / "servers").exists()  # nothing launched

    refused = project(
        "r2",
        "--emulator",
        "-m",
        "measure or live",
        "-k",
        "qwen36-mtp1 and short",
        f"--sglang-url={url}",
        "--update-baselines",
    )
    refused.stdout.fnmatch_lines(["*identity is incomplete*--sglang-url-gpus*"])
    assert proc.poll() is None


def test_attach_to_a_bad_url_or_something_that_is_not_sglang_is_one_clear_error(
    project: Project, tmp_path: Path
) -> None:
    port = free_port()
    result = project("r1", "-m", "live", "-k", "qwen36-mtp1", f"--sglang-url=http://127.0.0.1:{port}")
    result.stdout.fnmatch_lines([f"*--sglang-url http://127.0.0.1:{port}: not a reachable SGLang server*"])
    assert "Traceback" not in result.stdout.str()
    (tmp_path / "server_info").write_text(json.dumps({"hello": "world"}))
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for(f"http://127.0.0.1:{port}/server_info")  # else "not reachable" would be all it tests
        result = project("r2", "-m", "live", "-k", "qwen36-mtp1", f"--sglang-url=http://127.0.0.1:{port}")
        result.stdout.fnmatch_lines(["*: not a reachable SGLang server: *none of /model_info, /get_model_info exists*"])
        assert "Traceback" not in result.stdout.str()
        (tmp_path / "model_info").write_text(json.dumps({"model_path": "/models/x"}))
        result = project("r3", "-m", "live", "-k", "qwen36-mtp1", f"--sglang-url=http://127.0.0.1:{port}")
        result.stdout.fnmatch_lines([f"*--sglang-url http://127.0.0.1:{port}: answers /server_info but is not SGLang*"])
        assert "Traceback" not in result.stdout.str()
    finally:
        other.kill()
        other.wait()
