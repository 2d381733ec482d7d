"""Upgrade check: the same deployments resolved by two SGLang releases, side by side, and the walk through
the releases in between.

What an operator wants to know before touching the GPU box: which flags the new release removed,
renamed or deprecated (and what sglperf will write instead), which intents change their effective
value, which performance-relevant fields change under them (a backend or a size behind an "on"), with
the rule on each side, which SGLang warnings appear or vanish, which variants the new release refuses,
and, walking every release in between, where each change happened. `records` holds what is found,
`compare` the two ends, `walk` the releases between; `sglperf.reporting.upgrade` words them.
"""

from sglperf.upgrade.compare import compare_releases, flag_changes
from sglperf.upgrade.records import (
    FieldChanges,
    FlagChange,
    IntentChange,
    ReleaseStep,
    Transition,
    UpgradeReport,
    WalkReport,
    WarningChange,
)
from sglperf.upgrade.walk import walk_releases

__all__ = [
    "FieldChanges",
    "FlagChange",
    "IntentChange",
    "ReleaseStep",
    "Transition",
    "UpgradeReport",
    "WalkReport",
    "WarningChange",
    "compare_releases",
    "flag_changes",
    "walk_releases",
]
