"""Stored baselines for a person: one file shown, and what changed between two."""

from __future__ import annotations

from pathlib import Path

from sglperf.baselines import regression, store


def shown(path: Path, baseline: store.Baseline) -> list[str]:
    """Where and with what a baseline was recorded, and every entry's medians."""
    p = baseline.provenance
    gpus = ", ".join(sorted(set(p.gpu_names)))
    lines = [
        f"{path}: {baseline.deployment}/{baseline.variant} on {p.runner} ({p.gpu_count}x {gpus})"
        f"{p.numbers_source.words.tag}",
        f"  SGLang {p.sglang_version}, torch {p.torch_version}, CUDA {p.cuda_version}, driver {p.driver_version}, "
        f"sglperf {p.harness_version} ({p.git_commit[:10]}), recorded {p.date}",
        f"  launch: {p.launch_command}",
    ]
    for key, entry in sorted(baseline.entries.items()):
        medians = ", ".join(f"{m} {s.median:g} (n={s.n})" for m, s in sorted(entry.summary.items()))
        lines.append(f"  {key}: {medians}")
    return lines


def differences(old: store.Baseline, new: store.Baseline) -> list[str]:
    """Every entry removed, added or changed between two baselines, with the verdict of the new samples
    against the old."""
    lines = []
    for key in sorted(set(old.entries) | set(new.entries)):
        if key not in new.entries:
            lines.append(f"{key}: removed")
            continue
        lines += store.describe_change(old, new, key)
        if key in old.entries:
            lines += [
                f"  {c.message()}" for c in regression.compare_entry(old.entries[key], new.entries[key].samples, {})
            ]
    return lines
