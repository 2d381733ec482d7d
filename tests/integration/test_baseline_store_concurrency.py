"""The baseline store under several processes recording into one file at once."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from sglperf.baselines import store

from ..support.baselines import entry, provenance


def _record_one(args: tuple[str, str]) -> None:
    path, workload = args
    store.record(Path(path), "qwen36", "mtp1", provenance(), entry(workload))


def test_concurrent_records_from_several_processes_all_land(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    workloads = [f"w{i}" for i in range(8)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(_record_one, [(str(path), w) for w in workloads])
    assert sorted(store.load(path).entries) == sorted(f"{w}@c1" for w in workloads)
