"""The deprecation ledger: one entry per old spelling across releases, chains followed to a spelling the
target accepts, and what a release deleted answered from what the releases before it said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglperf.sglang import deprecations
from sglperf.sglang.argv import Option, ParserInfo
from sglperf.sglang.deprecations import (
    Deprecation,
    DeprecationLedger,
    accepts_spelling,
    deprecations_of,
    flag_of,
    replacement,
)
from sglperf.sglang.flags import FlagError, check_flags


def _parser(version: str, **options: Option) -> ParserInfo:
    return ParserInfo(version, options)


A_TO_B = Option(dest="b", deprecated=True, replacement="--b", deprecation_message="Use '--b' instead.")


def test_a_release_contributes_only_deprecations_that_name_a_replacement() -> None:
    parser = _parser("0.5.14", **{"--a": A_TO_B, "--old": Option(dest="o", deprecated=True), "--b": Option(dest="b")})
    assert deprecations_of(parser) == [Deprecation("--a", "--b", "0.5.14", "0.5.14", "Use '--b' instead.")]


def test_the_same_spelling_in_several_releases_is_one_entry_with_the_newest_words() -> None:
    old = Deprecation("--a", "--b", "0.5.14", "0.5.14", "old words")
    new = Deprecation("--a", "--b=x", "0.5.19", "0.5.19", "new words")
    ledger = DeprecationLedger([new, old])
    merged = ledger.get("--a")
    assert merged == Deprecation("--a", "--b=x", "0.5.14", "0.5.19", "new words")
    assert merged.releases == "0.5.14-0.5.19"


versions = st.sampled_from(["0.5.9", "0.5.13", "0.5.14", "0.5.19", "0.5.23"])


@given(st.lists(st.tuples(versions, st.sampled_from(["--b", "--c"])), min_size=1, max_size=6))
def test_merging_does_not_depend_on_the_order_releases_are_read(seen: list[tuple[str, str]]) -> None:
    entries = [Deprecation("--a", replacement, v, v) for v, replacement in seen]
    forward, backward = DeprecationLedger(entries).get("--a"), DeprecationLedger(reversed(entries)).get("--a")
    assert forward is not None and backward is not None
    assert (forward.first, forward.last) == (backward.first, backward.last)
    # Releases numbered "0.5.9" and "0.5.13" compare as versions, not as text.
    assert forward.first == min((v for v, _ in seen), key=lambda v: tuple(map(int, v.split("."))))


def test_a_chain_is_followed_until_the_target_accepts_the_spelling() -> None:
    ledger = DeprecationLedger(
        [Deprecation("--a", "--b", "0.5.14", "0.5.15"), Deprecation("--b", "--c=on", "0.5.17", "0.5.19")]
    )
    target = _parser("0.5.23", **{"--c": Option(dest="c")})
    assert [link.replacement for link in ledger.chain("--a", accepted_by=target)] == ["--b", "--c=on"]
    # A release that still accepts --b (not deprecated) ends the chain there.
    middle = _parser("0.5.16", **{"--b": Option(dest="b")})
    assert [link.replacement for link in ledger.chain("--a", accepted_by=middle)] == ["--b"]
    assert flag_of("--c=on") == "--c" and flag_of("--attn-dp-size <dp-size>") == "--attn-dp-size"


def test_a_cycle_in_what_releases_said_ends() -> None:
    ledger = DeprecationLedger([Deprecation("--a", "--b", "1.0", "1.0"), Deprecation("--b", "--a", "1.1", "1.1")])
    assert len(ledger.chain("--a")) == 2


def test_a_deleted_flag_is_answered_from_the_shipped_ledger_in_one_line() -> None:
    release = _parser("0.5.23", **{"--cuda-graph-max-bs-prefill": Option(dest="m")})
    with pytest.raises(FlagError) as raised:
        check_flags(["--piecewise-cuda-graph-max-tokens", "4096"], release, "qwen36.toml variant 'x'")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        "qwen36.toml variant 'x': --piecewise-cuda-graph-max-tokens is not accepted by SGLang 0.5.23 (removed); "
        "replacement: --cuda-graph-max-bs-prefill (SGLang 0.5.14-0.5.19 said"
    )


def test_a_chain_ending_at_a_spelling_the_target_lacks_is_no_answer() -> None:
    release = _parser("0.5.23", **{"--other": Option(dest="o")})
    with pytest.raises(FlagError, match=r"no known replacement|similar flags"):
        check_flags(["--piecewise-cuda-graph-max-tokens", "4096"], release, "v")


def test_the_shipped_ledger_round_trips() -> None:
    shipped = DeprecationLedger.shipped()
    assert len(shipped.entries) >= 20
    assert DeprecationLedger(Deprecation(**raw) for raw in json.loads(shipped.to_json())).entries == shipped.entries


def test_one_precedence_the_targets_words_then_the_releases_then_the_intent() -> None:
    backends = ("breakable", "full", "disabled")
    ledger = DeprecationLedger(
        [Deprecation("--enforce-piecewise-cuda-graph", "--cuda-graph-backend-prefill=tc_piecewise", "0.5.14", "0.5.19")]
    )
    # 0.5.22+ refuses tc_piecewise: the releases' chain is no answer there, sglperf's spelling of the intent is.
    target = ParserInfo("0.5.23", {"--cuda-graph-backend-prefill": Option(dest="p", choices=backends)})
    found = replacement("--enforce-piecewise-cuda-graph", target, ledger)
    assert found is not None and not found.from_releases and found.source == "intent"
    assert found.spelled.startswith("--cuda-graph-backend-prefill breakable")
    # Where the value is taken, the releases' words win over sglperf's spelling.
    earlier = ParserInfo(
        "0.5.21", {"--cuda-graph-backend-prefill": Option(dest="p", choices=(*backends, "tc_piecewise"))}
    )
    found = replacement("--enforce-piecewise-cuda-graph", earlier, ledger)
    assert found is not None and found.spelled == "--cuda-graph-backend-prefill=tc_piecewise"
    assert found.source == "SGLang 0.5.14-0.5.19's deprecation"
    # The target's own deprecation wins over what the ledger's newer releases said.
    own = Option(
        dest="e", deprecated=True, replacement="--cuda-graph-backend-prefill=breakable", deprecation_message="m"
    )
    itself = ParserInfo("0.5.16", {"--enforce-piecewise-cuda-graph": own, "--cuda-graph-backend-prefill": Option("p")})
    found = replacement("--enforce-piecewise-cuda-graph", itself, ledger)
    assert found is not None and found.own and found.source == "SGLang 0.5.16's parser" and found.release_says == "m"
    assert replacement("--no-such-flag", target, ledger) is None


def test_a_replacement_is_taken_only_with_a_value_the_option_allows() -> None:
    parser = ParserInfo("1", {"--b": Option(dest="b", choices=("x", "y")), "--c": Option(dest="c")})
    assert accepts_spelling(parser, "--b=x") and accepts_spelling(parser, "--b y") and accepts_spelling(parser, "--b")
    assert not accepts_spelling(parser, "--b=z") and not accepts_spelling(parser, "--d")
    assert accepts_spelling(parser, "--c <anything>")  # no fixed set of values: the words stand


def test_a_removed_flag_that_prefixes_its_successors_is_named_by_the_ledger_not_called_ambiguous() -> None:
    """0.5.23 refused --cuda-graph-max-bs as 'ambiguous (could be --cuda-graph-max-bs-decode,
    --cuda-graph-max-bs-prefill)' though 0.5.14-0.5.19 said it became --cuda-graph-max-bs-decode."""
    release = _parser(
        "0.5.23", **{"--cuda-graph-max-bs-decode": Option(dest="d"), "--cuda-graph-max-bs-prefill": Option(dest="p")}
    )
    with pytest.raises(FlagError) as raised:
        check_flags(["--cuda-graph-max-bs", "64"], release, "v")
    message = str(raised.value)
    assert message.startswith(
        "v: --cuda-graph-max-bs is not accepted by SGLang 0.5.23 (removed); replacement: --cuda-graph-max-bs-decode ("
    )
    assert message.endswith(
        "as written, SGLang reads it as an ambiguous abbreviation of --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill"
    )
    # A prefix no release ever deprecated is what argparse says it is.
    with pytest.raises(FlagError, match=r"--cuda-graph-max is ambiguous in SGLang 0.5.23 \(could be"):
        check_flags(["--cuda-graph-max", "64"], release, "v")


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "sglperf's deprecation ledger is missing"),
        (b"\xff\xfe", "is not JSON (UnicodeDecodeError)"),
        (b"[{", "is not JSON (JSONDecodeError)"),
        (b'{"flag": "--x"}', "is damaged (not a list)"),
        (b"[1]", "is damaged"),
        (b'[{"flag": "--x"}]', "is damaged"),
        (b'[{"flag": "--x", "replacement": "--y", "first": "0.5.14", "last": "soon"}]', "is damaged"),
        (b'[{"flag": 3, "replacement": "--y", "first": "0.5.14", "last": "0.5.19"}]', "is damaged"),
    ],
)
def test_a_missing_or_damaged_shipped_ledger_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None, said: str
) -> None:
    """Issue 53's audit: a missing or damaged deprecations.json was a traceback from every command that
    asks what replaces a flag (preflight's refusals, upgrade-check)."""
    path = tmp_path / "deprecations.json"
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setattr(deprecations, "shipped_path", lambda: path)
    deprecations._shipped_entries.cache_clear()
    try:
        with pytest.raises(deprecations.DeprecationsError) as raised:
            DeprecationLedger.shipped()
        with pytest.raises(deprecations.DeprecationsError):
            replacement("--cuda-graph-max-bs", _parser("0.5.23"))
    finally:
        deprecations._shipped_entries.cache_clear()
    message = str(raised.value)
    assert message.startswith(f"{path}: ") and said in message and "\n" not in message, message
    assert message.endswith(
        "reinstall sglperf (pip install --force-reinstall sglperf), or in a checkout run ci/refresh-deprecations.py"
    ), message
