"""`sglperf bisect`: which SGLang release changed one measurement item, and through which decision.

The walk (`upgrade-check --walk`) resolves every release of the range first and says where the item's
effective configuration changed; `sglperf.upgrade.bisect` searches with those releases first, measuring
each step as a paired comparison on fresh servers (`sglperf.session.release_sessions`). The results folder
holds the state (resumed by running the same command again), each release's own results folder (one run
each in the history store) and the servers' logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sglperf.commands import UsageError
from sglperf.commands import resolve as resolve_command
from sglperf.errors import SglperfError
from sglperf.history import ingest, location
from sglperf.model.deployment import Deployment, Variant
from sglperf.model.deployment_file import discover
from sglperf.model.metrics import METRICS
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.progress import Progress, silent
from sglperf.model.workload import LoadPoint, Workload, measurement_key
from sglperf.results import folder as results_folder
from sglperf.runtime import server
from sglperf.session.live_session import emulator_config_for
from sglperf.session.release_sessions import ReleaseSessions
from sglperf.session.running import LiveOptions, LiveSkip
from sglperf.sglang import envs
from sglperf.upgrade import bisect as search

DEFAULT_METRIC = "decode_tok_s"


@dataclass(frozen=True)
class BisectRequest:
    deployment: Path
    from_version: str
    to_version: str
    selector: str  # picks one measurement item of the deployment (a part of its key)
    metric: str = DEFAULT_METRIC
    results_dir: Path | None = None  # None: results/bisect/<item>-<from>-<to>
    emulator: bool = False
    emulator_config: str | None = None
    pythons: Mapping[str, str] = field(default_factory=dict)  # release -> its SGLang interpreter, given
    model_path: str | None = None
    budget: search.Budget = field(default_factory=search.Budget)
    history: str | None = None  # --history-store; None: the default
    max_host_load: float | None = None  # --max-host-load; None: the runner profile's


@dataclass(frozen=True)
class Item:
    deployment: Deployment
    variant: Variant
    workload: Workload
    load: LoadPoint

    @property
    def key(self) -> str:
        return measurement_key(self.deployment.key, self.variant.id, self.workload.id, self.load.tag)


def find_item(deployment: Deployment, selector: str) -> Item:
    """The one measurement item of ``deployment`` whose key is ``selector`` or, failing that, holds it."""
    items = [
        Item(deployment, v, w, load)
        for v in deployment.variants
        for w in deployment.workloads
        for load in w.load_points()
    ]
    exact = [i for i in items if i.key == selector]
    found = exact or [i for i in items if selector in i.key]
    if len(found) != 1:
        keys = ", ".join(i.key for i in (found or items))
        what = "matches none" if not found else f"matches {len(found)}"
        raise UsageError(f"-k {selector!r} {what} of {deployment.path.name}'s measurement items; one of: {keys}")
    return found[0]


def results_dir_for(request: BisectRequest, item: Item) -> Path:
    return request.results_dir or Path("results") / "bisect" / f"{item.key}-{request.from_version}-{request.to_version}"


@dataclass(frozen=True)
class BisectResult:
    outcome: search.BisectOutcome
    source: NumbersSource  # whose numbers the comparisons are
    folder: Path  # the results folder: the state, each release's folder, the servers' logs


def bisect(request: BisectRequest, progress: Progress = silent) -> BisectResult:
    """Run (or resume) the bisect the request asks for and return its answer."""
    if request.metric not in METRICS:
        raise UsageError(f"--metric {request.metric}: not a metric sglperf measures; one of: {', '.join(METRICS)}")
    found = discover([request.deployment])
    if len(found) != 1:
        raise UsageError(f"{request.deployment}: give one deployment file to bisect, not {len(found)}")
    item = find_item(found[0], request.selector)
    if request.emulator:
        try:  # bad input now, not as every release "cannot run" later
            emulator_config_for(request.emulator_config, request.from_version, item.variant.id)
        except server.ServerStartError as exc:
            raise UsageError(str(exc)) from None
    folder = results_dir_for(request, item)
    state_path = folder / results_folder.BISECT_FILE
    state = search.read_state(state_path)
    config = request.emulator_config or "{}"
    setup = f"the emulator, --emulator-config {config}" if request.emulator else "SGLang servers"
    question = (str(request.deployment), item.key, request.metric, request.from_version, request.to_version, setup)
    if state is not None and state.question() != question:
        raise UsageError(
            f"{state_path}: holds the bisect of {', '.join(state.question())}, not this one: give another --results-dir"
        )
    if state is None:
        state = _new_state(request, item, setup, progress)
        search.write_state(state_path, state)
    else:
        done = sum(len(c.sessions) for c in state.comparisons)
        progress(f"resuming the bisect in {state_path}: {len(state.comparisons)} comparison(s), {done} session(s) kept")
    progress(search.plan_line(state, request.budget))
    store = location.open_store(location.chosen(request.history))

    def recorded(release_folder: Path) -> None:
        if store is not None:
            store.add_run(ingest.from_folder(release_folder))

    options = LiveOptions(
        emulator=request.emulator,
        emulator_config=request.emulator_config,
        model_path=request.model_path,
        results_dir=folder,
        baselines_dir=folder / "no-baselines",  # releases are compared with each other, never a baseline
        baseline_missing="skip",
        root=request.deployment.parent,
        max_host_load=request.max_host_load,
    )
    sessions = ReleaseSessions(
        options,
        item.deployment,
        item.variant,
        item.workload,
        item.load,
        lambda release: request.pythons.get(release) or envs.choose_python(None, release, progress),
        progress,
        recorded,
    )
    try:
        outcome = search.Bisection(
            state, sessions, lambda s: search.write_state(state_path, s), request.budget, progress
        ).run()
    except LiveSkip as exc:
        raise UsageError(f"{item.key}: cannot be measured here: {exc}") from None
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"the bisect's state is kept in {state_path}: the same command resumes it") from None
    finally:
        sessions.close()
        if store is not None:
            store.close()
    source = NumbersSource.of(emulated=request.emulator, device="cpu" if item.deployment.runner.is_cpu else None)
    return BisectResult(outcome, source, folder)


def _new_state(request: BisectRequest, item: Item, setup: str, progress: Progress) -> search.BisectState:
    """The question, with the walk's answer: every release of the range and where the item's config changed."""
    progress(f"walking SGLang {request.from_version} -> {request.to_version} for {item.key}'s effective config")
    try:
        old_python = request.pythons.get(request.from_version) or envs.choose_python(
            None, request.from_version, progress
        )
        outcome = resolve_command.upgrade_check([item.deployment], old_python, request.to_version, True, progress)
    except SglperfError as exc:
        raise UsageError(f"the walk {request.from_version} -> {request.to_version} failed: {exc}") from None
    walk = outcome.walk
    assert walk is not None  # asked for
    changes = search.changes_for(walk.transitions, item.deployment.key, item.variant.id)
    floor = item.deployment.thresholds_for(item.workload).get(request.metric, METRICS[request.metric].default_threshold)
    return search.BisectState(
        deployment=str(request.deployment),
        item=item.key,
        metric=request.metric,
        from_version=request.from_version,
        to_version=request.to_version,
        setup=setup,
        floor=floor,
        releases=walk.releases,
        candidates=search.candidates_of(changes, walk.releases),
        changes=changes,
    )
