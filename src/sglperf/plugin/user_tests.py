"""Users' own tests on the suite's machinery: `@pytest.mark.sglang("qwen36", variants=[...])` runs a test
once per variant, and its fixtures share the one server per variant with the built-in items.

Test ids end in `[<deployment>-<variant>]`, so `-k qwen36` and `-k mtp3-full` select them with the
built-in items; tests that need a server are ordered next to their variant's built-in items (one
launch per variant) and, under `-n N --dist loadscope`, scheduled on the same worker.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from sglperf.errors import SglperfError
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.workload import LoadPoint, Workload
from sglperf.plugin.items import EFFECTS_NODE, ItemFailure, LiveTierItem, judge_measurement
from sglperf.plugin.keys import LIVE_KEY, PREFLIGHT_KEY
from sglperf.session import LiveSkip
from sglperf.session.handles import EffectiveArgsView, ServerHandle, VariantRef

MARKER = "sglang"
MARKER_HELP = (
    "sglang(deployment, variants=None): run the test once per variant of deployments/<deployment>.toml "
    "(all, or the listed ids), with the sglang_* fixtures bound to that variant"
)
# Fixtures that need the variant's running server (launched, emulated or attached).
SERVER_FIXTURES = frozenset({"sglang_server", "sglang_measure"})
Measure = Callable[..., MeasurementRecord]


def deployments_dir(config: pytest.Config) -> Path:
    return (config.rootpath / str(config.getini("sglperf_deployments"))).resolve()


@cache
def _load(path: Path) -> Deployment:
    return load(path)


def _refs(config: pytest.Config, marker: pytest.Mark, where: str) -> list[VariantRef]:
    key = marker.args[0] if marker.args else marker.kwargs.get("deployment")
    if not isinstance(key, str):
        raise pytest.UsageError(f"{where}: @pytest.mark.sglang needs a deployment key, e.g. sglang('qwen36')")
    path = deployments_dir(config) / f"{key}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in deployments_dir(config).glob("*.toml"))
        raise pytest.UsageError(f"{where}: no deployment {key!r} in {deployments_dir(config)} (known: {known})")
    try:
        deployment = _load(path)
    except DeploymentError as exc:
        raise pytest.UsageError(str(exc)) from None
    wanted = marker.kwargs.get("variants")
    ids = [v.id for v in deployment.variants]
    unknown = sorted(set(wanted or ()) - set(ids))
    if unknown:
        raise pytest.UsageError(f"{where}: {key} has no variant {', '.join(unknown)} (known: {', '.join(ids)})")
    return [VariantRef(path, key, v) for v in ids if wanted is None or v in wanted]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None or "sglang_variant" not in metafunc.fixturenames:
        return
    refs = _refs(metafunc.config, marker, metafunc.definition.nodeid)
    metafunc.parametrize("sglang_variant", refs, ids=[r.test_id for r in refs], indirect=True)


def _deployment(ref: VariantRef) -> Deployment:
    return _load(ref.deployment_path)


@pytest.fixture
def sglang_variant(request: pytest.FixtureRequest) -> VariantRef:
    """The variant this test instance runs for."""
    if not hasattr(request, "param"):
        raise pytest.UsageError(f"{request.node.nodeid}: sglang_* fixtures need @pytest.mark.sglang('<deployment>')")
    ref: VariantRef = request.param
    return ref


@pytest.fixture
def sglang_server(request: pytest.FixtureRequest, sglang_variant: VariantRef) -> ServerHandle:
    """The variant's running server (started on first use, shared with the built-in items)."""
    live = request.config.stash[LIVE_KEY]
    deployment = _deployment(sglang_variant)
    variant = deployment.variant(sglang_variant.variant)
    reason = live.skip_reason(deployment)
    if reason:
        pytest.skip(reason)
    try:
        return live.handle(deployment, variant)
    except LiveSkip as exc:
        pytest.skip(str(exc))
    except SglperfError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def sglang_effective_args(request: pytest.FixtureRequest, sglang_variant: VariantRef) -> EffectiveArgsView:
    """The variant's effective args: from its server when the test also uses `sglang_server` (live),
    else from SGLang's own resolution in preflight (no GPU needed)."""
    if "sglang_server" in request.fixturenames:
        handle: ServerHandle = request.getfixturevalue("sglang_server")
        return EffectiveArgsView(sglang_variant, "live", handle.sglang_version, handle.effective_args)
    try:
        return request.config.stash[PREFLIGHT_KEY].effective_view(_deployment(sglang_variant), sglang_variant.variant)
    except SglperfError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def sglang_measure(request: pytest.FixtureRequest, sglang_server: ServerHandle) -> Measure:
    """`measure(workload, concurrency=1)`: run a workload on the variant's server and compare it with
    (or, under --update-baselines, record it as) the variant's baseline, like the built-in items. A
    workload with a rate runs at its rate (``concurrency`` is then not given)."""
    live = request.config.stash[LIVE_KEY]
    deployment = _deployment(sglang_server.ref)
    variant = deployment.variant(sglang_server.ref.variant)

    def measure(workload: Workload, concurrency: int | None = None) -> MeasurementRecord:
        if workload.capacity is not None:
            pytest.fail(
                f"workload {workload.id} is a capacity search, run by its own items (pytest -k {workload.id}); "
                "to measure one of its rates here, give the workload that rate instead of capacity",
                False,
            )
        if workload.rate is not None and concurrency is not None:
            pytest.fail(f"workload {workload.id} runs at its rate: set its max_concurrency, not concurrency=", False)
        load = workload.load_points()[0] if workload.rate is not None else LoadPoint(concurrency or 1)
        try:
            return live.measure(deployment, variant, workload, load)
        except LiveSkip as exc:
            pytest.skip(str(exc))

    return measure


def assert_baseline(record: MeasurementRecord) -> None:
    """Fail (or skip) like a built-in measurement item: regressions, missing or mismatched baselines,
    refused refreshes, each with the same one-line messages."""
    try:
        judge_measurement(record)
    except ItemFailure as exc:
        pytest.fail(str(exc), pytrace=False)


# --- which server an item needs: ordering, teardown and xdist scheduling --------------------------


def server_key(item: pytest.Item) -> tuple[str, str] | None:
    """(deployment path, variant) of the server an item needs, or None."""
    if isinstance(item, LiveTierItem):
        return item.variant_key
    callspec = getattr(item, "callspec", None)
    fixtures = set(getattr(item, "fixturenames", ()))
    if callspec is None or "sglang_variant" not in callspec.params or not fixtures & SERVER_FIXTURES:
        return None
    ref: VariantRef = callspec.params["sglang_variant"]
    return (str(ref.deployment_path.resolve()), ref.variant)


def group_by_server(items: list[pytest.Item]) -> list[pytest.Item]:
    """Items needing the same server next to each other (at its first item's place), otherwise in order."""
    first: dict[tuple[str, str], int] = {}
    keys = []
    for index, item in enumerate(items):
        key = server_key(item)
        keys.append((first.setdefault(key, index), index) if key else (index, index))
    return [item for _, item in sorted(zip(keys, items), key=lambda pair: pair[0])]


def mark_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        if server_key(item) is not None and not isinstance(item, LiveTierItem):
            item.add_marker(
                pytest.mark.measure if "sglang_measure" in getattr(item, "fixturenames", ()) else pytest.mark.live
            )
        elif "sglang_effective_args" in getattr(item, "fixturenames", ()) and not isinstance(item, LiveTierItem):
            item.add_marker(pytest.mark.preflight)


def variant_scopes(config: pytest.Config) -> dict[str, str]:
    """Test-id prefix (`qwen36-mtp1`) -> xdist scope (`qwen36::mtp1`) for every shipped variant."""
    scopes = {}
    for path in sorted(deployments_dir(config).glob("*.toml")):
        try:
            deployment = _load(path)
        except DeploymentError:
            continue  # reported by collection, not here
        scopes.update({f"{deployment.key}-{v.id}": f"{deployment.key}::{v.id}" for v in deployment.variants})
    return scopes


def make_variant_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadscope`, with a variant's built-in items and users' tests of it in one scope."""
    from xdist.scheduler import LoadScopeScheduling

    scopes = variant_scopes(config)

    class VariantScopeScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            parts = nodeid.split("::")
            if parts[0].endswith(".toml") and len(parts) > 1:
                return f"{Path(parts[0]).stem}::{parts[1]}"
            param = re.search(r"\[(.+)\]$", nodeid)
            if param:
                # Several parameters join with "-": the longest known prefix is the variant.
                for prefix in sorted(scopes, key=len, reverse=True):
                    if param.group(1) == prefix or param.group(1).startswith(prefix + "-"):
                        return scopes[prefix]
            scope: str = super()._split_scope(nodeid)
            return scope

        # Effect items read both variants' measurements from the results folder, and under xdist those are
        # measured on other workers: their scopes are handed out only once no worker has anything else to run.

        def _assign_work_unit(self, node: Any) -> None:
            other = next((scope for scope in self.workqueue if not _is_effects(scope)), None)
            if other is not None:
                self.workqueue.move_to_end(other, last=False)  # the unit xdist's own code hands out
                super()._assign_work_unit(node)
                return
            others = [n for n in self.assigned_work if n is not node]
            if any(self._pending_of(self.assigned_work[n]) for n in others):
                # One worker waits for the effects (its last item with it: xdist runs an item once it knows
                # the next); the others end, as they would with nothing left.
                if any(not n.shutting_down for n in others):
                    node.shutdown()
                return
            while self.workqueue:
                super()._assign_work_unit(node)

        def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            # The last measurement done elsewhere releases the effects to the worker waiting for them.
            if self.workqueue and all(_is_effects(scope) for scope in self.workqueue):
                for waiting in [n for n in self.assigned_work if n is not node and not n.shutting_down]:
                    self._reschedule(waiting)

    return VariantScopeScheduling(config, log)


def _is_effects(scope: str) -> bool:
    return scope.endswith(f"::{EFFECTS_NODE}")
