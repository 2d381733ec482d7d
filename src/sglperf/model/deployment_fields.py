"""The deployment file's shared pieces: the strict base every table derives from, the field types several
tables use (names, environments, deadlines, paths, regression floors), and what each pattern means in words.

Every table is validated strictly: an unknown key or a wrong type is an error (`sglperf.model.deployment_file`
words it, naming the file and the field), never a silent conversion.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from sglperf.model.files import SAFE_NAME_PATTERN
from sglperf.model.metrics import METRICS

SLUG_PATTERN = SAFE_NAME_PATTERN
Slug = Annotated[str, Field(pattern=SLUG_PATTERN, max_length=64)]
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
ENV_VALUE_PATTERN = r"^[^\x00]*$"
# Environment for the server: names a process environment can hold, values without NUL (the kernel
# would refuse them at launch, under SGLang's name).
EnvVars = dict[
    Annotated[str, Field(pattern=ENV_NAME_PATTERN, max_length=256)],
    Annotated[str, Field(pattern=ENV_VALUE_PATTERN, max_length=65536)],
]
# SGLang flags: passed as process arguments, which cannot hold NUL either (the launch would fail with a
# Python error, not a line naming the field).
Flags = list[Annotated[str, Field(pattern=ENV_VALUE_PATTERN)]]
# A deadline sglperf promises to keep: finite, at most a week.
Deadline = Annotated[float, Field(gt=0, le=7 * 86400, allow_inf_nan=False)]
COMPUTE_CAPABILITY_PATTERN = r"^\d{1,2}\.\d$"
PATTERN_MEANING = {
    SLUG_PATTERN: "letters, digits, '.', '_' and '-' only (it becomes part of test ids and paths)",
    ENV_NAME_PATTERN: "an environment variable name (letters, digits and '_', not starting with a digit)",
    ENV_VALUE_PATTERN: "a value without NUL characters",
    COMPUTE_CAPABILITY_PATTERN: "a compute capability such as '8.6'",
}


class StrictTable(BaseModel):
    """A table of a deployment file."""

    # strict: `tp_size = "2"` or `reuse_prefix_cache = 1` is an error, not a silent conversion (a TOML
    # integer is still a valid float: `startup_timeout_s = 1800`). Paths are written as strings.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


FilePath = Annotated[Path, Field(strict=False)]
CLOSE_MATCH = 0.7  # difflib's ratio: output_length -> output_len (0.87), gpu_cnt -> gpu_count (0.88)


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean 'output_len'?"`` for an unknown key with a close known one, else ``""``."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=CLOSE_MATCH)
    return f"; did you mean {close[0]!r}?" if close else ""


def check_thresholds(value: dict[str, float]) -> dict[str, float]:
    """Regression floors per metric (a runner's, a workload's): known metrics, each within its range."""
    for metric, threshold in value.items():
        if metric not in METRICS:
            allowed = ", ".join(sorted(METRICS))
            raise ValueError(f"unknown metric {metric!r}; allowed: {allowed}{did_you_mean(metric, METRICS)}")
        limit = METRICS[metric].direction.threshold_limit
        if not 0 < threshold < limit:
            raise ValueError(
                f"threshold for {metric} must be a fraction between 0 and 1, e.g. 0.03"
                if limit == 1
                else f"threshold for {metric} must be above 0, e.g. 0.03 (+3%) or 2.0 (three times the baseline)"
            )
    return value
