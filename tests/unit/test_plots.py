"""`sglperf.reporting.plots`: which PNGs a run gets, what goes into the history, axis units."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure

from sglperf.cli import main
from sglperf.history import ingest, open_store
from sglperf.history.results_folder import RunResults, RunStamp, collect
from sglperf.model.files import OutsideFolderError, confined
from sglperf.model.measurement import MeasurementRecord, MetricComparison, Provenance, SampleSummary
from sglperf.model.metrics import MetricOutcome, unit_of
from sglperf.reporting import history, plots

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def measurement(
    variant: str = "mtp1",
    *,
    samples: dict[str, list[float]] | None = None,
    emulated: bool = False,
    comparisons: tuple[MetricComparison, ...] = (),
) -> MeasurementRecord:
    samples = samples or {"decode_tok_s": [64.0, 65.0, 66.0], "accept_length": [2.4, 2.5, 2.6]}
    key = f"qwen36-{variant}-decode-chat-c1"
    return MeasurementRecord(
        key=key,
        deployment="qwen36",
        variant=variant,
        workload="decode-chat",
        concurrency=1,
        emulated=emulated,
        sglang_version="0.5.23",
        provenance=Provenance(
            sglang_version="0.5.23",
            runner="2xA6000",
            date="2026-01-01T00:00:00Z",
            effective_args_digest="abc",
            launch_command="python -m sglang.launch_server",
        ),
        samples=samples,
        summary={
            m: SampleSummary(n=len(v), median=sorted(v)[len(v) // 2], p10=min(v), p90=max(v))
            for m, v in samples.items()
        },
        baseline=f"baselines/{key}.json",
        baseline_samples={m: [x * 1.1 for x in v] for m, v in samples.items()} if comparisons else {},
        comparisons=list(comparisons),
    )


def save(folder: Path, *records: MeasurementRecord, night: int | None = None) -> Path:
    """A results folder; with ``night``, stamped as run ``<folder name>`` started that day of January."""
    (folder / "measurements").mkdir(parents=True, exist_ok=True)
    run_id = None
    if night is not None:
        run_id = folder.name
        RunStamp(run_id, f"2026-01-{night:02d}T00:00:00+00:00").write(folder)
    for r in records:
        data = {**r.model_dump(mode="json"), "run_id": run_id, "result": {}}
        (folder / "measurements" / f"{r.key}.json").write_text(json.dumps(data))
    return folder


def past_of(store_path: Path, *folders: Path) -> tuple[RunResults, history.RunHistory]:
    """The last folder's run, and its history in a store holding every folder's run."""
    store = open_store(str(store_path))
    assert store is not None
    try:
        for folder in folders:
            store.add_run(ingest.from_folder(folder))
        run = collect(folders[-1])
        return run, history.read(run, store)
    finally:
        store.close()


def test_one_samples_png_per_measurement_and_no_history_alone(tmp_path: Path) -> None:
    a, b = measurement("mtp1"), measurement("mtp3-full")
    run = collect(save(tmp_path / "night", a, b))
    made = plots.draw(run, tmp_path / "out")
    assert made == {
        a.key: [tmp_path / "out" / f"{a.key}-samples.png"],
        b.key: [tmp_path / "out" / f"{b.key}-samples.png"],
    }
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [f"{a.key}-samples.png", f"{b.key}-samples.png"]
    )
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in (tmp_path / "out").iterdir())


def test_history_png_only_for_keys_two_runs_have(tmp_path: Path) -> None:
    a, b = measurement("mtp1"), measurement("mtp3-full")
    earlier = save(tmp_path / "night1", a, night=1)  # has only mtp1
    run, past = past_of(tmp_path / "h.sqlite", earlier, save(tmp_path / "night2", a, b, night=2))
    made = plots.draw(run, tmp_path / "out", past)
    assert made[a.key] == [tmp_path / "out" / f"{a.key}-samples.png", tmp_path / "out" / f"{a.key}-history.png"]
    assert made[b.key] == [tmp_path / "out" / f"{b.key}-samples.png"]
    assert (tmp_path / "out" / f"{a.key}-history.png").read_bytes().startswith(PNG_MAGIC)
    assert not (tmp_path / "out" / f"{b.key}-history.png").exists()


def test_history_skips_runs_without_the_record(tmp_path: Path) -> None:
    m, other = measurement(), measurement("mtp3-full")
    run, past = past_of(
        tmp_path / "h.sqlite", save(tmp_path / "night1", other, night=1), save(tmp_path / "n3", m, night=3)
    )
    made = plots.draw(run, tmp_path / "out", past)
    assert made[m.key] == [tmp_path / "out" / f"{m.key}-samples.png"]  # one point: no history


def test_history_points_are_each_runs_medians_in_recorded_order(tmp_path: Path, figures: list[Figure]) -> None:
    old = measurement(samples={"decode_tok_s": [60.0, 61.0, 62.0]})
    new = measurement(samples={"decode_tok_s": [70.0, 71.0, 72.0]})
    # Stored newest first, named against their order: the order is the recorded time's.
    night3 = save(tmp_path / "a-night3", new, night=3)
    night1 = save(tmp_path / "z-night1", old, night=1)
    store = open_store(str(tmp_path / "h.sqlite"))
    assert store is not None
    store.add_run(ingest.from_folder(night3))
    store.close()
    run, past = past_of(tmp_path / "h.sqlite", night1, night3)
    made = plots.draw(run, tmp_path / "out", past)
    assert len(made[new.key]) == 2
    history_figure = figures[-1]
    (ax,) = history_figure.axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["2026-01-01 00:00 (z-night1)", "2026-01-03 00:00 (a-night3)"]
    assert np.asarray(ax.lines[0].get_ydata()).tolist() == [61.0, 71.0]
    assert ax.get_ylabel() == "tok/s"
    assert "history: qwen36-mtp1-decode-chat-c1" in history_figure.texts[0].get_text()


def test_y_axis_label_is_the_metric_tables_unit(tmp_path: Path, figures: list[Figure]) -> None:
    assert unit_of("accept_length") == "tok/step"
    assert unit_of("no_such_metric") == ""
    record = measurement(samples={"accept_length": [2.5], "ttft_s": [0.1], "no_such_metric": [1.0]})
    plots.samples_figure(record, tmp_path / "s.png")
    (fig,) = figures
    labels = {ax.get_title().split("\n")[0]: ax.get_ylabel() for ax in fig.axes}
    assert labels == {m: unit_of(m) for m in ("accept_length", "no_such_metric", "ttft_s")}
    assert labels["accept_length"] == "tok/step" and labels["ttft_s"] == "s"


def test_samples_titles_carry_outcome_and_change_and_the_emulator_tag(tmp_path: Path, figures: list[Figure]) -> None:
    comparison = MetricComparison(
        metric="decode_tok_s",
        baseline_median=71.5,
        current_median=65.0,
        change=-0.091,
        threshold=0.03,
        p_value=0.001,
        outcome=MetricOutcome.REGRESSION,
        message="",
        n_baseline=3,
        n_current=3,
    )
    plots.samples_figure(measurement(emulated=True, comparisons=(comparison,)), tmp_path / "s.png")
    plots.samples_figure(measurement(), tmp_path / "t.png")
    emulated, gpu = figures
    titles = {ax.get_title() for ax in emulated.axes}
    assert titles == {"accept_length\nno baseline", "decode_tok_s\nregression, -9.1% (worse)"}
    assert "[EMULATOR: test double, not GPU results]" in emulated.texts[0].get_text()
    assert "EMULATOR" not in gpu.texts[0].get_text()


def test_a_run_without_measurements_draws_nothing(tmp_path: Path) -> None:
    made = plots.draw(RunResults(tmp_path, (), ()), tmp_path / "out")
    assert made == {}
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("key", ["../../escaped", "/tmp/sglperf-escaped", "sub/dir", ".hidden", ""])
def test_a_hostile_key_in_a_downloaded_folder_writes_nothing_outside_it(tmp_path: Path, key: str) -> None:
    """A results folder downloaded from CI is input: its record keys become plot names."""
    folder = tmp_path / "deep" / "results"
    record = json.loads(measurement().model_dump_json())
    save(folder, measurement())
    (folder / "measurements" / "qwen36-mtp1-decode-chat-c1.json").write_text(json.dumps({**record, "key": key}))
    before = set(tmp_path.rglob("*"))
    assert main(["report", str(folder)]) == 2
    assert set(tmp_path.rglob("*")) == before
    assert not Path("/tmp/sglperf-escaped-samples.png").exists()


def test_confined_refuses_every_way_out(tmp_path: Path) -> None:
    assert confined(tmp_path, "a-samples.png") == tmp_path.resolve() / "a-samples.png"
    (tmp_path / "link").symlink_to(tmp_path.parent)
    for name in ("../x.png", "/etc/x.png", "link/x.png", "a/b.png"):
        with pytest.raises(OutsideFolderError):
            confined(tmp_path, name)
