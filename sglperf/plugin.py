"""pytest plugin: every deployment file becomes test items, per (variant, intent) and tier.

A thin layer: collection turns deployments into items; running an item asks the run's session
(`sglperf.session`) for a verdict and reports it. Ids: `<deployment>-<variant>-<intent>` (preflight),
`<deployment>-<variant>-<intent>-live`, `<deployment>-<variant>-live-vs-preflight`,
`<deployment>-<variant>-<workload>-c<concurrency>` (measurements).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglperf import envs, preflight, report, server
from sglperf.deployment import Deployment, DeploymentError, Variant, load
from sglperf.meter import MeterError
from sglperf.session import LiveOptions, LiveSession, LiveSkip, PreflightSession
from sglperf.verdict import Status, Verdict

PREFLIGHT_KEY = pytest.StashKey[PreflightSession]()
LIVE_KEY = pytest.StashKey[LiveSession]()
SIGTERM_KEY = pytest.StashKey[Any]()
RESULTS_DIR_INPUT = "sglperf_results_dir"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglperf", "SGLang performance-regression suite")
    add = group.addoption
    add("--sglang-python", metavar="PATH", help="interpreter of the SGLang environment to use (default: this one)")
    add("--sglang-version", metavar="VERSION",
        help="use sglperf's managed environment for this SGLang release (built on first use)")
    add("--emulator", action="store_true",
        help="run the live tier against the SGLang emulator (a test double; its numbers are not GPU results)")
    add("--emulator-config", metavar="JSON|@FILE", help="timing model and faults for the emulator")
    add("--model-path", metavar="PATH", help="checkpoint path on this runner (or $SGLPERF_MODEL_PATH)")
    add("--api-key", metavar="KEY", help="API key the servers require (or $SGLPERF_API_KEY)")
    add("--results-dir", metavar="DIR", help="where server logs and results go (default: results/<UTC time>)")
    add("--ignore-runner-mismatch", action="store_true",
        help="run live items even if the visible GPUs differ from the deployment's runner profile")
    add("--gpu-timeout", type=float, default=3600.0, metavar="S", help="how long to wait for a free GPU set")
    add("--baselines-dir", metavar="DIR", help="baseline store (default: <rootdir>/baselines)")
    add("--update-baselines", action="store_true",
        help="record the measured samples as the new baselines (refused for variants whose effective args are wrong)")
    add("--baseline-missing", choices=("fail", "skip"), default="fail", help="what a measurement without baseline does")
    add("--baseline-mismatch", choices=("fail", "skip"), default="fail",
        help="what a baseline from another runner profile, GPU model or GPU count does")
    parser.addini("sglperf_deployments", "folder holding deployment files", default="deployments")


def _results_dir(config: pytest.Config) -> Path:
    chosen = config.getoption("results_dir") or getattr(config, "workerinput", {}).get(RESULTS_DIR_INPUT)
    if chosen:
        return Path(chosen)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return config.rootpath / "results" / stamp


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist: every worker writes into the controller's results folder."""
    node.workerinput[RESULTS_DIR_INPUT] = str(node.config.stash[LIVE_KEY].options.results_dir)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


MARKERS = {
    "preflight": "SGLang's own argument resolution on the CPU, runner GPUs simulated",
    "live": "a real (or emulated) SGLang server per variant",
    "measure": "decode speed, TTFT, ITL and MTP acceptance against baselines",
}


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(RunSummary(config), "sglperf-run-summary")
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {meaning}")

    def progress(message: str) -> None:
        # Looked up per call: the terminal reporter does not exist yet while plugins configure.
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"[sglperf] {message}")
        else:
            print(f"[sglperf] {message}", file=sys.stderr, flush=True)

    chosen: list[str] = []

    def python() -> str:
        if not chosen:
            chosen.append(envs.choose_python(config.getoption("sglang_python"),
                                             config.getoption("sglang_version"), progress))
        return chosen[0]

    config.stash[PREFLIGHT_KEY] = PreflightSession(python)
    options = LiveOptions(
        emulator=config.getoption("emulator"), emulator_config=config.getoption("emulator_config"),
        model_path=config.getoption("model_path"), api_key=config.getoption("api_key"),
        results_dir=_results_dir(config), ignore_runner_mismatch=config.getoption("ignore_runner_mismatch"),
        gpu_timeout_s=config.getoption("gpu_timeout"),
        baselines_dir=Path(config.getoption("baselines_dir") or config.rootpath / "baselines"),
        update_baselines=config.getoption("update_baselines"), baseline_missing=config.getoption("baseline_missing"),
        baseline_mismatch=config.getoption("baseline_mismatch"), root=config.rootpath)
    config.stash[LIVE_KEY] = LiveSession(options, config.stash[PREFLIGHT_KEY], progress)
    # SIGTERM (CI cancel, xdist shutting a worker down) unwinds like Ctrl-C, so servers are torn down.
    try:
        config.stash[SIGTERM_KEY] = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    except ValueError:
        pass  # not the main thread


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
    return (config.rootpath / config.getini("sglperf_deployments")).resolve()


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".toml" and file_path.parent.resolve() == _deployments_dir(parent.config):
        return DeploymentFile.from_parent(parent, path=file_path)
    return None


class DeploymentFile(pytest.File):
    def collect(self) -> Iterator[pytest.Collector]:
        deployment = load(self.path)
        for variant in deployment.variants:
            yield VariantNode.from_parent(self, name=variant.id, deployment=deployment)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, DeploymentError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]


class VariantNode(pytest.Collector):
    """One variant's items. Under `pytest -n N --dist loadscope` a variant stays on one worker,
    so each variant's server is started once."""

    def __init__(self, *, deployment: Deployment, **kwargs: Any):
        super().__init__(**kwargs)
        self.deployment = deployment

    def collect(self) -> Iterator[pytest.Item]:
        d, variant = self.deployment, self.deployment.variant(self.name)
        expectations = d.expectations_for(variant)
        for intent in expectations:
            yield PreflightItem.from_parent(self, name=f"{d.key}-{variant.id}-{intent}",
                                           deployment=d, variant_id=variant.id, intent=intent)
        for intent in expectations:
            yield LiveItem.from_parent(self, name=f"{d.key}-{variant.id}-{intent}-live",
                                      deployment=d, variant_id=variant.id, intent=intent)
        yield DriftItem.from_parent(self, name=f"{d.key}-{variant.id}-live-vs-preflight",
                                    deployment=d, variant_id=variant.id, intent="")
        for workload in d.workloads:
            for concurrency in workload.concurrency:
                yield MeasureItem.from_parent(self, name=f"{d.key}-{variant.id}-{workload.id}-c{concurrency}",
                                              deployment=d, variant_id=variant.id, intent="",
                                              workload_id=workload.id, concurrency=concurrency)


class IntentFailed(Exception):
    def __init__(self, verdict: Verdict):
        super().__init__(verdict.message())
        self.verdict = verdict


class SglperfItem(pytest.Item):
    tier = ""

    def __init__(self, *, deployment: Deployment, variant_id: str, intent: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.deployment = deployment
        self.variant_id = variant_id
        self.intent = intent
        self.add_marker(getattr(pytest.mark, self.tier))
        self.user_properties.append(("sglperf_tier", self.tier))

    @property
    def variant_key(self) -> tuple[str, str]:
        return (str(self.deployment.path.resolve()), self.variant_id)

    def report_verdict(self, verdict: Verdict) -> None:
        _append_verdict(self.config, verdict)
        self.user_properties += [("sglang_version", verdict.sglang_version), ("expected", verdict.expected),
                                 ("effective", str(verdict.actual)), ("verdict", verdict.status.value)]
        if verdict.status == Status.UNPROVEN:
            # Reported where the item is, not at this line of the plugin.
            raise pytest.skip.Exception(f"unproven in {verdict.tier}: {verdict.detail}", _use_item_location=True)
        if verdict.status != Status.PASS:
            raise IntentFailed(verdict)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, (IntentFailed, preflight.PreflightError, server.ServerStartError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)  # type: ignore[return-value]

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.tier} {self.name}"


class PreflightItem(SglperfItem):
    tier = "preflight"

    def runtest(self) -> None:
        self.report_verdict(self.config.stash[PREFLIGHT_KEY].verdict(self.deployment, self.variant_id, self.intent))


class _LiveTierItem(SglperfItem):
    tier = "live"

    def live(self) -> LiveSession:
        return self.config.stash[LIVE_KEY]

    def setup(self) -> None:
        reason = self.live().skip_reason(self.deployment)
        if reason:
            raise pytest.skip.Exception(reason, _use_item_location=True)

    def variant(self) -> Variant:
        return self.deployment.variant(self.variant_id)


class LiveItem(_LiveTierItem):
    def runtest(self) -> None:
        try:
            verdicts = self.live().verdicts(self.deployment, self.variant())
        except LiveSkip as exc:
            raise pytest.skip.Exception(str(exc), _use_item_location=True) from None
        self.report_verdict(next(v for v in verdicts if v.intent == self.intent))


class DriftFailed(Exception):
    pass


class DriftItem(_LiveTierItem):
    def runtest(self) -> None:
        found, lines = self.live().drift(self.deployment, self.variant())
        self.user_properties.append(("drift", "; ".join(lines)))
        if lines:
            self.add_report_section("call", "live vs preflight", "\n".join(lines))
        if found.intent_fields:
            raise DriftFailed(f"{self.name}: preflight mispredicted fields that intents read: "
                              + "; ".join(lines[: len(found.intent_fields)]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, DriftFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class MeasureFailed(Exception):
    pass


class MeasureItem(_LiveTierItem):
    tier = "measure"

    def __init__(self, *, workload_id: str, concurrency: int, **kwargs: Any):
        super().__init__(**kwargs)
        self.workload_id = workload_id
        self.concurrency = concurrency

    def runtest(self) -> None:
        workload = next(w for w in self.deployment.workloads if w.id == self.workload_id)
        try:
            outcome, record = self.live().measure(self.deployment, self.variant(), workload, self.concurrency)
        except LiveSkip as exc:
            raise pytest.skip.Exception(str(exc), _use_item_location=True) from None
        summary = record["summary"]
        self.user_properties.append(("sglperf_measurement", json.dumps({
            "key": outcome.key, "emulated": record["emulated"], "status": outcome.baseline_status,
            "medians": {m: s["median"] for m, s in summary.items()},
            "outcomes": {c["metric"]: c["outcome"] for c in record["comparisons"]},
            "changes": outcome.changes})))
        for metric, s in sorted(summary.items()):
            self.user_properties.append((f"median_{metric}", s["median"]))
        lines = [f"{m}: median {s['median']:.4g} (p10 {s['p10']:.4g}, p90 {s['p90']:.4g}, n={s['n']})"
                 for m, s in sorted(summary.items())]
        lines += [c["message"] for c in record["comparisons"]] + [f"note: {n}" for n in outcome.notes]
        lines += [f"baseline: {c}" for c in outcome.changes]
        self.add_report_section("call", "measurement" + (" (EMULATOR, not GPU results)" if record["emulated"] else ""),
                                "\n".join(lines))
        if outcome.skip_reason:
            raise pytest.skip.Exception(outcome.skip_reason, _use_item_location=True)
        if outcome.problems:
            context = f" ({'; '.join(outcome.notes)})" if outcome.notes else ""
            raise MeasureFailed("\n".join([f"{outcome.key}{context}:", *(f"  {p}" for p in outcome.problems)]))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, (MeasureFailed, MeterError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


def _append_verdict(config: pytest.Config, verdict: Verdict) -> None:
    """One JSON line per verdict; one file per pytest process, so xdist workers never interleave."""
    folder = config.stash[LIVE_KEY].options.results_dir
    folder.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(folder / f"verdicts-{worker}.jsonl", "a") as fh:
        fh.write(json.dumps(verdict.to_record(), sort_keys=True) + "\n")


class RunSummary:
    """Collects measurement summaries (from xdist workers too) and ends the run with the report."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rows: list[dict[str, Any]] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.rows += [json.loads(v) for k, v in report.user_properties if k == "sglperf_measurement"]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        if self.rows:
            emulated = any(r["emulated"] for r in self.rows)
            tr.section("sglperf measurements" + (" (EMULATOR: a test double, not GPU results)" if emulated else ""))
            tr.write_line(f"{'item':44} {'decode tok/s':>12} {'TTFT s':>9} {'ITL ms':>8} {'accept':>7}  baseline")
            for r in sorted(self.rows, key=lambda r: r["key"]):
                tr.write_line(_summary_line(r))
            changes = [c for r in self.rows for c in r["changes"]]
            if changes:
                tr.section("sglperf baseline changes")
                for line in changes:
                    tr.write_line(line)
        folder = self.config.stash[LIVE_KEY].options.results_dir
        if not hasattr(self.config, "workerinput") and folder.is_dir():
            try:
                tr.write_line(f"sglperf report: {report.write(folder, history=_history_dirs(folder))}")
            except ValueError:
                pass  # nothing was recorded in this run


def _summary_line(r: dict[str, Any]) -> str:
    m = r["medians"]
    regressed = [k for k, v in r["outcomes"].items() if v in ("regression", "insufficient")]
    improved = [k for k, v in r["outcomes"].items() if v == "improvement"]
    verdict = (f"REGRESSION: {', '.join(regressed)}" if regressed else
               f"improved: {', '.join(improved)} (refresh with --update-baselines)" if improved else r["status"])
    nan = float("nan")
    itl_ms = m["itl_s"] * 1000 if m.get("itl_s") else nan
    return (f"{r['key']:44} {m.get('decode_tok_s', nan):12.1f} {m.get('ttft_s', nan):9.3f} {itl_ms:8.2f} "
            f"{m.get('accept_length', nan):7.2f}  {verdict}")


def _history_dirs(folder: Path) -> list[Path]:
    parent = folder.resolve().parent
    return sorted(p for p in parent.iterdir() if p.is_dir() and p != folder.resolve() and (p / "measurements").is_dir())


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Stop a variant's server once its last item ran here, freeing its GPUs for the next one."""
    if not isinstance(item, _LiveTierItem):
        return
    if isinstance(nextitem, _LiveTierItem) and nextitem.variant_key == item.variant_key:
        return
    item.live().stop()


def pytest_report_header(config: pytest.Config) -> list[str]:
    live = config.stash[LIVE_KEY]
    lines = [f"sglperf results: {live.options.results_dir}"]
    if live.options.emulator:
        lines.append("sglperf live tier: SGLang EMULATOR (test double) - its numbers are not GPU results")
    if os.environ.get("SGLPERF_SIMULATED_GPUS"):
        lines.append(f"sglperf GPUs: simulated ({os.environ['SGLPERF_SIMULATED_GPUS']})")
    return lines
