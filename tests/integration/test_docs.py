"""The README and docs/ as a newcomer meets them: every example checked (tests/docs_check.py says how),
the pages built with `mkdocs build --strict`, none left out of the nav, the intent table from the code.

And the checker itself, on a page planted with broken examples: a check that never fails proves nothing.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from sglperf.sglang.intents import INTENTS

from .. import docs_check
from ..docs_check import ROOT, Report

PAGES = docs_check.pages()
README_MOST_LINES = 250  # the issue: "A newcomer finds 'add a deployment' at line 908 of a 74 KB README."


def _shown(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return docs_check.check(PAGES, tmp_path_factory.mktemp("docs-check"))


@pytest.mark.parametrize("page", PAGES, ids=_shown)
def test_every_block_of_the_page_passes_its_check(report: Report, page: Path) -> None:
    problems = [str(p) for p in report.problems if p.where.startswith(f"{_shown(page)}:")]
    assert not problems, "\n".join(problems)


def test_every_problem_belongs_to_a_page(report: Report) -> None:
    pages = {_shown(p) for p in PAGES}
    elsewhere = [str(p) for p in report.problems if p.where.split(":")[0] not in pages]
    assert not elsewhere, "\n".join(elsewhere)


def test_the_checker_saw_every_kind_of_block(report: Report) -> None:
    # A parser that silently found no blocks would pass everything above.
    assert report.type_checked >= 1 and report.deployments_loaded >= 2
    assert len(report.ran) >= 4 and report.run_by and report.not_run
    assert any("mkdocs build" in command for command in report.ran)


def test_the_readme_is_an_entry_point_not_the_manual() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines; move detail into docs/"


def _nav_pages(nav: list[object]) -> list[str]:
    found: list[str] = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            found += _nav_pages(value) if isinstance(value, list) else [str(value)]
    return found


def test_every_page_is_in_the_nav_once() -> None:
    # mkdocs.yml has !!python tags nowhere; a plain loader is enough.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(listed) == pages
    assert config["hooks"] == ["docs/hooks.py"] and config["strict"] is True


def _build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": str(Path(sys.executable).parent), "HOME": str(site.parent)},
    )


def test_the_site_builds_strict_with_the_intent_table_in_it(tmp_path: Path) -> None:
    proc = _build(ROOT, tmp_path / "site")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not [p.name for p in (tmp_path / "site").rglob("*.py*")], "the hook's code was published with the pages"
    intents = (tmp_path / "site" / "intents" / "index.html").read_text()
    assert "intents-table" not in intents  # the marker was replaced
    for name, intent in INTENTS.items():
        assert f"<code>{name}</code>" in intents
        for flag in intent.flag_names:
            assert flag in intents, f"{name}: {flag} missing from the generated table"


def _hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def test_the_intent_table_lists_every_spelling_the_code_would_write() -> None:
    table: str = _hooks().intents_table()
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines()[2:]}
    assert list(rows) == list(INTENTS)
    prefill = rows["prefill_cuda_graph"]
    # The code's preference order, backend values grouped under their flag.
    assert prefill.index("`--cuda-graph-backend-prefill breakable` (or `tc_piecewise`, `full`)") < prefill.index(
        "`--enforce-piecewise-cuda-graph`"
    )
    assert "`NEXTN` compared as `EAGLE`" in rows["speculative"]


def test_a_new_intent_without_a_note_fails_the_build(tmp_path: Path) -> None:
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    page = project / "docs" / "intents.md"
    page.write_text("\n".join(ln for ln in page.read_text().splitlines() if "**`overlap_schedule`**" not in ln))
    proc = _build(project, tmp_path / "site")
    assert proc.returncode != 0
    assert "missing: ['overlap_schedule']" in proc.stdout + proc.stderr


# --- the checker, on broken examples -------------------------------------------------------------------

BROKEN = """# Planted

```python
from sglperf import Workload

Workload.load_from_prompts("chat.jsonl")
```

```bash
.venv/bin/sglperf prefligth --help
```

```python
from sglperf.model.workload import Workload

print(Workload)
```

<!-- not-run: -->
```bash
.venv/bin/sglperf preflight
```

<!-- run-by: tests/no_such_test.py -->
```bash
.venv/bin/sglperf preflight
```

<!-- run-by: ci/setup.sh -->
```bash
.venv/bin/sglperf upgrade-check --from 0.5.13 --to 0.5.23
```

```bash
.venv/bin/pytest -k qwen36 --no-such-option
```

```toml
[runner]
gpu_count = "2"
```

```
an unlabelled block
```

<!-- run-by: ci/setup.sh -->
```toml
key = "what a command wrote"
```
"""


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    folder = tmp_path_factory.mktemp("planted")
    page = folder / "docs" / "broken.md"
    page.parent.mkdir()
    page.write_text(BROKEN)
    found = docs_check.check([page], folder / "work")
    return [str(p) for p in found.problems], page


def _at(problems: list[str], page: Path, line: int) -> list[str]:
    return [p for p in problems if p.startswith(f"{page}:{line}:")]


def test_a_call_to_a_function_that_does_not_exist_is_reported(broken: tuple[list[str], Path]) -> None:
    problems, page = broken
    (problem,) = _at(problems, page, 6)
    assert '"type[Workload]" has no attribute "load_from_prompts"' in problem


def test_a_typo_in_a_subcommand_is_reported(broken: tuple[list[str], Path]) -> None:
    problems, page = broken
    found = _at(problems, page, 9)
    # Statically (sglperf's own parser refuses it) and when run (the command exits 2).
    assert any("sglperf refuses it" in p and "invalid choice: 'prefligth'" in p for p in found), found
    assert any("failed: exit 2" in p for p in found), found


def test_the_other_planted_mistakes_are_each_reported(broken: tuple[list[str], Path]) -> None:
    problems, page = broken
    assert any("imports sglperf.model.workload: use the public API" in p for p in _at(problems, page, 14))
    assert _at(problems, page, 20) == [f"{page}:20: <!-- not-run: --> needs a reason (why no test runs this block)"]
    assert any("tests/no_such_test.py is not a file" in p for p in _at(problems, page, 25))
    assert any(
        "ci/setup.sh does not run `.venv/bin/sglperf upgrade-check" in p and "never mentions upgrade-check" in p
        for p in _at(problems, page, 30)
    )
    assert any("pytest has no option --no-such-option" in p for p in _at(problems, page, 34))
    assert any("nothing runs `.venv/bin/pytest -k qwen36 --no-such-option`" in p for p in _at(problems, page, 34))
    assert any("not a valid deployment" in p and "gpu_count" in p for p in _at(problems, page, 38))
    assert any("fenced block in no language" in p for p in _at(problems, page, 43))
    assert _at(problems, page, 48) == [
        f"{page}:48: run-by: ci/setup.sh never reads broken.md: nothing compares the block with the file"
    ]
    assert len(problems) == 12, "\n".join(problems)
