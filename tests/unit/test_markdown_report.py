"""`sglperf.reporting.markdown` on results folders built by hand (no server, no SGLang)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglperf.baselines import roofline
from sglperf.history import ingest, open_store
from sglperf.model.hardware import Bandwidth
from sglperf.model.host_load import HostLoad, HostLoadSummary
from sglperf.model.measurement import (
    BaselineStatus,
    MeasurementRecord,
    MetricComparison,
    Provenance,
    SampleSummary,
)
from sglperf.model.metrics import MetricOutcome
from sglperf.model.verdict import Status, Verdict
from sglperf.reporting import history, markdown
from sglperf.reporting.run_report import RunReport
from sglperf.results.folder import REPORT_NAME, ResultsError, collect


def verdict(
    variant: str = "mtp1",
    intent: str = "prefill_cuda_graph",
    status: Status = Status.PASS,
    *,
    actual: str | None = "on",
    detail: str = "read from cuda_graph_config.prefill.backend = 'breakable'",
    reasons: tuple[str, ...] = (),
    tier: str = "preflight",
) -> Verdict:
    return Verdict(
        deployment="qwen36",
        variant=variant,
        intent=intent,
        expected="on",
        actual=actual,
        status=status,
        detail=detail,
        sglang_version="0.5.23",
        reasons=reasons,
        tier=tier,
    )


def measurement(
    variant: str = "mtp1",
    workload: str = "decode-chat",
    concurrency: int = 1,
    *,
    samples: dict[str, list[float]] | None = None,
    comparisons: tuple[MetricComparison, ...] = (),
    status: BaselineStatus = BaselineStatus.COMPARED,
    emulated: bool = False,
    notes: tuple[str, ...] = (),
) -> MeasurementRecord:
    samples = samples or {"decode_tok_s": [64.0, 65.0, 66.0], "accept_length": [2.5, 2.5, 2.5]}
    key = f"qwen36-{variant}-{workload}-c{concurrency}"
    return MeasurementRecord(
        key=key,
        deployment="qwen36",
        variant=variant,
        workload=workload,
        concurrency=concurrency,
        emulated=emulated,
        sglang_version="0.5.23",
        provenance=Provenance(
            sglang_version="0.5.23",
            runner="2xA6000",
            emulated=emulated,
            date="2026-01-01T00:00:00Z",
            effective_args_digest="abc123",
            launch_command="python -m sglang.launch_server --model-path /m",
        ),
        samples=samples,
        summary={
            m: SampleSummary(n=len(v), median=sorted(v)[len(v) // 2], p10=min(v), p90=max(v))
            for m, v in samples.items()
        },
        baseline=f"baselines/{key}.json",
        baseline_status=status,
        baseline_samples={m: [v * 1.07 for v in vs] for m, vs in samples.items()} if comparisons else {},
        comparisons=list(comparisons),
        notes=list(notes),
    )


REGRESSION = MetricComparison(
    metric="decode_tok_s",
    baseline_median=70.0,
    current_median=65.0,
    change=-0.0714,
    threshold=0.03,
    p_value=0.001,
    outcome=MetricOutcome.REGRESSION,
    message="decode_tok_s regressed",
    n_baseline=3,
    n_current=3,
)


def write_folder(
    folder: Path, verdicts: list[Verdict], measurements: list[MeasurementRecord], *, verdict_file: str = "main"
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if verdicts:
        (folder / f"verdicts-{verdict_file}.jsonl").write_text(
            "".join(json.dumps(v.to_record(), sort_keys=True) + "\n" for v in verdicts)
        )
    if measurements:
        (folder / "measurements").mkdir(exist_ok=True)
        for m in measurements:
            record = {**m.model_dump(mode="json"), "result": {"samples": [], "note": "the meter's raw record"}}
            (folder / "measurements" / f"{m.key}.json").write_text(json.dumps(record))
    return folder


def report_of(folder: Path) -> str:
    return markdown.markdown(RunReport.of(collect(folder)))


def test_collect_reads_back_verdicts_and_measurements_ignoring_the_raw_result(tmp_path: Path) -> None:
    v = verdict(reasons=("SGLang rule x set y",))
    m = measurement(comparisons=(REGRESSION,))
    run = collect(write_folder(tmp_path / "night", [v], [m]))
    assert run.verdicts == (v,)
    assert run.measurements == (m,)


def test_emulator_banner_only_when_a_measurement_is_emulated(tmp_path: Path) -> None:
    gpu = report_of(write_folder(tmp_path / "gpu", [verdict()], [measurement()]))
    emulated = report_of(write_folder(tmp_path / "emu", [verdict()], [measurement(emulated=True)]))
    assert "test double" not in gpu
    assert "**SGLang emulator, a test double**" in emulated
    assert emulated.index("test double") < emulated.index("## qwen36 / mtp1")


def test_emulator_banner_when_a_verdict_came_from_the_emulator_tier(tmp_path: Path) -> None:
    live = report_of(write_folder(tmp_path / "live", [verdict(tier="live")], []))
    emulated = report_of(write_folder(tmp_path / "emu", [verdict(tier="live (emulator)")], []))
    assert "test double" not in live
    assert "test double" in emulated


def test_one_section_per_variant_sorted_with_its_own_rows(tmp_path: Path) -> None:
    folder = write_folder(
        tmp_path / "night",
        [verdict("mtp3-full", "single_batch_overlap"), verdict("mtp1", "prefill_cuda_graph")],
        [measurement("mtp3-full", "decode-code"), measurement("mtp1", "decode-chat", 8)],
    )
    text = report_of(folder)
    assert text.startswith("# sglperf report: night\n")
    assert "2 variants, 2 intent checks (0 failed), 2 measurements (0 regressions)." in text
    first, second = text.index("## qwen36 / mtp1"), text.index("## qwen36 / mtp3-full")
    assert first < second
    mtp1, mtp3 = text[first:second], text[second:]
    assert "| prefill_cuda_graph |" in mtp1 and "single_batch_overlap" not in mtp1
    assert "| single_batch_overlap |" in mtp3 and "prefill_cuda_graph" not in mtp3
    assert "### decode-chat at concurrency 8" in mtp1 and "decode-code" not in mtp1
    assert "### decode-code at concurrency 1" in mtp3


def test_verdict_rows_show_tier_status_detail_and_first_reason(tmp_path: Path) -> None:
    failed = verdict(
        "mtp1",
        status=Status.FAIL,
        actual="off",
        detail="read from cuda_graph_config.prefill.backend = 'disabled'",
        reasons=("SGLang rule _handle_piecewise (server_args.py:10) set off", "SGLang log [WARNING] second"),
    )
    errored = verdict("mtp1", "speculative", Status.ERROR, actual=None, detail="SGLang's validation says: boom")
    text = report_of(write_folder(tmp_path / "night", [failed, errored, verdict("mtp1", "decode_cuda_graph")], []))
    assert "1 variants, 3 intent checks (2 failed), 0 measurements (0 regressions)." in text
    assert "| tier | intent | expected | effective | verdict | detail |" in text
    assert (
        "| preflight | prefill_cuda_graph | on | off | **fail** | read from cuda_graph_config.prefill.backend = "
        "'disabled'; SGLang rule _handle_piecewise (server_args.py:10) set off |"
    ) in text
    assert "second" not in text  # only the first reason fits a table cell
    assert "| preflight | speculative | on | - | **error** | SGLang's validation says: boom |" in text
    assert "| preflight | decode_cuda_graph | on | on | **pass** |" in text


def test_inert_and_unproven_verdicts(tmp_path: Path) -> None:
    inert = verdict("mtp3-full", "single_batch_overlap", Status.INERT, actual="inert (set, no effect)", detail="d")
    unproven = verdict("mtp3-full", "vision_weights_skipped", Status.UNPROVEN, actual="on (unproven)", detail="u")
    text = report_of(write_folder(tmp_path / "night", [inert, unproven], []))
    assert "2 intent checks (1 failed)" in text  # inert is a failure, unproven is not
    assert "| preflight | single_batch_overlap | on | inert (set, no effect) | **inert** | d |" in text
    assert "| preflight | vision_weights_skipped | on | on (unproven) | **unproven** | u |" in text


def test_a_pipe_in_a_detail_is_escaped_so_the_table_keeps_its_columns(tmp_path: Path) -> None:
    v = verdict(detail="choices: a|b", reasons=("rule said x | y",))
    text = report_of(write_folder(tmp_path / "night", [v], []))
    row = next(line for line in text.splitlines() if line.startswith("| preflight | prefill_cuda_graph"))
    assert "choices: a\\|b; rule said x \\| y" in row
    assert row.replace("\\|", "").count("|") == 7  # six cells


def test_a_long_detail_is_cut(tmp_path: Path) -> None:
    text = report_of(write_folder(tmp_path / "night", [verdict(detail="x" * 1000)], []))
    row = next(line for line in text.splitlines() if line.startswith("| preflight | prefill_cuda_graph"))
    assert "x" * 300 in row and "x" * 301 not in row


def test_comparison_row_shows_baseline_current_delta_threshold_and_outcome(tmp_path: Path) -> None:
    m = measurement(comparisons=(REGRESSION,), notes=("--load-format dummy",))
    text = report_of(write_folder(tmp_path / "night", [], [m]))
    assert "1 variants, 0 intent checks (0 failed), 1 measurements (1 regressions)." in text
    assert "Notes: --load-format dummy" in text
    assert "| metric | baseline | current | delta | threshold | verdict |" in text
    assert "| decode_tok_s | 70 | 65 | -7.1% (worse) | 3% | **regression** |" in text


def test_a_metric_without_comparison_shows_the_current_median_and_baseline_status(tmp_path: Path) -> None:
    missing = measurement("mtp1", status=BaselineStatus.MISSING)
    compared = measurement("mtp3-full", comparisons=(REGRESSION,))
    text = report_of(write_folder(tmp_path / "night", [], [missing, compared]))
    mtp1, mtp3 = text.split("## qwen36 / mtp3-full")
    assert "| decode_tok_s | - | 65 | - | - | missing |" in mtp1
    assert "| accept_length | - | 2.5 | - | - | missing |" in mtp1
    # In a compared record, a metric that has no comparison (e.g. acceptance with dummy weights).
    assert "| accept_length | - | 2.5 | - | - | compared |" in mtp3
    assert "| decode_tok_s | 70 | 65 |" in mtp3


def test_write_saves_the_report_and_links_every_plot(tmp_path: Path) -> None:
    m = measurement(comparisons=(REGRESSION,))
    folder = write_folder(tmp_path / "night", [verdict()], [m])
    path = markdown.write(folder)
    assert path == folder / REPORT_NAME
    text = path.read_text()
    run = collect(folder)
    made = {m.key: [folder / "plots" / f"{m.key}-samples.png"]}
    assert text == markdown.markdown(RunReport.of(run, history.read(run, None)), made) + "\n"
    link = f"![{m.key}-samples](plots/{m.key}-samples.png)"
    assert link in text
    assert text.index("| decode_tok_s |") < text.index(link)
    assert (folder / "plots" / f"{m.key}-samples.png").is_file()
    assert "-history.png" not in text  # no history store given
    assert "History: no history store" in text


def test_write_links_the_history_plot_when_the_store_has_an_earlier_run(tmp_path: Path) -> None:
    m = measurement()
    earlier = write_folder(tmp_path / "night1", [], [m.model_copy(update={"sglang_version": "0.5.22"})])
    folder = write_folder(tmp_path / "night2", [], [m])
    store = open_store(str(tmp_path / "h.sqlite"))
    assert store is not None
    for f in (earlier, folder):
        store.add_run(ingest.from_folder(f))
    text = markdown.write(folder, store).read_text()
    store.close()
    assert f"![{m.key}-history](plots/{m.key}-history.png)" in text
    assert (folder / "plots" / f"{m.key}-history.png").is_file()


def test_an_empty_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no sglperf results here") as info:
        collect(tmp_path)
    assert str(tmp_path) in str(info.value)


def test_a_malformed_verdict_line_names_the_file_and_line(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "night", [verdict()], [], verdict_file="gw1")
    path = folder / "verdicts-gw1.jsonl"
    path.write_text(path.read_text() + "\n" + json.dumps({"deployment": "qwen36"}) + "\n")
    with pytest.raises(ResultsError) as info:
        collect(folder)
    assert str(info.value).startswith(f"{path}:3: not a verdict record")


@pytest.mark.parametrize(
    "line", ["{not json", "[1, 2]", '"text"', json.dumps({**verdict().to_record(), "status": "?"})]
)
def test_any_unreadable_verdict_line_is_a_results_error(tmp_path: Path, line: str) -> None:
    folder = tmp_path / "night"
    folder.mkdir()
    (folder / "verdicts-main.jsonl").write_text(line + "\n")
    with pytest.raises(ResultsError, match=r"verdicts-main\.jsonl:1: not a verdict record"):
        collect(folder)


def test_a_malformed_measurement_names_the_file_and_field(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "night", [], [measurement()])
    path = next((folder / "measurements").glob("*.json"))
    record = json.loads(path.read_text())
    del record["provenance"]
    path.write_text(json.dumps(record))
    with pytest.raises(ResultsError) as info:
        collect(folder)
    assert str(info.value) == f"{path}: not a measurement record (provenance: Field required)"


def test_a_measurement_that_is_not_json_names_the_file(tmp_path: Path) -> None:
    folder = write_folder(tmp_path / "night", [verdict()], [])
    (folder / "measurements").mkdir()
    path = folder / "measurements" / "broken.json"
    path.write_text("{truncated")
    with pytest.raises(ResultsError, match="not a measurement record") as info:
        collect(folder)
    assert str(path) in str(info.value)


def test_the_host_line_says_what_others_took_and_which_rounds_were_run_again(tmp_path: Path) -> None:
    busy = HostLoad(wall_s=2.0, cpus=2, foreign_cpu_s=2.0, steal_cpu_s=0.0, slack_cpu_s=0.06)
    quiet = HostLoad(wall_s=2.0, cpus=2, foreign_cpu_s=0.04, steal_cpu_s=0.0, slack_cpu_s=0.06)
    m = measurement().model_copy(update={"host": HostLoadSummary.of(0.1, [quiet, quiet], [busy])})
    run = collect(write_folder(tmp_path / "night", [], [m]))
    assert run.measurements == (m,)  # the summary survives the results file
    assert (
        "Host: other processes and the hypervisor took a median 1% of this machine's CPU during the measured rounds "
        "(max 1%; a round above 10% is run again); **1 round(s) run again**, the busiest: 50% of 2 CPUs "
        "(other processes 2.00 s, steal 0.00 s, in 2.00 s)"
    ) in markdown.markdown(RunReport.of(run))
    attached = measurement().model_copy(update={"host_note": "host load not counted: the server is attached"})
    assert "Host: host load not counted: the server is attached" in report_of(
        write_folder(tmp_path / "a", [], [attached])
    )


def with_roofline(m: MeasurementRecord, measured_tok_s: float) -> MeasurementRecord:
    """``m`` with the roofline of 2x RTX A6000 for qwen36 with MTP: 768 GB/s / 25.6 GB x 2.5 = 75 tok/s."""
    weights = roofline.WeightBytes(25_600_000_000, "preflight: parameters SGLang's X holds on TP rank 0")
    bandwidth = Bandwidth(768.0, "NVIDIA RTX A6000 datasheet (768 GB/s)")
    roof = roofline.decode_roofline(bandwidth, weights, measured_tok_s, 2.5, "NVIDIA RTX A6000")
    return m.model_copy(update={"roofline": roof})


def test_a_plausible_roofline_is_a_hardware_figure_with_its_inputs(tmp_path: Path) -> None:
    report = report_of(write_folder(tmp_path / "night", [], [with_roofline(measurement(), 70.0)]))
    assert (
        "Roofline: decode 70 tok/s is **93% of roofline** (75 tok/s = 768 GB/s / 25.6 GB per GPU per step x 2.5 "
        "tok/step; bandwidth: NVIDIA RTX A6000 datasheet (768 GB/s); weights: preflight: parameters SGLang's X "
        "holds on TP rank 0; tokens per step: measured acceptance length (median over rounds))"
    ) in report
    assert "## Roofline" in report and "Roofline check" not in report


def test_a_share_above_the_limit_is_reported_as_wrong_inputs_not_as_a_hardware_figure(tmp_path: Path) -> None:
    report = report_of(write_folder(tmp_path / "night", [], [with_roofline(measurement(), 1245.0)]))
    assert (
        "Roofline: **not a hardware figure**: decode 1245 tok/s is 1660% of the computed limit of 75 tok/s "
        "(over 105% is impossible, not fast): the roofline inputs or the measurement are wrong. Inputs: bandwidth "
        "768 GB/s (NVIDIA RTX A6000 datasheet (768 GB/s)); weight bytes per step 25.6 GB per GPU (preflight: "
        "parameters SGLang's X holds on TP rank 0); tokens per step 2.5 (measured acceptance length (median over "
        "rounds))"
    ) in report
    assert "of roofline**" not in report
    check = (
        "**Roofline check**: 1 measurement(s) above the memory-bandwidth limit, which no GPU can do, so their "
        "roofline inputs or their measurement are wrong: qwen36-mtp1-decode-chat-c1 (each one's Roofline line "
        "names the inputs)."
    )
    assert check in report and report.index(check) < report.index("## qwen36 / mtp1")  # said up front


def test_no_hardware_roofline_against_the_emulator(tmp_path: Path) -> None:
    # A record written before the emulator check, carrying a share of the runner's GPU bandwidth.
    old = with_roofline(measurement(emulated=True), 1245.0)
    new = measurement(emulated=True).model_copy(update={"roofline_note": roofline.EMULATOR_NOTE})
    for name, m in (("old", old), ("new", new)):
        report = report_of(write_folder(tmp_path / name, [], [m]))
        assert (
            "Roofline: not computed (the emulator has no memory bandwidth: its decode rate is a configured delay, "
            "not a GPU's)"
        ) in report
        assert "of roofline" not in report and "computed limit" not in report
        assert "## Roofline" not in report and "Roofline check" not in report
