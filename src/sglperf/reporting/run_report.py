"""One run's report, computed once and shown many ways.

A run is shown by the console summary at its end (`sglperf.plugin.summary`), report.md
(`reporting.markdown`), its plots (`reporting.plots`) and `sglperf compare --variants`. Each used to
read the results folder again and judge the variant effects again; now a `RunReport` is built once, from
the folder's records and the history read for them, and every surface renders that one record (the
pytest-benchmark way: compute in one place, render many). The one other judgement of effects is a
variant-effect item's own, of its one variant and point (`plugin.items.VariantEffectItem`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sglperf.baselines.variant_effects import variant_effects
from sglperf.history import SqlHistoryStore
from sglperf.history.records import StoredRun
from sglperf.model.item_outcome import ItemOutcome
from sglperf.model.measurement import MeasurementRecord
from sglperf.model.numbers_source import NumbersSource
from sglperf.model.variant_effect import VariantEffect
from sglperf.model.verdict import Verdict
from sglperf.reporting import history
from sglperf.results.folder import RunResults, collect, run_numbers_source


@dataclass(frozen=True)
class RunReport:
    label: str  # how the surfaces name the run: its folder's name (report.md), a stored run's label (compare)
    verdicts: tuple[Verdict, ...]
    measurements: tuple[MeasurementRecord, ...]
    effects: tuple[VariantEffect, ...]  # every variant against its reference, judged once for every surface
    numbers: NumbersSource  # whose numbers every surface says they are
    failed_items: tuple[ItemOutcome, ...] = ()
    past: history.RunHistory = field(default_factory=history.RunHistory)  # drifts, streaks, or why none

    @classmethod
    def of(cls, run: RunResults, past: history.RunHistory | None = None) -> RunReport:
        """A results folder's run, with the history read for it (none: no history, said so)."""
        return cls(
            label=run.folder.name,
            verdicts=run.verdicts,
            measurements=run.measurements,
            effects=tuple(variant_effects(run.measurements, run.sessions)),
            numbers=run.numbers_source,
            failed_items=run.failed_items,
            past=past or history.RunHistory(),
        )

    @classmethod
    def of_stored(cls, run: StoredRun) -> RunReport:
        """A run as the history store (or `history.ingest` of a folder) keeps it: no failed items, no history."""
        return cls(
            label=run.identity.label,
            verdicts=run.verdicts,
            measurements=run.measurements,
            effects=tuple(variant_effects(run.measurements, run.sessions)),
            numbers=run_numbers_source(run.measurements, run.verdicts),
        )


def read_report(folder: Path, store: SqlHistoryStore | None = None, store_note: str | None = None) -> RunReport:
    """The folder's run with the history ``store`` holds for it (the run recorded in it already)."""
    run = collect(folder)
    return RunReport.of(run, history.read(run, store, store_note))
