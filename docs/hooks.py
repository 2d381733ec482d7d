"""mkdocs hook: the intent table of docs/intents.md, generated from the code that spells the flags,
and the metric table of docs/measurement.md, from the one table the code reads.

A hand-written table of flag spellings drifts the day an intent learns a new release's flag. Instead,
every intent in ``sglperf.sglang.intents.INTENTS`` is asked, through its own ``flags()``, how it would
request each value from a release whose parser accepts every flag; the answer is refused and the intent
asked again, until it has nothing left. That lists every spelling in the order the code prefers it,
which is what a real release's parser picks from.

The page's hand-written notes must name exactly the intents the code has: a new intent without a note,
or a note about a removed one, fails the build.

And on every page, a table cell's code span may break a line only between words: the browser would
otherwise split `prefill_cuda_graph` anywhere to fit its column (docs/stylesheets/extra.css forbids that),
and an identifier has no place of its own to break; a `<wbr>` after each '_', '/' and a module path's '.'
gives it some. The first cell of a row names the row (an intent, a metric) and stays whole. An option
('--quick') is kept whole with its dashes: a span that holds several is split into one per option. The
text read, searched or copied is unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

from sglperf.model.metrics import METRICS
from sglperf.sglang.argv import ParserInfo
from sglperf.sglang.intents import INTENTS, Intent, IntentNotExpressible, Speculative

MARKER = "<!-- intents-table -->"
PAGE = "intents.md"
METRICS_MARKER = "<!-- metrics-table -->"
METRICS_PAGE = "measurement.md"
NOTE = re.compile(r"^- \*\*`([a-z_]+)`\*\*", re.M)
TABLE_ROW = re.compile(r"<tr\b[^>]*>.*?</tr>", re.S)
TABLE_CELL = re.compile(r"<t([dh])\b[^>]*>.*?</t\1>", re.S)
INLINE_CODE = re.compile(r"<code>([^<]*)</code>([,;:)]?)")
OPTION = re.compile(r" (?=\[?-)")  # before each option of an argv, optional ones ('[-k expr]') too
# After '_' or '/', or a '.' before a letter (`sglperf.testing`, not `0.5.23`); never at a span's end.
WORD_BREAK = re.compile(r"(?:[_/]|\.(?=[A-Za-z]))(?=[^_/.])")
# An architecture on the parser's own allow-list: the intents that depend on one take their first choice.
ARCHITECTURE = ("AnyArchitectureForCausalLM",)
# Placeholders for the one intent whose value is a setting, not on/off.
SPECULATIVE_SAMPLE = SimpleNamespace(algorithm="ALGORITHM", num_steps="N", num_draft_tokens="N", eagle_topk="K")


@dataclass(frozen=True)
class _RefusingParser(ParserInfo):
    """A release that accepts every flag and value except those refused so far."""

    refused_flags: frozenset[str] = frozenset()
    refused_values: frozenset[tuple[str, str]] = frozenset()

    def has(self, flag: str) -> bool:
        return flag not in self.refused_flags

    def accepts(self, flag: str, value: str) -> bool:
        return self.has(flag) and (flag, value) not in self.refused_values


def spellings(intent: Intent, value: Any, allow_list: tuple[str, ...] | None = ARCHITECTURE) -> list[list[str]]:
    """Every argv ``intent`` would write for ``value``, most preferred first; an empty argv (the
    release's default needs no flag) ends the list."""
    flags: set[str] = set()
    values: set[tuple[str, str]] = set()
    found: list[list[str]] = []
    while True:
        parser = _RefusingParser("any", {}, allow_list, frozenset(flags), frozenset(values))
        try:
            argv = intent.flags(value, parser, ARCHITECTURE)
        except IntentNotExpressible:
            return found
        if argv in found:  # refusing the value did not move it on: the flag takes any value
            flags.add(argv[0])
            continue
        found.append(argv)
        if not argv:
            return found
        if len(argv) == 2 and not argv[1].startswith("-"):
            values.add((argv[0], argv[1]))
        else:
            flags.add(argv[0])


def _code(argv: list[str]) -> str:
    return "`" + " ".join(a if not a.startswith("{") else f"'{a}'" for a in argv) + "`"


def _cell(found: list[list[str]], first_note: str = "") -> str:
    """Spellings as the table shows them, one flag's values grouped: `--x a` (or `b`, `c`)."""
    if not found:
        return "no flag in any release"
    parts: list[str] = []
    for argv in found:
        if not argv:
            parts.append("else nothing (the default)" if parts else "nothing (the default)")
        elif len(argv) == 2 and parts and parts[-1].startswith(f"`{argv[0]} "):
            head, _, rest = parts[-1].partition(" (or ")
            values = rest.removesuffix(")").split(", ") if rest else []
            parts[-1] = f"{head} (or {', '.join([*values, f'`{argv[1]}`'])})"
        else:
            parts.append(_code(argv))
    if first_note:
        parts[0] += f" ({first_note})"
    return ", ".join(parts)


def intents_table() -> str:
    rows = [
        "| intent | on: asked for with (first the release's parser accepts) | off | read from (effective args) |",
        "|---|---|---|---|",
    ]
    for name, intent in INTENTS.items():
        read = ", ".join(f"`{f}`" for f in intent.fields)
        if isinstance(intent, Speculative):
            on = _cell(spellings(intent, SPECULATIVE_SAMPLE))
            off = "leave `[launch.speculative]` out"
            aliases = ", ".join(f"`{a}` compared as `{b}`" for a, b in intent.ALIASES.items())
            read += f" ({aliases})" if aliases else ""
        else:
            found = spellings(intent, True)
            # A first choice that needs the architecture on the release's allow-list says so.
            needs_list = found[:1] != spellings(intent, True, allow_list=None)[:1]
            on = _cell(found, "architectures on the release's allow-list" if needs_list else "")
            off = _cell(spellings(intent, False))
        rows.append(f"| `{name}` | {on} | {off} | {read} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """The metric table (`sglperf.model.metrics.METRICS`) as the reader needs it: name, unit, which way
    is better, the default floor, and whether it is one value per round or a mean over requests."""
    rows = ["| metric | unit | better | default floor | per round |", "|---|---|---|---|---|"]
    for m in METRICS.values():
        floor = f"{m.default_threshold * 100:g}%" + (f" (or `{m.floor_from}`'s)" if m.floor_from else "")
        per_round = "yes" if m.per_round else "mean over the round's requests"
        rows.append(f"| `{m.name}` | {m.unit} | {m.direction.value} | {floor} | {per_round} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri == METRICS_PAGE:
        if markdown.count(METRICS_MARKER) != 1:
            raise PluginError(f"docs/{METRICS_PAGE}: needs exactly one {METRICS_MARKER} line for the metric table")
        return markdown.replace(METRICS_MARKER, metrics_table())
    if page.file.src_uri != PAGE:
        return markdown
    if markdown.count(MARKER) != 1:
        raise PluginError(f"docs/{PAGE}: needs exactly one {MARKER} line where the generated table goes")
    noted = NOTE.findall(markdown)
    if sorted(noted) != sorted(INTENTS):
        missing, unknown = set(INTENTS) - set(noted), set(noted) - set(INTENTS)
        raise PluginError(
            f"docs/{PAGE}: the notes must cover the intents the code has, once each "
            f"(missing: {sorted(missing) or 'none'}; not an intent: {sorted(unknown) or 'none'})"
        )
    return markdown.replace(MARKER, intents_table())


def _table_code(code: re.Match[str], *, names_row: bool) -> str:
    """A table cell's code span, and the punctuation after it, drawn to break only between words."""
    text, after = code.group(1), code.group(2)
    if not names_row:
        text = WORD_BREAK.sub(lambda m: m.group(0) + "<wbr>", text)
    # Each option of an argv on its own, kept whole with its dashes (extra.css: a .flag is an inline
    # block, so a line never ends on "--"); the punctuation after the span stays on its last line.
    chunks = OPTION.split(text)
    drawn = [f"<code>{chunk}</code>" for chunk in chunks]
    drawn[-1] += after
    flags = [chunk.lstrip("[").startswith("-") for chunk in chunks]
    return " ".join(f'<span class="flag">{d}</span>' if flag else d for flag, d in zip(flags, drawn, strict=True))


def _row(row: re.Match[str]) -> str:
    text = row.group(0)
    first = TABLE_CELL.search(text)
    if first is None:
        return text
    head = INLINE_CODE.sub(lambda code: _table_code(code, names_row=True), text[: first.end()])
    rest = TABLE_CELL.sub(
        lambda cell: INLINE_CODE.sub(lambda code: _table_code(code, names_row=False), cell.group(0)),
        text[first.end() :],
    )
    return head + rest


def on_page_content(html: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    return TABLE_ROW.sub(_row, html)
