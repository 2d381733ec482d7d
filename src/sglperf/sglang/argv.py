"""A release's server-args parser, as the probe introspected it, and a launch argv read through it.

Every place that looks into an argv (which flags a variant passes, with which values, what a flag asks of
a field, the argv without one flag) reads it here, the way SGLang's argparse reads it: an option token
starts with ``--``; its values are the text after ``=`` or the bare tokens that follow it; an abbreviation
means the one option it is a unique prefix of (argparse's ``allow_abbrev``). Without a parser, options are
named as written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Option:
    """What the installed release's argparse says about one flag."""

    dest: str
    choices: tuple[str, ...] | None = None
    default: Any = None
    takes_value: bool = True
    deprecated: bool = False
    help: str = ""
    # The release's own words when the flag is deprecated: the replacement its parser names (e.g.
    # "--cuda-graph-backend-prefill=breakable") and the message it prints when the flag is used.
    replacement: str | None = None
    deprecation_message: str | None = None


@dataclass(frozen=True)
class ParserInfo:
    """The installed release's server-args parser, as introspected by the probe."""

    version: str
    options: Mapping[str, Option]
    language_model_only_architectures: tuple[str, ...] | None = None

    def has(self, flag: str) -> bool:
        return flag in self.options

    def accepts(self, flag: str, value: str) -> bool:
        opt = self.options.get(flag)
        return opt is not None and (opt.choices is None or value in opt.choices)

    def canonical(self, flag: str) -> str | None:
        """The option ``flag`` means here: exact, or argparse's unique-prefix abbreviation."""
        if flag in self.options:
            return flag
        matches = [o for o in self.options if o.startswith(flag)]
        return matches[0] if len(matches) == 1 else None

    def abbreviates(self, flag: str) -> list[str]:
        """Every option ``flag`` is a prefix of (more than one: argparse calls it ambiguous)."""
        return [o for o in self.options if o.startswith(flag)]


@dataclass(frozen=True)
class Release:
    """The SGLang release an interpreter has, as preflight asked it: its version and its parser."""

    python: str
    version: str
    parser: ParserInfo
    stubbed_modules: tuple[str, ...] = ()  # GPU-only modules replaced by stubs so that it imports here


@dataclass(frozen=True)
class AskedValue:
    """What an argv asks of one field: the option (canonical) and its value as written (a switch: the
    value it stores)."""

    flag: str
    value: str | list[str] | bool

    @property
    def spelled(self) -> str:
        """As the argv has it: ``--enable-x``, ``--chunked-prefill-size 8192``."""
        if isinstance(self.value, bool):
            return self.flag
        return f"{self.flag} {' '.join(self.value) if isinstance(self.value, list) else self.value}"


@dataclass(frozen=True)
class ArgvOption:
    """One option token of an argv, with what follows it."""

    written: str  # the option as the argv has it, without "=value": "--tp", "--cuda-graph-max-bs"
    name: str  # the option it means: canonical with a parser that knows it, else as written
    known: bool  # the parser knows it (always False without a parser)
    at: int  # its index in the argv
    inline: bool  # its value is written after "=" in the same token
    values: tuple[str, ...]  # the inline value, or every bare token up to the next option

    @property
    def value(self) -> str | None:
        """The first value (an option of one value has no other)."""
        return self.values[0] if self.values else None

    def shown(self) -> list[str]:
        """The tokens as written: the option and the values that follow it."""
        return [self.written + (f"={self.values[0]}" if self.inline else ""), *([] if self.inline else self.values)]


class ParsedArgv:
    """A launch argv read through a release's parser (or, without one, by its spelling alone)."""

    def __init__(self, argv: Sequence[str], parser: ParserInfo | None = None):
        self.argv = tuple(argv)
        self.parser = parser
        self.options = tuple(self._read())

    def _read(self) -> Iterator[ArgvOption]:
        argv = self.argv
        for at, token in enumerate(argv):
            if not token.startswith("--"):
                continue
            written, eq, inline = token.partition("=")
            canonical = self.parser.canonical(written) if self.parser is not None else None
            if eq:
                values: tuple[str, ...] = (inline,)
            else:
                end = next((j for j in range(at + 1, len(argv)) if argv[j].startswith("--")), len(argv))
                values = argv[at + 1 : end]
            yield ArgvOption(written, canonical or written, canonical is not None, at, bool(eq), values)

    def __iter__(self) -> Iterator[ArgvOption]:
        return iter(self.options)

    @property
    def names(self) -> list[str]:
        """Every option the argv passes, in order (canonical where the parser knows it)."""
        return [o.name for o in self.options]

    def find(self, flag: str) -> ArgvOption | None:
        """The last occurrence of ``flag`` (argparse keeps the last), by the option it means."""
        found = [o for o in self.options if o.name == flag]
        return found[-1] if found else None

    def among(self, flags: Iterable[str]) -> list[ArgvOption]:
        """The occurrences of any of ``flags``, in order."""
        wanted = set(flags)
        return [o for o in self.options if o.name in wanted]

    def shown(self, flags: Iterable[str]) -> str:
        """The argv's options among ``flags``, with their values, as written ("" when none)."""
        return " ".join(token for o in self.among(flags) for token in o.shown())

    def without(self, flag: str, *, values: int | None = None) -> tuple[str, ...]:
        """The argv with every occurrence of ``flag`` taken out, with its values (``values``: at most that
        many after a separate option token; the bare tokens after them stay, as argparse would see them)."""
        dropped: set[int] = set()
        for o in self.options:
            if o.name == flag:
                taken = 0 if o.inline else len(o.values) if values is None else min(values, len(o.values))
                dropped.update(range(o.at, o.at + 1 + taken))
        return tuple(token for i, token in enumerate(self.argv) if i not in dropped)

    def asked(self) -> dict[str, AskedValue]:
        """What the argv asks of each field (argparse's ``dest``), by the parser; options it does not know
        are left out."""
        if self.parser is None:
            raise ValueError("what an argv asks of each field is read through a release's parser")
        asked: dict[str, AskedValue] = {}
        for o in self.options:
            if not o.known:
                continue
            option = self.parser.options[o.name]
            if not option.takes_value:
                stored = not option.default if isinstance(option.default, bool) else True
                asked[option.dest] = AskedValue(o.name, stored)
                continue
            asked[option.dest] = AskedValue(o.name, o.values[0] if len(o.values) == 1 else list(o.values))
        return asked
