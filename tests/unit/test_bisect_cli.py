"""`sglperf bisect`'s bad input: each is one line naming the option or file and what to do, exit 2, before
any SGLang is imported or any server started (and a state it cannot use is left as it was)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglperf import cli
from sglperf.upgrade import bisect

from ..support.project import ROOT

NATIVE = ROOT / "deployments" / "tiny-cpu-native.toml"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["bisect", str(NATIVE), "--from", "0.5.22", "--to", "0.5.23", *argv])
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-k", "nope"], "sglperf: -k 'nope' matches none of tiny-cpu-native.toml's measurement items; one of: "),
        (["-k", "plain"], "sglperf: -k 'plain' matches 3 of tiny-cpu-native.toml's measurement items; one of: "),
        (["-k", "decode-chat", "--metric", "speed"], "sglperf: --metric speed: not a metric sglperf measures; "),
        (["-k", "decode-chat", "--release-python", "0.5.22"], "sglperf: --release-python '0.5.22': give RELEASE=PATH"),
        (
            ["-k", "decode-chat", "--emulator", "--emulator-config", '{"releases": {"0.5.22": 1.1}}'],
            'sglperf: --emulator-config: "releases" must map SGLang versions to objects',
        ),
        (
            ["-k", "decode-chat", "--emulator", "--emulator-config", "{slow"],
            "sglperf: --emulator-config '{slow': not JSON or @file of JSON (",
        ),
        (
            ["-k", "decode-chat", "--first-quartets", "3", "--max-quartets", "2"],
            "sglperf: --first-quartets/--max-quartets: quartets: first 3 and most 2",
        ),
    ],
)
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    code, err = _run(capsys, *argv)
    assert code == cli.EXIT_BAD_INPUT
    assert err.startswith(expected) and "\n" not in err, err


def test_a_state_of_another_question_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = bisect.BisectState(
        deployment="other.toml",
        item="other-plain-decode-chat-c1",
        metric="decode_tok_s",
        from_version="0.5.19",
        to_version="0.5.23",
        setup="SGLang servers",
        floor=0.7,
        releases=["0.5.19", "0.5.23"],
        candidates=[],
    )
    path = tmp_path / "bisect.json"
    bisect.write_state(path, state)
    before = path.read_bytes()
    code, err = _run(capsys, "-k", "decode-chat", "--results-dir", str(tmp_path))
    assert code == cli.EXIT_BAD_INPUT
    assert err.startswith(f"sglperf: {path}: holds the bisect of other.toml, other-plain-decode-chat-c1, ")
    assert err.endswith("not this one: give another --results-dir") and "\n" not in err
    assert path.read_bytes() == before


def test_a_damaged_state_is_one_line_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bisect.json"
    path.write_text('{"format": 1, "comparisons": "many"}')
    code, err = _run(capsys, "-k", "decode-chat", "--results-dir", str(tmp_path))
    assert code == cli.EXIT_BAD_INPUT
    assert err.startswith(f"sglperf: {path}: not a bisect state sglperf can resume (") and "\n" not in err
    assert path.read_text() == '{"format": 1, "comparisons": "many"}'
