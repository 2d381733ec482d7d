"""`pytest -n N --dist loadscope` with sglperf's scheduler: a variant's items stay on one worker, and the effect
items (which read both variants' measurements from the results folder) are handed out only once every other
item has finished, on whichever worker. xdist's controller is played here by hand, with its real scheduler
class: a worker runs an item once it knows the next one (or is told to shut down), as xdist's workers do."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sglperf.model.workload import measurement_key
from sglperf.plugin.items import EFFECTS_NODE
from sglperf.plugin.user_tests import make_variant_scheduler


@dataclass
class Config:
    """What the scheduler reads of pytest's config."""

    rootpath: Path
    workers: int
    reorder: bool

    @property
    def option(self) -> Any:
        return type("Option", (), {"loadscopereorder": self.reorder})()

    def getvalue(self, name: str) -> list[str]:
        assert name == "tx"
        return [f"{self.workers}*popen"]

    def getini(self, name: str) -> str:
        return "deployments"


@dataclass(eq=False)
class Worker:
    name: str
    collection: list[str]
    run: Any  # the run's check, called with each batch of items this worker is sent
    queue: list[int] = field(default_factory=list)
    _shutdown_sent: bool = False

    @property
    def gateway(self) -> Any:
        return type("Gateway", (), {"id": self.name})()

    @property
    def shutting_down(self) -> bool:
        return self._shutdown_sent

    def send_runtest_some(self, indices: list[int]) -> None:
        assert not self._shutdown_sent, f"{self.name}: work sent after its shutdown"
        self.run(self, indices)
        self.queue += indices

    def shutdown(self) -> None:
        self._shutdown_sent = True

    @property
    def can_run(self) -> bool:
        return len(self.queue) >= 2 or (len(self.queue) == 1 and self._shutdown_sent)


def collection(variants: int, deployments: int) -> list[str]:
    """Node ids as sglperf's collection makes them: per variant its preflight and measurement items, then the
    deployment's effect items (every variant but the reference declares one)."""
    ids = []
    for d in range(deployments):
        key = f"dep{d}"
        names = [f"v{i}" for i in range(variants)]
        for variant in names:
            ids += [f"deployments/{key}.toml::{variant}::{key}-{variant}-prefill_cuda_graph"]
            ids += [
                f"deployments/{key}.toml::{variant}::{measurement_key(key, variant, 'chat', f'c{c}')}" for c in (1, 4)
            ]
        ids += [
            f"deployments/{key}.toml::{EFFECTS_NODE}::{measurement_key(key, variant, 'chat', f'c{c}')}-effect"
            for variant in names[1:]
            for c in (1, 4)
        ]
    return ids


def is_effect(nodeid: str) -> bool:
    return f"::{EFFECTS_NODE}::" in nodeid


def play(tmp_path: Path, workers: int, variants: int, deployments: int, reorder: bool, seed: int) -> list[str]:
    """One run, the controller's side: returns the node ids in the order they finished."""
    (tmp_path / "deployments").mkdir(exist_ok=True)
    ids = collection(variants, deployments)
    rng = random.Random(seed)
    finished: list[str] = []

    def sent(worker: Worker, indices: list[int]) -> None:
        # An effect may be sent while this worker's own last items are queued before it; never while
        # an item elsewhere has not finished.
        for index in indices:
            if is_effect(ids[index]):
                unfinished = {ids[i] for w in pool if w is not worker for i in w.queue if not is_effect(ids[i])}
                assert not unfinished, f"{ids[index]} sent to {worker.name} before {sorted(unfinished)} finished"

    pool = [Worker(f"gw{n}", ids, sent) for n in range(workers)]
    scheduler = make_variant_scheduler(Config(tmp_path, workers, reorder), None)  # type: ignore[arg-type]
    for worker in pool:
        scheduler.add_node(worker)
    for worker in pool:
        scheduler.add_node_collection(worker, ids)
    scheduler.schedule()
    gone: set[str] = set()
    for _ in range(10 * len(ids)):
        runnable = [w for w in pool if w.can_run]
        if not runnable:
            break
        worker = rng.choice(runnable)
        index = worker.queue.pop(0)
        finished.append(ids[index])
        scheduler.mark_test_complete(worker, index)
        for w in pool:  # a worker told to shut down ends once its queue is empty
            if w.shutting_down and not w.queue and w.name not in gone:
                gone.add(w.name)
                scheduler.remove_node(w)
    return finished


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("variants", [2, 3])
@pytest.mark.parametrize("reorder", [True, False])
def test_effect_items_run_after_every_measurement_and_every_item_runs(
    tmp_path: Path, workers: int, variants: int, reorder: bool
) -> None:
    for seed in range(12):
        finished = play(tmp_path, workers, variants, 2, reorder, seed)
        ids = collection(variants, 2)
        assert sorted(finished) == sorted(ids), f"seed {seed}: not every item ran once"
        first_effect = next(i for i, nodeid in enumerate(finished) if is_effect(nodeid))
        assert not [n for n in finished[first_effect:] if not is_effect(n)], f"seed {seed}: {finished}"


def test_a_variants_items_stay_on_one_worker(tmp_path: Path) -> None:
    """loadscope's promise (one server per variant) holds with the effects held back."""
    ids = collection(3, 1)
    seen: dict[str, set[str]] = {}

    (tmp_path / "deployments").mkdir()
    pool: list[Worker] = []

    def sent(worker: Worker, indices: list[int]) -> None:
        for index in indices:
            scope = ids[index].rsplit("::", 1)[0]
            seen.setdefault(scope, set()).add(worker.name)

    pool = [Worker(f"gw{n}", ids, sent) for n in range(2)]
    scheduler = make_variant_scheduler(Config(tmp_path, 2, True), None)  # type: ignore[arg-type]
    for worker in pool:
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, ids)
    scheduler.schedule()
    while runnable := [w for w in pool if w.can_run]:
        worker = runnable[0]
        scheduler.mark_test_complete(worker, worker.queue.pop(0))
    assert all(len(workers) == 1 for workers in seen.values()), seen
    assert len(seen) == 4  # three variants and the effects
