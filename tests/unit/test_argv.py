"""A launch argv read through a release's parser: options and their values, abbreviations, one taken out."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sglperf.sglang.argv import Option, ParsedArgv, ParserInfo

PARSER = ParserInfo(
    "0.5.13",
    {
        "--model-path": Option("model_path"),
        "--tp-size": Option("tp_size", default=1),
        "--chunked-prefill-size": Option("chunked_prefill_size"),
        "--cuda-graph-bs": Option("cuda_graph_bs"),
        "--cuda-graph-max-bs": Option("cuda_graph_max_bs"),
        "--speculative-algorithm": Option("speculative_algorithm"),
        "--enable-single-batch-overlap": Option("enable_single_batch_overlap", default=False, takes_value=False),
        "--disable-overlap-schedule": Option("disable_overlap_schedule", default=False, takes_value=False),
    },
)
ARGV = (
    "--model-path",
    "/m",
    "--tp-size",
    "2",
    "--speculative-algorithm",
    "NEXTN",
    "--cuda-graph-bs",
    "1",
    "2",
    "--enable-single-batch-overlap",
)


def test_the_argv_is_read_through_the_releases_parser() -> None:
    asked = ParsedArgv(ARGV, PARSER).asked()
    assert asked["tp_size"].value == "2"
    assert asked["cuda_graph_bs"].value == ["1", "2"]
    assert asked["enable_single_batch_overlap"].value is True
    assert asked["cuda_graph_bs"].spelled == "--cuda-graph-bs 1 2"
    assert ParsedArgv(("--chunked-prefill-size=8192",), PARSER).asked()["chunked_prefill_size"].value == "8192"
    abbreviated = ParsedArgv(("--chunked-prefill", "8192"), PARSER).asked()["chunked_prefill_size"]
    assert abbreviated.flag == "--chunked-prefill-size"


def test_an_abbreviation_means_its_option_and_is_shown_as_written() -> None:
    parsed = ParsedArgv(("--disable-overlap", "--tp", "2", "--cuda-graph-max", "8", "--nosuch", "x"), PARSER)
    assert parsed.names == ["--disable-overlap-schedule", "--tp-size", "--cuda-graph-max-bs", "--nosuch"]
    assert [o.known for o in parsed] == [True, True, True, False]
    found = parsed.find("--tp-size")
    assert found is not None and found.written == "--tp" and found.value == "2"
    assert parsed.shown(("--cuda-graph-max-bs", "--cuda-graph-bs")) == "--cuda-graph-max 8"
    # Without a parser an option is what it is written as: "--tp" is not "--tp-size".
    assert ParsedArgv(("--tp", "2")).find("--tp-size") is None
    # "--cuda-graph" is a prefix of two options: argparse calls it ambiguous, and so does the parser.
    assert PARSER.canonical("--cuda-graph") is None and len(PARSER.abbreviates("--cuda-graph")) == 2


def test_the_last_occurrence_wins_and_inline_values_are_read() -> None:
    parsed = ParsedArgv(("--load-format", "auto", "--load-format=dummy"))
    found = parsed.find("--load-format")
    assert found is not None and found.value == "dummy" and found.inline
    assert parsed.shown(("--load-format",)) == "--load-format auto --load-format=dummy"
    single = ParsedArgv(("--x",)).find("--x")
    assert single is not None and single.value is None


def test_the_argv_without_one_option_and_its_values() -> None:
    assert ParsedArgv(ARGV, PARSER).without("--cuda-graph-bs") == (
        "--model-path",
        "/m",
        "--tp-size",
        "2",
        "--speculative-algorithm",
        "NEXTN",
        "--enable-single-batch-overlap",
    )
    # One value at most: a stray token after it stays where argparse would see it.
    assert ParsedArgv(("--o", "{}", "stray", "--p")).without("--o", values=1) == ("stray", "--p")
    assert ParsedArgv(("--o={}", "stray")).without("--o", values=1) == ("stray",)


_FLAGS = st.sampled_from(["--tp-size", "--chunked-prefill-size", "--cuda-graph-bs", "--enable-single-batch-overlap"])


@given(st.lists(st.tuples(_FLAGS, st.lists(st.sampled_from(["1", "8", "auto"]), max_size=3)), max_size=5), _FLAGS)
def test_taking_a_flag_out_leaves_every_other_flag_as_asked(spec: list[tuple[str, list[str]]], removed: str) -> None:
    argv: list[str] = []
    for flag, values in spec:
        argv += [flag, *([] if not PARSER.options[flag].takes_value else values or ["1"])]
    before = ParsedArgv(argv, PARSER).asked()
    after = ParsedArgv(ParsedArgv(argv, PARSER).without(removed), PARSER).asked()
    dest = PARSER.options[removed].dest
    assert dest not in after
    assert after == {k: v for k, v in before.items() if k != dest}


@given(st.lists(st.sampled_from(["--a", "--b=1", "x", "--c", "y", "z"]), max_size=8))
def test_every_token_is_an_option_or_one_options_value_or_a_stray(argv: list[str]) -> None:
    """A bare token belongs to the option before it, unless that option took its value after "=" (argparse
    then sees a stray positional, as it does before the first option)."""
    owned, owner_inline = [], True
    for token in argv:
        if token.startswith("--"):
            owned.append(token)
            owner_inline = "=" in token
        elif not owner_inline:
            owned.append(token)
    assert [token for o in ParsedArgv(argv) for token in o.shown()] == owned
