"""One definition of each option for the plugin and the command; the command's old spellings still work
and say their new names."""

from __future__ import annotations

import argparse

import pytest

from sglperf import cli
from sglperf.options import (
    HISTORY_STORE,
    PLUGIN_OPTIONS,
    SGLANG_PYTHON,
    SGLANG_VERSION,
    OptionSpec,
    add_to_command,
)


def _subcommand(name: str) -> argparse.ArgumentParser:
    actions = cli.build_parser()._subparsers._group_actions  # type: ignore[union-attr]
    (choices,) = [a.choices for a in actions if isinstance(a.choices, dict)]
    parser: argparse.ArgumentParser = choices[name]
    return parser


@pytest.mark.parametrize(
    ("command", "spec"),
    [("preflight", SGLANG_PYTHON), ("explain", SGLANG_VERSION), ("report", HISTORY_STORE), ("compare", HISTORY_STORE)],
)
def test_the_command_and_the_plugin_spell_and_explain_an_option_alike(command: str, spec: OptionSpec) -> None:
    assert spec in PLUGIN_OPTIONS
    (action,) = [a for a in _subcommand(command)._actions if spec.flag in a.option_strings]
    assert action.option_strings == [spec.flag] and action.help == spec.help


def test_an_old_spelling_does_what_the_new_one_does_and_says_its_new_name(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    add_to_command(parser, SGLANG_VERSION)
    assert parser.parse_args(["--sglang", "0.5.23"]).sglang_version == "0.5.23"
    assert "--sglang is deprecated; use --sglang-version (it means the same)" in capsys.readouterr().err
    assert parser.parse_args(["--sglang-version", "0.5.23"]).sglang_version == "0.5.23"
    assert capsys.readouterr().err == ""
    assert "--sglang " not in parser.format_help()  # the old spelling is not offered


def test_the_old_spellings_stay_exclusive_with_each_other() -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["preflight", "--python", "/x", "--sglang-version", "0.5.23"])
