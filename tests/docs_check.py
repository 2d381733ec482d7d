"""Checks every fenced block of the README and the docs pages for what it claims to be.

A documented command or example that no longer works is worse than none: a newcomer copies it first.
So each block is classified by its language and checked by something real:

* ``python``: type-checked with ``mypy --strict``, each block on its own (an example must be complete),
  and it may import sglperf only through its public API (``from sglperf import NAME``, NAME in
  ``sglperf.__all__``): the package answers any other attribute with ``Any``, which mypy cannot check.
* ``toml``: a complete deployment file is loaded with sglperf's loader in a copy of the project's
  layout; a fragment (one table, say) is merged into qwen36's file and validated as a deployment; a file a
  command writes (``<!-- run-by: PATH -->``) must be read and compared by the test at PATH.
* ``bash``/``sh``/``shell``/``console`` (``$ `` lines): every command is first checked statically (the
  program exists; ``sglperf`` arguments parse with the CLI's own parser; pytest options exist; the bench
  scripts have the options named). Then each block either

  - runs here, when every command in it is cheap: ``--help``, ``pytest --collect-only``,
    ``mkdocs build`` (into a temporary folder);
  - or names what runs it in an HTML comment right before the block, ``<!-- run-by: PATH -->`` (or
    ``PATH, HELPER``): the files must exist and together hold each command's distinctive words (its
    script, sglperf subcommand, long options and the environment variables it sets), or name the page
    itself (a test that runs the page's blocks verbatim, as tests/sglang/test_history_docs.py does);
  - or says why nothing runs it, ``<!-- not-run: REASON -->`` (a GPU, a running server): the reason is
    mandatory.
* ``text``: output, not checked. A block with no language or another one is a problem: it would be
  checked by nothing.

Links of the README (the pages' own links are checked by ``mkdocs build --strict``) must reach an
existing file and, when they name one, an existing heading. Each table section of
docs/benchmarks.md names a bench script and options it has.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QWEN36 = ROOT / "deployments" / "qwen36.toml"
LANGUAGES = {"python", "toml", "bash", "sh", "shell", "console", "text"}
SHELL = {"bash", "sh", "shell", "console"}
# uv: a dependency of sglperf, in every venv that has it.
VENV_TOOLS = {"sglperf", "pytest", "python", "python3", "mkdocs", "ruff", "mypy", "pip", "uv"}
SYSTEM_TOOLS = {"bash", "sh", "grep", "git", "cat", "echo", "export", "cd", "ls", "env"}
OPERATORS = {"&&", "||", ";", "|", "&"}
REDIRECTIONS = {">", ">>", "<", "2>", "2>&1"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+-]*)\s*$")
NOTE = re.compile(r"^<!--\s*(?P<kind>run-by|not-run)\s*:(?P<value>.*?)-->\s*$")
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
BENCH_STAMP = re.compile(r"Recorded \d{4}-\d{2}-\d{2} \(UTC\) with `(?P<command>[^`]+)`")
BENCH_MARKER = re.compile(r"^<!-- bench:(?P<section>[\w/-]+):(?P<end>begin|end) -->$", re.M)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    note: tuple[str, str] | None  # ("run-by" | "not-run", value) from the comment right before it

    @property
    def where(self) -> str:
        return f"{_shown(self.page)}:{self.line}"


@dataclass(frozen=True)
class Command:
    block: Block
    text: str
    argv: tuple[str, ...]  # without the leading VAR=value words
    env: tuple[str, ...]  # the names those set

    @property
    def program(self) -> str:
        """The program's name as the docs use it: `.venv/bin/sglperf` and `sglperf` are both "sglperf"."""
        first = self.argv[0]
        return Path(first).name if first.startswith(".venv/bin/") else first


@dataclass(frozen=True)
class Problem:
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    ran: list[str] = field(default_factory=list)
    run_by: list[tuple[str, str]] = field(default_factory=list)  # (where, path)
    not_run: list[tuple[str, str]] = field(default_factory=list)  # (where, reason)
    type_checked: int = 0
    deployments_loaded: int = 0

    def add(self, where: str, message: str) -> None:
        self.problems.append(Problem(where, message))


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        end = next(
            (j for j in range(i + 1, len(lines)) if lines[j].strip() == fence[0] * len(fence)),
            len(lines),
        )
        # A block nested in a list item is indented; its own indentation is kept.
        body = "\n".join(
            line[indent:] if line.startswith(opening["indent"]) else line.lstrip() for line in lines[i + 1 : end]
        )
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        note = NOTE.match(previous)
        found.append(
            Block(page, i + 1, opening["lang"].lower(), body, (note["kind"], note["value"].strip()) if note else None)
        )
        i = end + 1
    return found


def _logical_lines(block: Block) -> Iterator[str]:
    """The block's command lines: continuations joined; in a console block only the `$ ` lines."""
    raw = block.text.splitlines()
    if block.lang == "console":
        raw = [line[2:] for line in raw if line.startswith("$ ")]
    pending = ""
    for line in raw:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield pending + line
        pending = ""
    if pending:
        yield pending


def commands(block: Block) -> list[Command]:
    found: list[Command] = []
    for line in _logical_lines(block):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
        current: list[str] = []
        for word in [*words, ";"]:
            if word not in OPERATORS:
                current.append(word)
                continue
            argv = _without_redirections(current)
            env = []
            while argv and re.fullmatch(r"[A-Za-z_]\w*=.*", argv[0]):
                env.append(argv.pop(0).split("=", 1)[0])
            if argv:
                found.append(Command(block, line.strip(), tuple(argv), tuple(env)))
            current = []
    return found


def _without_redirections(words: list[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in REDIRECTIONS:
            skip = True
        else:
            kept.append(word)
    return kept


# --- static checks of one command ----------------------------------------------------------------------


@cache
def _pytest_help() -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    return proc.stdout


@cache
def pytest_options() -> dict[str, bool]:
    """Every option pytest accepts here (sglperf's plugin and the project's loaded), and whether it
    takes a value (`-k EXPRESSION`, `--results-dir=RESULTS_DIR`)."""
    options: dict[str, bool] = {}
    for line in _pytest_help().splitlines():
        if not re.match(r"^ {2}-", line):
            continue
        spec = re.split(r"\s{2,}", line.strip())[0]
        for part in spec.split(", "):
            if found := re.fullmatch(r"(--?[\w-]+)(?:[ =](\S+))?", part):
                options[found[1]] = found[2] is not None
    return options


def _sglperf_parse_error(args: Sequence[str]) -> str | None:
    from sglperf.cli import build_parser

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(list(args))
    except SystemExit as exc:
        if exc.code not in (0, None):
            return errors.getvalue().strip().splitlines()[-1]
    return None


def _long_options(argv: Iterable[str]) -> list[str]:
    return [word.split("=", 1)[0] for word in argv if word.startswith("--") and len(word) > 2]


def static_problems(command: Command) -> list[str]:
    """What is wrong with the command without running it: its program, its options, its paths."""
    argv, program = command.argv, command.program
    if program in VENV_TOOLS:
        tool = Path(sys.executable).parent / program
        if not tool.exists() and program not in {"python", "python3"}:
            return [f"`{program}` is not installed in this environment ({tool})"]
    elif "/" in argv[0] or argv[0].endswith(".sh"):
        script = ROOT / argv[0]
        if not script.is_file():
            return [f"{argv[0]}: no such file in the repository"]
        if not os.access(script, os.X_OK):
            return [f"{argv[0]}: not executable (chmod +x, or write `bash {argv[0]}`)"]
    elif program not in SYSTEM_TOOLS:
        return [f"`{argv[0]}`: not a program the docs may assume (add it to docs_check.SYSTEM_TOOLS if it is)"]
    if program in {"bash", "sh"} and len(argv) > 1 and not (ROOT / argv[1]).is_file():
        return [f"{argv[1]}: no such file in the repository"]
    if program == "sglperf":
        error = _sglperf_parse_error(argv[1:])
        return [f"`{command.text}`: sglperf refuses it: {error}"] if error else []
    if program == "pytest":
        known = pytest_options()
        # A short option may carry its value: -rA, -n4.
        unknown = [o for o in _options(argv[1:]) if o not in known and not (o[1] != "-" and o[:2] in known)]
        missing = [p for p in _pytest_paths(argv[1:]) if not (ROOT / p.split("::")[0]).exists()]
        return [f"`{command.text}`: pytest has no option {o}" for o in unknown] + [
            f"`{command.text}`: no such test path {p}" for p in missing
        ]
    if program in {"python", "python3"}:
        return _python_problems(command)
    if program == "mkdocs" and (len(argv) < 2 or argv[1] not in {"build", "serve"}):
        return [f"`{command.text}`: mkdocs has no such command"]
    return []


def _options(args: Sequence[str]) -> list[str]:
    return [word.split("=", 1)[0] for word in args if word.startswith("-") and word != "-"]


def _pytest_paths(args: Sequence[str]) -> list[str]:
    """The arguments that name test files or folders, not the values of options such as -k."""
    paths: list[str] = []
    skip = False
    for word in args:
        if skip:
            skip = False
        elif word.startswith("-"):
            skip = "=" not in word and pytest_options().get(word, False)
        else:
            paths.append(word)
    return paths


def _python_problems(command: Command) -> list[str]:
    args = command.argv[1:]
    if args[:1] == ("-m",) and len(args) > 1:
        if importlib.util.find_spec(args[1].split(".")[0]) is None or importlib.util.find_spec(args[1]) is None:
            return [f"`{command.text}`: no module {args[1]}"]
        return []
    if args and args[0].endswith(".py"):
        script = ROOT / args[0]
        if not script.is_file():
            return [f"`{command.text}`: no such script {args[0]}"]
        source = script.read_text() + (ROOT / "bench" / "_docs_table.py").read_text()
        return [f"`{command.text}`: {args[0]} has no option {o}" for o in _long_options(args[1:]) if o not in source]
    return []


# --- who runs a command --------------------------------------------------------------------------------


def distinctive_words(command: Command) -> list[str]:
    """What a file that runs this command must contain: the script it calls, sglperf's subcommand and
    action, every long option, every environment variable it sets. Values (versions, ids, paths) may
    differ: a test runs the command on its own fixtures."""
    argv = command.argv
    words: list[str] = list(command.env)
    if "/" in argv[0] and not argv[0].startswith(".venv/"):
        words.append(Path(argv[0]).name)
    if command.program in {"bash", "sh"} and len(argv) > 1:
        words.append(Path(argv[1]).name)
    if command.program == "sglperf":
        words += [w for w in argv[1:3] if re.fullmatch(r"[a-z][a-z-]*", w)]
    words += _long_options(argv[1:])
    return list(dict.fromkeys(words))


def _holds(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(word)}(?![\w-])", text) is not None


def run_by_problems(block: Block, value: str) -> list[str]:
    """``value``: the test or script that runs the block, or several separated by commas when a test runs
    it through a helper of its own (the helper holds some of the command's words, the test the rest)."""
    paths = [p.strip() for p in value.split(",")]
    texts = []
    for path in paths:
        target = ROOT / path
        if not path or not target.is_file():
            moved = sorted(_shown(p) for p in ROOT.glob(f"tests/**/{Path(path).name}")) if path else []
            hint = f" (moved to {', '.join(moved)}?)" if moved else ""
            return [f"run-by: {path or '(nothing)'} is not a file of the repository{hint}"]
        texts.append(target.read_text(encoding="utf-8", errors="replace"))
    text, path = "\n".join(texts), ", ".join(paths)
    if _holds(text, block.page.name):  # it reads the page and runs its blocks as written
        return []
    problems = []
    for command in commands(block):
        missing = [w for w in distinctive_words(command) if not _holds(text, w)]
        if missing:
            problems.append(f"run-by: {path} does not run `{command.text}`: it never mentions {', '.join(missing)}")
    return problems


def runnable(command: Command, site_dir: Path) -> list[str] | None:
    """The argv this checker runs for a cheap command, or None when the command is not cheap."""
    argv, program = list(command.argv), command.program
    if program in VENV_TOOLS:
        argv[0] = str(Path(sys.executable).parent / program)
    if program == "sglperf" and "--help" in argv:
        return argv
    if program == "pytest" and "--collect-only" in argv:
        return [*argv, "-p", "no:cacheprovider", f"--results-dir={site_dir.parent / 'results'}"]
    if program == "mkdocs" and argv[1:2] == ["build"]:
        # Never into the repository: the site goes to this run's own folder.
        kept = [
            a for i, a in enumerate(argv) if a not in {"-d", "--site-dir"} and argv[i - 1] not in {"-d", "--site-dir"}
        ]
        return [*kept, "--site-dir", str(site_dir)]
    return None


def _run(argv: list[str], workdir: Path) -> str | None:
    env = {**os.environ, "SGLPERF_HISTORY": str(workdir / "history.sqlite"), "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode == 0:
        return None
    return f"exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-1500:]}"


# --- python and toml -----------------------------------------------------------------------------------


def _public_names() -> frozenset[str]:
    import sglperf

    return frozenset(sglperf.__all__)


def import_problems(source: str) -> list[tuple[int, str]]:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [(exc.lineno or 1, f"not valid Python: {exc.msg}")]
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "sglperf" or alias.name.startswith("sglperf."):
                    problems.append((node.lineno, f"`import {alias.name}`: write `from sglperf import NAME`"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sglperf":
            if node.module != "sglperf":
                problems.append((node.lineno, f"imports {node.module}: use the public API, `from sglperf import`"))
                continue
            private = [a.name for a in node.names if a.name not in _public_names()]
            if private:
                problems.append((node.lineno, f"{', '.join(private)}: not in sglperf's public API (sglperf.__all__)"))
    return problems


def type_check(python_blocks: Sequence[Block], workdir: Path) -> list[Problem]:
    """One mypy --strict run over every block, each its own module."""
    if not python_blocks:
        return []
    folder = workdir / "python-blocks"
    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, Block] = {}
    for n, block in enumerate(python_blocks):
        stem = re.sub(r"\W", "_", block.page.stem)
        name = f"block_{n:03d}_{stem}_{block.line}.py"
        (folder / name).write_text(block.text + "\n", encoding="utf-8")
        files[name] = block
    config = folder / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\npython_version = 3.11\nplugins = pydantic.mypy\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--cache-dir",
            str(workdir / "mypy-cache"),
            *files,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    problems = []
    for line in proc.stdout.splitlines():
        found = re.match(r"(?P<file>block_[^:]+\.py):(?P<line>\d+): error: (?P<message>.*)", line)
        if found:
            block = files[found["file"]]
            problems.append(Problem(f"{_shown(block.page)}:{block.line + int(found['line'])}", found["message"]))
    if proc.returncode != 0 and not problems:
        problems.append(Problem(_shown(folder), f"mypy failed: {(proc.stdout + proc.stderr)[-1500:]}"))
    return problems


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def toml_problem(block: Block, workdir: Path) -> str | None:
    from pydantic import ValidationError

    from sglperf import Deployment, DeploymentError, load_deployment

    try:
        data = tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as exc:
        return f"not valid TOML: {exc}"
    project = workdir / f"toml-{block.page.stem}-{block.line}"
    for part in ("models", "data/prompts"):
        shutil.copytree(ROOT / part, project / part, dirs_exist_ok=True)
    (project / "deployments").mkdir(exist_ok=True)
    path = project / "deployments" / "docs-example.toml"
    try:
        if "model" in data and "variants" in data:
            path.write_text(block.text, encoding="utf-8")
            load_deployment(path)
        else:  # a fragment: in context, merged into a deployment that is valid by itself
            merged = _merge(tomllib.loads(QWEN36.read_text()), data)
            if "workloads" in data:  # qwen36's expected effects name its own workloads, replaced here
                merged["variants"] = [{k: v for k, v in x.items() if k != "expect_effect"} for x in merged["variants"]]
            Deployment.model_validate({**merged, "key": "qwen36", "path": QWEN36})
    except (DeploymentError, ValidationError) as exc:
        return f"not a valid deployment: {exc}"
    return None


def produced_toml_problem(block: Block, value: str) -> str | None:
    """A file a command writes, shown as written (``sglperf init``'s deployment): it names paths of the
    user's repository, which this checker's copy does not have, so the test that runs the page must read the
    page and compare the block with what the command wrote."""
    try:
        tomllib.loads(block.text)
    except tomllib.TOMLDecodeError as exc:
        return f"not valid TOML: {exc}"
    texts = [(ROOT / p.strip()).read_text(encoding="utf-8") for p in value.split(",") if (ROOT / p.strip()).is_file()]
    if not texts:
        return f"run-by: {value.strip()} is not a file of the repository"
    if not any(_holds(text, block.page.name) for text in texts):
        return f"run-by: {value.strip()} never reads {block.page.name}: nothing compares the block with the file"
    return None


# --- the whole check -----------------------------------------------------------------------------------


def check(page_paths: Sequence[Path], workdir: Path, run: bool = True) -> Report:
    """Every problem of these pages' blocks; with ``run``, the cheap commands are run too."""
    report = Report()
    python_blocks: list[Block] = []
    for page in page_paths:
        for block in blocks(page):
            _check_block(block, workdir, report, python_blocks, run)
        if page.name == "README.md":
            _check_links(page, report)
        if page.name == "benchmarks.md":
            _check_bench_sections(page, report)
    report.problems += type_check(python_blocks, workdir)
    report.type_checked = len(python_blocks)
    return report


def _check_block(block: Block, workdir: Path, report: Report, python_blocks: list[Block], run: bool) -> None:
    if block.lang not in LANGUAGES:
        report.add(block.where, f"fenced block in {block.lang or 'no language'}: say which of {sorted(LANGUAGES)}")
        return
    if block.lang == "python":
        for line, message in import_problems(block.text):
            report.add(f"{_shown(block.page)}:{block.line + line}", message)
        python_blocks.append(block)
    elif block.lang == "toml" and block.note is not None and block.note[0] == "run-by":
        if problem := produced_toml_problem(block, block.note[1]):
            report.add(block.where, problem)
    elif block.lang == "toml":
        if problem := toml_problem(block, workdir):
            report.add(block.where, problem)
        else:
            report.deployments_loaded += 1
    elif block.lang in SHELL:
        _check_shell(block, workdir, report, run)


def _check_shell(block: Block, workdir: Path, report: Report, run: bool) -> None:
    found = commands(block)
    if not found:
        report.add(block.where, "a shell block with no command in it")
        return
    for command in found:
        for problem in static_problems(command):
            report.add(block.where, problem)
    kind, value = block.note or ("", "")
    if kind == "not-run":
        if not value:
            report.add(block.where, "<!-- not-run: --> needs a reason (why no test runs this block)")
        else:
            report.not_run.append((block.where, value))
        return
    if kind == "run-by":
        for problem in run_by_problems(block, value):
            report.add(block.where, problem)
        report.run_by.append((block.where, value))
        return
    site = workdir / f"site-{block.page.stem}-{block.line}"
    argvs = [runnable(command, site) for command in found]
    for command, argv in zip(found, argvs):
        if argv is None:
            report.add(
                block.where,
                f"nothing runs `{command.text}`: name the test or script that does (<!-- run-by: PATH -->), or "
                "say why nothing can (<!-- not-run: REASON -->)",
            )
        elif run:
            if failure := _run(argv, workdir):
                report.add(block.where, f"`{command.text}` failed: {failure}")
            else:
                report.ran.append(command.text)


def slugify(heading: str) -> str:
    """A heading's anchor as mkdocs writes it (Python-Markdown's toc default)."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _check_links(page: Path, report: Report) -> None:
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for link in LINK.finditer(line):
            target = link["target"]
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve()
            if not path.is_file():
                report.add(f"{_shown(page)}:{number}", f"link to {file}: no such file")
            elif anchor:
                headings = re.findall(r"^#{1,6}\s+(.*?)\s*$", path.read_text(encoding="utf-8"), re.M)
                if anchor not in {slugify(h.replace("`", "")) for h in headings}:
                    report.add(f"{_shown(page)}:{number}", f"link to {target}: {file} has no such heading")


def _check_bench_sections(page: Path, report: Report) -> None:
    text = page.read_text(encoding="utf-8")
    ends = {m["section"]: m["end"] for m in BENCH_MARKER.finditer(text)}
    for match in BENCH_MARKER.finditer(text):
        if match["end"] != "begin":
            continue
        section = match["section"]
        body = text[match.end() : text.find(f"<!-- bench:{section}:end -->", match.end())]
        where = f"{_shown(page)}:{text[: match.start()].count(chr(10)) + 1}"
        if section not in ends or f"<!-- bench:{section}:end -->" not in text[match.end() :]:
            report.add(where, f"bench:{section} has no end marker after its begin")
            continue
        stamp = BENCH_STAMP.search(body)
        if stamp is None:
            report.add(where, f"bench:{section} is not stamped with its command and date")
            continue
        words = shlex.split(stamp["command"])
        script = f"bench/{section.split('/')[0]}.py"
        if words[1:2] != [script]:
            report.add(where, f"bench:{section} was made by {words[1:2]}, not {script}")
        fake = Block(page, 0, "bash", stamp["command"], None)
        for problem in static_problems(Command(fake, stamp["command"], tuple(words), ())):
            report.add(where, problem)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="check the README's and docs' blocks, as tests/integration/test_docs.py does"
    )
    parser.add_argument("pages", nargs="*", type=Path, help="default: README.md and docs/")
    parser.add_argument("--no-run", action="store_true", help="static checks only")
    return parser.parse_args()


if __name__ == "__main__":
    import tempfile

    arguments = _arguments()
    with tempfile.TemporaryDirectory() as tmp:
        result = check([p.resolve() for p in arguments.pages] or pages(), Path(tmp), run=not arguments.no_run)
    for problem in result.problems:
        print(problem)
    print(
        f"{len(result.problems)} problem(s); ran {len(result.ran)} command(s), {len(result.run_by)} block(s) run "
        f"elsewhere, {len(result.not_run)} not run, {result.type_checked} Python block(s) type-checked, "
        f"{result.deployments_loaded} TOML block(s) validated"
    )
    sys.exit(1 if result.problems else 0)
