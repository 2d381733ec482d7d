"""Bisect: in which SGLang release one measurement changed, and through which of SGLang's decisions.

The search is over released versions, oldest first (cargo-bisect-rustc's and mozregression's shape: prebuilt
releases before commits). Every step is one paired comparison of two releases in counterbalanced sessions
(`sglperf.baselines.paired`): each session a fresh server of one release, in the order older, newer, newer,
older, so that a machine drifting while the bisect runs cancels instead of reading as a release's doing.
A comparison starts with ``first_quartets`` quartets and doubles them while its answer is not yet known,
up to ``max_quartets`` (Chromium Pinpoint's adaptive repeats, with a budget).

1. The endpoints first: the same within the floor is the answer ("nothing to bisect"); not decided within
   the budget is "not yet known", never a culprit.
2. Candidates before halving: the releases where the walk (`sglperf.upgrade.walk`) saw this item's effective
   configuration change. Each is measured against the search's lower end (its predecessor, when adjacent):
   the same moves the lower end past it; moved the endpoints' way, its own step against its predecessor
   decides whether it is the culprit. Against the lower end rather than always against its predecessor,
   a candidate that is not the culprit costs no release the halving would not measure anyway.
3. Halving over what is left: the middle release against the lower end; moved the endpoints' way: the
   change is at or below it; the same: above it. An undecided middle is asked against the upper end before
   the search gives up with "not yet known between X and Y". A release that cannot run (refuses the flags, its
   server does not start) is a verdict of its own, and the search takes the next release beside it.
4. The culprit is verified against its parent by a fresh comparison (Pinpoint's sandwich verification): a
   step that does not reproduce is reported as such, not as a culprit.

Everything measured is kept in the state (`BisectState`, the results folder's bisect file) as it is measured,
and the search is deterministic given its measurements: a resumed bisect replays the comparisons it has and
measures only what is missing (an interrupted quartet is measured again whole; its twin sessions are lost).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field, ValidationError

from sglperf.baselines import paired, stats
from sglperf.errors import SglperfError
from sglperf.model.files import os_problem, read_input, strict_json, write_text_atomic
from sglperf.model.progress import Progress, silent
from sglperf.model.variant_effect import EffectVerdict
from sglperf.upgrade.records import WARNING, Transition

STATE_FORMAT = 1
ABBA = (0, 1, 1, 0)  # which side each session of a quartet measures: 0 the older release, 1 the newer


class ReleaseUnusable(SglperfError):
    """A release that cannot run the item here: it refuses the flags, its server does not start, or it cannot
    be installed. The message is the verdict's line, with SGLang's own words where it gave any."""


class BisectStateError(SglperfError, ValueError):
    """A bisect state file that cannot be used; the message names the file and what to do."""


class Purpose(str, Enum):
    ENDPOINTS = "endpoints"
    CANDIDATE = (
        "candidate"  # a release where the item's effective config changed: against the lower end, or its predecessor
    )
    HALVING = "halving"
    VERIFY = "verify"  # the culprit against its parent, once more


class Answer(str, Enum):
    CULPRIT = "culprit"
    SAME = "same"  # the endpoints do not differ beyond the floor
    NOT_KNOWN = "not yet known"
    REFUSED = "refused"  # an endpoint cannot run the item


class ReleaseRun(BaseModel):
    """One session: one release's server, started fresh, warmed up, measured for the item's rounds."""

    release: str
    started_at: str
    seconds: float  # wall time of the session, its server start included
    samples: dict[str, list[float]]


class ConfigChange(BaseModel):
    """A change of the item's effective configuration the walk located at ``release``."""

    release: str
    what: str
    before: str
    after: str
    rule: str = ""
    rule_release: str = ""
    unsure: list[str] = Field(default_factory=list)  # releases before it that could not be resolved


class Comparison(BaseModel):
    """Two releases in ABBA quartets: older, newer, newer, older; the verdict is the newer against the older."""

    older: str
    newer: str
    purpose: Purpose
    sessions: list[ReleaseRun] = Field(default_factory=list)  # in time order
    finished: bool = False
    verdict: EffectVerdict | None = None
    ratio: float | None = None  # newer / older, the Hodges-Lehmann estimate
    ci_low: float | None = None
    ci_high: float | None = None
    unusable: str | None = None  # why one of the two could not run: then there is no verdict
    # The index of an earlier comparison of the same two releases whose answer this one takes (a halving
    # step a candidate step already measured): no sessions of its own. A verification never takes one.
    same_as: int | None = None

    @property
    def quartets(self) -> int:
        return len(self.sessions) // 4

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.sessions)

    def moved(self, way: EffectVerdict) -> bool:
        return self.verdict == way

    def describe(self) -> str:
        if self.unusable:
            return self.unusable
        if self.verdict is None:
            return "not finished"
        interval = (
            f" ({_pct(self.ratio)}, interval {_pct(self.ci_low)} to {_pct(self.ci_high)})"
            if self.ratio is not None and self.ci_low is not None and self.ci_high is not None
            else ""
        )
        return f"{self.verdict.value}{interval}"


class BisectState(BaseModel):
    """What a bisect has asked and measured so far: its question, the walk's answer, and every comparison."""

    format: int = STATE_FORMAT
    deployment: str  # the deployment file, as given
    item: str  # the measurement key
    metric: str
    from_version: str
    to_version: str
    setup: str  # what served: "SGLang servers", or the emulator with its configuration
    floor: float
    releases: list[str]  # oldest first, both ends included
    candidates: list[str]  # releases where the item's effective config changed (the walk)
    changes: list[ConfigChange] = Field(default_factory=list)  # every transition the walk located for it
    unusable: dict[str, str] = Field(default_factory=dict)  # release -> why it cannot run the item
    comparisons: list[Comparison] = Field(default_factory=list)

    def question(self) -> tuple[str, str, str, str, str, str]:
        return (self.deployment, self.item, self.metric, self.from_version, self.to_version, self.setup)


def read_state(path: Path) -> BisectState | None:
    """The state a bisect left in ``path``; None when there is none. A file that cannot be read or is not a
    bisect's is a `BisectStateError` naming it (and it is left as it is)."""
    try:
        data = read_input(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise BisectStateError(f"{path}: cannot read it: {os_problem(exc)}") from None
    try:
        state = BisectState.model_validate_json(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the file"
        raise BisectStateError(
            f"{path}: not a bisect state sglperf can resume ({where}: {first['msg']}); move it away, or give another "
            "--results-dir"
        ) from None
    if state.format != STATE_FORMAT:
        raise BisectStateError(
            f"{path}: written by a bisect of format {state.format}, this sglperf reads {STATE_FORMAT}"
        )
    return state


def write_state(path: Path, state: BisectState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, strict_json(state.model_dump(mode="json"), indent=1) + "\n")


class MeasuresRelease(Protocol):
    """One more session of the item on ``release``; `ReleaseUnusable` when that release cannot run it."""

    def session(self, release: str) -> ReleaseRun: ...


@dataclass(frozen=True)
class Budget:
    """Quartets per comparison: ``first`` to begin with, doubled while not decided, up to ``most``."""

    first: int = 1
    most: int = 4
    alpha: float = stats.DEFAULT_ALPHA

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.most:
            raise ValueError(f"quartets: first {self.first} and most {self.most} must satisfy 1 <= first <= most")


@dataclass
class BisectOutcome:
    """The bisect's answer and every comparison that led to it."""

    answer: Answer
    summary: str  # one line
    state: BisectState
    culprit: str | None = None
    parent: str | None = None
    verification: Comparison | None = None
    explains: str = ""  # whether the culprit's step accounts for the endpoints' whole change
    changes: list[ConfigChange] = field(default_factory=list)  # the item's config changes at the culprit

    @property
    def releases_measured(self) -> list[str]:
        seen = {s.release for c in self.state.comparisons for s in c.sessions}
        return [r for r in self.state.releases if r in seen]

    @property
    def server_starts(self) -> int:
        return sum(len(c.sessions) for c in self.state.comparisons)

    @property
    def minutes(self) -> float:
        return sum(c.seconds for c in self.state.comparisons) / 60.0


def _halvings(state: BisectState) -> int:
    return math.ceil(math.log2(max(1, len(state.releases) - 1)))


def planned_starts(state: BisectState, budget: Budget) -> tuple[int, int]:
    """Server starts of the plan: when every comparison decides in its first quartets, and at most (each
    comparison at the budget's most, an undecided middle asked against both ends)."""
    comparisons = 1 + len(state.candidates) + _halvings(state) + 1
    return 4 * budget.first * comparisons, 4 * budget.most * (comparisons + _halvings(state))


def plan_line(state: BisectState, budget: Budget) -> str:
    """What the bisect will measure at most, said before the first server starts."""
    between = len(state.releases) - 2
    halvings = _halvings(state)
    starts = planned_starts(state, budget)
    candidates = ", ".join(state.candidates) or "none"
    return (
        f"bisect {state.item} {state.metric}, SGLang {state.from_version} -> {state.to_version} "
        f"({between} release(s) between; effective config changed at: {candidates}): the endpoints, "
        f"{len(state.candidates)} candidate step(s), up to {halvings} halving(s) and the verification; "
        f"at most {starts[0]} server starts if each comparison decides in {budget.first} quartet(s), "
        f"up to {starts[1]} while not yet known"
    )


class Bisection:
    """The search, replaying ``state``'s comparisons and measuring what they lack through ``measure``;
    ``save`` is called after every session, so an interruption loses at most the quartet in progress."""

    def __init__(
        self,
        state: BisectState,
        measure: MeasuresRelease,
        save: Callable[[BisectState], None],
        budget: Budget = Budget(),
        progress: Progress = silent,
    ):
        self.state, self.measure, self.save, self.budget, self.progress = state, measure, save, budget, progress
        self._cursor = 0
        self._paced = False

    def run(self) -> BisectOutcome:
        r = self.state.releases
        ends = self._compare(r[0], r[-1], Purpose.ENDPOINTS)
        if ends.unusable:
            return self._outcome(Answer.REFUSED, f"cannot bisect: {ends.unusable}")
        if ends.verdict == EffectVerdict.NO_EFFECT:
            return self._outcome(
                Answer.SAME,
                f"{r[0]} and {r[-1]} are the same: {ends.describe()}, floor {_floor(self.state)}; nothing to bisect",
            )
        if ends.verdict is None or not ends.verdict.moved:
            return self._outcome(
                Answer.NOT_KNOWN,
                f"{r[0]} against {r[-1]}: {ends.describe()} after {ends.quartets} quartet(s): whether they "
                "differ is not yet known; nothing bisected (raise --max-quartets)",
            )
        way = ends.verdict
        lo, hi = 0, len(r) - 1
        lo, hi, found = self._candidates(lo, hi, way)
        if not found:
            lo, hi, why = self._halve(lo, hi, way)
            if why:
                return self._outcome(Answer.NOT_KNOWN, why)
        return self._verify(r[lo], r[hi], way, ends)

    def _candidates(self, lo: int, hi: int, way: EffectVerdict) -> tuple[int, int, bool]:
        """Each candidate still in range, against the search's lower end (its predecessor when that is the
        lower end): the same moves the lower end past it in one comparison, so a candidate that is not the
        culprit costs no release the halving would not have measured; moved, its own step against its
        predecessor says whether it is the culprit."""
        r = self.state.releases
        for candidate in self.state.candidates:
            index = r.index(candidate)
            if not lo < index <= hi or candidate in self.state.unusable or r[lo] in self.state.unusable:
                continue
            step = self._compare(r[lo], candidate, Purpose.CANDIDATE)
            if step.verdict == EffectVerdict.NO_EFFECT:
                lo = index  # like the older end: the change is above it
            elif step.moved(way):
                if index - 1 == lo:
                    return lo, index, True
                own = self._compare(r[index - 1], candidate, Purpose.CANDIDATE)
                if own.moved(way):
                    return index - 1, index, True
                if own.verdict == EffectVerdict.NO_EFFECT:
                    hi = index - 1  # the change is above the lower end and below the candidate's own step
                else:
                    hi = index
        return lo, hi, False

    def _halve(self, lo: int, hi: int, way: EffectVerdict) -> tuple[int, int, str]:
        r = self.state.releases
        while hi - lo > 1:
            mid = self._middle(lo, hi)
            if mid is None:
                unusable = [f"{v}: {self.state.unusable[v]}" for v in r[lo + 1 : hi]]
                return (
                    lo,
                    hi,
                    f"the change is between {r[lo]} and {r[hi]}; every release between cannot run: "
                    + "; ".join(unusable),
                )
            step = self._compare(r[lo], r[mid], Purpose.HALVING)
            if step.unusable:
                continue  # _middle now passes it by
            if step.moved(way):
                hi = mid
            elif step.verdict == EffectVerdict.NO_EFFECT:
                lo = mid
            else:
                other = self._compare(r[mid], r[hi], Purpose.HALVING)
                if other.moved(way):
                    lo = mid
                elif other.verdict == EffectVerdict.NO_EFFECT:
                    hi = mid
                else:
                    return (
                        lo,
                        hi,
                        (
                            f"the change is between {r[lo]} and {r[hi]}: {r[mid]} is not yet known to be like either "
                            f"({step.describe()} against {r[lo]}; {other.describe()} against {r[hi]}); resume "
                            "with a larger --max-quartets, or bisect a narrower range"
                        ),
                    )
        return lo, hi, ""

    def _middle(self, lo: int, hi: int) -> int | None:
        """The release nearest the middle of (lo, hi) that can run the item."""
        middle = (lo + hi) // 2
        usable = [i for i in range(lo + 1, hi) if self.state.releases[i] not in self.state.unusable]
        return min(usable, key=lambda i: (abs(i - middle), i)) if usable else None

    def _verify(self, parent: str, culprit: str, way: EffectVerdict, ends: Comparison) -> BisectOutcome:
        check = self._compare(parent, culprit, Purpose.VERIFY)
        changes = [c for c in self.state.changes if c.release == culprit or culprit in c.unsure]
        if not check.moved(way):
            return self._outcome(
                Answer.NOT_KNOWN,
                f"{culprit} looked like the culprit, but its verification against {parent} did not reproduce it "
                f"({check.describe()}); the change is not yet located",
                culprit=culprit,
                parent=parent,
                verification=check,
                changes=changes,
            )
        explains = ""
        if None not in (ends.ci_low, ends.ci_high, check.ci_low, check.ci_high):
            assert ends.ci_low is not None and ends.ci_high is not None  # for mypy: checked just above
            assert check.ci_low is not None and check.ci_high is not None
            if check.ci_low <= ends.ci_high and ends.ci_low <= check.ci_high:
                explains = f"it accounts for the endpoints' whole change ({_pct(ends.ratio)}): the intervals overlap"
            else:
                rest = [
                    f"{a} -> {b}"
                    for a, b in ((self.state.from_version, parent), (culprit, self.state.to_version))
                    if a != b
                ]
                explains = (
                    f"it accounts for part of the endpoints' change ({_pct(check.ratio)} of {_pct(ends.ratio)}, "
                    "the intervals apart): another change may lie in the range"
                    + (f"; bisect {' and '.join(rest)} to find it" if rest else "")
                )
        return self._outcome(
            Answer.CULPRIT,
            f"{culprit} made {self.state.metric} {way.value}: {check.describe()} against {parent}",
            culprit=culprit,
            parent=parent,
            verification=check,
            changes=changes,
            explains=explains,
        )

    def _outcome(
        self,
        answer: Answer,
        summary: str,
        culprit: str | None = None,
        parent: str | None = None,
        verification: Comparison | None = None,
        changes: Sequence[ConfigChange] = (),
        explains: str = "",
    ) -> BisectOutcome:
        return BisectOutcome(answer, summary, self.state, culprit, parent, verification, explains, list(changes))

    def _compare(self, older: str, newer: str, purpose: Purpose) -> Comparison:
        """The next comparison of the search: the state's, if it recorded it, finished with what it lacks."""
        comparisons = self.state.comparisons
        if self._cursor < len(comparisons):
            c = comparisons[self._cursor]
            if (c.older, c.newer, c.purpose) != (older, newer, purpose):
                raise BisectStateError(
                    f"the bisect state's comparison {self._cursor + 1} is {c.older} -> {c.newer} ({c.purpose.value}), "
                    f"but the search now asks {older} -> {newer} ({purpose.value}): it was written by another "
                    "search; give another --results-dir"
                )
        else:
            c = Comparison(older=older, newer=newer, purpose=purpose, same_as=self._earlier(older, newer, purpose))
            comparisons.append(c)
        self._cursor += 1
        if c.same_as is not None:
            return self._take_earlier(c)
        if c.finished and (c.unusable or _decided(c) or c.quartets >= self.budget.most):
            self.progress(f"{purpose.value}: {older} -> {newer}: {c.describe()} (measured before: not again)")
            return c
        for release in (older, newer):
            if release in self.state.unusable:
                return self._finish(c, unusable=f"{release} cannot run it: {self.state.unusable[release]}")
        whole = c.quartets * 4
        if len(c.sessions) > whole:
            self.progress(
                f"{purpose.value}: {older} -> {newer}: {len(c.sessions) - whole} session(s) of an interrupted quartet "
                "left out; the quartet is measured again whole"
            )
            del c.sessions[whole:]
        target = c.quartets or self.budget.first  # an undecided comparison resumed under a larger budget doubles
        while True:
            while len(c.sessions) < 4 * target:
                release = (older, newer)[ABBA[len(c.sessions) % 4]]
                try:
                    run = self.measure.session(release)
                except ReleaseUnusable as exc:
                    self.state.unusable[release] = str(exc).splitlines()[0]
                    return self._finish(c, unusable=f"{release} cannot run it: {self.state.unusable[release]}")
                c.sessions.append(run)
                self.save(self.state)
                self._say_pace(run)
            self._judge(c)
            if _decided(c) or target >= self.budget.most:
                self.progress(f"{purpose.value}: {older} -> {newer}: {c.describe()}, {c.quartets} quartet(s)")
                return self._finish(c)
            target = min(2 * target, self.budget.most)
            self.progress(
                f"{purpose.value}: {older} -> {newer}: {c.describe()} after {c.quartets} quartet(s): not yet known, "
                f"measuring up to {target}"
            )

    def _earlier(self, older: str, newer: str, purpose: Purpose) -> int | None:
        """A finished comparison of the same two releases this one can take its answer from: measuring the
        same pair again would only cost starts (the verification alone is measured afresh, on purpose)."""
        if purpose is Purpose.VERIFY:
            return None
        for i, c in enumerate(self.state.comparisons):
            if (
                (c.older, c.newer) == (older, newer)
                and c.finished
                and c.same_as is None
                and c.purpose != Purpose.VERIFY
            ):
                return i
        return None

    def _take_earlier(self, c: Comparison) -> Comparison:
        """``c`` with its earlier twin's answer, as that stands now (a resume may have measured it further)."""
        assert c.same_as is not None  # for mypy: the caller checked
        twin = self.state.comparisons[c.same_as]
        c.verdict, c.ratio, c.ci_low, c.ci_high = twin.verdict, twin.ratio, twin.ci_low, twin.ci_high
        c.unusable, c.finished = twin.unusable, True
        self.progress(
            f"{c.purpose.value}: {c.older} -> {c.newer}: {c.describe()} (comparison {c.same_as + 1}'s answer: "
            "not measured again)"
        )
        self.save(self.state)
        return c

    def _judge(self, c: Comparison) -> None:
        metric = self.state.metric
        sides: tuple[list[list[float]], list[list[float]]] = ([], [])
        for i, run in enumerate(c.sessions[: c.quartets * 4]):
            sides[ABBA[i % 4]].append(run.samples.get(metric, []))
        if any(not rounds for side in sides for rounds in side):
            c.verdict = EffectVerdict.NOT_JUDGED
            return
        result = paired.compare_paired(
            metric, paired.abba_log_ratios(sides[0], sides[1]), self.state.floor, self.budget.alpha
        )
        c.verdict, c.ratio, c.ci_low, c.ci_high = result.verdict, result.ratio, result.ci_low, result.ci_high

    def _finish(self, c: Comparison, unusable: str | None = None) -> Comparison:
        c.finished, c.unusable = True, unusable
        self.save(self.state)
        return c

    def _say_pace(self, run: ReleaseRun) -> None:
        """Once, after the first session: what the plan's server starts cost in minutes at this pace."""
        if self._paced:
            return
        self._paced = True
        fewest, most = planned_starts(self.state, self.budget)
        self.progress(
            f"a session (server start, warm-up, rounds) took {run.seconds:.0f} s on {run.release}: at this pace the "
            f"plan's {fewest} server starts take about {fewest * run.seconds / 60:.0f} min "
            f"(up to {most * run.seconds / 60:.0f} min while answers stay unknown)"
        )


def _decided(c: Comparison) -> bool:
    return c.verdict in (EffectVerdict.BETTER, EffectVerdict.WORSE, EffectVerdict.NO_EFFECT)


def _pct(ratio: float | None) -> str:
    return "?" if ratio is None or not math.isfinite(ratio) else f"{(ratio - 1.0) * 100:+.1f}%"


def _floor(state: BisectState) -> str:
    return f"+/-{state.floor * 100:g}%"


def changes_for(transitions: Sequence[Transition], deployment: str, variant: str) -> list[ConfigChange]:
    """The walk's transitions of one variant, as the bisect keeps them."""
    return [
        ConfigChange(
            release=t.release,
            what=t.what,
            before=t.before,
            after=t.after,
            rule=t.rule,
            rule_release=t.rule_release,
            unsure=list(t.unsure),
        )
        for t in transitions
        if (t.deployment, t.variant) == (deployment, variant)
    ]


def candidates_of(changes: Sequence[ConfigChange], releases: Sequence[str]) -> list[str]:
    """The releases where the item's effective configuration changed (an intent, a field, what the model
    class builds; a warning alone is not a change of what runs), oldest first."""
    found = {c.release for c in changes if c.what != WARNING}
    return [r for r in releases[1:] if r in found]
