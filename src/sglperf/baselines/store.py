"""Baselines: stored samples with provenance, one diff-friendly JSON file per variant.

`baselines/<runner>/<deployment>/<variant>.json` holds every workload x concurrency measured for
that variant. Files are deterministic (sorted keys, floats rounded to 6 significant digits) so that
a refresh reads well in code review, and written atomically (temporary file + rename, under a lock)
so that pytest-xdist workers and interrupted runs never leave a partial file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sglperf.model.files import write_text_atomic
from sglperf.model.measurement import Provenance, SampleSummary

SCHEMA_VERSION = 1
SIGNIFICANT_DIGITS = 6


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names the file and what to do."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Entry(_Strict):
    """One workload at one concurrency."""

    workload: str
    concurrency: int
    prompt_digest: str
    output_len: int
    samples: dict[str, tuple[float, ...]]  # metric -> per-request samples
    summary: dict[str, SampleSummary] = Field(default_factory=dict)  # derived, for people reading the file

    @property
    def key(self) -> str:
        return entry_key(self.workload, self.concurrency)


class Baseline(_Strict):
    schema_version: int
    deployment: str
    variant: str
    provenance: Provenance
    entries: dict[str, Entry]


def entry_key(workload: str, concurrency: int) -> str:
    return f"{workload}@c{concurrency}"


def path_for(root: Path, runner: str, deployment: str, variant: str) -> Path:
    return root / runner / deployment / f"{variant}.json"


def _round(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def make_entry(
    workload: str, concurrency: int, prompt_digest: str, output_len: int, samples: Mapping[str, Sequence[float]]
) -> Entry:
    import numpy as np

    rounded = {m: tuple(_round(float(x)) for x in xs) for m, xs in samples.items() if xs}
    summary = {
        m: SampleSummary(
            n=len(xs),
            median=_round(float(np.median(xs))),
            p10=_round(float(np.percentile(xs, 10))),
            p90=_round(float(np.percentile(xs, 90))),
        )
        for m, xs in rounded.items()
    }
    return Entry(
        workload=workload,
        concurrency=concurrency,
        prompt_digest=prompt_digest,
        output_len=output_len,
        samples=rounded,
        summary=summary,
    )


def dumps(baseline: Baseline) -> str:
    return json.dumps(baseline.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"


def load(path: Path) -> Baseline:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise BaselineError(f"{path}: no baseline") from None
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"{path}: not valid JSON ({exc}); restore it from git or re-record it with --update-baselines"
        ) from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != SCHEMA_VERSION:
        raise BaselineError(
            f"{path}: schema_version {version!r} is not one this sglperf reads ({SCHEMA_VERSION}); "
            "re-record it with --update-baselines, or use the sglperf version that wrote it"
        )
    try:
        return Baseline.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))
        raise BaselineError(f"{path}: invalid baseline file: {problems}") from None


def write_atomic(path: Path, baseline: Baseline) -> None:
    write_text_atomic(path, dumps(baseline))


def record(
    path: Path, deployment: str, variant: str, provenance: Provenance, entry: Entry
) -> tuple[Baseline | None, Baseline]:
    """Add or replace one entry under the file's lock; returns (old, new)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        old: Baseline | None = None
        if path.exists():
            try:
                old = load(path)
            except BaselineError:
                old = None  # an unreadable file is replaced whole by this run's record
        entries = dict(old.entries) if old and old.provenance.runner == provenance.runner else {}
        entries[entry.key] = entry
        new = Baseline(
            schema_version=SCHEMA_VERSION,
            deployment=deployment,
            variant=variant,
            provenance=provenance,
            entries=entries,
        )
        write_atomic(path, new)
    return old, new


def describe_change(old: Baseline | None, new: Baseline, key: str) -> list[str]:
    """One line per metric: what a refresh changed, for the run's summary and code review."""
    new_entry = new.entries[key]
    old_entry = old.entries.get(key) if old else None
    key = f"{new.deployment}/{new.variant} {key}"
    if old_entry is None:
        medians = ", ".join(f"{m} median {s.median:g}" for m, s in sorted(new_entry.summary.items()))
        return [f"{key}: new baseline ({medians})"]
    lines = []
    for metric, summary in sorted(new_entry.summary.items()):
        before = old_entry.summary.get(metric)
        if before is None:
            lines.append(f"{key} {metric}: new, median {summary.median:g}")
        else:
            change = (summary.median / before.median - 1) * 100 if before.median else float("nan")
            lines.append(f"{key} {metric}: median {before.median:g} -> {summary.median:g} ({change:+.1f}%)")
    if old and old.provenance.sglang_version != new.provenance.sglang_version:
        lines.append(f"{key}: SGLang {old.provenance.sglang_version} -> {new.provenance.sglang_version}")
    return lines


def identity_problems(baseline: Baseline, current: Provenance) -> list[str]:
    """Reasons the baseline must not be compared with this run at all."""
    b = baseline.provenance
    problems = []
    if b.runner != current.runner:
        problems.append(f"recorded on runner profile {b.runner!r}, this run is {current.runner!r}")
    if b.emulated != current.emulated:
        problems.append(
            "recorded against the emulator" if b.emulated else "recorded on GPUs, this run uses the emulator"
        )
    if b.gpu_count != current.gpu_count:
        problems.append(f"recorded on {b.gpu_count} GPUs, this run has {current.gpu_count}")
    if sorted(b.gpu_names) != sorted(current.gpu_names):
        then, now = ", ".join(sorted(set(b.gpu_names))), ", ".join(sorted(set(current.gpu_names)))
        problems.append(f"recorded on {then}, this run has {now}")
    return problems


def context_notes(baseline: Baseline, entry: Entry, current: Provenance, prompt_digest: str) -> list[str]:
    """Changes that explain a difference, shown next to the verdict."""
    b = baseline.provenance
    notes = []
    if b.sglang_version != current.sglang_version:
        notes.append(f"SGLang {b.sglang_version} -> {current.sglang_version}")
    if b.effective_args_digest != current.effective_args_digest:
        notes.append("effective server args changed since the baseline")
    if entry.prompt_digest != prompt_digest:
        notes.append("prompt set changed since the baseline")
    if b.dummy_weights != current.dummy_weights:
        notes.append("dummy weights in one of the runs")
    return notes
