"""Collection: a deployment file becomes one collector per variant and one item per (intent, tier),
per live-vs-preflight divergence, and per (workload, load) measurement: each concurrency, or its rate."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sglperf.baselines.variant_effects import variant_effects
from sglperf.errors import SglperfError
from sglperf.model.deployment import EFFECTS, Deployment, Variant
from sglperf.model.deployment_file import load
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.variant_effect import EffectVerdict, VariantEffect
from sglperf.model.verdict import Status, Verdict
from sglperf.model.workload import LoadPoint, measurement_key
from sglperf.plugin.keys import CONFIGS_WRITTEN_KEY, COUNTERBALANCED_KEY, LIVE_KEY, PREFLIGHT_KEY, xdist_worker
from sglperf.results import folder as results_folder
from sglperf.runtime.provenance import effective_config_record
from sglperf.session import LiveSession, LiveSkip
from sglperf.session.counterbalance import Counterbalanced

MEASUREMENT_PROPERTY = "sglperf_measurement"
# The collector of a deployment's effect items (`EffectsNode`): under xdist its scope runs last.
EFFECTS_NODE = EFFECTS


class SGLangCaveat(UserWarning):
    """A request overrides one of SGLang's own rules; the text is SGLang's reason for the rule."""


class ItemFailure(SglperfError):
    """A failure sglperf explains in full: shown as its message, without a traceback."""


BUG_NOTE = "unexpected error, a bug in sglperf: please report it with this traceback"


def explained(excinfo: pytest.ExceptionInfo[BaseException]) -> str | None:
    """The one line of an error sglperf explains; None for anything else."""
    return str(excinfo.value) if isinstance(excinfo.value, SglperfError) else None


def marked_as_bug(excinfo: pytest.ExceptionInfo[BaseException], shown: Any) -> Any:
    """pytest's own report of an unexplained error, traceback and all, with a section saying it is a bug."""
    # pytest.fail(..., pytrace=False) is pytest's explained failure, not ours to call a bug.
    add_section = getattr(shown, "addsection", None)
    if callable(add_section) and not isinstance(excinfo.value, pytest.fail.Exception):
        add_section("sglperf", BUG_NOTE)
    return shown


def _skip(reason: str) -> BaseException:
    # Reported where the item is, not at this line of the plugin.
    return pytest.skip.Exception(reason, _use_item_location=True)


class DeploymentFile(pytest.File):
    def collect(self) -> Iterator[pytest.Collector]:
        deployment = load(self.path)
        # A [topology]'s role variants ("plain.prefill") are collected under their variant: one node, so that
        # --dist loadscope keeps them on one worker, which starts the topology once.
        for name in dict.fromkeys(v.base or v.id for v in deployment.variants):
            yield VariantNode.from_parent(self, name=name, deployment=deployment)
        if any(v.expect_effect for v in deployment.variants):
            yield EffectsNode.from_parent(self, name=EFFECTS_NODE, deployment=deployment)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        message = explained(excinfo)
        return message if message is not None else marked_as_bug(excinfo, super().repr_failure(excinfo))


class VariantNode(pytest.Collector):
    """One variant's items. Under `pytest -n N --dist loadscope` a variant stays on one worker,
    so each variant's server is started once."""

    def __init__(self, *, deployment: Deployment, **kwargs: Any):
        super().__init__(**kwargs)
        self.deployment = deployment

    def collect(self) -> Iterator[pytest.Item]:
        for variant in self.deployment.variants:
            if (variant.base or variant.id) == self.name:
                yield from self._variant_items(variant)

    def _variant_items(self, variant: Variant) -> Iterator[pytest.Item]:
        d = self.deployment
        expectations = d.expectations_for(variant)
        for intent in expectations:
            yield PreflightItem.from_parent(
                self, name=f"{d.key}-{variant.id}-{intent}", deployment=d, variant_id=variant.id, intent=intent
            )
        role = d.role_of(variant)
        if role is not None and role.nodes > 1:
            yield RanksItem.from_parent(
                self, name=f"{d.key}-{variant.id}-ranks", deployment=d, variant_id=variant.id, intent=""
            )
        for intent in expectations:
            yield LiveItem.from_parent(
                self, name=f"{d.key}-{variant.id}-{intent}-live", deployment=d, variant_id=variant.id, intent=intent
            )
        yield LiveVsPreflightItem.from_parent(
            self, name=f"{d.key}-{variant.id}-live-vs-preflight", deployment=d, variant_id=variant.id, intent=""
        )
        for workload in d.workloads if d.measures(variant) else ():
            for point in workload.load_points():
                yield MeasureItem.from_parent(
                    self,
                    name=measurement_key(d.key, variant.id, workload.id, point.tag),
                    deployment=d,
                    variant_id=variant.id,
                    intent="",
                    workload_id=workload.id,
                    load=point,
                )
            if workload.capacity is not None:
                yield CapacityItem.from_parent(
                    self,
                    name=f"{d.key}-{variant.id}-{workload.id}-capacity",
                    deployment=d,
                    variant_id=variant.id,
                    intent="",
                    workload_id=workload.id,
                )


class EffectsNode(pytest.Collector):
    """The effects variants declare (expect_effect), after every variant: each holds one variant's rounds
    against the reference variant's, so both must have been measured first."""

    def __init__(self, *, deployment: Deployment, **kwargs: Any):
        super().__init__(**kwargs)
        self.deployment = deployment

    def collect(self) -> Iterator[pytest.Item]:
        d = self.deployment
        for variant in d.variants:
            for workload in (w for w in d.workloads if w.id in variant.expect_effect):
                for point in workload.load_points():
                    yield VariantEffectItem.from_parent(
                        self,
                        name=measurement_key(d.key, variant.id, workload.id, point.tag) + "-effect",
                        deployment=d,
                        variant_id=variant.id,
                        intent="",
                        workload_id=workload.id,
                        load=point,
                    )


class EffectSelection:
    """An effect item runs only beside both measurements it compares: `-k mtp1` or `-m "not measure"` that
    leaves out the variant's or the reference's measurement deselects it, rather than skipping it."""

    @pytest.hookimpl(trylast=True)  # after -k and -m have deselected
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        measured = {
            (i.deployment.path, i.variant_id, i.workload_id, i.load.tag) for i in items if isinstance(i, MeasureItem)
        }
        keep: list[pytest.Item] = []
        drop: list[pytest.Item] = []
        for item in items:
            if isinstance(item, VariantEffectItem):
                d, point = item.deployment, (item.workload_id, item.load.tag)
                needed = {(d.path, v, *point) for v in (d.reference, item.variant_id)}
                (keep if needed <= measured else drop).append(item)
            else:
                keep.append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


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
        """Which server the item needs: its variant's, or for a role variant ("plain.prefill") its topology's,
        which every role of the variant shares (stopped only after the last of them)."""
        variant = self.deployment.variant(self.variant_id)
        return (str(self.deployment.path.resolve()), variant.base or variant.id)

    def effective_config(self) -> Mapping[str, Any] | None:
        """The variant's whole effective config as this tier saw it (None: it has none)."""
        return None

    def report_verdict(self, verdict: Verdict) -> None:
        _append_verdict(self.config, verdict)
        effective = self.effective_config()
        if effective is not None:
            _append_config(self.config, verdict, effective)
        self.user_properties += [
            ("sglang_version", verdict.sglang_version),
            ("expected", verdict.expected),
            ("effective", str(verdict.actual)),
            ("verdict", verdict.status.value),
        ]
        if verdict.caveats:
            # Passed, but only because the request overrides one of SGLang's own rules: shown in the
            # warnings summary of every run, not only with -rA.
            self.warn(SGLangCaveat(f"{verdict.test_id}: " + "; ".join(verdict.caveats)))
            self.user_properties.append(("caveat", "; ".join(verdict.caveats)))
        if verdict.status == Status.UNPROVEN:
            raise _skip(f"unproven in {verdict.tier}: {verdict.detail}")
        if verdict.status != Status.PASS:
            raise ItemFailure(verdict.message())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        message = explained(excinfo)
        return message if message is not None else marked_as_bug(excinfo, super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"{self.tier} {self.name}"


class PreflightItem(SglperfItem):
    tier = "preflight"

    def runtest(self) -> None:
        self.report_verdict(self.config.stash[PREFLIGHT_KEY].verdict(self.deployment, self.variant_id, self.intent))

    def effective_config(self) -> Mapping[str, Any] | None:
        resolution = self.config.stash[PREFLIGHT_KEY].check(self.deployment, self.variant_id).resolution
        return resolution.effective if resolution is not None else None


class RanksItem(SglperfItem):
    """A multi-node role's ranks resolve alike: every rank of an instance is resolved with its own rank flags
    and compared with rank 0 (`sglperf.preflight.check.rank_drift`)."""

    tier = "preflight"

    def runtest(self) -> None:
        check = self.config.stash[PREFLIGHT_KEY].check(self.deployment, self.variant_id)
        if check.resolution is None:
            raise _skip(f"{self.name}: rank 0 was not resolved, so there is nothing to compare the ranks with")
        if check.rank_drift:
            raise ItemFailure(f"{self.name}: ranks resolve differently: " + "; ".join(check.rank_drift))


class LiveTierItem(SglperfItem):
    """An item that needs the variant's server (live checks, live-vs-preflight, measurements)."""

    tier = "live"

    def live(self) -> LiveSession:
        return self.config.stash[LIVE_KEY]

    def setup(self) -> None:
        reason = self.live().skip_reason(self.deployment)
        if reason:
            raise _skip(reason)

    def variant(self) -> Variant:
        return self.deployment.variant(self.variant_id)


class LiveItem(LiveTierItem):
    def runtest(self) -> None:
        try:
            verdicts = self.live().verdicts(self.deployment, self.variant())
        except LiveSkip as exc:
            raise _skip(str(exc)) from None
        self.report_verdict(next(v for v in verdicts if v.intent == self.intent))

    def effective_config(self) -> Mapping[str, Any] | None:
        return self.live().handle(self.deployment, self.variant()).effective_args


class LiveVsPreflightItem(LiveTierItem):
    def runtest(self) -> None:
        found, lines = self.live().divergence(self.deployment, self.variant())
        self.user_properties.append(("live_vs_preflight", "; ".join(lines)))
        if lines:
            self.add_report_section("call", "live vs preflight", "\n".join(lines))
        if found.intent_fields:
            raise ItemFailure(
                f"{self.name}: preflight mispredicted fields that intents read: "
                + "; ".join(lines[: len(found.intent_fields)])
            )


class MeasureItem(LiveTierItem):
    tier = "measure"

    def __init__(self, *, workload_id: str, load: LoadPoint, **kwargs: Any):
        super().__init__(**kwargs)
        self.workload_id = workload_id
        self.load = load

    def runtest(self) -> None:
        workload = next(w for w in self.deployment.workloads if w.id == self.workload_id)
        try:
            record = self.live().measure(self.deployment, self.variant(), workload, self.load)
        except LiveSkip as exc:
            raise _skip(str(exc)) from None
        self.user_properties.append((MEASUREMENT_PROPERTY, record.row().model_dump_json()))
        for metric, s in sorted(record.summary.items()):
            self.user_properties.append((f"median_{metric}", s.median))
        self.add_report_section(
            "call",
            "measurement" + record.numbers_source.words.item_section,
            "\n".join(measurement_section(record)),
        )
        judge_measurement(record)


class VariantEffectItem(SglperfItem):
    """The effect a variant declares (expect_effect) against the reference variant, from this run's
    records. It needs no server of its own, so it keeps its place after every variant's measurements."""

    tier = "measure"

    def __init__(self, *, workload_id: str, load: LoadPoint, **kwargs: Any):
        super().__init__(**kwargs)
        self.workload_id = workload_id
        self.load = load

    def setup(self) -> None:
        reason = self.config.stash[LIVE_KEY].skip_reason(self.deployment)
        if reason:
            raise _skip(reason)

    def runtest(self) -> None:
        variant = self.deployment.variant(self.variant_id)
        workload = next(w for w in self.deployment.workloads if w.id == self.workload_id)
        try:
            reference, measured = self.config.stash[LIVE_KEY].effect_records(
                self.deployment, variant, workload, self.load
            )
        except LiveSkip as exc:
            raise _skip(str(exc)) from None
        wanted = variant.expect_effect[workload.id]
        budget = self.deployment.counterbalance
        further = budget.sessions - 1
        effects = self._effects(reference, measured, wanted, further)
        # Not yet known: another quartet (A B, then B A), within the deployment's budget of sessions.
        while (more := further + 2 if further else 1) < budget.max_sessions and any(
            e.verdict in (EffectVerdict.UNDECIDED, EffectVerdict.NOT_JUDGED) for e in effects
        ):
            further = more
            effects = self._effects(reference, measured, wanted, further)
        # The effects that failed are the failure's own lines: the section shows the rest.
        lines = [e.line() for e in effects if e.expectation_met is not False] + [
            f"SGLang's batch log, decode batches by #running-req: {r.variant} {_decode_batches(r)}"
            for r in (reference, measured)
        ]
        lines += sorted({f"design: {e.design}" for e in effects})
        self.add_report_section("call", "variant effect", "\n".join(lines))
        where = f"{self.deployment.key}/{variant.id} vs {reference.variant}, {workload.id}@{self.load.tag}"
        unmeasured = sorted(set(wanted) - {e.metric for e in effects})
        failed = [e.line() for e in effects if e.expectation_met is False]
        failed += [f"{where}: {metric} expected {wanted[metric]}, but not measured on both" for metric in unmeasured]
        if failed:
            raise ItemFailure("\n".join(failed))
        undecided = [e.line() for e in effects if e.expectation_undecided]
        if undecided:
            raise _skip("not judged: " + "\n".join(undecided))

    def _effects(
        self, reference: MeasurementRecord, measured: MeasurementRecord, wanted: Mapping[str, str], further: int
    ) -> list[VariantEffect]:
        """The wanted metrics' effects over the first sessions and ``further`` counterbalanced ones."""
        sessions = _counterbalanced(self.config).sessions_for(self.deployment, further) if further else []
        return [e for e in variant_effects([reference, measured], sessions) if e.metric in wanted]


def _counterbalanced(config: pytest.Config) -> Counterbalanced:
    """The run's effect sessions, each kept as a line of the results folder as it is measured."""
    if COUNTERBALANCED_KEY not in config.stash:
        config.stash[COUNTERBALANCED_KEY] = Counterbalanced(
            config.stash[LIVE_KEY],
            lambda s: append_run_line(config, results_folder.LineKind.SESSIONS, s.model_dump(mode="json")),
        )
    return config.stash[COUNTERBALANCED_KEY]


def _decode_batches(record: MeasurementRecord) -> str:
    """How many decode batches ran at each batch size, eager ones by SGLang's own log lines."""
    if record.batches is None:
        return "not read"
    counts = record.batches.eager_decode_batches
    total, graph = record.batches.total("decode")
    said = ", ".join(f"{size}: {n}" for size, n in sorted(counts.items())) or "none eager"
    return said + (f" (and {graph} graph batches)" if graph else "") + f", {total} in all"


class CapacityItem(LiveTierItem):
    """A capacity workload's ladder, after its rates' items: the highest rate that keeps the slo, and
    whether it fell since the baseline (`sglperf.baselines.capacity`)."""

    tier = "measure"

    def __init__(self, *, workload_id: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.workload_id = workload_id

    def runtest(self) -> None:
        workload = next(w for w in self.deployment.workloads if w.id == self.workload_id)
        report = self.live().capacity(self.deployment, self.variant(), workload)
        self.add_report_section(
            "call",
            "capacity" + NumbersSource.of(emulated=report.emulated).words.item_section,
            "\n".join(report.lines()),
        )
        if report.missing:
            rates = ", ".join(f"{r:g}" for r in report.missing)
            raise _skip(f"{report.key}: not judged: {rates} req/s not measured in this run (deselected, or it failed)")
        if report.comparison is not None and report.comparison.fell:
            raise ItemFailure("\n  ".join([f"{report.key}:", *report.lines()]))


def measurement_section(record: MeasurementRecord) -> list[str]:
    """What a measurement item shows besides its failure: the medians, the comparisons that did not
    fail and, on a pass, the notes. A failure already says its regressions and notes: never twice."""
    lines = [
        f"{m}: median {s.median:.4g} (p10 {s.p10:.4g}, p90 {s.p90:.4g}, n={s.n})"
        for m, s in sorted(record.summary.items())
    ]
    lines += [c.message for c in record.comparisons if not c.outcome.fails]
    if not record.problems:
        lines += [f"note: {n}" for n in record.notes]
    return lines + [f"baseline: {c}" for c in record.changes]


def judge_measurement(record: MeasurementRecord) -> None:
    """Fail or skip like a built-in measurement item: the same messages for users' own workloads. A
    problem fails even where the baseline policy would skip (the rounds ran eager, say: no baseline
    is needed to see that)."""
    if record.problems:
        context = f" ({'; '.join(record.notes)})" if record.notes else ""
        skipped = [f"  and: {record.skip_reason}"] if record.skip_reason else []
        raise ItemFailure("\n".join([f"{record.key}{context}:", *(f"  {p}" for p in record.problems), *skipped]))
    if record.skip_reason:
        raise _skip(record.skip_reason)


def _append_config(config: pytest.Config, verdict: Verdict, effective: Mapping[str, Any]) -> None:
    """The variant's whole effective config beside its verdicts, once per tier and release in a process."""
    written = config.stash.setdefault(CONFIGS_WRITTEN_KEY, set())
    record = effective_config_record(
        verdict.tier, verdict.deployment, verdict.variant, verdict.sglang_version, effective
    )
    if record.key in written:
        return
    written.add(record.key)
    append_run_line(config, results_folder.LineKind.CONFIGS, record.to_record())


def _append_verdict(config: pytest.Config, verdict: Verdict) -> None:
    append_run_line(config, results_folder.LineKind.VERDICTS, verdict.to_record())


def append_run_line(config: pytest.Config, kind: results_folder.LineKind, record: dict[str, Any]) -> None:
    """One JSON line in this pytest process's file of ``kind``, so xdist workers never interleave."""
    options = config.stash[LIVE_KEY].options
    writer = xdist_worker(config) or "main"
    if said := results_folder.append_line(options.results_dir, kind, writer, record, options.run):
        config.stash[LIVE_KEY].progress(said)
