"""`sglperf init` fuzzed over its inputs: config.json's values (a hub's text, not ours) and the flags.

Whatever it is given, init either writes a deployment that loads, holding nothing the inputs did not ask for
(no table or key smuggled in through a value), or refuses in one line and leaves the repository as it was;
never a traceback, never a hang. The audit found 12 tracebacks (`--gpus 0`, odd config.json values, a long
path, Ctrl-D at a question) and one hang here.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import signal
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sglperf import scaffold
from sglperf.cli import EXIT_BAD_INPUT, main
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.deployment_file import load
from sglperf.runtime.gpus import SIMULATED_ENV, Inventory
from sglperf.scaffold import InitError, InitRequest, init

from ..support.project import QWEN36_CONFIG, ROOT

pytestmark = pytest.mark.selftest


def no_gpus() -> Inventory:
    return Inventory((), "none")


CONFIGS = {
    "llama": json.loads((ROOT / "tests" / "data" / "hf-configs" / "Llama-3.1-8B-Instruct" / "config.json").read_text()),
    "gemma": json.loads((ROOT / "tests" / "data" / "hf-configs" / "gemma-3-12b-it" / "config.json").read_text()),
    "qwen36": json.loads(QWEN36_CONFIG.read_text()),
}
# Keys a config's values are fuzzed at: what init and the parameter count read, at the top and in the text
# and vision sections.
KEYS = (
    "architectures",
    "model_type",
    "torch_dtype",
    "dtype",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "tie_word_embeddings",
    "mtp_num_hidden_layers",
    "num_nextn_predict_layers",
    "num_local_experts",
    "layer_types",
    "full_attention_interval",
    "quantization_config",
    "text_config",
    "vision_config",
    "deepstack_visual_indexes",
    "in_channels",
    "depth",
)
TOP_KEYS = {"description", "model", "runner", "launch", "expect", "variants", "workloads"}
LAUNCH_KEYS = {"tp_size"}

# Text with what breaks files: quotes, backslashes, newlines, control characters, DEL, lone surrogates.
nasty_text = st.text(
    st.sampled_from(['"', "\\", "\n", "\r", "\t", "\x00", "\x01", "\x7f", "\ud800", "[", "]", "=", "#", "a", "é", " "])
    | st.characters(),
    max_size=12,
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 1, 2, 48, 10**6, 10**15, 2**40 + 1])
    | st.floats(allow_nan=True, allow_infinity=True)
    | nasty_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A flag's value: usually one a person gives, else anything (so that most examples get far)."""
    return st.integers(0, 6).flatmap(lambda pick: odd if pick == 0 else usual)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    config: dict[str, Any] = copy.deepcopy(CONFIGS[draw(st.sampled_from(sorted(CONFIGS)))])
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        sections = [config, *(config[k] for k in ("text_config", "vision_config") if isinstance(config.get(k), dict))]
        section = draw(st.sampled_from(sections))
        section[draw(st.sampled_from(KEYS))] = draw(json_values)
    if draw(st.sampled_from([False, False, True])):
        config["architectures"] = draw(st.lists(nasty_text, min_size=1, max_size=2))
    return config


@contextlib.contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """A TimeoutError in place of a hang (the audit found one)."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"init took more than {seconds} s: a hang")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _check_written(deployment: Path) -> None:
    loaded = load(deployment)
    raw = tomllib.loads(deployment.read_text())
    assert set(raw) <= TOP_KEYS and set(raw["launch"]) <= LAUNCH_KEYS, raw  # nothing smuggled in by a value
    assert loaded.launch.env == {} and not loaded.launch.extra_flags


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*")) if root.exists() else set()


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    config=configs(),
    gpus=mostly(st.integers(1, 8), st.integers(-3, 70)),
    memory=mostly(st.sampled_from([24.0, 48.0, 80.0]), st.floats(allow_nan=True, allow_infinity=True)),
    name=mostly(st.just("NVIDIA L40S"), nasty_text),
    capability=mostly(st.sampled_from(["8.9", "9.0", "12.0"]), nasty_text),
    key=mostly(st.none(), nasty_text | st.just("k" * 300)),
    runner=mostly(st.none(), nasty_text),
    tp=mostly(st.none(), st.integers(-2, 80)),
    served=nasty_text | st.just("/models/m"),
)
@example(
    config=CONFIGS["llama"], gpus=0, memory=48.0, name="L40S", capability="8.9", key=None, runner=None, tp=None,
    served="/m",
)  # fmt: skip
@example(  # the hang: a layer count SGLang's config would never have, listed layer by layer
    config={**CONFIGS["qwen36"], "text_config": {**CONFIGS["qwen36"]["text_config"], "num_hidden_layers": 10**15,
                                                   "layer_types": None}},
    gpus=1, memory=48.0, name="L40S", capability="8.9", key=None, runner=None, tp=None, served="/m",
)  # fmt: skip
def test_init_writes_a_loading_deployment_or_refuses_in_one_line_leaving_nothing(
    tmp_path: Path,
    config: dict[str, Any],
    gpus: int,
    memory: float,
    name: str,
    capability: str,
    key: str | None,
    runner: str | None,
    tp: int | None,
    served: str,
) -> None:
    case = tmp_path / uuid.uuid4().hex
    model = case / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(config))
    root = case / "repo"
    request = InitRequest(model, root, key, served, gpus, name, memory, capability, runner, tp)
    with no_hang():
        try:
            result = init(request, inventory=no_gpus)
        except InitError as exc:
            event("refused")
            assert "\n" not in str(exc), str(exc)
            assert _files(root) == set(), "a refused init left files behind"
            return
    event("written")
    _check_written(result.deployment)


def test_a_config_json_value_never_breaks_the_parameter_count() -> None:
    """size() and mtp_layers on any value: a number or a ValueError, quickly (a 10**15-layer list hung)."""

    @settings(max_examples=300)
    @given(configs())
    def count(config: dict[str, Any]) -> None:
        facts = CheckpointFacts(config)
        with no_hang(10):
            for read in (facts.size, lambda: facts.mtp_layers):
                try:
                    read()
                except ValueError:
                    pass

    count()


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), no_hang():
        code = main(argv)
    return code, err.getvalue()


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    flags=st.lists(
        st.sampled_from(
            ["--gpus", "--gpu-name", "--memory-gib", "--compute-capability", "--tp", "--key", "--runner-name"]
        ).flatmap(
            lambda flag: st.tuples(st.just(flag), st.sampled_from(["0", "-1", "1", "nan", "inf", "8,9", "", "x" * 300]))
        ),
        max_size=4,
    )
)
def test_the_command_exits_clean_on_any_flag_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[tuple[str, str]]
) -> None:
    # Sized from config.json here (raising=False: the same test runs on code from before sizing by a build).
    monkeypatch.setattr(scaffold, "newest_release", lambda progress: None, raising=False)
    monkeypatch.setenv(SIMULATED_ENV, "")
    monkeypatch.setattr("sglperf.runtime.gpus._from_nvml", lambda: None)
    monkeypatch.setattr("sglperf.runtime.gpus._from_nvidia_smi", lambda: None)
    given_flags = dict(flags)
    defaults = {"--gpus": "1", "--gpu-name": "NVIDIA L40S", "--memory-gib": "48", "--compute-capability": "8.9"}
    argv = [str(ROOT / "tests" / "data" / "hf-configs" / "gemma-3-12b-it"), "--served-path", "/m", "--no-input"]
    for flag, value in {**defaults, **given_flags}.items():
        argv += [f"{flag}={value}"]
    root = tmp_path / uuid.uuid4().hex
    try:
        code, err = _cli(["init", *argv, "--dir", str(root)])
    except SystemExit as exc:  # argparse: "--gpus=x" is not an int, said in its usage line
        assert exc.code == 2
        return
    if code != 0:
        assert code == EXIT_BAD_INPUT and len(err.strip().splitlines()) == 1, err
        assert _files(root) == set()
