"""`sglperf.reporting.plots`: which PNGs a run gets, what goes into the history, axis units."""

from __future__ import annotations

import json
import struct
from itertools import groupby, pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.figure import Figure

from sglperf.baselines.changepoint import Drift
from sglperf.cli import main
from sglperf.history import ingest, open_store
from sglperf.model.files import OutsideFolderError, confined
from sglperf.model.measurement import MeasurementRecord, MetricComparison, Provenance, SampleSummary
from sglperf.model.metrics import MetricOutcome, unit_of
from sglperf.reporting import history, plots
from sglperf.reporting.run_report import RunReport
from sglperf.results.folder import RunResults, RunStamp, collect

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
    made = plots.draw(RunReport.of(run), tmp_path / "out")
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
    made = plots.draw(RunReport.of(run, past), tmp_path / "out")
    assert made[a.key] == [tmp_path / "out" / f"{a.key}-samples.png", tmp_path / "out" / f"{a.key}-history.png"]
    assert made[b.key] == [tmp_path / "out" / f"{b.key}-samples.png"]
    assert (tmp_path / "out" / f"{a.key}-history.png").read_bytes().startswith(PNG_MAGIC)
    assert not (tmp_path / "out" / f"{b.key}-history.png").exists()


def test_history_skips_runs_without_the_record(tmp_path: Path) -> None:
    m, other = measurement(), measurement("mtp3-full")
    run, past = past_of(
        tmp_path / "h.sqlite", save(tmp_path / "night1", other, night=1), save(tmp_path / "n3", m, night=3)
    )
    made = plots.draw(RunReport.of(run, past), tmp_path / "out")
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
    made = plots.draw(RunReport.of(run, past), tmp_path / "out")
    assert len(made[new.key]) == 2
    history_figure = figures[-1]
    (ax,) = history_figure.axes
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == ["Jan 01", "Jan 03"]  # z-night1 first: its run started first
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
    made = plots.draw(RunReport.of(RunResults(tmp_path, (), ())), tmp_path / "out")
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


# Issue 41: the figures must read on a laptop and in a markdown viewer, not as a thin strip of panels.
SIX = ("accept_length", "decode_tok_s", "e2e_s", "itl_s", "ttft_s", "verify_steps_s")
SIX_VALUES = {"accept_length": 2.5, "decode_tok_s": 70.0, "e2e_s": 4.0, "itl_s": 0.014, "ttft_s": 0.12}
SIX_VALUES["verify_steps_s"] = 28.0


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk, as a markdown viewer gets them."""
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def rows_of(fig: Figure) -> list[int]:
    """How many panels each row of the figure holds, top row first."""
    tops = sorted((round(ax.get_position().y1, 3) for ax in fig.axes), reverse=True)
    return [len(list(row)) for _, row in groupby(tops)]


def compared(metric: str, base: float, current: float, outcome: MetricOutcome, threshold: float) -> MetricComparison:
    return MetricComparison(
        metric=metric,
        baseline_median=base,
        current_median=current,
        change=current / base - 1,
        threshold=threshold,
        p_value=0.001,
        outcome=outcome,
        message="",
        n_baseline=3,
        n_current=3,
    )


def six_metric_record(emulated: bool = False) -> MeasurementRecord:
    samples = {m: [v * 0.99, v, v * 1.01] for m, v in SIX_VALUES.items()}
    comparisons = (
        compared("decode_tok_s", 71.5, 70.0, MetricOutcome.REGRESSION, 0.01),
        compared("ttft_s", 0.12, 0.12, MetricOutcome.UNCHANGED, 0.05),
        compared("accept_length", 2.2, 2.5, MetricOutcome.IMPROVEMENT, 0.03),
    )
    return measurement(samples=samples, comparisons=comparisons, emulated=emulated)


def band_of(ax: Any) -> list[tuple[float, float]]:
    """The y extent of every shaded span of a panel (axhspan: a Rectangle or, before matplotlib 3.9, a Polygon)."""
    spans = []
    for patch in ax.patches:
        box = patch.get_path().get_extents(patch.get_patch_transform())
        spans.append((box.y0, box.y1))
    return spans


def horizontal_lines_at(ax: Any) -> list[float]:
    return [float(line.get_ydata()[0]) for line in ax.lines if len(set(np.asarray(line.get_ydata()).tolist())) == 1]


def vertical_lines_at(ax: Any) -> list[float]:
    return [float(line.get_xdata()[0]) for line in ax.lines if len(set(np.asarray(line.get_xdata()).tolist())) == 1]


def test_six_metric_samples_figure_is_a_grid_a_laptop_shows_whole(tmp_path: Path, figures: list[Figure]) -> None:
    path = plots.samples_figure(six_metric_record(), tmp_path / "s.png")
    (fig,) = figures
    assert rows_of(fig) == [3, 3]
    width, height = png_size(path)
    assert 900 <= width <= 1400 and height >= 0.45 * width, (width, height)  # was 2112 x 396: a strip


def test_four_metrics_take_two_per_row(tmp_path: Path, figures: list[Figure]) -> None:
    samples = {m: [SIX_VALUES[m]] * 3 for m in SIX[:4]}
    plots.samples_figure(measurement(samples=samples), tmp_path / "s.png")
    assert rows_of(figures[0]) == [2, 2]


def test_samples_panels_draw_the_baseline_median_and_its_floor_band(tmp_path: Path, figures: list[Figure]) -> None:
    plots.samples_figure(six_metric_record(), tmp_path / "s.png")
    panels = {ax.get_title().split("\n")[0]: ax for ax in figures[0].axes}
    decode = panels["decode_tok_s"]
    assert 71.5 in horizontal_lines_at(decode)
    # The stats' decision rule: a rate regresses below baseline x (1 - floor), improves above baseline / (1 - floor).
    ((low, high),) = band_of(decode)
    assert low == pytest.approx(71.5 * 0.99) and high == pytest.approx(71.5 / 0.99)
    ((low, high),) = band_of(panels["ttft_s"])  # a latency: the worse side is up
    assert low == pytest.approx(0.12 / 1.05) and high == pytest.approx(0.12 * 1.05)
    assert band_of(panels["e2e_s"]) == [] and horizontal_lines_at(panels["e2e_s"]) == []  # no baseline: none drawn


def test_samples_titles_say_fail_ok_or_better_in_their_colour(tmp_path: Path, figures: list[Figure]) -> None:
    plots.samples_figure(six_metric_record(), tmp_path / "s.png")
    marks = {ax.get_title().split("\n")[0]: (ax.get_title(loc="left"), ax.title.get_color()) for ax in figures[0].axes}
    assert marks["decode_tok_s"] == ("FAIL", plots.OUTCOME_COLOUR["regression"])
    assert marks["ttft_s"] == ("ok", plots.OUTCOME_COLOUR["unchanged"])
    assert marks["accept_length"] == ("better", plots.OUTCOME_COLOUR["improvement"])
    assert marks["e2e_s"][0] == ""  # no baseline: neither pass nor fail
    titles = {ax.get_title() for ax in figures[0].axes}
    assert "decode_tok_s\nregression, -2.1% (worse)" in titles  # describe_change's convention


def twelve_nights(tmp_path: Path, last: float, *, emulated: bool = False) -> tuple[RunResults, history.RunHistory]:
    """Twelve stored runs of six metrics, each a hair (0.16% at most) from the last baseline's medians; the
    last run's decode_tok_s is ``last`` against a baseline of 70.0 with a 3% floor."""
    folders = []
    for night in range(1, 13):
        wobble = 1 + 0.0016 * (night % 2)
        samples = {m: [v * wobble] * 3 for m, v in SIX_VALUES.items()}
        comparisons: tuple[MetricComparison, ...] = ()
        if night == 12:
            samples["decode_tok_s"] = [last] * 3
            outcome = MetricOutcome.REGRESSION if last < 70.0 * 0.97 else MetricOutcome.UNCHANGED
            comparisons = (compared("decode_tok_s", 70.0, last, outcome, 0.03),)
        record = measurement(samples=samples, comparisons=comparisons, emulated=emulated)
        folders.append(save(tmp_path / f"n{night:02d}", record, night=night))
    return past_of(tmp_path / "h.sqlite", *folders)


def history_panels(fig: Figure) -> dict[str, Any]:
    return {ax.get_title().split(" ")[0].split("\n")[0]: ax for ax in fig.axes}


def test_history_of_six_metrics_is_a_grid_with_few_readable_dates(tmp_path: Path, figures: list[Figure]) -> None:
    run, past = twelve_nights(tmp_path, 70.0)
    made = plots.draw(RunReport.of(run, past), tmp_path / "out")
    fig = figures[-1]
    assert made[run.measurements[0].key][1].name.endswith("-history.png")
    assert rows_of(fig) == [3, 3]
    width, _ = png_size(made[run.measurements[0].key][1])
    assert width <= 1400
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    by_row = sorted(fig.axes, key=lambda ax: -ax.get_position().y1)
    lowest_date = min(t.get_window_extent(renderer).y0 for ax in by_row[:3] for t in ax.get_xticklabels())
    below = [ax.get_tightbbox(renderer) for ax in by_row[3:]]
    assert lowest_date > max(box.y1 for box in below if box is not None)  # above the next row's titles
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() if t.get_text()]
        assert 2 <= len(labels) <= 8
        assert all(float(t.get_fontsize()) >= 8 for t in labels)
        assert all(len(t.get_text()) <= 12 for t in labels), [t.get_text() for t in labels]


def test_a_hair_of_a_move_stays_a_hair_on_the_history_axis(tmp_path: Path, figures: list[Figure]) -> None:
    run, past = twelve_nights(tmp_path, 70.0)
    plots.draw(RunReport.of(run, past), tmp_path / "out")
    for metric, ax in history_panels(figures[-1]).items():
        values = np.asarray(ax.lines[0].get_ydata())
        low, high = ax.get_ylim()
        floor = 0.03 if metric in ("decode_tok_s", "itl_s", "accept_length", "verify_steps_s") else 0.05
        assert high - low >= 2 * floor * float(np.median(values)) * 0.95, metric  # at least the floor each way
        assert (values.max() - values.min()) / (high - low) < 0.2, metric  # 0.16% of a move, not a cliff


def test_a_wide_floor_keeps_a_latency_axis_above_zero(tmp_path: Path, figures: list[Figure]) -> None:
    """The CPU tier's 250% latency floor, taken symmetrically, put e2e_s on an axis from -0.3 s."""
    samples = {"e2e_s": [0.18, 0.2, 0.24], "decode_tok_s": [290.0, 310.0, 380.0]}
    record = measurement(samples=samples).model_copy(update={"floors": {"e2e_s": 2.5, "decode_tok_s": 0.7}})
    points = [("2026-01-01 00:00 (a)", {"e2e_s": 0.2}), ("2026-01-02 00:00 (b)", {"e2e_s": 0.24})]
    plots.samples_figure(record, tmp_path / "s.png")
    plots.history_figure(record, points, tmp_path / "h.png")
    samples_fig, history_fig = figures
    panels = {ax.get_title().split("\n")[0]: ax for ax in samples_fig.axes}
    for panel in (panels["e2e_s"], panels["decode_tok_s"], *history_fig.axes):
        low = panel.get_ylim()[0]
        assert low >= 0.0, (panel.get_title(), low)
    # The floor's room is still there on the worse side: a latency may rise 3.5 times, a rate fall to 0.3.
    assert panels["e2e_s"].get_ylim()[1] >= 0.21 * 3.5
    assert panels["decode_tok_s"].get_ylim()[0] <= 335.0 * 0.3 * 1.0001


def test_history_draws_the_baseline_and_marks_runs_beyond_its_floor(tmp_path: Path, figures: list[Figure]) -> None:
    run, past = twelve_nights(tmp_path, 60.0)
    plots.draw(RunReport.of(run, past), tmp_path / "out")
    decode = history_panels(figures[-1])["decode_tok_s"]
    assert 70.0 in horizontal_lines_at(decode)
    ((low, high),) = band_of(decode)
    assert low == pytest.approx(70.0 * 0.97) and high == pytest.approx(70.0 / 0.97)
    worse = [line for line in decode.lines if line.get_label() == plots.BEYOND_FLOOR_WORSE]
    assert [np.asarray(line.get_xdata()).tolist() for line in worse] == [[11]]  # the last run only
    assert decode.get_ylim()[0] < 60.0 < 70.0 * 0.97


def test_history_title_has_the_full_emulator_tag(tmp_path: Path, figures: list[Figure]) -> None:
    run, past = twelve_nights(tmp_path, 70.0, emulated=True)
    plots.draw(RunReport.of(run, past), tmp_path / "out")
    assert "[EMULATOR: test double, not GPU results]" in figures[-1].texts[0].get_text()


@pytest.mark.parametrize(
    ("labels", "shown"),
    [
        (["2026-01-05 03:00 (a)", "2026-01-05 14:30 (b)"], ["Jan 05 03:00", "Jan 05 14:30"]),  # one day: the times
        (["2025-12-31 03:00 (a)", "2026-01-01 03:00 (b)"], ["2025-12-31", "2026-01-01"]),  # two years: the years
        (["night-one-of-many", "night-two-of-many"], ["night-one-of", "night-two-of"]),  # no date: cut short
    ],
)
def test_history_dates_stay_short_and_tell_runs_apart(
    tmp_path: Path, figures: list[Figure], labels: list[str], shown: list[str]
) -> None:
    points = [(label, {"decode_tok_s": 70.0}) for label in labels]
    plots.history_figure(measurement(), points, tmp_path / "h.png")
    (ax,) = figures[0].axes
    assert [t.get_text() for t in ax.get_xticklabels()] == shown


def test_many_runs_get_at_most_eight_evenly_spaced_dates_ending_at_this_run(
    tmp_path: Path, figures: list[Figure]
) -> None:
    points = [(f"2026-{1 + d // 28:02d}-{1 + d % 28:02d} 03:00 (r{d})", {"decode_tok_s": 70.0}) for d in range(40)]
    plots.history_figure(measurement(), points, tmp_path / "h.png")
    (ax,) = figures[0].axes
    ticks = list(ax.get_xticks())
    assert len(ticks) <= 8 and ticks[-1] == 39
    assert len({b - a for a, b in pairwise(ticks)}) == 1  # evenly spaced
    assert ax.get_xticklabels()[-1].get_text() == "Feb 12"  # run 39: the 12th of February


def test_a_drift_is_still_marked_from_its_first_run(tmp_path: Path, figures: list[Figure]) -> None:
    points = [(f"2026-01-{d:02d} 03:00 (r{d})", {"decode_tok_s": 70.0 if d < 8 else 65.0}) for d in range(1, 13)]
    drift = Drift("decode_tok_s", 7, points[7][0], -0.0714, 5, ())
    plots.history_figure(measurement(), points, tmp_path / "h.png", [drift])
    (ax,) = figures[0].axes
    assert ax.get_title() == "decode_tok_s (median per run)\ndrifting since Jan 08, -7.1% (worse)"
    assert 6.5 in vertical_lines_at(ax)
