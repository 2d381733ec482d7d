"""Intents: version-independent expectations about an SGLang server, and how each release spells them.

Every SGLang flag name and effective-args field path the suite relies on is written here, once,
inside the intent it belongs to. An intent knows (a) which flags request it, choosing among the
spellings by what the installed release's own parser accepts, and (b) how to read it back from
resolved (effective) server args. Flags an intent knows but the installed parser lacks are how the
suite names a replacement when a deployment uses a removed flag.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sglperf.errors import SglperfError
from sglperf.model.checkpoint import VISION_CONFIG_KEYS, CheckpointFacts
from sglperf.model.intent_names import (
    DECODE_CUDA_GRAPH,
    INTENT_NAMES,
    OVERLAP_SCHEDULE,
    PREFILL_CUDA_GRAPH,
    SINGLE_BATCH_OVERLAP,
    SPECULATIVE,
    VISION_WEIGHTS_SKIPPED,
)
from sglperf.model.resolution import ModelFacts
from sglperf.sglang.argv import ParsedArgv, ParserInfo

# Overrides for the checkpoint's config.json, as a JSON object (every release the suite knows).
MODEL_OVERRIDE_FLAG = "--json-model-override-args"


class IntentNotExpressible(SglperfError):
    """The installed release has no flag for this intent."""


@dataclass(frozen=True)
class Reading:
    """An intent's value read from effective args."""

    value: Any
    source: str  # the field(s) read, e.g. "cuda_graph_config.prefill.backend = 'breakable'"
    provable: bool = True  # False: effective args cannot prove it (needs live evidence)
    note: str = ""


class Intent(Protocol):
    # Read-only members: each implementation declares its own as class attributes.
    @property
    def name(self) -> str: ...

    @property
    def fields(self) -> tuple[str, ...]:
        """Effective fields whose writes explain this intent."""

    @property
    def log_keywords(self) -> tuple[str, ...]:
        """Log lines mentioning these explain it too."""

    @property
    def known_flags(self) -> Mapping[str, Any]:
        """Every spelling across releases -> the intent value it requests."""

    @property
    def flag_names(self) -> tuple[str, ...]:
        """Every flag this intent is requested or read by, in any release (log lines naming them are
        about this intent)."""

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]: ...

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading: ...

    def inert_reason(self, effective: Mapping[str, Any], model: ModelFacts | None) -> str | None:
        """Why SGLang will not act on this intent's field although it is set, or None."""

    def matches(self, expected: Any, actual: Any) -> bool: ...

    def show(self, value: Any) -> str: ...


def _dig(mapping: Mapping[str, Any], path: str) -> Any:
    node: Any = mapping
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


class _Boolean:
    """Shared behaviour of on/off intents."""

    name: str
    known_flags: Mapping[str, Any] = {}

    def inert_reason(self, effective: Mapping[str, Any], model: ModelFacts | None) -> str | None:
        return None  # SGLang acts on these fields wherever they are set

    def matches(self, expected: Any, actual: Any) -> bool:
        return bool(expected) == bool(actual)

    def show(self, value: Any) -> str:
        return "on" if value else "off"


def _read_graph(
    effective: Mapping[str, Any], backend_field: str, backend_off: str, flag_fields: tuple[tuple[str, bool], ...]
) -> Reading:
    """A CUDA graph phase: the nested backend (0.5.14+), else the first boolean field present
    (``True`` in the pair: the field says "disabled")."""
    try:
        backend = _dig(effective, backend_field)
        return Reading(backend != backend_off, f"{backend_field} = {backend!r}")
    except KeyError:
        pass
    for name, negated in flag_fields:
        if name in effective:
            value = bool(effective[name])
            return Reading(not value if negated else value, f"{name} = {effective[name]}")
    raise KeyError(f"none of {backend_field}, {', '.join(n for n, _ in flag_fields)} in the effective args")


@dataclass(frozen=True)
class _Spelling:
    """One way a release spells a request: a flag, maybe with a value, valid if the parser agrees."""

    flag: str
    value: str | None = None

    def usable(self, parser: ParserInfo) -> bool:
        return parser.accepts(self.flag, self.value) if self.value is not None else parser.has(self.flag)

    def argv(self) -> list[str]:
        return [self.flag] if self.value is None else [self.flag, self.value]


def _first_usable(spellings: list[_Spelling], parser: ParserInfo) -> _Spelling | None:
    return next((s for s in spellings if s.usable(parser)), None)


def _captured_sizes(effective: Mapping[str, Any], fields: Sequence[str]) -> tuple[tuple[int, ...], str] | None:
    """The sizes a graph will be captured for, ascending, and the field read; None when the release's
    effective args do not say (or say nothing usable)."""
    for path in fields:
        try:
            value = _dig(effective, path)
        except KeyError:
            continue
        if isinstance(value, list) and value and all(isinstance(v, int) and v > 0 for v in value):
            return tuple(sorted(set(value))), path
    return None


def _switch(flag: str, parser: ParserInfo) -> list[str]:
    """A switch this release must have."""
    if not parser.has(flag):
        raise IntentNotExpressible(f"SGLang {parser.version} has no {flag}")
    return [flag]


def _raise_to(flags: Sequence[str], value: int, parser: ParserInfo, what: str) -> list[str]:
    """The first of ``flags`` this release accepts, set to ``value``."""
    chosen = _first_usable([_Spelling(f) for f in flags], parser)
    if chosen is None:
        raise IntentNotExpressible(f"SGLang {parser.version} has none of {', '.join(flags)} to raise {what}")
    return [chosen.flag, str(value)]


class PrefillCudaGraph(_Boolean):
    """The prefill ("piecewise", later "breakable") CUDA graph."""

    name = PREFILL_CUDA_GRAPH
    # 0.5.14+: one prefill backend in a nested config; 0.5.10-0.5.13: disable/enforce booleans;
    # 0.5.4-0.5.9: opt-in boolean.
    BACKEND_FLAG = "--cuda-graph-backend-prefill"
    BACKEND_FIELD = "cuda_graph_config.prefill.backend"
    BACKEND_OFF = "disabled"
    BACKENDS_ON = ("breakable", "tc_piecewise", "full")  # preference order
    ENFORCE_FLAG = "--enforce-piecewise-cuda-graph"
    DISABLE_FLAG = "--disable-piecewise-cuda-graph"
    ENABLE_FLAG = "--enable-piecewise-cuda-graph"
    DISABLE_FIELD = "disable_piecewise_cuda_graph"
    ENABLE_FIELD = "enable_piecewise_cuda_graph"
    # The token sizes the graph is captured for, and the largest: nested (0.5.14+) or flat (0.5.13).
    SIZES_FIELDS = ("cuda_graph_config.prefill.bs", "piecewise_cuda_graph_tokens")
    MAX_TOKENS_FIELDS = ("cuda_graph_config.prefill.max_bs", "piecewise_cuda_graph_max_tokens")
    # Raising the largest: 0.5.14+ spells it per phase (the old flag a deprecated alias until 0.5.20).
    MAX_TOKENS_FLAGS = ("--cuda-graph-max-bs-prefill", "--piecewise-cuda-graph-max-tokens")
    SIZES_FLAGS = ("--cuda-graph-bs-prefill", "--piecewise-cuda-graph-tokens", *MAX_TOKENS_FLAGS)
    # A longer prompt is prefilled in chunks of this many tokens: the most one prefill batch holds.
    CHUNK_FIELD = "chunked_prefill_size"
    # SGLang captures token sizes at multiples of 512 from 4096 up (generate_prefill_cuda_graph_batch_sizes,
    # _generate_piecewise_cuda_graph_tokens): a cap raised to one is itself captured.
    CAPTURE_STEP = 512

    fields = ("cuda_graph_config", DISABLE_FIELD, ENABLE_FIELD, "enforce_piecewise_cuda_graph")
    log_keywords = ("piecewise", "prefill cuda graph", "breakable cuda graph", "prefill cudagraph")
    known_flags = {ENFORCE_FLAG: True, ENABLE_FLAG: True, DISABLE_FLAG: False}
    flag_names = (BACKEND_FLAG, ENFORCE_FLAG, DISABLE_FLAG, ENABLE_FLAG)

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        if value:
            # Any explicit backend skips SGLang's auto-disable cascade; so does "enforce".
            spellings = [_Spelling(self.BACKEND_FLAG, b) for b in self.BACKENDS_ON]
            spellings += [_Spelling(self.ENFORCE_FLAG), _Spelling(self.ENABLE_FLAG)]
        else:
            spellings = [_Spelling(self.BACKEND_FLAG, self.BACKEND_OFF), _Spelling(self.DISABLE_FLAG)]
            if parser.has(self.ENABLE_FLAG) and not parser.has(self.DISABLE_FLAG):
                return []  # opt-in era: off unless asked
        chosen = _first_usable(spellings, parser)
        if chosen is None:
            raise IntentNotExpressible(
                f"SGLang {parser.version} has none of {self.BACKEND_FLAG}, {self.ENFORCE_FLAG}, {self.ENABLE_FLAG}"
            )
        return chosen.argv()

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        return _read_graph(
            effective, self.BACKEND_FIELD, self.BACKEND_OFF, ((self.DISABLE_FIELD, True), (self.ENABLE_FIELD, False))
        )

    def captured_sizes(self, effective: Mapping[str, Any]) -> tuple[tuple[int, ...], str] | None:
        """The token sizes the prefill graph will be captured for, and the field read."""
        return _captured_sizes(effective, self.SIZES_FIELDS)

    def own_size_flags(self, argv: ParsedArgv) -> str:
        """A variant's own flags that fix the prefill graph's token sizes, as written ("" when none)."""
        return argv.shown(self.SIZES_FLAGS)

    def coverage_flags(self, tokens: int, parser: ParserInfo) -> list[str]:
        """The flags that make this release capture the prefill graph up to ``tokens`` (rounded up to a
        size SGLang captures)."""
        step = self.CAPTURE_STEP
        return _raise_to(self.MAX_TOKENS_FLAGS, -(-tokens // step) * step, parser, "the prefill graph's largest size")


class DecodeCudaGraph(_Boolean):
    """The decode CUDA graph (on by default in every release)."""

    name = DECODE_CUDA_GRAPH
    BACKEND_FLAG = "--cuda-graph-backend-decode"
    BACKEND_FIELD = "cuda_graph_config.decode.backend"
    BACKEND_OFF = "disabled"
    DISABLE_FLAG = "--disable-cuda-graph"
    DISABLE_FIELD = "disable_cuda_graph"

    fields = ("cuda_graph_config", DISABLE_FIELD, "enable_torch_compile")
    log_keywords = ("cuda graph is disabled", "disable cuda graph", "decode cuda graph")
    known_flags = {DISABLE_FLAG: False}
    flag_names = (BACKEND_FLAG, DISABLE_FLAG)

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        if value:
            return []  # the default; naming a backend would change which one runs
        chosen = _first_usable([_Spelling(self.BACKEND_FLAG, self.BACKEND_OFF), _Spelling(self.DISABLE_FLAG)], parser)
        if chosen is None:
            raise IntentNotExpressible(
                f"SGLang {parser.version} has neither {self.BACKEND_FLAG} nor {self.DISABLE_FLAG}"
            )
        return chosen.argv()

    # On the CPU the backend is not what decides: SGLang 0.5.23 captures its CPU graph (CPUGraphRunner,
    # torch.compile) only with --enable-torch-compile, whatever cuda_graph_config.decode says
    # (capture_decode_graph, model_executor/model_runner_components/cuda_graph_setup.py).
    DEVICE_FIELD = "device"
    CPU_COMPILE_FIELD = "enable_torch_compile"

    # The batch sizes the graph is captured for: nested (0.5.14+) or flat (0.5.13). On the CPU these are
    # the CPU graph's, generated up to torch_compile_max_bs (handle_gpu_memory_settings, 0.5.19+).
    SIZES_FIELDS = ("cuda_graph_config.decode.bs", "cuda_graph_bs")
    # Fields whose writes set the largest size, the rule a coverage failure quotes.
    MAX_BS_FIELDS = ("cuda_graph_config.decode.max_bs", "cuda_graph_max_bs", "torch_compile_max_bs")
    # Raising the largest size: 0.5.19+ spells it per phase and kept the old flag as a deprecated alias,
    # which 0.5.20 removed; on the CPU the graph is torch.compile's, capped by its own flag.
    MAX_BS_FLAGS = ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    CPU_MAX_BS_FLAG = "--torch-compile-max-bs"
    # Flags that fix the sizes outright: a variant using one has chosen its own cap.
    SIZES_FLAGS = ("--cuda-graph-bs-decode", "--cuda-graph-bs", *MAX_BS_FLAGS, CPU_MAX_BS_FLAG)
    # What bounds a decode batch whatever the load (SGLang resets it, e.g. for speculative decoding).
    MAX_RUNNING_FIELD = "max_running_requests"

    def captured_sizes(self, effective: Mapping[str, Any]) -> tuple[tuple[int, ...], str] | None:
        """The batch sizes the decode graph will be captured for, and the field read."""
        return _captured_sizes(effective, self.SIZES_FIELDS)

    def own_size_flags(self, argv: ParsedArgv) -> str:
        """A variant's own flags that fix the decode graph's sizes, as written ("" when none)."""
        return argv.shown(self.SIZES_FLAGS)

    def coverage_flags(self, batch: int, parser: ParserInfo, cpu: bool) -> list[str]:
        """The flags that make this release capture the decode graph up to ``batch``."""
        flags = (self.CPU_MAX_BS_FLAG,) if cpu else self.MAX_BS_FLAGS
        return _raise_to(flags, batch, parser, "the decode graph's largest batch")

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        if effective.get(self.DEVICE_FIELD) == "cpu" and self.CPU_COMPILE_FIELD in effective:
            compiled = bool(effective[self.CPU_COMPILE_FIELD])
            try:
                said = f"; {self.BACKEND_FIELD} = {_dig(effective, self.BACKEND_FIELD)!r} is not what decides there"
            except KeyError:
                said = ""
            return Reading(
                compiled,
                f"device = 'cpu', {self.CPU_COMPILE_FIELD} = {compiled} (SGLang captures a CPU decode graph only "
                f"with --enable-torch-compile{said})",
            )
        return _read_graph(effective, self.BACKEND_FIELD, self.BACKEND_OFF, ((self.DISABLE_FIELD, True),))


class OverlapSchedule(_Boolean):
    """The overlap scheduler: the CPU schedules the next batch while the GPU runs this one, on every decode
    step. On by default in every release (``disable_overlap_schedule = False``); SGLang turns it off by
    itself under rules that depend on the release, the speculative algorithm, the model's architecture
    (e.g. a mamba cache without its extra buffer), environment variables, the device and the parallelism.
    Preflight names the rule that did it, from the release's own resolution. No release has a flag that
    forces it on: a request for it spells nothing, and the verdict says whether SGLang keeps it."""

    name = OVERLAP_SCHEDULE
    FLAG = "--disable-overlap-schedule"
    FIELD = "disable_overlap_schedule"
    fields = (FIELD,)
    log_keywords = ("overlap schedule", "overlap scheduler", "overlap_schedule")
    known_flags = {FLAG: False}
    flag_names = (FLAG,)

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        # On, the default: what turns it off are SGLang's own rules, which no flag overrides.
        return _switch(self.FLAG, parser) if not value else []

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        if self.FIELD not in effective:
            raise KeyError(f"{self.FIELD} not in the effective args")
        return Reading(not effective[self.FIELD], f"{self.FIELD} = {effective[self.FIELD]}")


class SingleBatchOverlap(_Boolean):
    """Single-batch overlap. SGLang reads the field only in its MoE code (`initialize_moe_config` in
    layers/moe/utils.py, and the MoE / DeepEP layers of deepseek_v2, glm4_moe, ...; 0.5.13 to 0.5.23),
    so it acts only where the model builds layers with routed experts. Whether it does is read from
    the release's own model class, built on the meta device in preflight."""

    name = SINGLE_BATCH_OVERLAP
    FLAG = "--enable-single-batch-overlap"
    FIELD = "enable_single_batch_overlap"
    fields = (FIELD,)
    log_keywords = ("single batch overlap", "single-batch-overlap", "single_batch_overlap")
    known_flags = {FLAG: True}
    flag_names = (FLAG,)

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        return _switch(self.FLAG, parser) if value else []

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        if self.FIELD not in effective:
            raise KeyError(f"{self.FIELD} not in the effective args")
        on = bool(effective[self.FIELD])
        if on and model is None:
            return Reading(
                True,
                f"{self.FIELD} = True",
                provable=False,
                note="set, but whether SGLang acts on it depends on MoE layers the model class was not built to show",
            )
        return Reading(on, f"{self.FIELD} = {effective[self.FIELD]}")

    def inert_reason(self, effective: Mapping[str, Any], model: ModelFacts | None) -> str | None:
        if not effective.get(self.FIELD) or model is None or model.moe_layers > 0:
            return None
        return (
            f"{self.FIELD} = True, but SGLang reads it only in its MoE layers (initialize_moe_config, "
            f"layers/moe/utils.py) and the model class {model.architecture} builds none on this release "
            "(0 modules with routed experts): single-batch overlap does nothing for this dense model"
        )


class VisionWeightsSkipped(_Boolean):
    """The vision tower's weights are not loaded. Flags only ask; weight memory proves it."""

    name = VISION_WEIGHTS_SKIPPED
    # Never builds the tower, but only for the release's own architecture allow-list (0.5.18+).
    MODEL_ONLY_FLAG = "--language-model-only"
    MODEL_ONLY_FIELD = "language_model_only"
    # Encoder/language disaggregation; for Qwen-VL-family models the tower is still built and loaded.
    LANGUAGE_ONLY_FLAG = "--language-only"
    LANGUAGE_ONLY_FIELD = "language_only"
    # The checkpoint config's own switch: SGLang's ModelConfig reads it (0.5.18+: is_lm_only =
    # --language-model-only or hf_config.language_model_only) and the Qwen3-VL family's model class
    # then builds no tower. --language-model-only itself is refused outside an architecture allow-list;
    # a model override sets the config key for any architecture. Preflight proves which one works.
    OVERRIDE_FLAG = MODEL_OVERRIDE_FLAG
    OVERRIDE_FIELD = "json_model_override_args"
    OVERRIDE = {"language_model_only": True}
    fields = (MODEL_ONLY_FIELD, LANGUAGE_ONLY_FIELD, OVERRIDE_FIELD)
    log_keywords = ("language-only", "language-model-only", "language_only", "language_model_only", "vision")
    known_flags = {MODEL_ONLY_FLAG: True, LANGUAGE_ONLY_FLAG: True}
    flag_names = (MODEL_ONLY_FLAG, LANGUAGE_ONLY_FLAG)

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        if not value:
            return []
        allowed = parser.language_model_only_architectures
        if parser.has(self.MODEL_ONLY_FLAG) and allowed is not None and set(architectures) & set(allowed):
            return [self.MODEL_ONLY_FLAG]
        if parser.has(self.OVERRIDE_FLAG):
            return [self.OVERRIDE_FLAG, json.dumps(self.OVERRIDE)]
        # The last resort an operator would reach for; preflight shows whether the tower is still built.
        if parser.has(self.LANGUAGE_ONLY_FLAG):
            return [self.LANGUAGE_ONLY_FLAG]
        raise IntentNotExpressible(
            f"SGLang {parser.version} has none of {self.MODEL_ONLY_FLAG} (for this architecture), "
            f"{self.OVERRIDE_FLAG}, {self.LANGUAGE_ONLY_FLAG}"
        )

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        if model is not None:
            built = (
                f"{model.vision_tower} ({model.vision_param_bytes_per_rank / 1e9:.2f} GB per GPU)"
                if model.vision_tower
                else "none"
            )
            return Reading(
                model.vision_tower is None,
                f"SGLang's model class {model.architecture}, built on the meta device: vision tower {built}",
            )
        model_only = bool(effective.get(self.MODEL_ONLY_FIELD, False))
        language_only = bool(effective.get(self.LANGUAGE_ONLY_FIELD, False))
        if model_only:
            return Reading(
                True,
                f"{self.MODEL_ONLY_FIELD} = True",
                provable=False,
                note="the flag is set; only the live tier's weight memory proves the tower was not loaded",
            )
        if self._override_asks(effective):
            return Reading(
                True,
                f"{self.OVERRIDE_FIELD} sets language_model_only",
                provable=False,
                note="the checkpoint's switch is set; only SGLang's model class (built in preflight) or the live "
                "tier's weight memory proves the tower was not built",
            )
        if language_only:
            return Reading(
                True,
                f"{self.LANGUAGE_ONLY_FIELD} = True",
                provable=False,
                note=(
                    f"{self.LANGUAGE_ONLY_FLAG} is set, but it belongs to encoder/language "
                    "disaggregation and does not skip the vision tower for Qwen-VL-family "
                    "models; only the live tier's weight memory can tell"
                ),
            )
        return Reading(False, f"{self.MODEL_ONLY_FIELD} = False, {self.LANGUAGE_ONLY_FIELD} = False")

    def not_applicable(self, hf_config: Mapping[str, Any]) -> str | None:
        """Why the intent cannot apply to this model at all (a text-only checkpoint), else None. A config
        naming no architecture says too little to tell."""
        checkpoint = CheckpointFacts(hf_config)
        architectures = ", ".join(checkpoint.architectures)
        if not architectures or checkpoint.vision_config_keys:
            return None
        return (
            f"not applicable: {architectures} is text-only (its config.json has none of "
            f"{', '.join(VISION_CONFIG_KEYS)}), so there is no vision tower to skip: drop {self.name} "
            "from the deployment's [expect] and the variant's request"
        )

    def _override_asks(self, effective: Mapping[str, Any]) -> bool:
        """Whether the effective model overrides carry the checkpoint switch (a JSON string field)."""
        text = effective.get(self.OVERRIDE_FIELD)
        try:
            overrides = json.loads(text) if isinstance(text, str) and text else {}
        except json.JSONDecodeError:
            return False
        return isinstance(overrides, dict) and overrides.get("language_model_only") is True

    def inert_reason(self, effective: Mapping[str, Any], model: ModelFacts | None) -> str | None:
        flags = [
            f
            for f, field in (
                (self.LANGUAGE_ONLY_FLAG, self.LANGUAGE_ONLY_FIELD),
                (self.MODEL_ONLY_FLAG, self.MODEL_ONLY_FIELD),
            )
            if effective.get(field)
        ]
        if self._override_asks(effective):
            flags.append(f"{self.OVERRIDE_FLAG} {json.dumps(self.OVERRIDE)}")
        if not flags or model is None or model.vision_tower is None:
            return None
        return (
            f"{' and '.join(flags)} set, but SGLang's model class {model.architecture} still builds its vision "
            f"tower ({model.vision_tower}, {model.vision_param_bytes_per_rank / 1e9:.2f} GB per GPU): "
            "the vision weights are loaded"
        )


@dataclass(frozen=True)
class SpeculativeSettings:
    algorithm: str
    num_steps: int
    num_draft_tokens: int
    eagle_topk: int


class Speculative:
    """Speculative decoding settings (MTP): algorithm after alias rewriting, steps, drafts, top-k."""

    name = SPECULATIVE
    FLAGS = {
        "algorithm": "--speculative-algorithm",
        "num_steps": "--speculative-num-steps",
        "num_draft_tokens": "--speculative-num-draft-tokens",
        "eagle_topk": "--speculative-eagle-topk",
    }
    FIELDS = {
        "algorithm": "speculative_algorithm",
        "num_steps": "speculative_num_steps",
        "num_draft_tokens": "speculative_num_draft_tokens",
        "eagle_topk": "speculative_eagle_topk",
    }
    # A separate draft checkpoint (the deployment's draft_model): not a setting compared, a path.
    DRAFT_MODEL_FLAG = "--speculative-draft-model-path"
    # SGLang rewrites these algorithm names while resolving.
    ALIASES = {"NEXTN": "EAGLE"}
    fields = tuple(FIELDS.values())
    log_keywords = ("speculative algorithm", "speculative decoding is", "draft model", "eagle", "nextn", "mtp")
    known_flags: Mapping[str, Any] = {}
    flag_names = tuple(FLAGS.values())

    def flags(self, value: Any, parser: ParserInfo, architectures: tuple[str, ...]) -> list[str]:
        argv: list[str] = []
        for key, flag in self.FLAGS.items():
            if not parser.has(flag):
                raise IntentNotExpressible(f"SGLang {parser.version} has no {flag}")
            argv += [flag, str(getattr(value, key))]
        return argv

    def read(self, effective: Mapping[str, Any], model: ModelFacts | None = None) -> Reading:
        missing = [f for f in self.FIELDS.values() if f not in effective]
        if missing:
            raise KeyError(f"{', '.join(missing)} not in the effective args")
        values = {key: effective[f] for key, f in self.FIELDS.items()}
        source = ", ".join(f"{f} = {effective[f]!r}" for f in self.FIELDS.values())
        return Reading(values, source)

    def _normal(self, value: Any) -> dict[str, Any]:
        data = dict(value) if isinstance(value, Mapping) else {k: getattr(value, k) for k in self.FIELDS}
        algorithm = str(data.get("algorithm") or "").upper()
        data["algorithm"] = self.ALIASES.get(algorithm, algorithm)
        return data

    def matches(self, expected: Any, actual: Any) -> bool:
        if actual is None:
            return False
        return self._normal(expected) == self._normal(actual)

    def inert_reason(self, effective: Mapping[str, Any], model: ModelFacts | None) -> str | None:
        return None

    def show(self, value: Any) -> str:
        if value is None:
            return "off"
        data = dict(value) if isinstance(value, Mapping) else {k: getattr(value, k) for k in self.FIELDS}
        algorithm = str(data["algorithm"])
        alias = self.ALIASES.get(algorithm.upper())
        shown = f"{algorithm} (= {alias})" if alias else algorithm
        return f"{shown} steps={data['num_steps']} draft={data['num_draft_tokens']} topk={data['eagle_topk']}"


# Instances others call by name: coverage reads the graphs' size fields and spells their size flags;
# preflight asks the vision intent whether a model can have a tower at all.
PREFILL_GRAPH = PrefillCudaGraph()
DECODE_GRAPH = DecodeCudaGraph()
VISION = VisionWeightsSkipped()
SPECULATIVE_SETTINGS = Speculative()
_IMPLEMENTATIONS: tuple[Intent, ...] = (
    PREFILL_GRAPH,
    DECODE_GRAPH,
    OverlapSchedule(),
    SingleBatchOverlap(),
    VISION,
    SPECULATIVE_SETTINGS,
)
INTENTS: dict[str, Intent] = {i.name: i for i in _IMPLEMENTATIONS}
assert tuple(INTENTS) == INTENT_NAMES, "every intent name has exactly one implementation"


def spelling_of_intent_flag(flag: str, parser: ParserInfo, architectures: tuple[str, ...] = ()) -> str | None:
    """How sglperf spells, for this release, the intent value ``flag`` asks for (when an intent knows that flag)."""
    for intent in INTENTS.values():
        if flag in intent.known_flags:
            value = intent.known_flags[flag]
            try:
                argv = intent.flags(value, parser, architectures)
            except IntentNotExpressible:
                return None
            spelled = " ".join(argv) if argv else "(nothing: it is the default)"
            return f"{spelled} (or `request = {{ {intent.name} = {str(value).lower()} }}` in the variant)"
    return None
