"""The bisect's search (sglperf.upgrade.bisect) against releases whose levels the test sets: it finds the
culprit with fewer releases than a linear walk, takes the config changes first, verifies before it names
one, says "same" and "not yet known" where that is the answer, treats a release that cannot run as a verdict,
and resumes from its state without measuring again what it kept."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglperf.model.variant_effect import EffectVerdict
from sglperf.upgrade import bisect
from sglperf.upgrade.bisect import Answer, Bisection, BisectState, Budget, ConfigChange, Purpose, ReleaseUnusable

RELEASES = ["0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"]


class Levels:
    """Releases measured at set levels (tok/s) with log-normal round noise; some cannot run."""

    def __init__(self, levels: dict[str, float], noise: float = 0.005, unusable: tuple[str, ...] = (), seed: int = 0):
        self.levels, self.noise, self.unusable = levels, noise, unusable
        self.rng = np.random.default_rng(seed)
        self.calls: Counter[str] = Counter()
        self.stop_after: int | None = None  # raise KeyboardInterrupt at this session (an interrupted bisect)

    def session(self, release: str) -> bisect.ReleaseRun:
        if release in self.unusable:
            raise ReleaseUnusable(f"SGLang {release} refuses --enable-piecewise-cuda-graph: unrecognized arguments")
        if self.stop_after is not None and sum(self.calls.values()) >= self.stop_after:
            raise KeyboardInterrupt
        self.calls[release] += 1
        rounds = self.levels[release] * self.rng.lognormal(0.0, self.noise, size=8)
        return bisect.ReleaseRun(release=release, started_at="", seconds=10.0, samples={"decode_tok_s": list(rounds)})


def _state(releases: list[str] = RELEASES, candidates: list[str] | None = None) -> BisectState:
    changes = [
        ConfigChange(release=c, what="cuda_graph_config.decode.max_bs", before="24", after="48")
        for c in candidates or []
    ]
    return BisectState(
        deployment="d.toml",
        item="d-plain-chat-c1",
        metric="decode_tok_s",
        from_version=releases[0],
        to_version=releases[-1],
        setup="the emulator",
        floor=0.03,
        releases=releases,
        candidates=bisect.candidates_of(changes, releases),
        changes=changes,
    )


def _levels(culprit: str, factor: float, releases: list[str] = RELEASES) -> dict[str, float]:
    at = releases.index(culprit)
    return {r: 100.0 * (factor if i >= at else 1.0) for i, r in enumerate(releases)}


def _run(state: BisectState, measure: Levels, budget: Budget | None = None) -> bisect.BisectOutcome:
    return Bisection(state, measure, lambda s: None, budget or Budget()).run()


def test_a_code_change_is_found_with_fewer_releases_than_a_linear_walk_and_verified() -> None:
    measure = Levels(_levels("0.5.22", 1 / 1.1))
    outcome = _run(_state(), measure)
    assert outcome.answer is Answer.CULPRIT
    assert (outcome.culprit, outcome.parent) == ("0.5.22", "0.5.21")
    assert outcome.changes == []  # nothing the walk saw: the cause is in SGLang's code
    assert outcome.verification is not None and outcome.verification.purpose is Purpose.VERIFY
    assert outcome.verification.verdict is EffectVerdict.WORSE
    assert len(outcome.releases_measured) < len(RELEASES)
    assert "0.5.20" not in measure.calls
    assert outcome.server_starts == sum(measure.calls.values()) == 16
    assert "whole change" in outcome.explains


def test_a_candidate_that_is_the_culprit_is_found_first() -> None:
    measure = Levels(_levels("0.5.20", 1.3, RELEASES[:3]))
    outcome = _run(_state(RELEASES[:3], candidates=["0.5.20"]), measure)
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.20")
    assert [c.purpose for c in outcome.state.comparisons] == [Purpose.ENDPOINTS, Purpose.CANDIDATE, Purpose.VERIFY]
    assert [c.what for c in outcome.changes] == ["cuda_graph_config.decode.max_bs"]
    assert outcome.state.comparisons[0].verdict is EffectVerdict.BETTER


def test_a_candidate_that_is_not_the_culprit_costs_no_extra_release() -> None:
    """The walk saw a change at 0.5.21, the slowdown came at 0.5.22: 0.5.21 against the lower end is the same,
    so the search goes on above it; 0.5.20 is never measured."""
    measure = Levels(_levels("0.5.22", 0.9))
    outcome = _run(_state(candidates=["0.5.21"]), measure)
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.22")
    assert [(c.older, c.newer, c.purpose) for c in outcome.state.comparisons] == [
        ("0.5.19", "0.5.23", Purpose.ENDPOINTS),
        ("0.5.19", "0.5.21", Purpose.CANDIDATE),
        ("0.5.21", "0.5.22", Purpose.HALVING),
        ("0.5.21", "0.5.22", Purpose.VERIFY),
    ]
    assert "0.5.20" not in measure.calls
    assert outcome.changes == []  # the change the walk saw was at 0.5.21, not at the culprit


def test_endpoints_alike_are_the_answer_with_one_quartet() -> None:
    measure = Levels(dict.fromkeys(RELEASES, 100.0))
    outcome = _run(_state(), measure)
    assert outcome.answer is Answer.SAME
    assert "nothing to bisect" in outcome.summary
    assert measure.calls == Counter({"0.5.19": 2, "0.5.23": 2})


def test_a_difference_inside_the_noise_is_not_yet_known_after_the_budget() -> None:
    """A 3% floor, a 3% step and 10% round noise: doubled quartets up to the budget, then "not yet known"."""
    measure = Levels(_levels("0.5.21", 0.97), noise=0.1)
    outcome = _run(_state(), measure, Budget(first=1, most=2))
    assert outcome.answer is Answer.NOT_KNOWN
    assert outcome.culprit is None
    ends = outcome.state.comparisons[0]
    assert ends.quartets == 2 and ends.verdict is EffectVerdict.UNDECIDED


def test_a_release_that_cannot_run_is_a_verdict_and_the_search_goes_round_it() -> None:
    measure = Levels(_levels("0.5.20", 0.8), unusable=("0.5.21",))
    outcome = _run(_state(), measure)
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.20")
    assert "unrecognized arguments" in outcome.state.unusable["0.5.21"]
    assert any(c.unusable and "0.5.21" in c.unusable for c in outcome.state.comparisons)


def test_a_culprit_hidden_behind_a_release_that_cannot_run_is_narrowed_and_said() -> None:
    """0.5.21 cannot run and the change is at 0.5.22: whether 0.5.21 or 0.5.22 made it cannot be told."""
    outcome = _run(_state(), Levels(_levels("0.5.22", 0.8), unusable=("0.5.21",)))
    assert outcome.answer is Answer.NOT_KNOWN
    assert outcome.summary.startswith("the change is between 0.5.20 and 0.5.22; every release between cannot run")
    assert "0.5.21: SGLang 0.5.21 refuses" in outcome.summary


def test_an_endpoint_that_cannot_run_ends_the_bisect_saying_why() -> None:
    outcome = _run(_state(), Levels(_levels("0.5.22", 0.8), unusable=("0.5.23",)))
    assert outcome.answer is Answer.REFUSED
    assert outcome.summary.startswith("cannot bisect: 0.5.23 cannot run it: SGLang 0.5.23 refuses")


def test_a_culprit_that_does_not_reproduce_is_not_named() -> None:
    """The step looks worse in the search, and the same in its verification: not yet known, never a culprit."""

    class Flaky(Levels):
        def session(self, release: str) -> bisect.ReleaseRun:
            run = super().session(release)
            verifying = sum(self.calls.values()) > 12  # endpoints, halving x2: the verification after
            if release == "0.5.23" or (release == "0.5.22" and not verifying):
                run.samples["decode_tok_s"] = [v * 0.8 for v in run.samples["decode_tok_s"]]
            return run

    outcome = _run(_state([*RELEASES[1:4], "0.5.23"]), Flaky(dict.fromkeys(RELEASES, 100.0)))
    assert outcome.answer is Answer.NOT_KNOWN
    assert "did not reproduce" in outcome.summary


def test_a_resumed_bisect_does_not_measure_its_endpoints_again(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    state = _state()
    bisect.write_state(path, state)
    measure = Levels(_levels("0.5.22", 0.9))
    measure.stop_after = 6  # the endpoints' quartet and two sessions of the next comparison
    with pytest.raises(KeyboardInterrupt):
        Bisection(state, measure, lambda s: bisect.write_state(path, s)).run()
    kept = bisect.read_state(path)
    assert kept is not None
    assert [len(c.sessions) for c in kept.comparisons] == [4, 2]
    again = Levels(_levels("0.5.22", 0.9), seed=1)
    said: list[str] = []
    outcome = Bisection(kept, again, lambda s: bisect.write_state(path, s), progress=said.append).run()
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.22")
    assert any("endpoints: 0.5.19 -> 0.5.23" in line and "not again" in line for line in said)
    assert any("interrupted quartet" in line for line in said)
    assert "0.5.23" not in again.calls  # the endpoints' comparison was kept whole
    assert len(outcome.state.comparisons[1].sessions) == 4


def test_a_state_of_another_search_is_refused_naming_the_comparison(tmp_path: Path) -> None:
    state = _state()
    state.comparisons.append(bisect.Comparison(older="0.5.19", newer="0.5.21", purpose=Purpose.ENDPOINTS))
    with pytest.raises(bisect.BisectStateError, match=r"comparison 1 is 0.5.19 -> 0.5.21 \(endpoints\)"):
        _run(state, Levels(_levels("0.5.22", 0.9)))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"{not json", r"bisect.json: not a bisect state sglperf can resume \(the file: Invalid JSON"),
        (b'{"format": 1}', r"bisect.json: not a bisect state sglperf can resume \(deployment: Field required\)"),
    ],
)
def test_a_damaged_state_is_one_line_and_left_as_it_is(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bisect.json"
    path.write_bytes(content)
    with pytest.raises(bisect.BisectStateError, match=expected) as raised:
        bisect.read_state(path)
    assert "\n" not in str(raised.value)
    assert path.read_bytes() == content


def test_a_state_of_a_later_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    bisect.write_state(path, _state().model_copy(update={"format": 9}))
    with pytest.raises(bisect.BisectStateError, match="format 9, this sglperf reads 1"):
        bisect.read_state(path)


def test_the_plan_says_the_cost_before_anything_starts() -> None:
    line = bisect.plan_line(_state(candidates=["0.5.21"]), Budget(first=1, most=4))
    assert "3 release(s) between; effective config changed at: 0.5.21" in line
    # 4 steps: 2 halvings; the endpoints, 1 candidate, 2 halvings and the verification in 1 quartet each
    assert "1 candidate step(s), up to 2 halving(s)" in line
    assert "20 server starts if each comparison decides in 1 quartet(s), up to 112 while not yet known" in line


def test_the_first_session_turns_the_plan_into_minutes() -> None:
    said: list[str] = []
    Bisection(_state(candidates=["0.5.21"]), Levels(_levels("0.5.22", 0.9)), lambda s: None, progress=said.append).run()
    paced = [line for line in said if "at this pace" in line]
    # each Levels session "took" 10 s: 20 starts are 3.3 min, 112 are 18.7
    assert paced == [
        "a session (server start, warm-up, rounds) took 10 s on 0.5.19: at this pace the plan's 20 server starts "
        "take about 3 min (up to 19 min while answers stay unknown)"
    ]


def test_warnings_alone_are_not_candidates() -> None:
    changes = [
        ConfigChange(release="0.5.20", what="SGLang warning", before="(none)", after="deprecated"),
        ConfigChange(release="0.5.21", what="intent decode_cuda_graph", before="on", after="off"),
    ]
    assert bisect.candidates_of(changes, RELEASES) == ["0.5.21"]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=9),
    data=st.data(),
    factor=st.sampled_from([0.8, 1.25]),
)
def test_any_single_step_is_found_whatever_the_candidates(n: int, data: st.DataObject, factor: float) -> None:
    releases = [f"0.6.{i}" for i in range(n)]
    culprit = data.draw(st.integers(min_value=1, max_value=n - 1))
    candidates = data.draw(st.lists(st.sampled_from(releases[1:]), unique=True))
    measure = Levels(_levels(releases[culprit], factor, releases))
    outcome = _run(_state(releases, sorted(candidates, key=releases.index)), measure)
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, releases[culprit])
    if not candidates and n >= 5:
        assert len(outcome.releases_measured) < n  # fewer than a linear walk


def test_a_pair_measured_as_a_candidate_is_not_measured_again_by_the_halving() -> None:
    # 0.5.20 sits at the floor's edge: its candidate step stays undecided after the whole budget. The halving's
    # first middle is 0.5.20 again, against the same lower end: it takes that answer instead of 16 more starts.
    releases = RELEASES[:4]
    state = _state(releases, candidates=["0.5.20"])
    measure = Levels({"0.5.19": 100.0, "0.5.20": 97.0, "0.5.21": 97.0, "0.5.22": 80.0})
    outcome = _run(state, measure)
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.22")
    steps = [(c.purpose, c.older, c.newer, c.same_as) for c in outcome.state.comparisons]
    assert steps[1:3] == [
        (Purpose.CANDIDATE, "0.5.19", "0.5.20", None),
        (Purpose.HALVING, "0.5.19", "0.5.20", 1),
    ]
    candidate, halving = outcome.state.comparisons[1:3]
    assert candidate.verdict is EffectVerdict.UNDECIDED and candidate.quartets == 4
    assert halving.verdict is EffectVerdict.UNDECIDED and not halving.sessions
    assert outcome.server_starts == sum(measure.calls.values())


def test_the_verification_is_measured_afresh_even_when_its_pair_was_measured() -> None:
    outcome = _run(_state(candidates=["0.5.22"]), Levels(_levels("0.5.22", 0.9)))
    verify = outcome.state.comparisons[-1]
    assert (verify.purpose, verify.older, verify.newer) == (Purpose.VERIFY, "0.5.21", "0.5.22")
    assert verify.same_as is None and verify.quartets == 1
    assert any(
        c.purpose is Purpose.CANDIDATE and (c.older, c.newer) == ("0.5.21", "0.5.22") for c in outcome.state.comparisons
    )


def test_a_taken_answer_survives_an_interrupt_and_resume(tmp_path: Path) -> None:
    path = tmp_path / "bisect.json"
    levels = {"0.5.19": 100.0, "0.5.20": 97.0, "0.5.21": 97.0, "0.5.22": 80.0}
    state = _state(RELEASES[:4], candidates=["0.5.20"])
    measure = Levels(levels)
    measure.stop_after = 4 + 16 + 2  # the endpoints, the candidate's whole budget, half the next quartet
    with pytest.raises(KeyboardInterrupt):
        Bisection(state, measure, lambda s: bisect.write_state(path, s)).run()
    kept = bisect.read_state(path)
    assert kept is not None and kept.comparisons[2].same_as == 1
    outcome = Bisection(kept, Levels(levels, seed=1), lambda s: bisect.write_state(path, s)).run()
    assert (outcome.answer, outcome.culprit) == (Answer.CULPRIT, "0.5.22")
    assert [c.same_as for c in outcome.state.comparisons].count(1) == 1
