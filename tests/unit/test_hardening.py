"""Issue 13: bad input gets one clear line naming the file and what to do, never a traceback, and
nothing that could not be read is overwritten. Fast: in this process, no SGLang environment, no server
(with real processes, servers and pytest runs: tests/integration/test_hardening_processes.py)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shutil
import signal
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglperf import cli, preflight
from sglperf.baselines import regression, store
from sglperf.model.deployment import EFFECTS, Deployment
from sglperf.model.deployment_file import DeploymentError, load
from sglperf.model.graph_coverage import graph_needs
from sglperf.model.intent_names import INTENT_NAMES
from sglperf.model.measurement import BaselineStatus
from sglperf.model.prompts import load_prompts
from sglperf.model.server_facts import ServerFacts
from sglperf.model.verdict import Status, Verdict
from sglperf.runtime import server
from sglperf.session.live_session import _emulation_problem, _user_emulator_config
from sglperf.session.measurement import record_baseline
from sglperf.sglang import envs
from sglperf.sglang.server_api import NOT_ARGS

from ..support.baselines import baseline_file, entry, provenance
from ..support.project import QWEN36, make_project

pytest_plugins = ["pytester"]

NOT_UTF8 = b'description = "caf\xe9"\n'


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglperf: "), err
    assert "Traceback" not in out + err
    return lines[0]


# -- 2: --update-baselines never replaces a file it cannot read ------------------------------------

UNREADABLE = {
    "truncated": lambda text: text[: len(text) // 2],
    "schema_version 2": lambda text: text.replace('"schema_version": 1', '"schema_version": 2'),
    "not UTF-8": lambda text: text.replace("qwen36", "qw\udce9n36"),
}


@pytest.mark.parametrize("damage", sorted(UNREADABLE))
def test_record_refuses_to_overwrite_an_unreadable_baseline(tmp_path: Path, damage: str) -> None:
    path = baseline_file(tmp_path / "mtp1.json")
    assert sorted(store.load(path).entries) == ["decode-chat@c1", "decode-chat@c2"]
    path.write_bytes(UNREADABLE[damage](path.read_text()).encode("utf-8", "surrogateescape"))
    before = path.read_bytes()
    with pytest.raises(store.BaselineError) as excinfo:
        store.record(path, "qwen36", "mtp1", provenance(), entry(concurrency=1, scale=2))
    message = str(excinfo.value)
    assert "\n" not in message and str(path) in message
    assert "will not overwrite it" in message and "restore it from git" in message and "move it away" in message
    assert path.read_bytes() == before


def test_update_baselines_item_fails_with_the_line_and_leaves_the_file(tmp_path: Path) -> None:
    path = baseline_file(tmp_path / "mtp1.json")
    path.write_text(path.read_text()[:100])
    before = path.read_bytes()
    deployment = load(QWEN36)
    verdict = record_baseline(path, deployment, deployment.variant("mtp1"), provenance(), entry())
    assert verdict.status == BaselineStatus.UNREADABLE
    assert len(verdict.problems) == 1 and str(path) in verdict.problems[0] and "move it away" in verdict.problems[0]
    assert path.read_bytes() == before


def test_update_baselines_refuses_a_variant_with_wrong_args_or_an_unidentified_server(tmp_path: Path) -> None:
    path = tmp_path / "mtp1.json"
    deployment = load(QWEN36)
    variant = deployment.variant("mtp1")
    wrong = Verdict("qwen36", "mtp1", "piecewise_cuda_graph", "true", "false", Status.FAIL, "", "0.5.23", tier="live")
    refused = [
        record_baseline(path, deployment, variant, provenance(), entry(), wrong_args=[wrong]),
        record_baseline(path, deployment, variant, provenance(), entry(), ran_otherwise=["no graph replayed"]),
        record_baseline(path, deployment, variant, provenance(), entry(), unidentified_server="http://h:30000"),
    ]
    assert [v.status for v in refused] == [BaselineStatus.REFUSED] * 3
    assert "piecewise_cuda_graph expected true, got false (live)" in refused[0].problems[0]
    assert "did not run what its intents say" in refused[1].problems[0]
    assert "http://h:30000" in refused[2].problems[0] and "--sglang-url-gpus" in refused[2].problems[0]
    assert not path.exists()
    recorded = record_baseline(path, deployment, variant, provenance(), entry())
    assert recorded.status == BaselineStatus.RECORDED and path.exists()


# -- 5: an unknown --variant or deployment path is an error before any interpreter is asked ---------


@pytest.fixture
def no_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    def asked(*_a: object, **_k: object) -> None:
        raise AssertionError("an interpreter was asked before the input was checked")

    # The modules themselves: the command looks both up at call time.
    monkeypatch.setattr(envs, "choose_python", asked)
    monkeypatch.setattr(preflight, "Resolver", asked)


@pytest.mark.usefixtures("no_interpreter")
def test_preflight_unknown_variant_lists_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["preflight", str(QWEN36), "--variant", "mtp1", "--variant", "nosuchvariant"]) == 2
    line = _one_line_error(capsys)
    assert "--variant nosuchvariant" in line and str(QWEN36) in line
    assert "known variants: mtp1, mtp3-defaults, mtp3-full, mtp3-prefill-graph" in line


@pytest.mark.usefixtures("no_interpreter")
def test_explain_against_an_unknown_variant_blames_against(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53's audit: `explain --against nosuch` said "--variant nosuch: no such variant"."""
    assert cli.main(["explain", str(QWEN36), "--variant", "mtp1", "--against", "nosuch"]) == 2
    line = _one_line_error(capsys)
    assert line.startswith("sglperf: --against nosuch: no such variant in ") and "--variant" not in line, line
    assert cli.main(["explain", str(QWEN36), "--variant", "nosuch", "--against", "mtp1"]) == 2
    assert _one_line_error(capsys).startswith("sglperf: --variant nosuch: no such variant in ")


@pytest.mark.usefixtures("no_interpreter")
@pytest.mark.parametrize("command", [["preflight"], ["upgrade-check", "--to", "0.5.23"]])
def test_unknown_deployment_path_is_exit_2(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([*command, str(tmp_path / "nope.toml")]) == 2
    assert "nope.toml: no such deployment file" in _one_line_error(capsys)
    assert cli.main([*command, str(tmp_path)]) == 2
    assert "no deployment files found" in _one_line_error(capsys)


# -- audit 2026-12 #7, #8: over-long paths and special files are one line, never a hang ---------------


@pytest.fixture
def special_files(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(65 * 2**20)  # sparse: no disk used
    return {
        "device": Path("/dev/zero"),
        "fifo": fifo,
        "oversized": big,
        "over-long path": tmp_path / ("d" * 5000 + ".toml"),
    }


SAID = {
    "device": "not a regular file",
    "fifo": "not a regular file",
    "oversized": "larger than 64 MiB",
    "over-long path": "File name too long (ENAMETOOLONG)",
}


@pytest.mark.parametrize("kind", sorted(SAID))
def test_special_files_as_deployment_baseline_or_emulator_config_are_one_line(
    kind: str, special_files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    path = special_files[kind]
    assert cli.main(["preflight", str(path)]) == 2
    assert SAID[kind] in _one_line_error(capsys)
    assert cli.main(["baseline", "show", str(path)]) == 2
    assert SAID[kind] in _one_line_error(capsys)
    with pytest.raises(server.ServerStartError, match=SAID[kind].replace("(", r"\(").replace(")", r"\)")):
        _user_emulator_config(f"@{path}")


def test_a_model_config_that_is_a_device_names_the_deployment_field(tmp_path: Path) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace("../models/qwen3.6-27b/config.json", "/dev/zero"))
    with pytest.raises(DeploymentError, match=r"model.config: /dev/zero: cannot read it: not a regular file"):
        load(path)


# -- 10: numbers and booleans are not strings --------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("tp_size = 2", 'tp_size = "2"', "launch.tp_size"),
        ("memory_gib = 48", 'memory_gib = "48"', "runner.memory_gib"),
        (
            'repeats = 12\n\n[[workloads]]\nid = "decode-code"',
            'repeats = "12"\n\n[[workloads]]\nid = "decode-code"',
            "workloads[0].repeats",
        ),
        ("concurrency = [1, 8]", 'concurrency = [1, "8"]', "workloads[0].concurrency[1]"),
        ("output_len = 32", "output_len = 32.0", "workloads[2].output_len"),
        ("warmup = 1\n", "warmup = 1\nreuse_prefix_cache = 1\n", "workloads[2].reuse_prefix_cache"),
    ],
)
def test_strings_for_numbers_are_errors_naming_file_and_field(
    tmp_path: Path, old: str, new: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_project(tmp_path)
    text = QWEN36.read_text()
    assert old in text
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    message = str(excinfo.value)
    assert str(path) in message and f"  - {field}: " in message, message
    if '"' in new:
        assert "write it without quotes" in message


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (
            ("[launch]", '[launch]\nenv = { A = "x\\u0000y" }'),
            "launch.env.A: 'x\\x00y' is not allowed; expected a value without NUL",
        ),
        (
            ("[launch]", '[launch]\nenv = { "A=B" = "1" }'),
            "launch.env.A=B.[key]: 'A=B' is not allowed; expected an environment variable name",
        ),
        (("startup_timeout_s = 1800", "startup_timeout_s = inf"), "launch.startup_timeout_s"),
        (("startup_timeout_s = 1800", "startup_timeout_s = 1e12"), "launch.startup_timeout_s"),
    ],
)
def test_values_that_would_fail_later_are_refused_at_load(tmp_path: Path, edit: tuple[str, str], said: str) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace(*edit, 1))
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    assert said in str(excinfo.value), str(excinfo.value)


def test_toml_integers_are_still_floats(tmp_path: Path) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace("startup_timeout_s = 1800", "startup_timeout_s = 600"))
    d = load(path)
    assert d.launch.startup_timeout_s == 600.0 and d.runner.memory_gib == 48.0
    assert isinstance(d.launch.startup_timeout_s, float)


@pytest.mark.parametrize(("written", "read"), [("8.6", "8.6"), ("9", "9.0"), ("12.0", "12.0")])
def test_a_compute_capability_written_as_a_number_is_read_as_written(tmp_path: Path, written: str, read: str) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace('compute_capability = "8.6"', f"compute_capability = {written}", 1))
    assert load(path).runner.compute_capability == read


def test_a_number_for_a_text_field_says_to_quote_it(tmp_path: Path) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace('gpu_name = "NVIDIA RTX A6000"', "gpu_name = 6000", 1))
    with pytest.raises(DeploymentError) as excinfo:
        load(path)
    assert 'runner.gpu_name: Input should be a valid string, got the number 6000: write it in quotes, "6000"' in str(
        excinfo.value
    )


def test_incomplete_variant_speculative_is_a_load_error(tmp_path: Path) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    text = QWEN36.read_text()
    start, end = text.index("[launch.speculative]"), text.index("# Releases before")
    path.write_text(
        text[:start]
        + text[end:].replace(
            "speculative = { num_steps = 1, num_draft_tokens = 2 }", 'speculative = { algorithm = "NEXTN" }'
        )
    )
    with pytest.raises(
        DeploymentError,
        match=r"variants\[0\]\.speculative: merged with \[launch.speculative\] it is incomplete: num_steps",
    ):
        load(path)


# -- audit 2026-12 #4: write errors are one line, nothing half-written ---------------------------------


def test_a_baseline_folder_that_cannot_be_written_is_one_baseline_error(tmp_path: Path) -> None:
    (tmp_path / "baselines").write_text("a file where the folder should be")
    path = tmp_path / "baselines" / "2xA6000" / "qwen36" / "mtp1.json"
    with pytest.raises(store.BaselineError) as excinfo:
        store.record(path, "qwen36", "mtp1", provenance(), entry(concurrency=1))
    message = str(excinfo.value)
    assert message.startswith(f"{path}: cannot be written (") and "nothing was changed" in message, message
    assert "\n" not in message and (tmp_path / "baselines").read_text().startswith("a file")


def test_a_baseline_lock_that_is_a_symlink_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    path = tmp_path / "mtp1.json"
    Path(str(path) + ".lock").symlink_to(target)
    with pytest.raises(store.BaselineError, match=r"lock .*mtp1.json.lock is a symbolic link; remove"):
        store.record(path, "qwen36", "mtp1", provenance(), entry(concurrency=1))
    assert target.read_text() == "keep me" and not path.exists()


# -- audit 2026-12 #12: odd /server_info answers are named, never silently dropped or trusted ----------


def test_odd_memory_usage_reads_as_absent_not_a_crash() -> None:
    info = {"version": "0.5.23", "internal_states": [{"memory_usage": ["not", "a", "dict"]}]}
    facts = ServerFacts.from_server_info("http://x", info, {}, NOT_ARGS)
    assert facts.graph_memory is None and facts.weight_gib is None


def test_which_baselines_a_server_gets_follows_the_run_not_the_servers_word() -> None:
    says = {"version": "0.5.23", "emulated": True}
    emulator = ServerFacts.from_server_info("http://x", says, {}, NOT_ARGS)
    sglang = ServerFacts.from_server_info("http://x", {"version": "0.5.23"}, {}, NOT_ARGS)
    assert _emulation_problem(emulator, emulator=True) is None and _emulation_problem(sglang, emulator=False) is None
    assert "says it is the emulator, but this run expects SGLang" in str(_emulation_problem(emulator, emulator=False))
    assert "does not say it is one" in str(_emulation_problem(sglang, emulator=True))


# -- 12: baseline summaries come from the samples; a metric without samples is an error --------------


def _write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_show_and_diff_use_the_samples_not_a_contradicting_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mtp1.json"
    store.record(path, "qwen36", "mtp1", provenance(), entry())
    data = json.loads(path.read_text())
    data["entries"]["decode-chat@c1"]["summary"]["decode_tok_s"]["median"] = 999.0
    _write_json(path, data)
    assert store.load(path).entries["decode-chat@c1"].summary["decode_tok_s"].median == pytest.approx(70.55)
    assert cli.main(["baseline", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "decode_tok_s 70.55 (n=12)" in out and "999" not in out
    assert cli.main(["baseline", "diff", str(path), str(path)]) == 0
    assert "999" not in capsys.readouterr().out


@pytest.mark.parametrize("how", ["empty samples", "summary only"])
def test_a_metric_without_samples_is_an_error_naming_file_and_metric(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mtp1.json"
    store.record(path, "qwen36", "mtp1", provenance(), entry())
    data = json.loads(path.read_text())
    stored = data["entries"]["decode-chat@c1"]
    if how == "empty samples":
        stored["samples"]["ttft_s"] = []
    else:
        del stored["samples"]["ttft_s"]
    _write_json(path, data)
    with pytest.raises(store.BaselineError, match=r"entries.decode-chat@c1: metric ttft_s has .*no samples") as excinfo:
        store.load(path)
    assert str(path) in str(excinfo.value)
    assert cli.main(["baseline", "show", str(path)]) == 2
    assert "metric ttft_s" in _one_line_error(capsys)


# -- 15: one line and exit 2 (or a quiet exit), never a traceback -----------------------------------


class _ClosedPipe:
    def write(self, _text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self) -> int:
        raise OSError("no file descriptor")


def test_broken_pipe_exits_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = baseline_file(tmp_path / "mtp1.json")
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main(["baseline", "show", str(path)]) == cli.EXIT_BROKEN_PIPE
    monkeypatch.undo()
    assert capsys.readouterr().err == ""


def test_baseline_show_of_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["baseline", "show", str(tmp_path)]) == 2
    line = _one_line_error(capsys)
    assert f"{tmp_path}: is a directory" in line


def test_non_utf8_baseline_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mtp1.json"
    path.write_bytes(b'{"schema_version": 1, "deployment": "caf\xe9"}')
    with pytest.raises(store.BaselineError, match=r"mtp1.json: not UTF-8 text \(byte 0xe9 at offset 40\)"):
        store.load(path)
    assert cli.main(["baseline", "diff", str(path), str(path)]) == 2
    assert "mtp1.json: not UTF-8 text" in _one_line_error(capsys)


def test_nan_baseline_samples_in_the_measure_tier_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mtp1.json"
    store.record(path, "qwen36", "mtp1", provenance(), entry())
    path.write_text(path.read_text().replace("70.1,", "NaN,", 1))
    verdict = regression.compare_to_baseline(
        path, provenance(), entry(), {}, missing="fail", mismatch="fail", record_command="pytest --update-baselines"
    )
    assert verdict.status == BaselineStatus.UNREADABLE
    assert len(verdict.problems) == 1 and str(path) in verdict.problems[0] and "NaN" in verdict.problems[0]


def test_nan_reaching_the_statistics_names_the_file(tmp_path: Path) -> None:
    """Belt and braces: a sample the statistics refuse is reported with the baseline file."""
    path = tmp_path / "mtp1.json"
    store.record(path, "qwen36", "mtp1", provenance(), entry())
    current = entry()
    current = current.model_copy(update={"samples": {**current.samples, "decode_tok_s": (math.nan,) * 12}})
    verdict = regression.compare_to_baseline(
        path, provenance(), current, {}, missing="fail", mismatch="fail", record_command="x"
    )
    assert verdict.status == BaselineStatus.UNREADABLE and str(path) in verdict.problems[0]


def test_non_utf8_deployment_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_project(tmp_path)
    path = tmp_path / "deployments" / "qwen36.toml"
    path.write_bytes(NOT_UTF8)
    with pytest.raises(DeploymentError, match=r"qwen36.toml: not UTF-8 text \(byte 0xe9 at offset 18\)"):
        load(path)
    assert cli.main(["preflight", str(path)]) == 2
    assert f"{path}: not UTF-8 text" in _one_line_error(capsys)


def test_report_of_a_missing_results_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["report", str(tmp_path / "nope" / "run")]) == 2
    assert "nope/run: no such results folder" in _one_line_error(capsys)


# -- fuzz: any bytes in a deployment or baseline file: a value or one error naming the file ----------

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DEPLOYMENT_KEYS = [
    "description", "key", "path", "model", "runner", "launch", "expect", "variants", "workloads", "id", "flags",
    "request", "speculative", "env", "tp_size", "startup_timeout_s", "gpu_count", "memory_gib", "config",
    "prompts", "concurrency", "repeats", "thresholds", "prefill_cuda_graph", "sglang", "num_steps", "algorithm",
]  # fmt: skip
TOML_SCALARS = st.one_of(
    st.integers(-5, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("inf", "inf").lower()),
    st.sampled_from(["true", "false", '"2"', '"1800"', '""', '"../models/qwen3.6-27b/config.json"', "nan", "[]", "{}"]),
    st.text(max_size=12).map(json.dumps),
)
TOML_VALUES = st.recursive(
    TOML_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.sampled_from(DEPLOYMENT_KEYS), inner, max_size=3).map(
            lambda d: "{ " + ", ".join(f"{k} = {v}" for k, v in d.items()) + " }"
        ),
    ),
    max_leaves=6,
)
TOML_LINES = st.one_of(
    st.tuples(st.sampled_from(DEPLOYMENT_KEYS), TOML_VALUES).map(lambda kv: f"{kv[0]} = {kv[1]}"),
    st.sampled_from(["[model]", "[runner]", "[launch]", "[launch.speculative]", "[[launch.when]]", "[expect]"]),
    st.sampled_from(["[[variants]]", "[[workloads]]", "[variants]", "path = 1", "["]),
    st.text(max_size=20),
)
TOMLISH = st.lists(TOML_LINES, max_size=14).map("\n".join)


def _mutate(text: str, data: st.DataObject) -> bytes:
    raw = text.encode()
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["value", "drop line", "truncate", "insert", "byte"]))
        if op == "value":
            text_lines = raw.decode("utf-8", "surrogateescape").splitlines()
            candidates = [i for i, line in enumerate(text_lines) if " = " in line]
            if candidates:
                i = data.draw(st.sampled_from(candidates))
                text_lines[i] = text_lines[i].split(" = ", 1)[0] + " = " + data.draw(TOML_VALUES)
            raw = "\n".join(text_lines).encode("utf-8", "surrogateescape")
        elif op == "drop line":
            byte_lines = raw.splitlines()
            if byte_lines:
                del byte_lines[data.draw(st.integers(0, len(byte_lines) - 1))]
            raw = b"\n".join(byte_lines)
        elif op == "truncate":
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        elif op == "insert":
            at = data.draw(st.integers(0, len(raw)))
            raw = raw[:at] + data.draw(st.binary(max_size=8)) + raw[at:]
        elif raw:
            at = data.draw(st.integers(0, len(raw) - 1))
            raw = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1 :]
    return raw


@pytest.fixture(scope="module")
def fuzz_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("fuzz"))


def _check_deployment_bytes(project: Path, content: bytes) -> None:
    path = project / "deployments" / "qwen36.toml"
    path.write_bytes(content)
    try:
        deployment = load(path)
    except DeploymentError as exc:
        assert str(path) in str(exc)
        return
    for variant in deployment.variants:  # what collection does with a loaded file
        deployment.expectations_for(variant)
    if any(v.expect_effect for v in deployment.variants):  # the effects' node beside the variants' nodes
        assert EFFECTS not in {v.id for v in deployment.variants}
    flags = [*deployment.launch.extra_flags, *(f for r in deployment.launch.when for f in r.flags)]
    flags += [f for v in deployment.variants for f in v.flags]
    assert all("\x00" not in f for f in flags)  # each becomes a process argument at launch
    # What preflight and the measure tier's collection read of it before any SGLang is asked.
    needs = graph_needs(deployment)
    needs.largest_in_flight(), needs.prefill_capture_need()
    json.dumps(deployment.runner.as_probe_profile(), allow_nan=False)
    for workload in deployment.workloads:
        [(point.tag, point.describe()) for point in workload.load_points()]
        workload.schedule()


@FUZZ
@given(content=st.binary(max_size=400))
def test_fuzz_deployment_arbitrary_bytes(fuzz_project: Path, content: bytes) -> None:
    _check_deployment_bytes(fuzz_project, content)


@FUZZ
@given(text=TOMLISH)
def test_fuzz_deployment_tomlish_text(fuzz_project: Path, text: str) -> None:
    _check_deployment_bytes(fuzz_project, text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(data=st.data())
def test_fuzz_deployment_mutated_valid_file(fuzz_project: Path, data: st.DataObject) -> None:
    _check_deployment_bytes(fuzz_project, _mutate(QWEN36.read_text(), data))


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**20), 10**20),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=10),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10,
)
VALID_BASELINE = store.dumps(
    store.Baseline(
        schema_version=1,
        deployment="qwen36",
        variant="mtp1",
        provenance=provenance(),
        entries={e.key: e for e in (entry(), entry("decode-code", 8))},
    )
)


def _mutate_json(value: Any, data: st.DataObject, depth: int = 0) -> Any:
    """Replace, drop or keep one node on a random path through the document."""
    if isinstance(value, dict) and value and depth < 6:
        key = data.draw(st.sampled_from(sorted(value)))
        out = dict(value)
        op = data.draw(st.sampled_from(["descend", "drop", "replace"]))
        if op == "drop":
            del out[key]
        elif op == "replace":
            out[key] = data.draw(JSON_VALUES | st.sampled_from([[], [float("nan")], "70", -1.0, 0, 2]))
        else:
            out[key] = _mutate_json(value[key], data, depth + 1)
        return out
    if isinstance(value, list) and value and depth < 6:
        i = data.draw(st.integers(0, len(value) - 1))
        return [
            *value[:i],
            data.draw(JSON_VALUES | st.sampled_from([float("nan"), float("inf"), 0.0, -3.0])),
            *value[i + 1 :],
        ]
    return data.draw(JSON_VALUES)


def _check_baseline_bytes(folder: Path, content: bytes) -> None:
    path = folder / "mtp1.json"
    path.write_bytes(content)
    try:
        baseline = store.load(path)
    except store.BaselineError as exc:
        assert str(path) in str(exc)
        with pytest.raises(store.BaselineError, match="will not overwrite it"):
            store.record(path, "qwen36", "mtp1", provenance(), entry())
        assert path.read_bytes() == content  # a file that fails to load is never changed
        return
    for stored in baseline.entries.values():  # what show and the comparison use
        assert set(stored.summary) == set(stored.samples)
        regression.compare_entry(stored, stored.samples, {})


@FUZZ
@given(content=st.binary(max_size=400))
def test_fuzz_baseline_arbitrary_bytes(tmp_path: Path, content: bytes) -> None:
    _check_baseline_bytes(tmp_path, content)


@FUZZ
@given(value=JSON_VALUES, versioned=st.booleans())
def test_fuzz_baseline_jsonish(tmp_path: Path, value: Any, versioned: bool) -> None:
    if versioned:
        value = {"schema_version": 1, "entries": value}
    _check_baseline_bytes(tmp_path, json.dumps(value).encode())


@FUZZ
@given(data=st.data())
def test_fuzz_baseline_mutated_valid_file(tmp_path: Path, data: st.DataObject) -> None:
    if data.draw(st.booleans()):
        content = json.dumps(_mutate_json(json.loads(VALID_BASELINE), data), indent=2).encode()
    else:
        content = _mutate(VALID_BASELINE, data)
    _check_baseline_bytes(tmp_path, content)


# -- fuzz: any measurement record in a (downloaded) results folder: a report or one line, nothing outside


def _valid_record() -> dict[str, Any]:
    samples = {"decode_tok_s": [64.0, 65.0, 66.0], "ttft_s": [0.1, 0.11, 0.12]}
    return {
        "key": "qwen36-mtp1-decode-chat-c1",
        "deployment": "qwen36",
        "variant": "mtp1",
        "workload": "decode-chat",
        "concurrency": 1,
        "emulated": False,
        "sglang_version": "0.5.23",
        "provenance": json.loads(provenance().model_dump_json()),
        "samples": samples,
        "summary": {m: {"n": 3, "median": v[1], "p10": v[0], "p90": v[2]} for m, v in samples.items()},
        "baseline": "baselines/x.json",
        "batches": {
            "log": "s.log",
            "decode_log_interval": 8,
            "graph_label": "cuda graph",
            "rounds": [{"round": 0, "prefill": 1, "prefill_graph": 1, "decode": 4, "decode_graph": 4}],
        },
    }


def _check_report_of(tmp_path: Path, content: bytes) -> None:
    root = tmp_path / "fuzz-report"
    if root.exists():
        shutil.rmtree(root)
    folder = root / "deep" / "results"
    (folder / "measurements").mkdir(parents=True)
    (folder / "measurements" / "qwen36-mtp1-decode-chat-c1.json").write_bytes(content)
    before = set(root.rglob("*"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["report", str(folder)])
    if code == 2:
        lines = err.getvalue().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sglperf: ") and "Traceback" not in lines[0], err.getvalue()
        assert set(root.rglob("*")) == before  # nothing written when refused
    else:
        assert code == 0, err.getvalue()
    written = set(root.rglob("*")) - before
    assert all(folder in p.parents for p in written), written  # nothing outside the folder


@pytest.mark.parametrize("value", [math.inf, -math.inf, 1e308])
def test_a_record_with_a_sample_at_infinity_is_reported_not_a_crash(tmp_path: Path, value: float) -> None:
    """Found by the fuzzing below: an infinite sample gave the plot an infinite axis and matplotlib raised
    (ValueError: Axis limits cannot be NaN or Inf), a traceback from `sglperf report`."""
    record = _valid_record()
    record["samples"]["decode_tok_s"][1] = value
    _check_report_of(tmp_path, json.dumps(record).encode())


@FUZZ
@given(data=st.data())
def test_fuzz_measurement_record_mutated(tmp_path: Path, data: st.DataObject) -> None:
    record = _valid_record()
    if data.draw(st.booleans()):
        content = json.dumps(_mutate_json(record, data)).encode()
    else:
        content = _mutate(json.dumps(record, indent=1), data)
    _check_report_of(tmp_path, content)


@FUZZ
@given(value=JSON_VALUES)
def test_fuzz_measurement_record_jsonish(tmp_path: Path, value: Any) -> None:
    _check_report_of(tmp_path, json.dumps(value).encode())


# -- prompt files, read when a deployment loads (preflight, collection): a prompt set or one line --------

PROMPT_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=8),
        st.sampled_from(["user", "system", "assistant", "id", "\ud800", "x\udfff"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["id", "messages", "role", "content", "x"]), inner, max_size=3),
    ),
    max_leaves=8,
)


def _check_prompt_line(project: Path, line: str) -> None:
    """A prompt file of one good line and ``line``: loads, or one DeploymentError naming the file; a loaded
    set is what the meter sends (text, chat messages as JSON, the token bound)."""
    prompts = project / "data" / "prompts" / "chat.jsonl"
    good = json.dumps({"id": "a", "messages": [{"role": "user", "content": "hello"}]})
    prompts.write_text(good + "\n" + line + "\n")
    try:
        deployment = load(project / "deployments" / "qwen36.toml")
    except DeploymentError as exc:
        assert "chat.jsonl:2" in str(exc) and "\n" not in str(exc), str(exc)
        return
    assert deployment is not None
    loaded = load_prompts(prompts)
    for prompt in loaded.prompts:
        json.dumps(prompt.chat_messages(), ensure_ascii=False).encode()
        assert prompt.token_bound > 0 and prompt.text.encode()


@pytest.fixture(scope="module")
def prompt_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_project(tmp_path_factory.mktemp("prompts"), QWEN36.read_text())


@pytest.mark.parametrize(
    "line",
    [
        r'{"id": "b", "messages": [{"role": [], "content": "x"}]}',
        r'{"id": "b", "messages": [{"role": {"a": 1}, "content": "x"}]}',
        r'{"id": "b", "messages": [{"role": "user", "content": "x\ud800"}]}',
        r'{"id": "b\udfff", "messages": [{"role": "user", "content": "x"}]}',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_prompt_lines_of_the_wrong_shape_are_one_error(prompt_project: Path, line: str) -> None:
    """Found by the audit: valid JSON of the wrong shape (a list for a role: TypeError unhashable; a lone
    surrogate escape: UnicodeEncodeError at the token bound; nesting: RecursionError) crashed preflight and
    collection, which read every prompt file when the deployment loads."""
    _check_prompt_line(prompt_project, line)


@FUZZ
@given(value=PROMPT_VALUES, wrapped=st.booleans())
def test_fuzz_prompt_lines(prompt_project: Path, value: Any, wrapped: bool) -> None:
    if wrapped:
        value = {"id": "b", "messages": value if isinstance(value, list) else [value]}
    _check_prompt_line(prompt_project, json.dumps(value))


# -- fuzz over the deployment file's own schema: every field, valid and mutated values, wrong types, unknown
# keys and nesting, written as TOML; a Deployment or one DeploymentError naming the file, never another
# exception, never a hang (issue 53: 75 of 4,000 such files were tracebacks) -------------------------------

SCHEMA = Deployment.model_json_schema()
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
KNOWN_PATHS = ["../models/qwen3.6-27b/config.json", "../data/prompts/chat.jsonl", "../data/prompts", "", "."]
KEY_WORDS = [*INTENT_NAMES, "decode_tok_s", "ttft_s", "decode-chat", "prefill-long", "SGLANG_X", "mtp1", "x"]


_BUILT: dict[tuple[str, str, int], st.SearchStrategy[Any]] = {}


def _once(kind: str, build: Any) -> Any:
    """Each strategy built once per (schema, depth): building them afresh for every example cost most of
    the test's time (Hypothesis reads a lambda's source to name it)."""

    def cached(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
        key = (kind, json.dumps(schema, sort_keys=True), min(depth, 5))
        if key not in _BUILT:
            _BUILT[key] = build(schema, depth)
        return _BUILT[key]

    return cached


def _resolved(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _wrong(depth: int) -> st.SearchStrategy[Any]:
    """A value of any TOML type: a wrong type for most fields, nested tables and arrays among them."""
    return _wrong_once({}, depth)  # type: ignore[no-any-return]


def _build_wrong(_: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    scalars = st.one_of(
        st.booleans(),
        st.integers(-(2**63), 2**63 - 1),
        st.floats(allow_nan=True, allow_infinity=True),
        TEXT,
        st.sampled_from([*KNOWN_PATHS, "1e400", "-1", "0", "true"]),
    )
    if depth > 3:
        return scalars
    return st.one_of(
        scalars,
        st.lists(scalars, max_size=3),
        st.dictionaries(st.sampled_from(KEY_WORDS), scalars, max_size=3),
        st.dictionaries(st.sampled_from(KEY_WORDS), st.deferred(lambda: _wrong(depth + 1)), max_size=2),
    )


_wrong_once = _once("wrong", _build_wrong)


def _valid(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[Any]:
    """A value the schema describes (bounds included, as pydantic's json schema states them)."""
    return _valid_once(schema, depth)  # type: ignore[no-any-return]


def _build_valid(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    schema = _resolved(schema)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        branches = [b for b in schema.get("anyOf", schema.get("oneOf", [])) if b.get("type") != "null"]
        return st.one_of(*(_valid(b, depth) for b in branches))
    kind = schema.get("type")
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low, high = schema.get("minimum", -5), schema.get("maximum", 10**6)
        return st.integers(low, high)
    if kind == "number":
        low = schema.get("minimum", schema.get("exclusiveMinimum", -5.0))
        high = schema.get("maximum", 1e6)
        return st.floats(low, high, exclude_min="exclusiveMinimum" in schema)
    if kind == "string":
        if "pattern" in schema:
            return st.from_regex(schema["pattern"], fullmatch=True).filter(lambda s: len(s) <= 64 and "\x00" not in s)
        if schema.get("format") == "path":
            return st.sampled_from(KNOWN_PATHS)
        return TEXT
    if kind == "array":
        return st.lists(_field(schema.get("items", {}), depth + 1), max_size=3)
    if kind == "object":
        return _table(schema, depth + 1)
    return _wrong(depth)


_valid_once = _once("valid", _build_valid)


def _field(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    """Mostly a valid value; sometimes a wrong type, a nested table or array."""
    return _field_once(schema, depth)  # type: ignore[no-any-return]


def _build_field(schema: dict[str, Any], depth: int) -> st.SearchStrategy[Any]:
    if depth > 4:
        return st.booleans()
    return st.one_of(_valid(schema, depth), _valid(schema, depth), _valid(schema, depth), _wrong(depth))


_field_once = _once("field", _build_field)


def _table(schema: dict[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    """An object of the schema: a subset of its properties (the required ones usually), values from
    _field, and now and then an unknown key."""
    return _table_once(schema, depth)  # type: ignore[no-any-return]


def _build_table(schema: dict[str, Any], depth: int) -> st.SearchStrategy[dict[str, Any]]:
    schema = _resolved(schema)
    properties: dict[str, Any] = schema.get("properties", {})
    keyed = schema.get("additionalProperties") or next(iter(schema.get("patternProperties", {}).values()), None)
    if not properties:
        value = keyed if isinstance(keyed, dict) else {}
        return st.dictionaries(st.sampled_from(KEY_WORDS) | TEXT, _field(value, depth), max_size=3)
    required = set(schema.get("required", ()))

    @st.composite
    def table(draw: st.DrawFn) -> dict[str, Any]:
        out = {}
        for name, sub in properties.items():
            if name == "path":
                continue  # set by sglperf from where the file is (a file naming it is refused: tested above)
            if draw(st.floats(0, 1)) < (0.9 if name in required else 0.4):
                out[name] = draw(_field(sub, depth))
        if draw(st.integers(0, 9)) == 0:
            out[draw(st.sampled_from(["speculative", "env", "id", "flags", "x", "tp", "Key"]))] = draw(_wrong(depth))
        return out

    return table()


_table_once = _once("table", _build_table)


def _toml_key(key: str) -> str:
    return key if key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key) else json.dumps(key)


def _toml(value: Any) -> str | None:
    """``value`` as one TOML value, inline; None for what TOML cannot hold (null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(v for v in map(_toml, value) if v is not None) + "]"
    items = [f"{_toml_key(k)} = {shown}" for k, v in value.items() if (shown := _toml(v)) is not None]
    return "{ " + ", ".join(items) + " }" if items else "{}"


def _deployment_text(document: dict[str, Any]) -> str:
    return "".join(f"{_toml_key(k)} = {shown}\n" for k, v in document.items() if (shown := _toml(v)) is not None)


@contextlib.contextmanager
def _no_hang(seconds: float) -> Iterator[None]:
    def hung(signum: int, frame: object) -> None:
        raise AssertionError(f"loading the deployment took over {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


QWEN36_DOCUMENT = tomllib.loads(QWEN36.read_text())


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (('id = "mtp1"', 'id = "effects"'), "variants[0].id: 'effects' names the deployment's expected effects"),
        (("tp_size = 2", 'tp_size = 2\nextra_flags = ["--x\\u0000"]'), "launch.extra_flags[0]: '--x\\x00' is not"),
        (('id = "mtp1"', 'id = "mtp1"\nflags = ["\\u0000"]'), "variants[0].flags[0]: '\\x00' is not allowed"),
    ],
)
def test_names_and_flags_the_run_cannot_use_are_refused_at_load(
    fuzz_project: Path, edit: tuple[str, str], said: str
) -> None:
    """Found writing the schema fuzzing below: a variant named "effects" beside expected effects took the
    effects' node of the test tree (and their xdist scope); a NUL in a flag was accepted, and the launch
    failed with Python's "embedded null byte"."""
    path = fuzz_project / "deployments" / "qwen36.toml"
    path.write_text(QWEN36.read_text().replace(*edit, 1))
    with pytest.raises(DeploymentError) as raised:
        load(path)
    assert said in str(raised.value), str(raised.value)


@FUZZ
@given(data=st.data())
def test_fuzz_deployment_from_the_schema(fuzz_project: Path, data: st.DataObject) -> None:
    """Whole files from the schema, or the shipped file with one schema field replaced, removed or added."""
    if data.draw(st.integers(0, 3)) == 0:
        document = data.draw(_table(SCHEMA, 0))
        if data.draw(st.integers(0, 4)):  # the key must match the file name: mostly, let it
            document["key"] = "qwen36"
    else:
        document = json.loads(json.dumps(QWEN36_DOCUMENT))
        holder, schema = document, SCHEMA
        for _ in range(data.draw(st.integers(0, 2))):  # down into a table or an array's item
            tables = [k for k, v in holder.items() if isinstance(v, (dict, list)) and v]
            props = _resolved(schema).get("properties", {})
            if not tables:
                break
            key = data.draw(st.sampled_from(sorted(tables)))
            sub = _resolved(props.get(key, {}))
            if isinstance(holder[key], list):
                index = data.draw(st.integers(0, len(holder[key]) - 1))
                if not isinstance(holder[key][index], dict):
                    break
                holder, schema = holder[key][index], _resolved(sub.get("items", {}))
            else:
                holder, schema = holder[key], sub
        props = _resolved(schema).get("properties", {}) or {k: {} for k in holder}
        name = data.draw(st.sampled_from(sorted(set(props) - {"path"}) or ["x"]))
        op = data.draw(st.sampled_from(["valid", "valid", "valid", "field", "wrong", "drop", "unknown"]))
        if op == "drop":
            holder.pop(name, None)
        elif op == "unknown":
            holder[f"{name}_x"] = data.draw(_wrong(1))
        elif op == "wrong":
            holder[name] = data.draw(_wrong(1))
        else:
            holder[name] = data.draw((_valid if op == "valid" else _field)(props.get(name, {}), 1))
    with _no_hang(10.0):
        _check_deployment_bytes(fuzz_project, _deployment_text(document).encode())
