"""SGLang's own flag deprecations, kept across releases.

A release that renames a flag usually keeps the old spelling for a while as a deprecated alias that names
its replacement: 0.5.14-0.5.19 did, and 0.5.20 deleted the aliases (sgl-project/sglang#38375). A
deployment written for an older release then meets a release that neither accepts the old spelling nor
says what replaced it. The ledger remembers what the releases said: each deprecated spelling, the
replacement its release named, the first and last release seen declaring it, and the release's message.

Nothing in it is written by hand. The shipped copy (``deprecations.json`` beside this module) is written
by ``ci/refresh-deprecations.py`` from the releases' own parsers and checked against a real release by
tests/sglang/test_deprecations.py; a parser at hand (the old release of an upgrade check) adds to it.

``replacement`` is the one answer to "what do I write instead of this flag on that release", for preflight's
refusals and warnings and for upgrade-check alike, with one precedence: what the releases said (the target's
own deprecation, then the chain of older releases' deprecations to a spelling the target accepts), and only
then how sglperf spells the intent the flag asked for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path

from packaging.version import Version

from sglperf.errors import SglperfError
from sglperf.model.files import os_problem, read_input
from sglperf.sglang.argv import ParserInfo
from sglperf.sglang.intents import spelling_of_intent_flag as intent_spelling

SHIPPED_FILE = "deprecations.json"


def flag_of(spelling: str) -> str:
    """The option in a replacement as a release wrote it: "--x=y" or "--x y" -> "--x"."""
    return spelling.split("=", 1)[0].split(maxsplit=1)[0]


@dataclass(frozen=True)
class Deprecation:
    flag: str
    replacement: str  # as the release wrote it, sometimes with a value: "--cuda-graph-backend-prefill=breakable"
    first: str  # the first and last release seen declaring it
    last: str
    message: str | None = None  # what the release prints when the old spelling is used

    @property
    def releases(self) -> str:
        return self.first if self.first == self.last else f"{self.first}-{self.last}"

    def describe(self) -> str:
        """One clause: where the replacement comes from, in the release's words when it has them."""
        if self.message:  # the release's words already name both spellings
            return f'SGLang {self.releases} said "{self.message.strip()[:200]}"'
        return f"SGLang {self.releases} deprecated {self.flag} for {self.replacement}"


def deprecations_of(parser: ParserInfo) -> list[Deprecation]:
    """Every deprecated option of one release whose parser names a replacement."""
    return [
        Deprecation(flag, option.replacement, parser.version, parser.version, option.deprecation_message)
        for flag, option in sorted(parser.options.items())
        if option.deprecated and option.replacement
    ]


class DeprecationLedger:
    """Deprecations by old spelling; the same spelling seen in several releases is one entry."""

    def __init__(self, entries: Iterable[Deprecation] = ()):
        self._by_flag: dict[str, Deprecation] = {}
        for entry in entries:
            self._add(entry)

    def _add(self, entry: Deprecation) -> None:
        known = self._by_flag.get(entry.flag)
        if known is None:
            self._by_flag[entry.flag] = entry
            return
        first = min(known.first, entry.first, key=Version)
        last = max(known.last, entry.last, key=Version)
        newest = entry if Version(entry.last) >= Version(known.last) else known  # its replacement and words
        self._by_flag[entry.flag] = replace(newest, first=first, last=last)

    @classmethod
    def shipped(cls) -> DeprecationLedger:
        return cls(_shipped_entries())

    def with_parsers(self, *parsers: ParserInfo | None) -> DeprecationLedger:
        entries = list(self._by_flag.values())
        for parser in parsers:
            if parser is not None:
                entries += deprecations_of(parser)
        return DeprecationLedger(entries)

    @property
    def entries(self) -> list[Deprecation]:
        return sorted(self._by_flag.values(), key=lambda d: d.flag)

    def get(self, flag: str) -> Deprecation | None:
        return self._by_flag.get(flag)

    def chain(self, flag: str, accepted_by: ParserInfo | None = None) -> tuple[Deprecation, ...]:
        """The deprecations from ``flag`` on, each replacement followed, until ``accepted_by`` accepts the
        spelling in hand without deprecating it (or the ledger knows nothing further)."""
        links: list[Deprecation] = []
        current = flag
        while (entry := self._by_flag.get(current)) is not None and entry not in links:
            if accepted_by is not None and (option := accepted_by.options.get(current)) and not option.deprecated:
                break
            links.append(entry)
            current = flag_of(entry.replacement)
        return tuple(links)

    def to_json(self) -> str:
        return json.dumps([asdict(e) for e in self.entries], indent=1, sort_keys=True) + "\n"


class DeprecationsError(SglperfError, ValueError):
    """The shipped ledger cannot be read: sglperf's own install is damaged."""


def shipped_path() -> Path:
    return Path(str(resources.files("sglperf.sglang").joinpath(SHIPPED_FILE)))


@cache
def _shipped_entries() -> tuple[Deprecation, ...]:
    path = shipped_path()
    fix = "reinstall sglperf (pip install --force-reinstall sglperf), or in a checkout run ci/refresh-deprecations.py"
    try:
        raw = json.loads(read_input(path).decode("utf-8"))
    except FileNotFoundError:
        raise DeprecationsError(f"{path}: sglperf's deprecation ledger is missing: {fix}") from None
    except OSError as exc:
        raise DeprecationsError(f"{path}: cannot read sglperf's deprecation ledger: {os_problem(exc)}: {fix}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DeprecationsError(
            f"{path}: sglperf's deprecation ledger is not JSON ({type(exc).__name__}): {fix}"
        ) from None
    try:
        if not isinstance(raw, list):
            raise TypeError("not a list")
        entries = tuple(Deprecation(**entry) for entry in raw)
        for entry in entries:
            texts = (entry.flag, entry.replacement, entry.first, entry.last)
            if not all(isinstance(t, str) for t in texts) or not isinstance(entry.message, (str, type(None))):
                raise TypeError(f"{entry.flag!r}: not all text")
            for release in (entry.first, entry.last):
                Version(release)
    except (TypeError, ValueError) as exc:  # InvalidVersion is a ValueError
        raise DeprecationsError(f"{path}: sglperf's deprecation ledger is damaged ({exc}): {fix}") from None
    return entries


def accepts_spelling(parser: ParserInfo, spelling: str) -> bool:
    """Whether ``parser`` takes a replacement as a release wrote it: the option, and its value where the
    option has a fixed set of them ("--cuda-graph-backend-prefill=tc_piecewise" is refused from 0.5.22)."""
    option = parser.options.get(flag_of(spelling))
    if option is None:
        return False
    rest = spelling[len(flag_of(spelling)) :].lstrip("= ")
    return not rest or option.choices is None or rest in option.choices


@dataclass(frozen=True)
class Replacement:
    """What to write instead of a flag on one release, and who says so: the releases' own deprecations
    (``links``, oldest first), or sglperf's spelling of the intent the flag asked for (``links`` empty)."""

    spelled: str
    links: tuple[Deprecation, ...] = ()
    own: bool = False  # the target release's own parser deprecates the flag and names this

    @property
    def from_releases(self) -> bool:
        return bool(self.links)

    @property
    def source(self) -> str:
        """Where it comes from, in a few words."""
        if not self.links:
            return "intent"
        if self.own:
            return f"SGLang {self.links[0].first}'s parser"
        return " then ".join(f"SGLang {link.releases}'s deprecation" for link in self.links)

    @property
    def release_says(self) -> str | None:
        """The releases' messages, as they print them."""
        said = " / ".join(link.message.strip() for link in self.links if link.message)
        return said or None

    def describe(self) -> str:
        """One clause naming the replacement and its source."""
        if not self.links:
            return self.spelled
        return f"{self.spelled} ({'; then '.join(link.describe() for link in self.links)})"


def replacement(
    flag: str, target: ParserInfo, ledger: DeprecationLedger | None = None, architectures: tuple[str, ...] = ()
) -> Replacement | None:
    """What to write instead of ``flag`` on ``target``: the target's own deprecation of it; else the chain of
    what older releases said, when it ends at a spelling the target takes; else how sglperf spells the intent
    ``flag`` asks for; None when nobody knows."""
    option = target.options.get(flag)
    if option is not None and option.deprecated and option.replacement:
        own = Deprecation(flag, option.replacement, target.version, target.version, option.deprecation_message)
        return Replacement(option.replacement, (own,), own=True)
    links = (ledger or DeprecationLedger.shipped()).chain(flag, accepted_by=target)
    if links and accepts_spelling(target, links[-1].replacement):
        return Replacement(links[-1].replacement, links)
    spelled = intent_spelling(flag, target, architectures)
    return Replacement(spelled) if spelled is not None else None
