"""The walk: every release between the two ends resolved in turn, and where each change happened, with the
rule of the release it happened in; and each removed flag's chain through the releases' own deprecations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sglperf.judge.decisions import BUILT_MODEL, config_and_model, field_changes
from sglperf.judge.intent import explain as explain_intent
from sglperf.model.resolution import FieldChange
from sglperf.model.verdict import Status
from sglperf.preflight import VariantCheck
from sglperf.sglang.deprecations import DeprecationLedger, accepts_spelling
from sglperf.sglang.intents import INTENTS
from sglperf.upgrade.compare import warnings_of
from sglperf.upgrade.records import MODEL_BUILD, WARNING, ReleaseStep, Transition, UpgradeReport, WalkReport


def _model_unbuilt(check: VariantCheck) -> str | None:
    """Why the model class was not built on the meta device for this variant on this release, if it was not."""
    resolution = check.resolution
    if resolution is None or resolution.effective is None or resolution.model is not None:
        return None
    return resolution.model_error


def _intent_values(check: VariantCheck) -> dict[str, str]:
    """Each intent's value, where this release makes it known: an intent left unproven because the model
    class could not be built is unknown here, never a change."""
    unbuilt = _model_unbuilt(check) is not None
    return {v.intent: str(v.actual) for v in check.verdicts if not (unbuilt and v.status == Status.UNPROVEN)}


def _intent_rule(name: str, check: VariantCheck) -> str:
    """Why the intent reads as it does on this release: the SGLang rule that set its field, else the field
    itself (a value no rule wrote: the release's own default changed)."""
    args = check.resolution.effective_args if check.resolution else None
    if args is None:
        return ""
    intent = INTENTS[name]
    try:
        reading = intent.read(args.fields, args.model)
    except (KeyError, TypeError):
        return ""
    rules = [r for r in explain_intent(intent, args, reading.value) if r.startswith("SGLang rule")]
    return rules[0] if rules else f"no rule wrote it: {reading.source}"


@dataclass
class _Known:
    """The last walked release where one channel of a variant's facts was known, and the releases since
    where it was not."""

    version: str
    check: VariantCheck
    unsure: list[str] = field(default_factory=list)


class _VariantWalk:
    """One variant's facts followed release by release: its intents, its watched fields, what its model
    class builds, and SGLang's warnings; a release where a fact is unknown leaves a gap, never a change."""

    def __init__(self, key: tuple[str, str], watched: set[str]) -> None:
        self.key, self.watched = key, watched
        self.intents: dict[str, tuple[str, _Known]] = {}
        self.config: _Known | None = None
        self.model: _Known | None = None
        self.unbuilt = False  # the model class failed to build on the last release that resolved the variant
        self.found: list[Transition] = []

    def unknown(self, version: str) -> None:
        """A release that did not resolve this variant."""
        for _, known in self.intents.values():
            known.unsure.append(version)
        for channel in (self.config, self.model):
            if channel is not None:
                channel.unsure.append(version)

    def step(self, version: str, check: VariantCheck) -> None:
        values = _intent_values(check)
        for intent, (_, known) in self.intents.items():
            if intent not in values:
                known.unsure.append(version)
        for intent, value in values.items():
            last = self.intents.get(intent)
            if last is not None and last[0] != value:
                rule = _intent_rule(intent, check)
                self._add(f"intent {intent}", version, last[0], value, rule, version, last[1].unsure)
            self.intents[intent] = (value, _Known(version, check))
        resolution = check.resolution
        if resolution is None or resolution.effective is None:
            self.unknown(version)
            return
        if self.config is not None:
            self._fields(self.config, version, check)
        self.config = _Known(version, check)
        unbuilt = _model_unbuilt(check)
        if unbuilt is not None:
            if self.model is not None:
                self.model.unsure.append(version)
            if not self.unbuilt:  # said once, where it starts
                self._add(MODEL_BUILD, version, "built", f"not built on the meta device: {unbuilt[:200]}", "", "")
            self.unbuilt = True
            return
        if resolution.model is None:
            return  # not asked to build it: nothing known of it either way
        if self.unbuilt:
            self._add(MODEL_BUILD, version, "not built", "built", "", "")
        if self.model is not None:
            self._model(self.model, version, check)
        self.model, self.unbuilt = _Known(version, check), False

    def _fields(self, last: _Known, version: str, check: VariantCheck) -> None:
        before, after = last.check.resolution, check.resolution
        assert before is not None and after is not None and before.effective is not None
        assert after.effective is not None
        for change in field_changes(before.effective, after.effective, before.writes, after.writes):
            if change.field in self.watched:
                self._change(change, last, version)
        old, new = warnings_of(last.check), warnings_of(check)
        for wording in sorted(new.keys() - old.keys()):
            self._add(WARNING, version, "(none)", new[wording], "", "", last.unsure)
        for wording in sorted(old.keys() - new.keys()):
            self._add(WARNING, version, old[wording], "(none)", "", "", last.unsure)

    def _model(self, last: _Known, version: str, check: VariantCheck) -> None:
        before, after = last.check.resolution, check.resolution
        assert before is not None and after is not None
        for change in field_changes(
            {BUILT_MODEL: config_and_model(before)[BUILT_MODEL]}, {BUILT_MODEL: config_and_model(after)[BUILT_MODEL]}
        ):
            if change.field in self.watched:
                self._change(change, last, version)

    def _change(self, change: FieldChange, last: _Known, version: str) -> None:
        # The rule of the release the value comes from: the later one's write, else (a field it no longer
        # has) the earlier one's, labelled with that release.
        write, source = (change.rule_after, version) if change.rule_after else (change.rule_before, last.version)
        rule = write.describe() if write else ""
        self._add(
            change.named, version, change.shown_before, change.shown_after, rule, source if rule else "", last.unsure
        )

    def _add(
        self, what: str, version: str, before: str, after: str, rule: str, rule_release: str, unsure: Sequence[str] = ()
    ) -> None:
        self.found.append(Transition(*self.key, what, version, before, after, rule, rule_release, tuple(unsure)))


def walk_releases(steps: Sequence[ReleaseStep], report: UpgradeReport) -> WalkReport:
    """Each intent and each field of ``report``'s field diff, and SGLang's warnings, followed release by
    release: every transition, with the rule of the release it quotes; a release that could not be resolved
    (or a model class that could not be built) leaves the change unsure between it and the next, never
    credited to the next alone. And, for every flag the target removed, the replacement chain the releases in
    between declared."""
    walk = WalkReport(report.from_version, report.to_version)
    walk.releases = [s.version for s in steps]
    walk.walked = [s.version for s in steps if s.error is None]
    walk.unresolved = [f"{s.version}: {s.error}" for s in steps if s.error is not None]
    watched = {(f.deployment, f.variant): {c.field for c in f.changes} for f in report.fields}
    variants: dict[tuple[str, str], _VariantWalk] = {}
    for step in steps:
        seen = {(c.deployment.key, c.variant.id): c for c in step.checks} if step.error is None else {}
        for key in seen:  # in the order the release checked them: the record's order never depends on a set's
            if key not in variants:
                variants[key] = _VariantWalk(key, watched.get(key, set()))
        for key, variant in variants.items():
            if key in seen:
                variant.step(step.version, seen[key])
            else:
                variant.unknown(step.version)
    for variant in variants.values():
        walk.transitions += variant.found
    said = DeprecationLedger().with_parsers(*(s.parser for s in steps))
    target = steps[-1].parser
    for flag_change in report.flags:
        links = said.chain(flag_change.flag) if flag_change.change in ("removed", "renamed") else ()
        if links:
            walk.chains[flag_change.flag] = list(links)
            # Its value too: 0.5.22 takes --cuda-graph-backend-prefill, but not =tc_piecewise.
            walk.chain_ends_accepted[flag_change.flag] = target is not None and accepts_spelling(
                target, links[-1].replacement
            )
    return walk
