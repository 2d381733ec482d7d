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

from sglperf.errors import SglperfError
from sglperf.judge.decisions import field_changes
from sglperf.model.files import os_problem, read_input, write_text_atomic
from sglperf.model.measurement import Provenance, SampleSummary
from sglperf.model.workload import LoadPoint
from sglperf.sglang.server_api import LAUNCH_SPECIFIC_FIELDS

SCHEMA_VERSION = 1
# A KV pool change noted beside the verdict. SGLang sizes the pool from the memory free at start: two
# starts of one build, one after the other, differed by 0.04% on the CPU server, and a start beside
# another server got 16.5% less. An upgrade that reserves memory elsewhere shrinks it too, and at
# concurrency > 1 fewer requests may then fit.
KV_POOL_NOTE_CHANGE = 0.05
GPU_LIMIT_NOTE_CHANGE = 0.01  # power limits and clocks are set values, not measured ones
SIGNIFICANT_DIGITS = 6


class BaselineError(SglperfError, ValueError):
    """A baseline file that cannot be used; the message names the file and what to do."""

    def __init__(self, message: str, problem: str = ""):
        super().__init__(message)
        self.problem = problem or message  # what is wrong, without the file name and the advice


def _error(
    path: Path, problem: str, fix: str = "restore it from git or re-record it with --update-baselines"
) -> BaselineError:
    return BaselineError(f"{path}: {problem}" + (f"; {fix}" if fix else ""), problem)


class BaselineMissing(BaselineError):
    """There is no baseline file (the one case --update-baselines may write a file from scratch)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Entry(_Strict):
    """One workload at one load: a concurrency, or (open loop) a rate with its schedule."""

    workload: str
    concurrency: int  # open loop: the most in flight
    rate: float | None = None  # open loop: requests per second
    schedule: str = ""  # open loop: everything that shaped the sends (`Workload.schedule`); must match to compare
    prompt_digest: str
    output_len: int
    samples: dict[str, tuple[float, ...]]  # metric -> per-request samples
    summary: dict[str, SampleSummary] = Field(default_factory=dict)  # derived, for people reading the file
    # The server's watched metrics per round (`baselines.server_moves`): named in a failure, never judged.
    server: dict[str, tuple[float, ...]] = Field(default_factory=dict)

    @property
    def key(self) -> str:
        return entry_key(self.workload, self.concurrency, self.rate)


class Baseline(_Strict):
    schema_version: int
    deployment: str
    variant: str
    provenance: Provenance
    entries: dict[str, Entry]


def entry_key(workload: str, concurrency: int | None, rate: float | None = None) -> str:
    return f"{workload}@{LoadPoint(concurrency, rate).tag}"


def path_for(root: Path, runner: str, deployment: str, variant: str) -> Path:
    return root / runner / deployment / f"{variant}.json"


def _round(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def summarize(samples: Mapping[str, Sequence[float]]) -> dict[str, SampleSummary]:
    """Median, p10 and p90 per metric: derived from the samples, never stored on its own."""
    import numpy as np

    return {
        m: SampleSummary(
            n=len(xs),
            median=_round(float(np.median(xs))),
            p10=_round(float(np.percentile(xs, 10))),
            p90=_round(float(np.percentile(xs, 90))),
        )
        for m, xs in samples.items()
    }


def make_entry(
    workload: str,
    concurrency: int,
    prompt_digest: str,
    output_len: int,
    samples: Mapping[str, Sequence[float]],
    server: Mapping[str, Sequence[float]] | None = None,
    *,
    rate: float | None = None,
    schedule: str = "",
) -> Entry:
    rounded = {m: tuple(_round(float(x)) for x in xs) for m, xs in samples.items() if xs}
    return Entry(
        workload=workload,
        concurrency=concurrency,
        rate=rate,
        schedule=schedule,
        prompt_digest=prompt_digest,
        output_len=output_len,
        samples=rounded,
        summary=summarize(rounded),
        server={m: tuple(_round(float(x)) for x in xs) for m, xs in (server or {}).items() if xs},
    )


def dumps(baseline: Baseline) -> str:
    return json.dumps(baseline.model_dump(mode="json"), sort_keys=True, indent=2) + "\n"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a baseline can hold")


def load(path: Path) -> Baseline:
    """Read and check one baseline file; every problem is a BaselineError naming the file."""
    try:
        data = read_input(path)
    except FileNotFoundError:
        raise BaselineMissing(f"{path}: no baseline", "no baseline") from None
    except IsADirectoryError:
        raise _error(path, "is a directory", "give a baseline file (<runner>/<deployment>/<variant>.json)") from None
    except OSError as exc:
        raise _error(path, f"cannot read it: {os_problem(exc)}", "") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(path, f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})") from None
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise _error(path, f"not valid JSON ({exc or 'nested too deeply'})") from None
    version = raw.get("schema_version") if isinstance(raw, dict) else None
    if version != SCHEMA_VERSION:
        raise _error(
            path,
            f"schema_version {version!r} is not one this sglperf reads ({SCHEMA_VERSION})",
            "re-record it with --update-baselines, or use the sglperf version that wrote it",
        )
    try:
        baseline = Baseline.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False))
        raise _error(path, f"invalid baseline file: {problems}") from None
    return _checked(path, baseline)


def _checked(path: Path, baseline: Baseline) -> Baseline:
    """Samples usable by the statistics, and summaries recomputed from them.

    The samples are the baseline: the regression verdict compares samples, and the summary is
    written next to them only for people reading the file. So a summary that disagrees with its
    samples (a hand edit, a bad merge) is replaced by the one the samples give rather than refused:
    `baseline show`/`diff` then print what the verdict will use, and a baseline whose data are
    fine is not thrown away (re-recording costs GPU hours) over a derived field. What cannot be
    recomputed is refused: a metric with no samples (in the summary only, or an empty list) and
    samples the statistics cannot use (not finite, or not positive).
    """
    entries = {}
    for key, entry in baseline.entries.items():
        summary_only = sorted(set(entry.summary) - set(entry.samples))
        if summary_only:
            raise _error(path, f"entries.{key}: metric {summary_only[0]} has a summary but no samples")
        for metric, xs in sorted(entry.samples.items()):
            if not xs:
                raise _error(path, f"entries.{key}: metric {metric} has no samples")
            bad = [x for x in xs if not (math.isfinite(x) and x > 0)]
            if bad:
                raise _error(
                    path,
                    f"entries.{key}: metric {metric} has samples that are not finite positive numbers "
                    f"({', '.join(map(repr, bad[:3]))})",
                )
        entries[key] = entry.model_copy(update={"summary": summarize(entry.samples)})
    return baseline.model_copy(update={"entries": entries})


def write_atomic(path: Path, baseline: Baseline) -> None:
    write_text_atomic(path, dumps(baseline))


def record(
    path: Path, deployment: str, variant: str, provenance: Provenance, entry: Entry
) -> tuple[Baseline | None, Baseline]:
    """Add or replace one entry under the file's lock; returns (old, new). A folder or lock that cannot
    be written is a BaselineError naming it; the file is then left as it was."""
    lock = Path(str(path) + ".lock")
    if lock.is_symlink():
        # The lock is opened for writing: a link would have us write wherever it points.
        raise _error(path, f"its lock {lock} is a symbolic link", f"remove {lock} (sglperf makes its own)")
    try:
        return _record(path, lock, deployment, variant, provenance, entry)
    except OSError as exc:
        raise _error(
            path,
            f"cannot be written ({os_problem(exc)}); nothing was changed",
            "make its folder writable or free space, then record again",
        ) from None


def _record(
    path: Path, lock: Path, deployment: str, variant: str, provenance: Provenance, entry: Entry
) -> tuple[Baseline | None, Baseline]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        old: Baseline | None = None
        try:
            old = load(path)
        except BaselineMissing:
            old = None
        except BaselineError as exc:
            # Never replace what could not be read: it may hold other workloads' baselines, or be
            # a newer sglperf's file. A person decides.
            raise _error(
                path,
                f"exists but cannot be read ({exc.problem}), so --update-baselines will not overwrite it",
                f"restore it from git (git checkout -- {path}) or move it away, then record again",
            ) from None
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


# Fields named in a baseline's note, most performance-relevant first; the rest are counted.
NOTE_FIELDS = 3


def effective_args_note(baseline: Provenance, current: Provenance) -> str:
    """``effective server args changed since the baseline: chunked_prefill_size 4096 -> 8192, ... (+2 more)``."""
    said = "effective server args changed since the baseline"
    if baseline.effective_args is None or current.effective_args is None:
        return said
    changes = field_changes(baseline.effective_args, current.effective_args, leave_out=LAUNCH_SPECIFIC_FIELDS)
    if not changes:
        return said
    shown = [c.move for c in changes[:NOTE_FIELDS]]
    more = f" (+{len(changes) - NOTE_FIELDS} more)" if len(changes) > NOTE_FIELDS else ""
    return f"{said}: {', '.join(shown)}{more}"


def context_notes(baseline: Baseline, entry: Entry, current: Provenance, prompt_digest: str) -> list[str]:
    """Changes that explain a difference, shown next to the verdict."""
    b = baseline.provenance
    notes = []
    if b.sglang_version != current.sglang_version:
        notes.append(f"SGLang {b.sglang_version} -> {current.sglang_version}")
    if b.effective_args_digest != current.effective_args_digest:
        notes.append(effective_args_note(b, current))
    if b.kv_pool_tokens and current.kv_pool_tokens:
        change = current.kv_pool_tokens / b.kv_pool_tokens - 1
        if abs(change) > KV_POOL_NOTE_CHANGE:
            notes.append(f"KV cache pool {b.kv_pool_tokens:,} -> {current.kv_pool_tokens:,} tokens ({change:+.0%})")
    if current.server_metrics and not b.server_metrics:
        notes.append(
            "SGLang's --enable-metrics is on now and was off for the baseline: its own bookkeeping cost 3-5.5% "
            "decode tok/s on the CPU server (bench/enable_metrics_cost.py); refresh the baseline"
        )
    for name, then, now, unit in (
        ("GPU power limit", b.gpu_power_limit_w, current.gpu_power_limit_w, "W"),
        ("GPU max SM clock", b.gpu_sm_clock_max_mhz, current.gpu_sm_clock_max_mhz, "MHz"),
    ):
        if then and now and abs(now / then - 1) > GPU_LIMIT_NOTE_CHANGE:
            notes.append(f"{name} {then:.0f} -> {now:.0f} {unit} since the baseline")
    if entry.prompt_digest != prompt_digest:
        notes.append("prompt set changed since the baseline")
    if b.dummy_weights != current.dummy_weights:
        notes.append("dummy weights in one of the runs")
    return notes
