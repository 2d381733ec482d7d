"""A stand-in for preflight's resolver, as the emulator stands in for a server: the parser a test gives, and
effective args made from each argv by that parser's defaults, the argv's own values and rules the test writes,
in place of SGLang's resolution in a worker. `preflight.check` and `preflight.explain` take it wherever they take
the real resolver (`preflight.resolve.Resolves`), so their logic is tested in the fast tier; what SGLang really
decides is the real-release tests' business.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglperf.model.resolution import LogLine, ModelFacts, Resolution, SGLangError, Write
from sglperf.sglang.argv import ParsedArgv, ParserInfo, Release


@dataclass(frozen=True)
class StandInRule:
    """One rule of the stand-in's resolution: when ``applies`` says so of the effective args so far, set
    ``field`` (a dotted path reaches into a nested setting) to ``value`` (a function of the effective args so
    far, or a value) and record the write as SGLang's probe does, under ``name`` and ``where``; ``warning``:
    a log line it prints too."""

    field: str
    value: Any | Callable[[Mapping[str, Any]], Any]
    applies: Callable[[Mapping[str, Any]], bool] = lambda _: True
    name: str = "stand_in_rule"
    where: str = "server_args.py:1"
    comment: str = ""
    conditions: tuple[str, ...] = ()
    warning: str = ""


def _typed(text: str) -> Any:
    """An argv value as the stand-in's effective args hold it: a number where it reads as one."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _as_effective(value: str | list[str] | bool) -> Any:
    if isinstance(value, bool):
        return value
    return [_typed(v) for v in value] if isinstance(value, list) else _typed(value)


def _dig(effective: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    *parents, leaf = path.split(".")
    node = effective
    for part in parents:
        node = node.setdefault(part, {})
    return node, leaf


@dataclass
class StandInResolver:
    """What `preflight.resolver.Resolver` answers, from the test's parser, rules and model."""

    parser: ParserInfo
    rules: Sequence[StandInRule] = ()
    model: ModelFacts | None = None
    # An error the "release" raises for an argv (type, message), or None: e.g. a refusal SGLang would make.
    refuse: Callable[[Mapping[str, Any]], SGLangError | None] = lambda _: None
    asked: list[tuple[str, ...]] = field(default_factory=list)  # every argv resolved, in order

    def release(self) -> Release:
        return Release("stand-in", self.parser.version, self.parser)

    def resolve(self, jobs: Sequence[tuple[Sequence[str], dict[str, str]]], salt: str = "") -> list[Resolution]:
        return [self._resolve(tuple(argv), dict(env)) for argv, env in jobs]

    def _resolve(self, argv: tuple[str, ...], env: dict[str, str]) -> Resolution:
        self.asked.append(argv)
        parsed = ParsedArgv(argv, self.parser)
        unknown = [o.written for o in parsed if not o.known]
        if unknown:
            error = SGLangError("SystemExit", f"unrecognized arguments: {' '.join(unknown)}")
            return Resolution(argv, env, None, error=error)
        effective: dict[str, Any] = {
            o.dest: copy.deepcopy(o.default) for o in self.parser.options.values() if o.default != argparse.SUPPRESS
        }
        for dest, asked in parsed.asked().items():
            effective[dest] = _as_effective(asked.value)
        writes, logs = [], []
        for rule in self.rules:
            if not rule.applies(effective):
                continue
            value = rule.value(effective) if callable(rule.value) else rule.value
            node, leaf = _dig(effective, rule.field)
            old = node.get(leaf)
            node[leaf] = value
            writes.append(
                Write(
                    rule.field,
                    value,
                    rule.name,
                    rule.where,
                    comment=rule.comment,
                    conditions=rule.conditions,
                    old=old,
                )
            )
            if rule.warning:
                logs.append(LogLine("WARNING", "sglang.srt.server_args", rule.warning))
        refusal = self.refuse(effective)
        if refusal is not None:
            return Resolution(argv, env, None, tuple(logs), tuple(writes), error=refusal)
        return Resolution(argv, env, effective, tuple(logs), tuple(writes), model=self.model)

    def close(self) -> None:
        pass
