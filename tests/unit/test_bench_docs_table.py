"""bench/_docs_table.py: a bench script's --write-docs rewrites its own section of the page and nothing else."""

from __future__ import annotations

import argparse
from datetime import date
from pathlib import Path

import pytest
from bench import _docs_table
from bench._docs_table import DocsTableError, rewrite

PAGE = """# Benchmarks

Prose about the meter, written by hand.

<!-- bench:meter_cpu:begin -->
old meter table
<!-- bench:meter_cpu:end -->

Between the sections.

<!-- bench:meter_cpu/real-cpu:begin -->
old real-cpu table
<!-- bench:meter_cpu/real-cpu:end -->

The end.
"""
TABLE = "| a | b |\n|---|---:|\n| x | 1.0 |\n"
DAY = date(2026, 12, 3)


@pytest.fixture
def page(tmp_path: Path) -> Path:
    path = tmp_path / "benchmarks.md"
    path.write_text(PAGE)
    return path


def test_replaces_only_its_own_section_stamped_with_command_and_date(page: Path) -> None:
    rewrite(page, "meter_cpu", "python bench/meter_cpu.py --pairs 5", TABLE, DAY)
    text = page.read_text()
    assert "old meter table" not in text
    assert "old real-cpu table" in text  # the labelled section of the same script is another section
    assert text.startswith(
        "# Benchmarks\n\nProse about the meter, written by hand.\n\n<!-- bench:meter_cpu:begin -->\n"
    )
    assert text.endswith("<!-- bench:meter_cpu/real-cpu:end -->\n\nThe end.\n")
    section = text.split("<!-- bench:meter_cpu:begin -->\n")[1].split("<!-- bench:meter_cpu:end -->")[0]
    assert section == (
        "\nRecorded 2026-12-03 (UTC) with `python bench/meter_cpu.py --pairs 5`:\n\n" + TABLE.rstrip("\n") + "\n\n"
    )


def test_rewriting_twice_gives_the_same_page(page: Path) -> None:
    rewrite(page, "meter_cpu/real-cpu", "python bench/meter_cpu.py --servers real-cpu", TABLE, DAY)
    once = page.read_text()
    rewrite(page, "meter_cpu/real-cpu", "python bench/meter_cpu.py --servers real-cpu", TABLE, DAY)
    assert page.read_text() == once
    assert "old meter table" in once


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        (PAGE.replace("<!-- bench:meter_cpu:begin -->\n", ""), "<!-- bench:meter_cpu:begin --> is missing"),
        (PAGE.replace("<!-- bench:meter_cpu:end -->\n", ""), "<!-- bench:meter_cpu:end --> is missing"),
        (PAGE + "<!-- bench:meter_cpu:begin -->\n", "<!-- bench:meter_cpu:begin --> is found 2 times (lines 5, 16)"),
        (PAGE + "<!-- bench:meter_cpu:end -->\n", "<!-- bench:meter_cpu:end --> is found 2 times"),
        (
            PAGE.replace("<!-- bench:meter_cpu:begin -->", "@")
            .replace("<!-- bench:meter_cpu:end -->", "<!-- bench:meter_cpu:begin -->")
            .replace("@", "<!-- bench:meter_cpu:end -->"),
            "comes before",
        ),
    ],
    ids=["no-begin", "no-end", "two-begins", "two-ends", "end-first"],
)
def test_refuses_in_one_error_and_leaves_the_page_untouched(page: Path, broken: str, says: str) -> None:
    page.write_text(broken)
    with pytest.raises(DocsTableError) as caught:
        rewrite(page, "meter_cpu", "python bench/meter_cpu.py", TABLE, DAY)
    assert says in str(caught.value)
    assert "bench:meter_cpu" in str(caught.value) and str(page) in str(caught.value)
    assert page.read_text() == broken


def test_a_section_never_matches_a_longer_name(page: Path) -> None:
    # "meter_cpu" must not take "meter_cpu/real-cpu"'s markers for its own.
    page.write_text(PAGE.replace("<!-- bench:meter_cpu:begin -->\n", ""))
    with pytest.raises(DocsTableError, match="is missing"):
        rewrite(page, "meter_cpu", "python bench/meter_cpu.py", TABLE, DAY)


def test_refuses_a_table_that_carries_a_marker(page: Path) -> None:
    with pytest.raises(DocsTableError, match="contains a bench marker"):
        rewrite(page, "meter_cpu", "python bench/meter_cpu.py", "<!-- bench:other:end -->\n", DAY)
    assert page.read_text() == PAGE


def test_keeps_the_page_readable_by_others(page: Path) -> None:
    page.chmod(0o644)
    rewrite(page, "meter_cpu", "python bench/meter_cpu.py", TABLE, DAY)
    assert page.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in page.parent.iterdir()] == [page.name]  # no temporary file left beside it


def _script(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    _docs_table.add_flag(parser)
    args = parser.parse_args(argv)
    print(f"`{_docs_table.command('bench/meter_cpu.py', argv)}`\n")
    print(f"| pairs |\n|---:|\n| {args.pairs} |")
    return 0


@pytest.mark.parametrize(
    ("flag", "section"),
    [(["--write-docs"], "meter_cpu"), (["--write-docs=real-cpu"], "meter_cpu/real-cpu")],
)
def test_the_flag_writes_what_the_script_printed_without_the_flag_in_the_command(
    page: Path, capsys: pytest.CaptureFixture[str], flag: list[str], section: str
) -> None:
    status = _docs_table.run_script("bench/meter_cpu.py", _script, ["--pairs", "5", *flag], doc=page)
    assert status == 0
    printed = capsys.readouterr().out
    assert printed == "`python bench/meter_cpu.py --pairs 5`\n\n| pairs |\n|---:|\n| 5 |\n"  # still printed
    body = page.read_text().split(f"<!-- bench:{section}:begin -->\n")[1].split(f"<!-- bench:{section}:end -->")[0]
    assert "with `python bench/meter_cpu.py --pairs 5`:" in body
    assert printed.strip() in body


def test_without_the_flag_the_page_is_not_touched(page: Path) -> None:
    assert _docs_table.run_script("bench/meter_cpu.py", _script, ["--pairs", "5"], doc=page) == 0
    assert page.read_text() == PAGE


def test_a_script_whose_section_is_missing_says_so_and_exits_2(page: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = _docs_table.run_script("bench/meter_cpu.py", _script, ["--write-docs=no-such"], doc=page)
    assert status == 2
    assert "bench:meter_cpu/no-such:begin --> is missing" in capsys.readouterr().err
    assert page.read_text() == PAGE


def test_a_label_is_a_plain_word() -> None:
    with pytest.raises(SystemExit):
        _script(["--write-docs=Real CPU"])


def test_every_bench_script_has_the_flag_and_a_section() -> None:
    bench = Path(_docs_table.__file__).parent
    page = _docs_table.DOCS.read_text()
    for script in sorted(bench.glob("*.py")):
        if script.name.startswith("_") or script.stem == "tiny_cpu":  # helpers, not scripts
            continue
        source = script.read_text()
        assert "_docs_table.add_flag(parser)" in source, f"{script.name} has no --write-docs"
        assert "_docs_table.run_script(__file__, main)" in source, f"{script.name} does not write its table"
        assert f"<!-- bench:{script.stem}:begin -->" in page or f"<!-- bench:{script.stem}/" in page, (
            f"docs/benchmarks.md has no section for {script.name}"
        )
