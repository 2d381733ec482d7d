"""pytest plugin: every deployment file becomes test items, per (variant, intent) and tier.

A thin layer: collection turns deployments into items; running an item asks the run's session
(`sglperf.session`) for a verdict and reports it. Ids: `<deployment>-<variant>-<intent>` (preflight),
`<deployment>-<variant>-<intent>-live`, `<deployment>-<variant>-live-vs-preflight`,
`<deployment>-<variant>-<workload>-c<concurrency>` (measurements).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from sglperf.model.files import SAFE_NAME_PATTERN, writable_folder_problem
from sglperf.model.progress import Progress
from sglperf.options import ATTACH_URL_ENV, PLUGIN_OPTIONS, RUN_ID_ENV
from sglperf.plugin.items import DeploymentFile, EffectSelection
from sglperf.plugin.keys import LIVE_KEY, PREFLIGHT_KEY, PROGRESS_KEY, SIGTERM_KEY
from sglperf.plugin.progress import LiveProgress
from sglperf.plugin.summary import RunSummary
from sglperf.plugin.user_tests import (
    MARKER_HELP,
    assert_baseline,
    group_by_server,
    make_variant_scheduler,
    mark_tiers,
    pytest_generate_tests,
    server_key,
    sglang_effective_args,
    sglang_measure,
    sglang_server,
    sglang_variant,
)
from sglperf.results.folder import RunStamp
from sglperf.runtime import gpus, server
from sglperf.session import LiveOptions, LiveSession, PreflightSession
from sglperf.sglang import envs

RESULTS_DIR_INPUT = "sglperf_results_dir"
RUN_INPUT = "sglperf_run"  # the run's id and start time, for xdist workers
__all__ = [
    "assert_baseline",
    "pytest_generate_tests",
    "sglang_effective_args",
    "sglang_measure",
    "sglang_server",
    "sglang_variant",
]
TIER_MARKERS = {
    "preflight": "SGLang's own argument resolution on the CPU, runner GPUs simulated",
    "live": "a real (or emulated) SGLang server per variant",
    "measure": "decode speed, TTFT, ITL and MTP acceptance against baselines",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglperf", "SGLang performance-regression suite")
    for spec in PLUGIN_OPTIONS:
        spec.add_to(group.addoption)
    parser.addini("sglperf_deployments", "folder holding deployment files", default="deployments")


def _results_dir(config: pytest.Config) -> Path:
    chosen = config.getoption("results_dir") or getattr(config, "workerinput", {}).get(RESULTS_DIR_INPUT)
    if chosen:
        return Path(chosen)
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return config.rootpath / "results" / stamp


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker writes into the controller's results folder."""
    options = node.config.stash[LIVE_KEY].options
    node.workerinput[RESULTS_DIR_INPUT] = str(options.results_dir)
    node.workerinput[RUN_INPUT] = [options.run.run_id, options.run.started_at]


def _run_stamp(config: pytest.Config) -> RunStamp:
    """The controller names the run; xdist workers take its name."""
    given = getattr(config, "workerinput", {}).get(RUN_INPUT)
    if given:
        return RunStamp(str(given[0]), str(given[1]))
    run_id = config.getoption("run_id") or os.environ.get(RUN_ID_ENV) or None
    if run_id is not None and not re.fullmatch(SAFE_NAME_PATTERN, run_id):
        raise pytest.UsageError(f"--run-id / ${RUN_ID_ENV}: {run_id[:80]!r} is not a safe name (letters, digits, _.-)")
    return RunStamp.new(run_id)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RunSummary(config), "sglperf-run-summary")
    config.pluginmanager.register(EffectSelection(), "sglperf-effect-selection")
    for name, meaning in TIER_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")
    config.addinivalue_line("markers", MARKER_HELP)

    _check_usage(config)
    results_dir = _results_dir(config)
    if problem := writable_folder_problem(results_dir):
        raise pytest.UsageError(f"--results-dir: {problem}; pass a writable folder")
    progress: Progress = LiveProgress(config, results_dir)
    config.stash[PROGRESS_KEY] = progress

    chosen: list[str] = []

    def python() -> str:
        if not chosen:
            chosen.append(
                envs.choose_python(config.getoption("sglang_python"), config.getoption("sglang_version"), progress)
            )
        return chosen[0]

    config.stash[PREFLIGHT_KEY] = PreflightSession(python, progress)
    options = LiveOptions(
        emulator=config.getoption("emulator"),
        emulator_config=config.getoption("emulator_config"),
        model_path=config.getoption("model_path"),
        api_key=config.getoption("api_key"),
        results_dir=results_dir,
        ignore_runner_mismatch=config.getoption("ignore_runner_mismatch"),
        gpu_timeout_s=config.getoption("gpu_timeout"),
        baselines_dir=Path(config.getoption("baselines_dir") or config.rootpath / "baselines"),
        update_baselines=config.getoption("update_baselines"),
        baseline_missing=config.getoption("baseline_missing"),
        baseline_mismatch=config.getoption("baseline_mismatch"),
        root=config.rootpath,
        attach_url=config.getoption("sglang_url") or os.environ.get(ATTACH_URL_ENV) or None,
        attach_gpus=config.getoption("sglang_url_gpus"),
        max_host_load=config.getoption("max_host_load"),
        max_gpu_throttle=config.getoption("max_gpu_throttle"),
        host_quiet_wait_s=config.getoption("quiet_wait"),
        gpu_telemetry=not config.getoption("no_gpu_telemetry"),
        run=_run_stamp(config),
    )
    config.stash[LIVE_KEY] = LiveSession(options, config.stash[PREFLIGHT_KEY], progress)
    # SIGTERM (CI cancel, xdist shutting a worker down) unwinds like Ctrl-C, so servers are torn down.
    try:
        config.stash[SIGTERM_KEY] = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    except ValueError:
        pass  # not the main thread


def _check_usage(config: pytest.Config) -> None:
    """Option mistakes, found once before collection: one usage error, not one failure per item."""
    python, version = config.getoption("sglang_python"), config.getoption("sglang_version")
    if python and version:
        raise pytest.UsageError("--sglang-python and --sglang-version both given: pass one of them")
    if version:
        try:
            envs.check_version(version)
        except envs.BadVersionError as exc:
            raise pytest.UsageError(f"--sglang-version: {exc}") from None


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(SIGTERM_KEY, None)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)
    live = config.stash.get(LIVE_KEY, None)
    if live is not None:
        live.close()
    pre = config.stash.get(PREFLIGHT_KEY, None)
    if pre is not None:
        pre.close()
    server.stop_all()


def _deployments_dir(config: pytest.Config) -> Path:
    return (config.rootpath / str(config.getini("sglperf_deployments"))).resolve()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".toml" and file_path.parent.resolve() == _deployments_dir(parent.config):
        return DeploymentFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)  # before -m deselects: users' tests get their tier markers here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_tiers(items)
    items[:] = group_by_server(items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") == "loadscope":
        return make_variant_scheduler(config, log)
    return None


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a variant's server once its last item ran here, freeing its GPUs for the next one."""
    key = server_key(item)
    if key is None or (nextitem is not None and server_key(nextitem) == key):
        return
    item.config.stash[LIVE_KEY].stop()


def pytest_report_header(config: pytest.Config) -> list[str]:
    live = config.stash[LIVE_KEY]
    lines = [f"sglperf results: {live.options.results_dir}"]
    if live.options.emulator:
        lines.append("sglperf live tier: SGLang EMULATOR (test double) - its numbers are not GPU results")
    if live.options.attach_url:
        lines.append(f"sglperf live tier: attached to {live.options.attach_url} (nothing launched or stopped)")
    if os.environ.get(gpus.SIMULATED_ENV):
        lines.append(f"sglperf GPUs: simulated ({os.environ[gpus.SIMULATED_ENV]})")
    return lines
