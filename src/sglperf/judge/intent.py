"""Judging one intent: its expected value against what SGLang decided, with SGLang's own reasons."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sglperf.model.resolution import STARTUP_REFUSAL, EffectiveArgs, SGLangError, Write
from sglperf.model.verdict import Status, Verdict
from sglperf.sglang.intents import INTENTS, VISION, Intent

MAX_REASONS = 4


def _nested(path: str, value: Any) -> dict[str, Any]:
    """A write to ``cuda_graph_config.prefill.backend`` as the mapping an intent reads it from."""
    *parents, leaf = path.split(".")
    mapping: dict[str, Any] = {leaf: value}
    for part in reversed(parents):
        mapping = {part: mapping}
    return mapping


def _describe_write(intent: Intent, write: Write) -> tuple[Any, str]:
    """(intent value this write implies or None, how to show it)."""
    try:
        reading = intent.read(_nested(write.field, write.new))
        return reading.value, f"{reading.source} ({intent.show(reading.value)})"
    except (KeyError, TypeError):
        shown = repr(write.new)
        return None, f"{write.field} = {shown[:80]}"


# Log lines that can say why SGLang decided something; an INFO line only reports what it did.
REASON_LEVELS = ("WARNING", "ERROR", "CRITICAL")


def explain(intent: Intent, args: EffectiveArgs, actual: Any) -> list[str]:
    """SGLang's rules that produced ``actual`` (a write to the intent's field or to a setting nested in it),
    then its warnings about the intent."""
    reasons: list[str] = []
    previous: Any = object()
    for write in args.writes:
        if write.field.split(".", 1)[0] not in intent.fields:
            continue
        implied, shown = _describe_write(intent, write)
        decisive = implied is not None and intent.matches(implied, actual) and implied != previous
        if implied is not None:
            previous = implied
        if not (decisive and write.changed):
            continue
        where = ", ".join(p for p in (write.where, f'"{write.comment}"' if write.comment else "") if p)
        text = f"SGLang rule {write.rule}" + (f" ({where})" if where else "") + f" set {shown}"
        if text not in reasons:
            reasons.append(text)
    reasons += [
        f"SGLang log [{line.level}] {line.message.strip()[:300]}"
        for line in args.logs
        if line.level in REASON_LEVELS and is_about(intent, line.message)
    ]
    return reasons[:MAX_REASONS]


def _spaced(text: str) -> str:
    """Prose compared alike whatever the separators: "prefill-CUDA graph" reads "prefill cuda graph"."""
    return " ".join(re.sub(r"[^a-z0-9]+", " ", text.lower()).split())


def _names(message: str) -> set[str]:
    """Every flag (`--a-b`) and field (`a_b`) named in a log line, whole: `--disable-cuda-graph-padding`
    is not `--disable-cuda-graph`."""
    lowered = message.lower()
    return set(re.findall(r"--[a-z0-9][a-z0-9-]*", lowered)) | set(re.findall(r"\b[a-z0-9]+(?:_[a-z0-9]+)+\b", lowered))


def is_about(intent: Intent, message: str) -> bool:
    """Whether an SGLang log line is about this intent. A line that names the intent's fields or flags
    is; one that only shares a topic word with it (speculative ...) and names another flag is not:
    "Max running requests is reset to 48 for speculative decoding ... --max-running-requests"."""
    own = {name.lower() for name in (*intent.fields, *intent.flag_names)}
    named = _names(message)
    if named & own:
        return True
    others = named - own
    # Topic words inside another field's or flag's name ("disable_cuda_graph_padding") do not count.
    prose = message.lower()
    for name in sorted(others, key=len, reverse=True):
        prose = prose.replace(name, " ")
    text = f" {_spaced(prose)} "
    if not any(f" {_spaced(k)} " in text for k in intent.log_keywords):
        return False
    return not {n for n in others if n.startswith("--")}


def judge(
    deployment: str,
    variant: str,
    intent: Intent,
    expected: Any,
    args: EffectiveArgs | None,
    sglang_version: str,
    *,
    error: SGLangError | None = None,
    requested: bool = False,
    hint: str = "",
    warnings: Sequence[str] = (),
    tier: str = "preflight",
    caveats: Sequence[str] = (),
    conflict: str = "",
) -> Verdict:
    """Compare one intent's expectation with the variant's effective args (None: SGLang refused it).

    ``caveats``: SGLang's own words for a rule the request overrides (see `preflight.check`).
    ``conflict``: the user's own flag that sets the intent against the expectation; a failure names it
    before anything SGLang did (a request beside it did not lose to SGLang, but to that flag)."""
    shown_expected = intent.show(expected)
    base: dict[str, Any] = {
        "deployment": deployment,
        "variant": variant,
        "intent": intent.name,
        "expected": shown_expected,
        "sglang_version": sglang_version,
        "warnings": tuple(warnings),
        "tier": tier,
        "caveats": tuple(caveats),
    }
    if error is not None or args is None:
        if error is not None and error.type == STARTUP_REFUSAL:
            detail = f"SGLang would refuse to start it on this runner's GPUs: {error.message}"
        else:
            detail = f"SGLang's validation says: {f'{error.type}: {error.message}' if error else 'no effective args'}"
        return Verdict(actual=None, status=Status.ERROR, detail=detail, **base)
    try:
        reading = intent.read(args.fields, args.model)
    except KeyError as exc:
        return Verdict(
            actual=None,
            status=Status.ERROR,
            detail=f"cannot read {intent.name} from SGLang {sglang_version}'s effective args: {exc.args[0]}",
            **base,
        )
    actual = intent.show(reading.value)
    reasons = tuple(explain(intent, args, reading.value))
    inert = intent.inert_reason(args.fields, args.model) if expected is True else None
    if inert:
        # Accepted and set, yet SGLang will not act on it here: the failure this suite exists for.
        return Verdict(actual="inert (set, no effect)", status=Status.INERT, detail=inert, reasons=reasons, **base)
    if not intent.matches(expected, reading.value):
        how = conflict or ("you asked for it, but SGLang overrode the request" if requested else hint)
        detail = f"read from {reading.source}" + (f"; {how}" if how else "")
        if reading.note:
            detail += f"; {reading.note}"
        return Verdict(actual=actual, status=Status.FAIL, detail=detail, reasons=reasons, **base)
    if not reading.provable:
        note = reading.note
        if args.model_error:
            note += f" (the model class could not be built on the meta device: {args.model_error[:200]})"
        return Verdict(
            actual=f"{actual} (unproven)",
            status=Status.UNPROVEN,
            detail=f"read from {reading.source}; {note}",
            reasons=reasons,
            **base,
        )
    return Verdict(actual=actual, status=Status.PASS, detail=f"read from {reading.source}", reasons=reasons, **base)


def judge_error(
    deployment: str,
    variant: str,
    intent_name: str,
    expected: Any,
    sglang_version: str,
    message: str,
    tier: str = "preflight",
) -> Verdict:
    """A variant that could not be spelled for this release: every intent errors with the reason."""
    return Verdict(
        deployment=deployment,
        variant=variant,
        intent=intent_name,
        expected=INTENTS[intent_name].show(expected),
        actual=None,
        status=Status.ERROR,
        detail=message,
        sglang_version=sglang_version,
        tier=tier,
    )


def not_applicable(verdict: Verdict, hf_config: Mapping[str, Any]) -> Verdict:
    """An expectation the model cannot have (the vision intent on a text-only checkpoint): INERT, with
    why, in every tier; other verdicts as they are."""
    if verdict.intent != VISION.name or verdict.expected != VISION.show(True) or verdict.status is Status.ERROR:
        return verdict
    reason = VISION.not_applicable(hf_config)
    return replace(verdict, status=Status.INERT, actual="not applicable", detail=reason) if reason else verdict
