"""Every command-line option sglperf has, defined once for the pytest plugin and the `sglperf` command.

pytest's ``addoption`` and argparse's ``add_argument`` take the same words, so one `OptionSpec` serves both
(pytest-benchmark does the same). One spelling per choice: where the command once spelled a choice its own
way (``--python``, ``--sglang``), the old spelling is kept as an alias that still works and says its new
name, as SGLang's own deprecations do.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sglperf.history.location import HISTORY_ENV
from sglperf.model.gpu_telemetry import DEFAULT_MAX_GPU_THROTTLE
from sglperf.model.host_load import DEFAULT_MAX_HOST_LOAD

RUN_ID_ENV = "SGLPERF_RUN_ID"
ATTACH_URL_ENV = "SGLPERF_SGLANG_URL"


def share(text: str) -> float:
    """A share of the CPU (or of a GPU's samples) in (0, 1]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of the CPU between 0 (excluded) and 1")
    return value


def seconds(text: str) -> float:
    """A number of seconds in [0, 86400)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 86_400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds between 0 and 86400")
    return value


@dataclass(frozen=True)
class OptionSpec:
    """One option: its spelling, what argparse and pytest need to read it, and its retired spellings."""

    flag: str
    help: str
    metavar: str | None = None
    action: str | None = None
    type: Callable[[str], Any] | None = None
    default: Any = None
    choices: tuple[str, ...] | None = None
    renamed_from: tuple[str, ...] = ()  # the command's old spellings: accepted, each saying its new name

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    def kwargs(self) -> dict[str, Any]:
        found: dict[str, Any] = {"help": self.help}
        for name in ("metavar", "action", "type", "default", "choices"):
            value = getattr(self, name)
            if value is not None:
                found[name] = value
        return found

    def add_to(self, add: Callable[..., Any], **overrides: Any) -> None:
        """Define it with ``add`` (pytest's ``addoption`` or argparse's ``add_argument``)."""
        add(self.flag, **{**self.kwargs(), **overrides})


class _Renamed(argparse.Action):
    """An old spelling: it does what the new one does, and says so once."""

    def __init__(self, option_strings: Sequence[str], dest: str, new_flag: str = "", **kwargs: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        print(f"sglperf: {option} is deprecated; use {self.new_flag} (it means the same)", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_to_command(parser: argparse.ArgumentParser | Any, spec: OptionSpec, **overrides: Any) -> None:
    """Define ``spec`` on one of the command's (sub)parsers or groups, with its old spellings as aliases
    hidden from the help."""
    spec.add_to(parser.add_argument, **overrides)
    for old in spec.renamed_from:
        parser.add_argument(
            old, dest=spec.dest, action=_Renamed, new_flag=spec.flag, metavar=spec.metavar, help=argparse.SUPPRESS
        )


SGLANG_PYTHON = OptionSpec(
    "--sglang-python",
    "interpreter of the SGLang environment to use (default: this one)",
    metavar="PATH",
    renamed_from=("--python",),
)
SGLANG_VERSION = OptionSpec(
    "--sglang-version",
    "use sglperf's managed environment for this SGLang release (built on first use)",
    metavar="VERSION",
    renamed_from=("--sglang",),
)
HISTORY_STORE = OptionSpec(
    "--history-store",
    "run-history store: an SQLite file, a postgresql:// URL, or off (default: "
    f"${HISTORY_ENV}, else ~/.local/share/sglperf/history.sqlite)",
    metavar="PATH|URL|off",
)

# The plugin's own, in the order `pytest --help` lists them.
EMULATOR = OptionSpec(
    "--emulator",
    "run the live tier against the SGLang emulator (a test double; its numbers are not GPU results)",
    action="store_true",
)
EMULATOR_CONFIG = OptionSpec(
    "--emulator-config",
    'timing model and faults for the emulator; a "variants" object gives variants their own (by id)',
    metavar="JSON|@FILE",
)
MODEL_PATH = OptionSpec("--model-path", "checkpoint path on this runner (or $SGLPERF_MODEL_PATH)", metavar="PATH")
API_KEY = OptionSpec("--api-key", "API key the servers require (or $SGLPERF_API_KEY)", metavar="KEY")
RESULTS_DIR = OptionSpec(
    "--results-dir", "where server logs and results go (default: results/<UTC time>)", metavar="DIR"
)
IGNORE_RUNNER_MISMATCH = OptionSpec(
    "--ignore-runner-mismatch",
    "run live items even if the visible GPUs differ from the deployment's runner profile",
    action="store_true",
)
GPU_TIMEOUT = OptionSpec(
    "--gpu-timeout", "how long to wait for a free GPU set", metavar="S", type=float, default=3600.0
)
BASELINES_DIR = OptionSpec("--baselines-dir", "baseline store (default: <rootdir>/baselines)", metavar="DIR")
UPDATE_BASELINES = OptionSpec(
    "--update-baselines",
    "record the measured samples as the new baselines (refused for variants whose effective args are wrong)",
    action="store_true",
)
BASELINE_MISSING = OptionSpec(
    "--baseline-missing", "what a measurement without baseline does", choices=("fail", "skip"), default="fail"
)
BASELINE_MISMATCH = OptionSpec(
    "--baseline-mismatch",
    "what a baseline from another runner profile, GPU model or GPU count does",
    choices=("fail", "skip"),
    default="fail",
)
SGLANG_URL = OptionSpec(
    "--sglang-url",
    f"check and measure a server that is already running (or ${ATTACH_URL_ENV}); nothing is launched or stopped",
    metavar="URL",
)
SGLANG_URL_GPUS = OptionSpec(
    "--sglang-url-gpus",
    "the attached server's GPUs, e.g. '2xNVIDIA RTX A6000' (SGLang does not report them; needed to record baselines)",
    metavar="COUNTxNAME",
)
MAX_HOST_LOAD = OptionSpec(
    "--max-host-load",
    "drop and run again a measured round during which other processes and the hypervisor took more than "
    "this share of the machine's CPU (default: the runner profile's max_host_load, else "
    f"{DEFAULT_MAX_HOST_LOAD:g}; 1 never drops)",
    metavar="SHARE",
    type=share,
)
QUIET_WAIT = OptionSpec(
    "--quiet-wait",
    "how long one measurement waits, in all, for a quiet host and GPU after dropping a disturbed round (default 60)",
    metavar="SECONDS",
    type=seconds,
    default=60.0,
)
MAX_GPU_THROTTLE = OptionSpec(
    "--max-gpu-throttle",
    "drop and run again a measured round during which a GPU ran clock-limited by temperature or power "
    "for more than this share of it (default: the runner profile's max_gpu_throttle, else "
    f"{DEFAULT_MAX_GPU_THROTTLE:g}; 1 never drops for throttling)",
    metavar="SHARE",
    type=share,
)
NO_GPU_TELEMETRY = OptionSpec(
    "--no-gpu-telemetry",
    "read no GPU telemetry (NVML) during measured rounds: no round is dropped for a throttling GPU or a "
    "foreign GPU process",
    action="store_true",
)
RUN_ID = OptionSpec(
    "--run-id", f"this run's id in the history (default: ${RUN_ID_ENV}, else UTC time + random)", metavar="ID"
)

PLUGIN_OPTIONS = (
    SGLANG_PYTHON,
    SGLANG_VERSION,
    EMULATOR,
    EMULATOR_CONFIG,
    MODEL_PATH,
    API_KEY,
    RESULTS_DIR,
    IGNORE_RUNNER_MISMATCH,
    GPU_TIMEOUT,
    BASELINES_DIR,
    UPDATE_BASELINES,
    BASELINE_MISSING,
    BASELINE_MISMATCH,
    SGLANG_URL,
    SGLANG_URL_GPUS,
    MAX_HOST_LOAD,
    QUIET_WAIT,
    MAX_GPU_THROTTLE,
    NO_GPU_TELEMETRY,
    HISTORY_STORE,
    RUN_ID,
)
