"""`sglperf init`: a first deployment file for a repository of the user's own, from what can be read.

What it reads, it does not ask: the model's ``config.json`` (architecture, a vision tower, MoE layers, an
MTP head, the weights' size), the runner's GPUs through NVML or ``nvidia-smi`` when this machine is the
runner, a draft model's ``config.json``. What it cannot read (the GPUs of a runner that is not this
machine) it asks for at a terminal, or names the flags for it. The file carries only the intents that
can apply to the model (no vision intent on a text-only checkpoint, speculative decoding only where the
model or a draft provides it), and every choice it made is a comment in it, so that the person reading
it knows what to change. It writes only files that do not exist yet, and appends to ``.gitignore``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sglperf.errors import SglperfError
from sglperf.model.checkpoint import CheckpointFacts
from sglperf.model.deployment_file import load as load_deployment
from sglperf.model.files import os_problem, read_input
from sglperf.model.intent_names import DECODE_CUDA_GRAPH, OVERLAP_SCHEDULE, PREFILL_CUDA_GRAPH, VISION_WEIGHTS_SKIPPED
from sglperf.runtime.gpus import Inventory, visible_gpus

# Lines a repository using sglperf keeps out of git: each run's results folder, and the lock files that
# guard a baseline while a run writes it.
GITIGNORE_LINES = ("results/", "baselines/**/*.lock")
# The weights may take this share of a GPU's memory; the rest is the KV cache and the graphs' buffers.
WEIGHT_SHARE = 0.6
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


def read_config(model: Path, what: str = "model") -> tuple[Path, CheckpointFacts, bytes]:
    """The config.json of a model folder (or the file itself), checked: a JSON object with architectures."""
    path = model / "config.json" if model.is_dir() else model
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
    out = re.sub(r"[^a-z0-9_.-]+", "-", name.lower()).strip("-.")
    return out or "model"


Ask = Callable[[str], str]


def runner_gpus(request: InitRequest, ask: Ask | None, inventory: Callable[[], Inventory] = visible_gpus) -> RunnerGpus:
    """The runner's GPUs: the command line's, else this machine's (when it has any), else asked for."""
    given = (request.gpu_count, request.gpu_name, request.memory_gib, request.compute_capability)
    if all(v is not None for v in given):
        assert request.gpu_count is not None and request.gpu_name is not None and request.memory_gib is not None
        assert request.compute_capability is not None
        return RunnerGpus(
            request.gpu_count, request.gpu_name, request.memory_gib, request.compute_capability, "the command line"
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
    return RunnerGpus(count, name, float(memory), capability, source)


def _ask_text(ask: Ask, question: str) -> str:
    for _ in range(3):
        answer = ask(question).strip()
        if answer:
            return answer
    raise InitError(f"no answer to {question.strip()!r}")


def _ask_int(ask: Ask, question: str) -> int:
    for _ in range(3):
        answer = ask(question).strip()
        if answer.isdigit() and 1 <= int(answer) <= 64:
            return int(answer)
    raise InitError(f"{question.strip()} needs a whole number from 1 to 64")


def _ask_float(ask: Ask, question: str) -> float:
    for _ in range(3):
        try:
            value = float(ask(question).strip())
        except ValueError:
            continue
        if 0 < value <= 4096:
            return value
    raise InitError(f"{question.strip()} needs a number of GiB above 0")


def _ask_capability(ask: Ask) -> str:
    for _ in range(3):
        answer = ask("Compute capability (e.g. 8.9 for an L40S, 9.0 for an H100): ").strip()
        if re.fullmatch(r"\d{1,2}\.\d", answer):
            return answer
    raise InitError("the compute capability needs the form 8.9")


def choose_tp(checkpoint: CheckpointFacts, gpus: RunnerGpus, asked: int | None) -> tuple[int, str]:
    """Tensor-parallel size and why: the fewest GPUs (a power of two) whose memory holds the weights with
    room for the KV cache; all of them when the weights cannot be counted."""
    if asked is not None:
        if not 1 <= asked <= gpus.count:
            raise InitError(f"--tp {asked}: the runner has {gpus.count} GPU(s)")
        return asked, "as given (--tp)"
    try:
        weight_gib = checkpoint.size().weight_gib
    except ValueError as exc:
        return gpus.count, f"every GPU: sglperf cannot count this model's weights ({exc})"
    tp = 1
    while tp < gpus.count and weight_gib / tp > WEIGHT_SHARE * gpus.memory_gib:
        tp *= 2
    tp = min(tp, gpus.count)
    need = weight_gib / tp
    why = f"weights {weight_gib:.1f} GiB, {need:.1f} GiB per GPU of {gpus.memory_gib:g} GiB"
    if need > WEIGHT_SHARE * gpus.memory_gib:
        why += f": more than {WEIGHT_SHARE:.0%} of each GPU even on all of them, so expect little KV cache"
    return tp, why


def draft_choice(request: InitRequest) -> tuple[DraftChoice, bytes] | None:
    if request.draft is None:
        return None
    path, checkpoint, raw = read_config(request.draft, "draft model")
    served = request.draft_served_path or (str(request.draft.resolve()) if request.draft.is_dir() else None)
    if served is None:
        raise InitError(f"--draft {request.draft}: a config.json, not a folder: give --draft-served-path too")
    names = " ".join(checkpoint.architectures).lower()
    algorithm = "EAGLE3" if "eagle3" in names else "EAGLE" if "eagle" in names else "STANDALONE"
    return DraftChoice(path, served, algorithm), raw


def _toml(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a TOML basic string takes JSON's escapes


def deployment_text(
    key: str,
    served_path: str,
    checkpoint: CheckpointFacts,
    gpus: RunnerGpus,
    tp: tuple[int, str],
    runner_name: str,
    draft: DraftChoice | None,
) -> str:
    arch = ", ".join(checkpoint.architectures)
    lines = [
        f"# Written by `sglperf init` from {arch}'s config.json. Every field: sglperf docs, Deployments.",
        f"description = {_toml(f'{arch} on {gpus.count}x {gpus.name}, TP {tp[0]}')}",
        "",
        "[model]",
        f"key = {_toml(key)}",
        f"served_path = {_toml(served_path)}  # on the runner; --model-path or $SGLPERF_MODEL_PATH override it",
        f'config = "../models/{key}/config.json"  # what preflight resolves against (no weights needed)',
        "",
        f"[runner]  # from {gpus.source}",
        f"name = {_toml(runner_name)}",
        f"gpu_count = {gpus.count}",
        f"gpu_name = {_toml(gpus.name)}",
        f"compute_capability = {_toml(gpus.compute_capability)}",
        f"memory_gib = {gpus.memory_gib:g}",
        "",
        "[launch]",
        f"tp_size = {tp[0]}  # {tp[1]}",
        "",
        "# What every variant must really run with: preflight checks it against the release's own resolution,",
        "# the live tier against the running server (sglperf docs: Intents).",
        "[expect]",
        f"{PREFILL_CUDA_GRAPH} = true",
        f"{DECODE_CUDA_GRAPH} = true",
        f"{OVERLAP_SCHEDULE} = true",
        "",
        "[[variants]]",
        'id = "defaults"',
        'description = "SGLang\'s defaults for this model and runner"',
    ]
    if checkpoint.vision_config_keys:
        lines += [
            "",
            "# The checkpoint has a vision tower. Served text-only, its weights are memory for nothing: this variant",
            "# asks SGLang to skip them, and preflight shows whether the release can (sglperf docs: Intents).",
            "[[variants]]",
            'id = "text-only"',
            'description = "vision weights skipped"',
            f"request = {{ {VISION_WEIGHTS_SKIPPED} = true }}",
        ]
    if checkpoint.mtp_layers:
        lines += [
            "",
            f"# The checkpoint carries an MTP head ({checkpoint.mtp_layers} layer(s)): speculative decoding with it.",
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
    if checkpoint.moe:
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
        try:
            if path.is_file() and section in path.read_text(errors="replace"):
                return path
        except OSError:
            return path  # unreadable: not ours to replace
    return None


def _new_file(path: Path, text: str | bytes, result: InitResult) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "xb") as out:  # never over a file the user has
            out.write(text.encode() if isinstance(text, str) else text)
    except FileExistsError:
        raise InitError(f"{path}: exists already; sglperf init writes only new files (remove it, or --key)") from None
    result.written.append(path)


def _gitignore(root: Path, result: InitResult) -> None:
    path = root / ".gitignore"
    try:
        current = path.read_text() if path.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        problem = os_problem(exc) if isinstance(exc, OSError) else "not UTF-8 text"
        result.notes.append(f"{path}: cannot read it ({problem}); add {', '.join(GITIGNORE_LINES)} yourself")
        return
    have = {line.strip() for line in current.splitlines()}
    missing = [line for line in GITIGNORE_LINES if line not in have]
    if not missing:
        return
    block = ("\n" if current and not current.endswith("\n") else "") + "# sglperf\n" + "\n".join(missing) + "\n"
    with open(path, "a") as out:
        out.write(block)
    (result.written if not current else result.appended).append(path)


def init(request: InitRequest, ask: Ask | None = None, inventory: Callable[[], Inventory] = visible_gpus) -> InitResult:
    """Write deployments/KEY.toml, models/KEY/config.json (and the draft's), prompts/chat.jsonl, a
    pytest.ini where the repository has no pytest configuration, and the .gitignore lines."""
    config_path, checkpoint, raw = read_config(request.model)
    key = request.key or slug(config_path.parent.name)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", key):
        raise InitError(f"--key {key!r}: letters, digits, '.', '_' and '-' only (it names files and test ids)")
    served = request.served_path or (str(request.model.resolve()) if request.model.is_dir() else None)
    if served is None:
        raise InitError(f"{request.model}: a config.json, not a model folder: give --served-path (the runner's path)")
    gpus = runner_gpus(request, ask, inventory)
    tp = choose_tp(checkpoint, gpus, request.tp_size)
    draft = draft_choice(request)
    runner_name = request.runner_name or slug(f"{gpus.count}x{gpus.name.removeprefix('NVIDIA ')}")
    root = request.root
    deployment = root / "deployments" / f"{key}.toml"
    if deployment.exists():
        raise InitError(f"{deployment}: exists already; sglperf init writes only new files (remove it, or --key)")
    result = InitResult(deployment)
    _new_file(root / "models" / key / "config.json", raw, result)
    if draft is not None:
        _new_file(root / "models" / f"{key}-draft" / "config.json", draft[1], result)
    prompts = root / "prompts" / "chat.jsonl"
    if not prompts.exists():
        _new_file(prompts, _prompts_text(), result)
    _new_file(deployment, deployment_text(key, served, checkpoint, gpus, tp, runner_name, draft and draft[0]), result)
    if (existing := _pytest_config(root)) is None:
        _new_file(root / "pytest.ini", PYTEST_INI, result)
    else:
        result.notes.append(
            f"{existing}: has a pytest configuration already: add `addopts = -ra` (skip reasons) and, if your "
            "deployments are not in deployments/, `sglperf_deployments = FOLDER`"
        )
    _gitignore(root, result)
    load_deployment(deployment)  # what init writes must load; a failure here is sglperf's bug, not the user's
    return result


def summary(result: InitResult, root: Path, sglang: str) -> Sequence[str]:
    def shown(path: Path) -> str:
        try:
            return str(path.relative_to(root))
        except ValueError:
            return str(path)

    lines = [f"wrote {shown(p)}" for p in result.written]
    lines += [f"added sglperf's lines to {shown(p)}" for p in result.appended]
    lines += result.notes
    lines += [
        "next: what SGLang will really do with it, and then a run against the emulator:",
        f"  sglperf preflight {shown(result.deployment)} --sglang-version {sglang}",
        f"  pytest -m preflight --sglang-version={sglang}",
    ]
    return lines
