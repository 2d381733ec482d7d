"""`sglperf init`: a first deployment file for a repository of the user's own, from what can be read.

What it reads, it does not ask: the model's ``config.json`` (architecture, a vision tower, MoE layers, an
MTP head), the weights' size as the newest SGLang release built here builds the model (counted from
config.json where none is built), the runner's GPUs through NVML or ``nvidia-smi`` when this machine is the
runner, a draft model's ``config.json``. What it cannot read (the GPUs of a runner that is not this
machine) it asks for at a terminal, or names the flags for it. The file carries only the intents that
can apply to the model (no vision intent on a text-only checkpoint, speculative decoding only where the
model or a draft provides it), and every choice it made is a comment in it, so that the person reading
it knows what to change.

It checks everything before it writes anything: every input, that no file it would write exists, and that
the deployment loads, in a scratch folder laid out like the repository. Then it writes only new files (and
appends to ``.gitignore``); a failure while writing removes what it wrote. Every value it writes into TOML
is escaped (a config.json is the hub's text, not ours), and every comment is one line.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sglperf import preflight
from sglperf.errors import SglperfError
from sglperf.model.checkpoint import CheckpointFacts, GpuWeights, gpu_weights
from sglperf.model.deployment import Deployment
from sglperf.model.deployment_fields import COMPUTE_CAPABILITY_PATTERN
from sglperf.model.deployment_file import DeploymentError
from sglperf.model.deployment_file import load as load_deployment
from sglperf.model.files import SAFE_NAME_PATTERN, os_problem, read_input
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, OVERLAP_SCHEDULE, PREFILL_CUDA_GRAPH, VISION_WEIGHTS_SKIPPED
from sglperf.model.progress import Progress, silent
from sglperf.model.resolution import ModelFacts
from sglperf.model.runner_profile import RunnerProfile
from sglperf.preflight.resolve import Resolves, resolve_variants
from sglperf.runtime.gpus import Inventory, visible_gpus
from sglperf.sglang import envs

# Lines a repository using sglperf keeps out of git: each run's results folder, the lock files that
# guard a baseline while a run writes it, and the virtualenv docs/getting-started.md installs sglperf into.
GITIGNORE_LINES = ("results/", "baselines/**/*.lock", ".venv/")
# The weights may take this share of a GPU's memory; the rest is the KV cache and the graphs' buffers.
WEIGHT_SHARE = 0.6
NAME_CHARS = 64  # a key or runner name: part of file names and test ids (the deployment file's limit)
MAX_GPUS = 64  # the runner profile's limit
MAX_MEMORY_GIB = 4096
SHOWN_CHARS = 200  # of a config.json's text (its architectures) in a comment or description
DEFAULTS_VARIANT = "defaults"
PYTEST_CONFIGS = (("pytest.ini", "[pytest]"), ("pyproject.toml", "[tool.pytest.ini_options]"),
                  ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))  # fmt: skip
PYTEST_INI = """[pytest]
# sglperf's plugin collects every deployments/*.toml as tests; -ra prints each skipped item's reason,
# which is where sglperf says what it did not check, and why.
addopts = -ra
sglperf_deployments = deployments
"""
# A few prompts to start from: a measurement compares rounds over the same prompts, so replace them with
# your own traffic's before recording the first baseline (the format: docs/deployments.md#prompt-sets).
STARTER_PROMPTS = (
    ("chat-01", "Explain the difference between a process and a thread, with one example of each."),
    ("chat-02", "Write a short, friendly email asking a colleague to review a pull request by Friday."),
    ("chat-03", "What are three common causes of a slow SQL query, and how would you check for each?"),
    ("chat-04", "Summarise the plot of a heist film you invent, in five sentences."),
)


SOURCE_NAMES = {"nvml": "this machine's GPUs (NVML)", "nvidia-smi": "this machine's GPUs (nvidia-smi)",
                "simulated": "$SGLPERF_SIMULATED_GPUS"}  # fmt: skip


class InitError(SglperfError, ValueError):
    """`sglperf init` cannot write the deployment; the message names the input and what to do."""


@dataclass(frozen=True)
class RunnerGpus:
    """The runner's GPUs as a deployment file states them, and where each fact came from."""

    count: int
    name: str
    memory_gib: float
    compute_capability: str
    source: str  # "nvml", "nvidia-smi", "the command line", "asked"


@dataclass(frozen=True)
class DraftChoice:
    config: Path  # the draft's config.json on this machine
    served_path: str
    algorithm: str


@dataclass(frozen=True)
class InitRequest:
    model: Path  # a model folder holding config.json, or the config.json itself
    root: Path  # the user's repository
    key: str | None = None
    served_path: str | None = None
    gpu_count: int | None = None
    gpu_name: str | None = None
    memory_gib: float | None = None
    compute_capability: str | None = None
    runner_name: str | None = None
    tp_size: int | None = None
    draft: Path | None = None
    draft_served_path: str | None = None


@dataclass
class InitResult:
    deployment: Path
    written: list[Path] = field(default_factory=list)
    appended: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SizingRelease:
    """The SGLang release init asks to build the model: its version, and a resolver for a runner profile
    (with the preflight cache folder to use: init's own scratch, as its model folder is)."""

    version: str
    resolver: Callable[[RunnerProfile, Path], Resolves]


def newest_release(progress: Progress = silent) -> SizingRelease | None:
    """The newest managed SGLang environment that is built, asked as `sglperf preflight` asks it; None when
    none is built (init then counts config.json, and says so)."""
    env = envs.newest_ready()
    if env is None:
        return None
    python = str(env.python)
    return SizingRelease(
        env.version, lambda runner, cache: preflight.Resolver(python, runner, cache_dir=cache, progress=progress)
    )


@dataclass(frozen=True)
class _Plan:
    """Everything init will write, checked: new files in order, and the .gitignore lines to append."""

    deployment: Path
    files: tuple[tuple[Path, bytes], ...]
    gitignore_append: tuple[Path, str] | None
    notes: tuple[str, ...]


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError as exc:  # an over-long name, a loop of links
        raise InitError(f"{path}: cannot read it: {os_problem(exc)}") from None


def _exists(path: Path) -> bool:
    """Whether anything is at ``path``, a dangling link too (init writes nothing through it)."""
    try:
        return os.path.lexists(path) or path.exists()
    except OSError as exc:
        raise InitError(f"{path}: cannot use it: {os_problem(exc)}") from None


def read_config(model: Path, what: str = "model") -> tuple[Path, CheckpointFacts, bytes]:
    """The config.json of a model folder (or the file itself), checked: a JSON object with architectures."""
    path = model / "config.json" if _is_dir(model) else model
    try:
        raw = read_input(path)
    except FileNotFoundError:
        raise InitError(f"{path}: no such file (give the {what}'s folder, holding config.json, or the file)") from None
    except OSError as exc:
        raise InitError(f"{path}: cannot read it: {os_problem(exc)}") from None
    try:
        checkpoint = CheckpointFacts.parse(raw)
    except ValueError as exc:
        raise InitError(f"{path}: {exc}: is it the {what}'s config.json?") from None
    return path, checkpoint, raw


def slug(name: str) -> str:
    """A deployment key from a folder name: "Llama-3.1-8B-Instruct" -> "llama-3.1-8b-instruct"."""
    out = re.sub(r"[^a-z0-9_.-]+", "-", name.lower())[:NAME_CHARS].lstrip("-._").rstrip("-.")
    return out or "model"


def _checked_name(name: str, flag: str) -> str:
    if len(name) > NAME_CHARS or not re.fullmatch(SAFE_NAME_PATTERN, name):
        raise InitError(
            f"{flag} {_shown(name)}: at most {NAME_CHARS} letters, digits, '.', '_' and '-', starting with a letter "
            "or digit (it names files and test ids)"
        )
    return name


Ask = Callable[[str], str]


def _answered(ask: Ask | None) -> Ask | None:
    """``ask`` with the end of input (Ctrl-D) and Ctrl-C at a question as one line each, nothing written."""
    if ask is None:
        return None

    def asking(question: str) -> str:
        try:
            return ask(question)
        except EOFError:
            raise InitError(
                f"no answer to {question.strip()!r}: the input ended (Ctrl-D); nothing was written"
            ) from None
        except KeyboardInterrupt:
            raise InitError(f"interrupted at {question.strip()!r} (Ctrl-C); nothing was written") from None

    return asking


def runner_gpus(request: InitRequest, ask: Ask | None, inventory: Callable[[], Inventory] = visible_gpus) -> RunnerGpus:
    """The runner's GPUs: the command line's, else this machine's (when it has any), else asked for."""
    given = (request.gpu_count, request.gpu_name, request.memory_gib, request.compute_capability)
    if all(v is not None for v in given):
        assert request.gpu_count is not None and request.gpu_name is not None and request.memory_gib is not None
        assert request.compute_capability is not None
        return _checked_gpus(
            RunnerGpus(
                request.gpu_count, request.gpu_name, request.memory_gib, request.compute_capability, "the command line"
            )
        )
    found = inventory()
    count, name, memory, capability = given
    source = "the command line"
    if len(found):
        first = found.gpus[0]
        count = count if count is not None else len(found)
        name = name or first.name
        memory = memory if memory is not None else round(first.memory_gib)
        capability = capability or first.compute_capability or None
        source = SOURCE_NAMES.get(found.source, found.source)
    missing = [
        flag
        for flag, value in (
            ("--gpus", count),
            ("--gpu-name", name),
            ("--memory-gib", memory),
            ("--compute-capability", capability),
        )
        if value is None
    ]
    if missing and ask is None:
        seen = f"this machine's GPUs ({found.source}) do not tell" if len(found) else "no GPU is visible here"
        raise InitError(
            f"the runner's GPUs: {seen}; give {', '.join(missing)} as on the runner, e.g. --gpus 1 "
            '--gpu-name "NVIDIA L40S" --memory-gib 48 --compute-capability 8.9 (nvidia-smi --query-gpu='
            "name,memory.total,compute_cap --format=csv on the runner prints them)"
        )
    if missing:
        assert ask is not None
        source = "asked"
        if count is None:
            count = _ask_int(ask, "How many GPUs does the runner have? ")
        if name is None:
            name = _ask_text(ask, 'GPU name, as nvidia-smi prints it (e.g. "NVIDIA L40S"): ')
        if memory is None:
            memory = _ask_float(ask, "Memory per GPU, in GiB (e.g. 48): ")
        if capability is None:
            capability = _ask_capability(ask)
    assert count is not None and name is not None and memory is not None and capability is not None
    return _checked_gpus(RunnerGpus(count, name, float(memory), capability, source))


def _checked_gpus(gpus: RunnerGpus) -> RunnerGpus:
    """The GPUs as a deployment file can state them; InitError names the flag of a value it cannot hold."""
    where = f" (from {gpus.source})" if gpus.source not in ("the command line", "asked") else ""
    if not 1 <= gpus.count <= MAX_GPUS:
        raise InitError(f"--gpus {gpus.count}{where}: a runner has 1 to {MAX_GPUS} GPUs")
    if not gpus.name.strip() or len(gpus.name) > 256:
        raise InitError(
            f'--gpu-name {_shown(gpus.name)}{where}: the GPU\'s name as nvidia-smi prints it, e.g. "NVIDIA L40S"'
        )
    if not (math.isfinite(gpus.memory_gib) and 0 < gpus.memory_gib <= MAX_MEMORY_GIB):
        raise InitError(f"--memory-gib {gpus.memory_gib:g}{where}: GiB per GPU, above 0 and at most {MAX_MEMORY_GIB}")
    if not re.fullmatch(COMPUTE_CAPABILITY_PATTERN, gpus.compute_capability):
        raise InitError(
            f"--compute-capability {_shown(gpus.compute_capability)}{where}: the form 8.9 (nvidia-smi's compute_cap)"
        )
    return gpus


def _ask_text(ask: Ask, question: str) -> str:
    for _ in range(3):
        answer = ask(question).strip()
        if answer:
            return answer
    raise InitError(f"no answer to {question.strip()!r}")


def _ask_int(ask: Ask, question: str) -> int:
    for _ in range(3):
        answer = ask(question).strip()
        if answer.isdigit() and 1 <= int(answer) <= MAX_GPUS:
            return int(answer)
    raise InitError(f"{question.strip()} needs a whole number from 1 to {MAX_GPUS}")


def _ask_float(ask: Ask, question: str) -> float:
    for _ in range(3):
        try:
            value = float(ask(question).strip())
        except ValueError:
            continue
        if 0 < value <= MAX_MEMORY_GIB:
            return value
    raise InitError(f"{question.strip()} needs a number of GiB above 0")


def _ask_capability(ask: Ask) -> str:
    for _ in range(3):
        answer = ask("Compute capability (e.g. 8.9 for an L40S, 9.0 for an H100): ").strip()
        if re.fullmatch(COMPUTE_CAPABILITY_PATTERN, answer):
            return answer
    raise InitError("the compute capability needs the form 8.9")


@dataclass(frozen=True)
class ReleaseBuild:
    """What one release built of the model for init: its version, the build or why there is none."""

    version: str
    model: ModelFacts | None
    error: str | None


def model_build(deployment: Deployment, resolver: Resolves, version: str) -> ReleaseBuild:
    """The deployment's defaults variant resolved as `sglperf preflight` resolves it, for its model build."""
    try:
        (resolved,) = resolve_variants(deployment, resolver, [DEFAULTS_VARIANT], without_requests=False)
    except SglperfError as exc:
        return ReleaseBuild(version, None, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    finally:
        resolver.close()
    found = resolved.resolution
    if found is None:
        return ReleaseBuild(version, None, resolved.plan_error)
    refused = f"{found.error.type}: {found.error.message}" if found.error else None
    return ReleaseBuild(version, found.model, found.model_error or refused)


def model_weights(checkpoint: CheckpointFacts, build: ReleaseBuild | None) -> tuple[GpuWeights | None, str]:
    """The whole model's weights (TP 1) from the release's build, else counted from config.json, and a line
    saying where they came from; None and why when neither can size it."""
    if build is None:
        why = (
            f"no managed SGLang environment is built; `sglperf env build {envs.NEWEST_CHECKED}` lets init ask the "
            "release's own build of the model"
        )
    elif build.error:
        why = f"SGLang {build.version}'s build of the model failed: {_shown(build.error.splitlines()[0])}"
    else:
        why = f"SGLang {build.version} built no model"
    try:
        weights = gpu_weights(checkpoint, build.model if build else None, None, 1, no_build=why)
    except ValueError as exc:
        return None, str(exc)
    if weights.source == "model build":
        assert build is not None and build.model is not None
        return weights, (
            f"weights {weights.model_gib:.1f} GiB, as SGLang {build.version} builds the model "
            f"({build.model.architecture}, on the meta device)"
        )
    return weights, f"weights {weights.model_gib:.1f} GiB, {weights.detail}"


def choose_tp(weights: GpuWeights | None, why: str, gpus: RunnerGpus, asked: int | None) -> tuple[int, str]:
    """Tensor-parallel size and why: the fewest GPUs (a power of two) whose memory holds the weights with
    room for the KV cache; all of them when nothing could size the weights (``why`` says why)."""
    if asked is not None:
        if not 1 <= asked <= gpus.count:
            raise InitError(f"--tp {asked}: the runner has {gpus.count} GPU(s)")
        return asked, "as given (--tp)"
    if weights is None:
        return gpus.count, f"every GPU: sglperf cannot size this model's weights ({why}); --tp N chooses"
    weight_gib = weights.model_gib
    tp = 1
    while tp < gpus.count and weight_gib / tp > WEIGHT_SHARE * gpus.memory_gib:
        tp *= 2
    tp = min(tp, gpus.count)
    need = weight_gib / tp
    chose = f"weights {weight_gib:.1f} GiB, {need:.1f} GiB per GPU of {gpus.memory_gib:g} GiB"
    if need > WEIGHT_SHARE * gpus.memory_gib:
        chose += f": more than {WEIGHT_SHARE:.0%} of each GPU even on all of them, so expect little KV cache"
    return tp, chose


def draft_choice(request: InitRequest) -> tuple[DraftChoice, bytes] | None:
    if request.draft is None:
        return None
    path, checkpoint, raw = read_config(request.draft, "draft model")
    served = request.draft_served_path or (str(request.draft.resolve()) if _is_dir(request.draft) else None)
    if served is None:
        raise InitError(f"--draft {request.draft}: a config.json, not a folder: give --draft-served-path too")
    names = " ".join(checkpoint.architectures).lower()
    algorithm = "EAGLE3" if "eagle3" in names else "EAGLE" if "eagle" in names else "STANDALONE"
    return DraftChoice(path, served, algorithm), raw


def _toml(value: str) -> str:
    """A TOML basic string holding exactly ``value``: quote, backslash and every control character escaped
    (TOML forbids them raw, DEL too, which JSON's escaping leaves); ValueError for a lone surrogate (a
    config.json's "\\ud800"), which no TOML string holds."""
    out = []
    for char in value:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{_shown(value)} holds a lone surrogate (\\u{code:04X}): not text")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _shown(text: str, chars: int = SHOWN_CHARS) -> str:
    """Any text as one printable line (control characters and lone surrogates escaped), at most ``chars``."""
    shown = "".join(
        char.encode("unicode_escape").decode() if not char.isprintable() or 0xD800 <= ord(char) <= 0xDFFF else char
        for char in text[:chars]
    )
    return shown + ("..." if len(text) > chars else "")


def _comment(text: str) -> str:
    """Text for after a ``#``: one line, whatever it holds."""
    return _shown(text, 4 * SHOWN_CHARS)


@dataclass(frozen=True)
class _ModelFacts:
    """What init reads of the model's config.json, read once (an odd value is an InitError here)."""

    architectures: str
    vision: bool
    mtp_layers: int
    moe: bool


def _model_facts(checkpoint: CheckpointFacts, path: Path) -> _ModelFacts:
    try:
        return _ModelFacts(
            ", ".join(checkpoint.architectures),
            bool(checkpoint.vision_config_keys),
            checkpoint.mtp_layers,
            checkpoint.moe,
        )
    except ValueError as exc:
        raise InitError(f"{path}: {exc}") from None


def deployment_text(
    key: str,
    served_path: str,
    model: _ModelFacts,
    gpus: RunnerGpus,
    tp: tuple[int, str],
    runner_name: str,
    draft: DraftChoice | None,
) -> str:
    arch = _shown(model.architectures)
    lines = [
        f"# Written by `sglperf init` from {_comment(arch)}'s config.json. Every field: sglperf docs, Deployments.",
        f"description = {_toml(f'{arch} on {gpus.count}x {gpus.name}, TP {tp[0]}')}",
        "",
        "[model]",
        f"key = {_toml(key)}",
        f"served_path = {_toml(served_path)}  # on the runner; --model-path or $SGLPERF_MODEL_PATH override it",
        f'config = "../models/{key}/config.json"  # what preflight resolves against (no weights needed)',
        "",
        f"[runner]  # from {_comment(gpus.source)}",
        f"name = {_toml(runner_name)}",
        f"gpu_count = {gpus.count}",
        f"gpu_name = {_toml(gpus.name)}",
        f"compute_capability = {_toml(gpus.compute_capability)}",
        f"memory_gib = {gpus.memory_gib:g}",
        "",
        "[launch]",
        f"tp_size = {tp[0]}  # {_comment(tp[1])}",
        "",
        "# What every variant must really run with: preflight checks it against the release's own resolution,",
        "# the live tier against the running server (sglperf docs: Intents).",
        "[expect]",
        f"{PREFILL_CUDA_GRAPH} = true",
        f"{DECODE_CUDA_GRAPH} = true",
        f"{OVERLAP_SCHEDULE} = true",
        "",
        "[[variants]]",
        f'id = "{DEFAULTS_VARIANT}"',
        'description = "SGLang\'s defaults for this model and runner"',
    ]
    if model.vision:
        lines += [
            "",
            "# The checkpoint has a vision tower. Served text-only, its weights are memory for nothing: this variant",
            "# asks SGLang to skip them, and preflight shows whether the release can (sglperf docs: Intents).",
            "[[variants]]",
            'id = "text-only"',
            'description = "vision weights skipped"',
            f"request = {{ {VISION_WEIGHTS_SKIPPED} = true }}",
        ]
    if model.mtp_layers:
        lines += [
            "",
            f"# The checkpoint carries an MTP head ({model.mtp_layers} layer(s)): speculative decoding with it.",
            "[[variants]]",
            'id = "mtp3"',
            'description = "MTP, 3 steps, 4 draft tokens"',
            'speculative = { algorithm = "NEXTN", num_steps = 3, num_draft_tokens = 4, eagle_topk = 1 }',
        ]
    if draft is not None:
        lines += [
            "",
            f"# The draft model ({draft.algorithm}): served from the runner's path, its config read by preflight.",
            "[[variants]]",
            f"id = {_toml(draft.algorithm.lower())}",
            f"description = {_toml(f'{draft.algorithm} draft, 3 steps, 4 draft tokens')}",
            "# Once measured on the runner, hold the draft to its purpose (sglperf docs: Measurement):",
            '# expect_effect = { decode-chat = { decode_tok_s = "higher" } }',
            "[variants.speculative]",
            f"algorithm = {_toml(draft.algorithm)}",
            "num_steps = 3",
            "num_draft_tokens = 4",
            "eagle_topk = 1",
            "[variants.speculative.draft_model]",
            f"served_path = {_toml(draft.served_path)}",
            f'config = "../models/{key}-draft/config.json"',
        ]
    if model.moe:
        lines += [
            "",
            "# A mixture-of-experts model: single-batch overlap is an intent SGLang acts on here",
            "# (request = { single_batch_overlap = true } in a variant; docs/intents.md).",
        ]
    lines += [
        "",
        "# Measured on GPU runners (and against the emulator anywhere): decode speed on your prompts.",
        "[[workloads]]",
        'id = "decode-chat"',
        'prompts = "../prompts/chat.jsonl"',
        "output_len = 256",
        "concurrency = [1]",
        "warmup = 2",
        "repeats = 12",
        "",
    ]
    return "\n".join(lines)


def _prompts_text() -> str:
    return "".join(
        json.dumps({"id": pid, "messages": [{"role": "user", "content": text}]}) + "\n" for pid, text in STARTER_PROMPTS
    )


def _pytest_config(root: Path) -> Path | None:
    for name, section in PYTEST_CONFIGS:
        path = root / name
        if not _exists(path):
            continue
        try:
            if section in read_input(path).decode(errors="replace"):
                return path
        except OSError:
            return path  # unreadable (or a FIFO, a device): not ours to replace
    return None


def _gitignore(root: Path, notes: list[str]) -> tuple[Path, str] | None:
    """(.gitignore, the text to append: the block of sglperf's lines it lacks), or None: nothing to add, or
    a .gitignore init cannot read (said in ``notes``). A missing one is written as a new file."""
    path = root / ".gitignore"
    if not _exists(path):
        return path, "# sglperf\n" + "".join(f"{line}\n" for line in GITIGNORE_LINES)
    try:
        current = read_input(path).decode()
    except (OSError, UnicodeDecodeError) as exc:
        problem = os_problem(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        notes.append(f"{path}: cannot read it ({problem}); add {', '.join(GITIGNORE_LINES)} yourself")
        return None
    # "/results", "results" and "results/" all keep the folder out.
    have = {line.strip().strip("/") for line in current.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line.strip("/") not in have]
    if not missing:
        return None
    return path, ("\n" if current and not current.endswith("\n") else "") + "# sglperf\n" + "\n".join(missing) + "\n"


def _loaded(scratch: Path, files: Sequence[tuple[Path, bytes]], deployment: Path, root: Path) -> Deployment:
    """The deployment as it will be, loaded from ``scratch`` laid out like the repository (``files`` at their
    places, the repository's existing prompts copied in); InitError with the repository's paths if it fails."""
    for path, data in files:
        placed = scratch / path.relative_to(root)
        placed.parent.mkdir(parents=True, exist_ok=True)
        placed.write_bytes(data)
    try:
        return load_deployment(scratch / deployment.relative_to(root))
    except DeploymentError as exc:
        raise InitError(str(exc).replace(str(scratch), str(root))) from None


@dataclass(frozen=True)
class _Inputs:
    """What the deployment is made of, every value checked."""

    checkpoint: CheckpointFacts
    config: bytes
    model: _ModelFacts
    key: str
    served: str
    gpus: RunnerGpus
    runner_name: str
    draft: tuple[DraftChoice, bytes] | None

    def text(self, tp: tuple[int, str]) -> bytes:
        draft = self.draft[0] if self.draft else None
        return deployment_text(self.key, self.served, self.model, self.gpus, tp, self.runner_name, draft).encode()


def _inputs(request: InitRequest, ask: Ask | None, inventory: Callable[[], Inventory]) -> _Inputs:
    config_path, checkpoint, raw = read_config(request.model)
    model = _model_facts(checkpoint, config_path)
    key = _checked_name(request.key or slug(config_path.parent.name), "--key")
    served = request.served_path or (str(request.model.resolve()) if _is_dir(request.model) else None)
    if served is None:
        raise InitError(f"{request.model}: a config.json, not a model folder: give --served-path (the runner's path)")
    gpus = runner_gpus(request, _answered(ask), inventory)
    if request.tp_size is not None:
        choose_tp(None, "", gpus, request.tp_size)  # its range, checked before anything is asked of SGLang
    draft = draft_choice(request)
    runner_name = _checked_name(
        request.runner_name or slug(f"{gpus.count}x{gpus.name.removeprefix('NVIDIA ')}"), "--runner-name"
    )
    texts = [
        ("the served path", served),
        ("--gpu-name", gpus.name),
        (f"{config_path}: architectures", model.architectures),
    ]
    texts += [("the draft's served path", draft[0].served_path)] if draft else []
    for what, value in texts:
        try:
            _toml(value)
        except ValueError as exc:
            raise InitError(f"{what}: {exc}") from None
    return _Inputs(checkpoint, raw, model, key, served, gpus, runner_name, draft)


def _tp(
    inputs: _Inputs,
    request: InitRequest,
    sizing: SizingRelease | None,
    provisional: Callable[[], Deployment],
    cache: Path,
    progress: Progress,
    notes: list[str],
) -> tuple[int, str]:
    """The TP size asked for, else sized: by the release's own build of the (``provisional``) deployment's
    model when a release is built here, else by counting config.json; what sized it goes to ``notes``."""
    if request.tp_size is not None:
        return choose_tp(None, "", inputs.gpus, request.tp_size)
    build = None
    if sizing is not None:
        deployment = provisional()
        progress(
            f"sizing {_shown(inputs.model.architectures)} with SGLang {sizing.version}'s own model build (the "
            "newest SGLang environment built here; about a minute)"
        )
        build = model_build(deployment, sizing.resolver(deployment.runner, cache), sizing.version)
    weights, said = model_weights(inputs.checkpoint, build)
    tp = choose_tp(weights, said, inputs.gpus, None)
    if weights is None:
        said = f"tp_size {tp[0]} (every GPU): sglperf cannot size this model's weights ({said}); give --tp N"
    notes.append(said)
    return tp


def _plan(
    request: InitRequest,
    ask: Ask | None,
    inventory: Callable[[], Inventory],
    sizing: SizingRelease | None,
    progress: Progress,
) -> _Plan:
    """Every input checked and every file init would write, loaded as a deployment in a scratch folder."""
    inputs = _inputs(request, ask, inventory)
    root = request.root
    deployment = root / "deployments" / f"{inputs.key}.toml"
    # In the order they are written: the deployment's inputs, then it, then the repository's settings.
    before: list[tuple[Path, bytes]] = [(root / "models" / inputs.key / "config.json", inputs.config)]
    if inputs.draft is not None:
        before.append((root / "models" / f"{inputs.key}-draft" / "config.json", inputs.draft[1]))
    prompts = root / "prompts" / "chat.jsonl"
    users_prompts = _exists(prompts)
    if not users_prompts:
        before.append((prompts, _prompts_text().encode()))
    after: list[tuple[Path, bytes]] = []
    notes: list[str] = []
    if (existing := _pytest_config(root)) is None:
        after.append((root / "pytest.ini", PYTEST_INI.encode()))
    else:
        notes.append(
            f"{existing}: has a pytest configuration already: add `addopts = -ra` (skip reasons) and, if your "
            "deployments are not in deployments/, `sglperf_deployments = FOLDER`"
        )
    for path in [*(p for p, _ in before), deployment, *(p for p, _ in after)]:
        if _exists(path):
            raise InitError(f"{path}: exists already; sglperf init writes only new files (remove it, or --key)")
    appended = _gitignore(root, notes)
    if appended is not None and not _exists(appended[0]):
        after.append((appended[0], appended[1].encode()))
        appended = None
    around = [*before, *after]
    if users_prompts:  # the deployment will name it: it must load too
        try:
            around.append((prompts, read_input(prompts)))
        except OSError as exc:
            raise InitError(f"{prompts}: cannot read it: {os_problem(exc)} (the deployment would name it)") from None

    with tempfile.TemporaryDirectory(prefix="sglperf-init-") as scratch_folder:
        scratch = Path(scratch_folder)

        def provisional() -> Deployment:
            return _loaded(scratch, [*around, (deployment, inputs.text((1, "sizing")))], deployment, root)

        tp = _tp(inputs, request, sizing, provisional, scratch / "preflight-cache", progress, notes)
        final = (deployment, inputs.text(tp))
        _loaded(scratch, [*around, final], deployment, root)
    return _Plan(deployment, (*before, final, *after), appended, tuple(notes))


def _write(plan: _Plan) -> InitResult:
    """Write the plan's files (new only) and .gitignore's lines; on any failure, remove what was written."""
    result = InitResult(plan.deployment, notes=list(plan.notes))
    made: list[Path] = []  # folders init created, outermost first
    written: list[Path] = []
    grown: tuple[Path, int] | None = None
    path = plan.deployment
    try:
        for path, data in plan.files:
            _make_folders(path.parent, made)
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            written.append(path)
            with os.fdopen(handle, "wb") as out:
                out.write(data)
        if plan.gitignore_append is not None:
            path, block = plan.gitignore_append
            size = path.stat().st_size
            grown = (path, size)
            with open(path, "a", encoding="utf-8") as out:
                out.write(block)
    except BaseException as exc:
        _undo(written, made, grown)
        if isinstance(exc, FileExistsError):
            raise InitError(
                f"{path}: exists already; sglperf init writes only new files (remove it, or --key)"
            ) from None
        if isinstance(exc, OSError):
            raise InitError(f"{path}: cannot write it: {os_problem(exc)}; init left nothing behind") from None
        raise
    result.written = written
    result.appended = [grown[0]] if grown else []
    return result


def _make_folders(folder: Path, made: list[Path]) -> None:
    missing = []
    while not os.path.lexists(folder):
        missing.append(folder)
        if folder.parent == folder:
            break
        folder = folder.parent
    for each in reversed(missing):
        each.mkdir()
        made.append(each)


def _undo(written: list[Path], made: list[Path], grown: tuple[Path, int] | None) -> None:
    """Remove only what init wrote: its files, the folders it created (when empty), its .gitignore lines."""
    for path in reversed(written):
        try:
            path.unlink()
        except OSError:
            pass
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass
    if grown is not None:
        try:
            os.truncate(grown[0], grown[1])
        except OSError:
            pass


def init(
    request: InitRequest,
    ask: Ask | None = None,
    inventory: Callable[[], Inventory] = visible_gpus,
    sizing: SizingRelease | None = None,
    progress: Progress = silent,
) -> InitResult:
    """Write deployments/KEY.toml, models/KEY/config.json (and the draft's), prompts/chat.jsonl, a
    pytest.ini where the repository has no pytest configuration, and the .gitignore lines. ``sizing``: the
    release whose own model build sizes the weights (`newest_release`); None counts config.json."""
    return _write(_plan(request, ask, inventory, sizing, progress))


def command_prefix(root: Path, prefix: Path | None = None) -> str:
    """How the next steps spell sglperf's commands: by the virtualenv they are installed in, relative to the
    repository when it is there (``.venv/bin/``, as docs/getting-started.md installs them), else bare when
    that folder is on PATH, else by its absolute path."""
    venv = Path(sys.prefix) if prefix is None else prefix
    folder = venv / "bin"
    if prefix is None and sys.prefix == sys.base_prefix:
        return ""  # not a virtualenv: the commands are wherever the installer put them
    try:
        return f"{folder.resolve().relative_to(root.resolve())}/"
    except (ValueError, OSError):
        pass
    found = shutil.which("sglperf")
    if found and Path(found).resolve().parent == folder.resolve():
        return ""
    return f"{folder}/"


def summary(result: InitResult, root: Path, sglang: str, commands: str | None = None) -> Sequence[str]:
    def shown(path: Path) -> str:
        try:
            return str(path.relative_to(root))
        except ValueError:
            return str(path)

    run = command_prefix(root) if commands is None else commands
    lines = [f"wrote {shown(p)}" for p in result.written]
    lines += [f"added sglperf's lines to {shown(p)}" for p in result.appended]
    lines += result.notes
    lines += [
        "next: what SGLang will really do with it, and then a run against the emulator:",
        f"  {run}sglperf preflight {shown(result.deployment)} --sglang-version {sglang}",
        f"  {run}pytest -m preflight --sglang-version={sglang}",
    ]
    return lines
