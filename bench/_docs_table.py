"""Writes a bench script's printed table into its own section of docs/benchmarks.md.

Every number in the documentation comes from a script here, and a table copied by hand goes stale
without anyone noticing which command made it or when. A script run with ``--write-docs`` rewrites
only the text between its section's markers::

    <!-- bench:meter_cpu:begin -->
    ... replaced: the exact command, the UTC date, what the script printed ...
    <!-- bench:meter_cpu:end -->

A script whose results are shown twice (other options, another machine's run) names the second
section with a label: ``--write-docs=real-cpu`` writes ``bench:meter_cpu/real-cpu``.

Anything unexpected about the markers (missing, repeated, in the wrong order) is one error naming
the section, and the file is left exactly as it was: a half-rewritten page would silently lose the
tables around it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TextIO

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
FLAG = "--write-docs"
_LABEL = re.compile(r"[a-z0-9][a-z0-9-]*")
_ANY_MARKER = re.compile(r"<!--\s*bench:")


class DocsTableError(Exception):
    """The page's markers do not allow a safe rewrite (the page was not touched)."""


def add_flag(parser: argparse.ArgumentParser) -> None:
    """The ``--write-docs[=LABEL]`` option, the same in every script (``run_script`` acts on it)."""
    parser.add_argument(
        FLAG,
        nargs="?",
        const="",
        default=None,
        type=_label,
        metavar="LABEL",
        help="also write what this prints into docs/benchmarks.md, section bench:<script>[/LABEL]",
    )


def _label(text: str) -> str:
    if text and not _LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: a label is lower-case letters, digits and dashes")
    return text


def _split(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """(argv without the flag, its label: None when absent, "" when given bare)."""
    rest: list[str] = []
    label: str | None = None
    items = list(argv)
    i = 0
    while i < len(items):
        arg = items[i]
        if arg == FLAG:
            label = ""
            # argparse takes the next word as the label when it is not an option.
            if i + 1 < len(items) and _LABEL.fullmatch(items[i + 1]) and not items[i + 1].startswith("-"):
                label = items[i + 1]
                i += 1
        elif arg.startswith(FLAG + "="):
            label = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return rest, label


def command(script: str, argv: Sequence[str] | None = None) -> str:
    """The command that reproduces the numbers: ``python bench/<script>.py ...`` without the flag,
    which only decides where the output goes."""
    rest, _ = _split(sys.argv[1:] if argv is None else argv)
    return shlex.join(["python", f"bench/{Path(script).stem}.py", *rest])


def _markers(section: str) -> tuple[str, str]:
    return f"<!-- bench:{section}:begin -->", f"<!-- bench:{section}:end -->"


def rewrite(doc: Path, section: str, cmd: str, body: str, day: date | None = None) -> None:
    """Replace what lies between ``section``'s markers in ``doc`` with ``body``, stamped with the
    command and the UTC date. Raises DocsTableError, touching nothing, unless each marker is on a
    line of its own exactly once, begin before end."""
    begin, end = _markers(section)
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocsTableError(f"{doc}: cannot read it: {exc.strerror or exc}") from None
    lines = text.splitlines(keepends=True)
    found = {m: [i for i, line in enumerate(lines) if line.strip() == m] for m in (begin, end)}
    for marker, at in found.items():
        if len(at) != 1:
            problem = "missing" if not at else f"found {len(at)} times (lines {', '.join(str(i + 1) for i in at)})"
            raise DocsTableError(
                f"{doc}: section bench:{section}: the line {marker} is {problem}; the page needs exactly one "
                f"{begin} and one {end} around the table (the page was not changed)"
            )
    first, last = found[begin][0], found[end][0]
    if last < first:
        raise DocsTableError(
            f"{doc}: section bench:{section}: {end} (line {last + 1}) comes before {begin} (line {first + 1}) "
            "(the page was not changed)"
        )
    if _ANY_MARKER.search(body):
        raise DocsTableError(f"section bench:{section}: the table itself contains a bench marker; not written")
    when = (day or datetime.now(UTC).date()).isoformat()
    stamp = f"Recorded {when} (UTC) with `{cmd}`:\n\n"
    # Blank lines around the body: Markdown would read a table or paragraph touching an HTML comment
    # as part of a raw HTML block.
    new = "".join(lines[: first + 1]) + "\n" + stamp + body.strip("\n") + "\n\n" + "".join(lines[last:])
    _replace(doc, new)


def _replace(doc: Path, text: str) -> None:
    # Written beside the page and renamed over it: an interrupted write leaves the old page whole.
    fd, tmp = tempfile.mkstemp(prefix=f".{doc.name}.", dir=doc.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, doc.stat().st_mode & 0o777)  # mkstemp's 0600 would hide the page from others
        os.replace(tmp, doc)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class _Tee(io.StringIO):
    """Keeps a copy of what is printed, still printing it."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self._out = out

    def write(self, s: str) -> int:
        self._out.write(s)
        return super().write(s)

    def flush(self) -> None:
        self._out.flush()


@contextlib.contextmanager
def tee() -> Iterator[io.StringIO]:
    copy = _Tee(sys.stdout)
    with contextlib.redirect_stdout(copy):
        yield copy


def run_script(
    script: str, main: Callable[[list[str] | None], int], argv: Sequence[str] | None = None, doc: Path = DOCS
) -> int:
    """Run a bench script's ``main`` (which parses ``--write-docs`` with ``add_flag``); when the flag
    was given, write what it printed to stdout into its section of ``doc``. Progress on stderr stays out."""
    args = list(sys.argv[1:] if argv is None else argv)
    with tee() as printed:
        status = main(args)
    _, label = _split(args)
    if label is None:
        return status
    name = Path(script).stem
    section = f"{name}/{label}" if label else name
    try:
        rewrite(doc, section, command(name, args), printed.getvalue())
    except DocsTableError as exc:
        print(f"{FLAG}: {exc}", file=sys.stderr)
        return 2
    print(f"{FLAG}: wrote section bench:{section} of {doc}", file=sys.stderr)
    return status
