"""Runs inside the *target* interpreter (the one with SGLang installed), never imported by sglperf.

It simulates the runner's GPUs, stubs GPU-only modules that cannot load here, then asks the
installed SGLang itself: what does your argument parser accept, and what do you resolve these
argv lists to? Standard library only, because it runs in SGLang's environment, not ours.

Protocol (JSON lines): the first stdin line is ``{"profile": {...}}``, answered by a description
of the release (version, parser options) or an error; every further line is a job
``{"id", "argv", "env", "build_model"}``, answered by its resolution and, when ``build_model`` is set
and SGLang accepted the argv, by what SGLang's model class builds for it on torch's meta device
(``"model"``, or ``"model_error"`` when construction is impossible here). EOF ends the worker.

Every job starts from the state the worker had right after importing SGLang (environment, SGLang's
process-global records, its warn-once memories), so a variant says the same alone or after others.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import functools
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import io
import json
import linecache
import logging
import math
import os
import re
import stat
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# GPU kernel packages, each stubbed only if importing it fails (as SGLang's own CPU tests do with
# sgl_kernel). flashinfer is stubbed because SGLang picks its default attention backend by whether
# flashinfer is importable, as it is on every GPU runner; deep_gemm, installed with SGLang on every CUDA
# runner, because 0.5.20+ import it unguarded in MLA attention (without it SGLang's registry drops its
# DeepSeek class and the build falls back to a Transformers class that cannot shard MLA); cutlass (the
# CUTLASS DSL, also on every CUDA runner), which 0.5.15 imports unguarded in the same MLA path. Stub nothing
# else: transformers probes optional packages such as flash_attn by spec and breaks on a stub.
GPU_ONLY_MODULES = ("sgl_kernel", "flashinfer", "deep_gemm", "cutlass")


def _stub_gpu_only_modules(never_import: list[str]) -> tuple[list[str], list[str]]:
    """(stubbed modules, installed ones stubbed without an import). ``never_import``: modules this CPU cannot
    load (a kernel built for AVX-512 kills the process with SIGILL on import, before any except runs)."""
    stubbed, kept_out = [], []
    for name in GPU_ONLY_MODULES:
        if name in never_import:
            stubbed.append(name)
            if importlib.util.find_spec(name) is not None:
                kept_out.append(name)
            continue
        try:
            __import__(name)
        except Exception:  # ImportError, OSError (missing libcuda), RuntimeError...
            for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
                del sys.modules[key]
            stubbed.append(name)
    if not stubbed:
        return stubbed, kept_out

    class _Loader(importlib.abc.Loader):
        def create_module(self, spec: Any) -> None:
            return None

        def exec_module(self, module: Any) -> None:
            from unittest.mock import MagicMock

            module.__getattr__ = lambda attr: MagicMock(name=f"{module.__name__}.{attr}")

    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname.split(".", maxsplit=1)[0] in stubbed:
                return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
            return None

    sys.meta_path.insert(0, _Finder())
    return stubbed, kept_out


def _fake_nvidia_smi(profile: dict[str, Any]) -> str:
    """A stand-in `nvidia-smi` answering the --query-gpu forms SGLang uses."""
    folder = tempfile.mkdtemp(prefix="sglperf-smi-")
    mib = int(profile["memory_gib"] * 1024)
    values = {
        "name": profile["gpu_name"],
        "memory.total": f"{mib}",
        "memory.free": f"{mib}",
        "memory.used": "0",
        "compute_cap": profile["compute_capability"],
        "driver_version": "simulated",
    }
    script = f"""#!{sys.executable}
import sys
values = {values!r}
count = {profile["gpu_count"]}
args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query is None:
    print("sglperf simulated nvidia-smi: " + str(count) + " x " + values["name"])
    sys.exit(0)
units = not any("nounits" in a for a in args)
for i in range(count):
    row = []
    for field in query.split(","):
        field = field.strip()
        value = str(i) if field == "index" else values.get(field, "N/A")
        if units and field.startswith("memory."):
            value += " MiB"
        row.append(value)
    print(", ".join(row))
"""
    path = os.path.join(folder, "nvidia-smi")
    with open(path, "w") as fh:
        fh.write(script)
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return folder


def _simulate_gpus(profile: dict[str, Any]) -> None:
    """Make torch report the runner's GPUs; resolution only reads these properties."""
    import torch

    count = profile["gpu_count"]
    major, minor = (int(p) for p in profile["compute_capability"].split("."))
    total = int(profile["memory_gib"] * 1024**3)
    props = SimpleNamespace(
        name=profile["gpu_name"],
        total_memory=total,
        major=major,
        minor=minor,
        multi_processor_count=profile.get("sm_count", 84),
        is_integrated=False,
        L2_cache_size=6 * 1024**2,
        uuid="simulated",
        gcnArchName="",
    )
    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: count
    cuda.current_device = lambda: 0
    cuda.get_device_name = lambda device=None: profile["gpu_name"]
    cuda.get_device_capability = lambda device=None: (major, minor)
    cuda.get_device_properties = lambda device=None: props
    cuda.mem_get_info = lambda device=None: (total, total)
    cuda.set_device = lambda device: None
    cuda.synchronize = lambda device=None: None
    cuda.empty_cache = lambda: None
    cuda.is_bf16_supported = lambda *a, **k: major >= 8
    if torch.version.cuda is None:
        torch.version.cuda = "12.8"
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(count))
    os.environ["PATH"] = _fake_nvidia_smi(profile) + os.pathsep + os.environ.get("PATH", "")


def _switch_profile(profile: dict[str, Any], clean: _CleanState) -> None:
    """Another runner of the same GPU model (sglperf's WorkerPool keeps other models apart): its GPU count and
    memory simulated, SGLang's cached answers about the GPUs dropped, and the environment it leaves between
    jobs now this runner's."""
    if profile.get("device", "cuda") != "cpu":
        _simulate_gpus(profile)
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang") or module is None:
            continue
        try:
            values = list(vars(module).values())
        except TypeError:
            continue
        for value in values:
            try:  # a module's values may be anything: placeholders of missing packages raise on any attribute
                clear = getattr(value, "cache_clear", None)
                ours = str(getattr(value, "__module__", "")).startswith("sglang")
            except Exception:
                continue
            if callable(clear) and ours:
                clear()
    clean.environ = dict(os.environ)


def _jsonable(value: Any, depth: int = 0) -> Any:
    if depth > 12:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, depth + 1) for v in value]
    if hasattr(value, "value") and type(value).__module__ != "builtins" and hasattr(type(value), "__members__"):
        return _jsonable(value.value, depth + 1)  # Enum
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}
    fields = getattr(type(value), "__struct_fields__", None)  # msgspec.Struct
    if fields is not None:
        return {name: _jsonable(getattr(value, name), depth + 1) for name in fields}
    return repr(value)


# Colour and cursor codes that SGLang (and the libraries it calls) put into log lines and messages.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


# Deprecation is the action class's word (SGLang's DeprecatedAction, DeprecatedStoreTrueAction,
# DeprecatedStoreConstAction, DeprecatedAliasStoreAction; argparse's own `deprecated=True`). A plain
# action counts only when its help *starts* by saying so ("Deprecated. Use ...", "(Deprecated, use
# ...)", "[Deprecated] ..."): help that merely mentions the word ("Replaces the deprecated
# --grpc-mode") describes the replacement, not a deprecated flag.
_HELP_DEPRECATED = re.compile(r"^\W*deprecated\b", re.IGNORECASE)
_HELP_REPLACEMENT = re.compile(r"\buse\s+'?(--[\w-]+(?:=[^\s,;)']+)?)", re.IGNORECASE)


class _Refused(Exception):
    """parser.error() called by a deprecated action that only refuses (the flag is gone)."""


def _deprecated_by_class(action: argparse.Action) -> bool:
    return getattr(action, "deprecated", False) is True or any(
        "Deprecated" in klass.__name__ for klass in type(action).__mro__
    )


def _render_deprecation(parser: argparse.ArgumentParser, action: argparse.Action, option: str) -> str | None:
    """Use the option the way argparse would and return what the release itself says about it."""
    heard = _Capture()
    root = logging.getLogger()
    root.addHandler(heard)
    printed = io.StringIO()
    environ = dict(os.environ)

    def refuse(message: str) -> Any:
        raise _Refused(message)

    original_error = parser.error
    parser.error = refuse  # type: ignore[method-assign]
    values: Any = None
    if action.nargs != 0:
        value = str(next(iter(action.choices))) if action.choices else "1"
        values = value if action.nargs in (None, "?") else [value]
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed), warnings.catch_warnings():
            action(parser, argparse.Namespace(), values, option)
    except _Refused as exc:
        return _plain(str(exc)).strip() or None
    except (Exception, SystemExit):
        pass
    finally:
        parser.error = original_error  # type: ignore[method-assign]
        root.removeHandler(heard)
        if dict(os.environ) != environ:
            os.environ.clear()
            os.environ.update(environ)
    said = [line["message"] for line in heard.lines] or [printed.getvalue()]
    return " ".join(m.strip() for m in said if m.strip()) or None


def _deprecation(
    parser: argparse.ArgumentParser, action: argparse.Action, option: str, help_text: str, by_class: bool
) -> tuple[str | None, str | None]:
    """(replacement flag, the release's own message) for a deprecated option."""
    if not by_class:
        found = _HELP_REPLACEMENT.search(help_text)
        return (found.group(1) if found else None), (_plain(help_text).strip() or None)
    new_flag = getattr(action, "new_flag", None)
    replacement = new_flag.strip() if isinstance(new_flag, str) and new_flag.strip() else None
    const = getattr(action, "const_value", None)
    # A const-storing alias stands for the new flag with that value (0.5.19: --enable-breakable-cuda-graph
    # -> --cuda-graph-backend-prefill=breakable); a boolean const means the new flag is a switch.
    if replacement and isinstance(const, str) and "=" not in replacement and " " not in replacement:
        replacement = f"{replacement}={const}"
    message = _render_deprecation(parser, action, option)
    if message is None:
        error = getattr(action, "error_message", None)
        message = _plain(error).strip() if isinstance(error, str) and error.strip() else None
    return replacement, message


def _describe_parser(server_args_cls: Any) -> dict[str, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    server_args_cls.add_cli_args(parser)
    options = {}
    for action in parser._actions:
        kind = type(action).__name__
        help_text = action.help if isinstance(action.help, str) else ""
        by_class = _deprecated_by_class(action)
        deprecated = by_class or bool(_HELP_DEPRECATED.match(help_text))
        record = {
            "dest": action.dest,
            "action": kind,
            "choices": _jsonable(list(action.choices)) if action.choices else None,
            "default": _jsonable(action.default),
            "takes_value": action.nargs != 0,
            "deprecated": deprecated,
            "help": _plain(help_text[:400]),
            "replacement": None,
            "deprecation_message": None,
        }
        for opt in action.option_strings:
            options[opt] = record
            if deprecated:
                replacement, message = _deprecation(parser, action, opt, help_text, by_class)
                options[opt] = {**record, "replacement": replacement, "deprecation_message": message}
    return options


# The nested per-phase config (0.5.14+): its writes are recorded as cuda_graph_config.<phase>.<name>.
_PHASE_CONFIG_MODULE = "sglang.srt.model_executor.cuda_graph_config"


def _header(filename: str, lineno: int) -> str:
    """An if/elif/else header, its continuation lines joined (``if (\n a\n and b\n):``)."""
    parts = []
    for ln in range(lineno, lineno + 8):
        text = linecache.getline(filename, ln).strip()
        parts.append(text)
        if text.endswith(":"):
            break
    return " ".join(" ".join(parts).rstrip(":").replace("( ", "(").replace(" )", ")").split())


_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)


@functools.lru_cache(maxsize=128)
def _source_tree(filename: str) -> ast.Module | None:
    try:
        return ast.parse("".join(linecache.getlines(filename)), filename)
    except (SyntaxError, ValueError, RecursionError):
        return None


def _statements(node: ast.AST) -> list[tuple[str, list[ast.stmt]]]:
    """A compound statement's blocks by name ("body", "orelse", ...), handlers' bodies included."""
    blocks = [(name, getattr(node, name)) for name in ("body", "orelse", "finalbody") if getattr(node, name, None)]
    blocks += [("handler", h.body) for h in getattr(node, "handlers", [])]
    return blocks


def _comment_above(filename: str, lineno: int) -> str:
    """The comment block just above a line (blank lines allowed, banners such as ``# ----`` saying nothing)."""
    block: list[str] = []
    for ln in range(lineno - 1, 0, -1):
        stripped = linecache.getline(filename, ln).strip()
        if not stripped:
            continue
        if not stripped.startswith("#"):
            break
        words = stripped.lstrip("# ").strip()
        if words.strip("-=*~#"):
            block.insert(0, words)
        elif block:
            break  # a banner closes the block above the line
    return " ".join(block)


def _is_elif(filename: str, node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and linecache.getline(filename, node.lineno).lstrip().startswith("elif")


def _branch_context(filename: str, lineno: int, loop_values: dict[str, Any] | None = None) -> tuple[list[str], str]:
    """The conditions a statement sits under, outermost first, and SGLang's comment for it, read from the
    code's structure (its AST, within the function it is in).

    The comment is the block just above the statement, else the block that opens a branch it sits in (the
    first lines of that branch, or just above its ``if``/``elif``/``else``), innermost first; a block above a
    simple statement is that statement's, and a block above an ``if`` is about that branch only, never its
    ``elif`` siblings'. A ``for`` over a table of named rules (``for name, predicate in rules``) adds the
    rule the loop was at (``loop_values``: the frame's locals), so ``if predicate()`` says which rule."""
    tree = _source_tree(filename)
    if tree is None:
        return [], ""
    path: list[tuple[ast.stmt, str]] = []  # (enclosing statement, the block of it the next one sits in)
    blocks: list[tuple[str, list[ast.stmt]]] = [("body", tree.body)]
    statement: ast.stmt | None = None
    while blocks:
        found = None
        for name, body in blocks:
            for node in body:
                if node.lineno <= lineno <= (node.end_lineno or node.lineno):
                    found = (name, node)
                    break
            if found:
                break
        if found is None:
            break
        name, statement = found
        if path:
            path[-1] = (path[-1][0], name)
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            path = []  # the rule is the innermost function: conditions outside it are not its
        path.append((statement, ""))
        blocks = _statements(statement)
    if statement is None:
        return [], ""
    path.pop()  # the statement itself
    conditions: list[str] = []
    for node, block in path:
        if isinstance(node, ast.If):
            if block == "body":
                conditions.append(_header(filename, node.lineno))
            elif not (
                len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If) and _is_elif(filename, node.orelse[0])
            ):
                conditions.append("else")
        elif isinstance(node, (ast.For, ast.AsyncFor)) and loop_values:
            names = [n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)]
            conditions += [f"{n} = {loop_values[n]!r}" for n in names if isinstance(loop_values.get(n), str)]
    comment = _comment_above(filename, statement.lineno)
    inner = dict(path)  # each enclosing statement -> the block of it the statement sits in
    for node, block in reversed(path):
        if comment or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            break
        body = dict(_statements(node)).get(block) or []
        first = body[0] if body else None
        # A block opening a branch labels it when a compound statement follows it (an ``if`` only for its
        # own body, never for its elif/else siblings); above a simple statement it is that statement's.
        opens = first is not None and first is not statement and isinstance(first, _COMPOUND)
        if opens and first is not None and not (isinstance(first, ast.If) and inner.get(first) == "orelse"):
            comment = _comment_above(filename, first.lineno)
        if not comment and isinstance(node, ast.If) and block == "body":
            comment = _comment_above(filename, node.lineno)
    return conditions, comment


def _traced_write(field: str, old: Any, value: Any, frame: Any) -> dict[str, Any]:
    code = frame.f_code
    try:
        changed = not (old is value or bool(old == value))
    except Exception:
        changed = True
    conditions, comment = _branch_context(code.co_filename, frame.f_lineno, frame.f_locals)
    return {
        "field": field,
        "changed": changed,
        "old": _jsonable(old),
        "new": _jsonable(value),
        "rule": code.co_name,
        "where": f"{os.path.basename(code.co_filename)}:{frame.f_lineno}",
        "code": linecache.getline(code.co_filename, frame.f_lineno).strip(),
        "comment": comment,
        "conditions": conditions,
    }


class _WriteTracer:
    """Records which function and line changed a field of ``cls`` during resolution, by patching its
    ``__setattr__``; ``field_of(name, frame)`` names the field recorded (None: not traced)."""

    def __init__(self, cls: Any, field_of: Callable[[str, Any], str | None]) -> None:
        self.active = False
        self.writes: list[dict[str, Any]] = []
        original = cls.__setattr__
        tracer = self

        def traced(obj: Any, name: str, value: Any) -> None:
            if tracer.active and name in obj.__dict__:
                frame = sys._getframe(1)
                field = field_of(name, frame) if frame.f_code.co_name != "__init__" else None
                if field is not None:
                    tracer.writes.append(_traced_write(field, obj.__dict__[name], value, frame))
            original(obj, name, value)

        cls.__setattr__ = traced


def _server_args_tracer(cls: Any) -> _WriteTracer:
    """ServerArgs of the releases that resolve by assignment (before 0.5.19)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return _WriteTracer(cls, lambda name, frame: name if name in names else None)


def _phase_tracer() -> _WriteTracer | None:
    """A graph phase's settings (``max_bs``, ``bs``, ``backend``) in releases with the nested per-phase
    config (0.5.14+), whose own resolution record names only the function that declared the whole
    config. The phase is read from the statement (``decode_cuda_graph_config.max_bs = 24``)."""
    try:
        cls = importlib.import_module(_PHASE_CONFIG_MODULE).PhaseConfig
    except (ImportError, AttributeError):
        return None

    def field_of(name: str, frame: Any) -> str | None:
        if name.startswith("_"):
            return None
        statement = linecache.getline(frame.f_code.co_filename, frame.f_lineno).split("=", 1)[0]
        phase = next((p for p in ("decode", "prefill") if p in statement), "?")
        return f"cuda_graph_config.{phase}.{name}"

    return _WriteTracer(cls, field_of)


# Releases that resolve by declaring (0.5.19+): ``declare_resolution(server_args, source, **fields)``
# appends to ``ServerArgs._resolved_overrides`` and names only a source.
_DECLARING_MODULE = "sglang.srt.arg_groups.overrides"


def _site(code: Any, lineno: int) -> dict[str, Any]:
    conditions, comment = _branch_context(code.co_filename, lineno)
    return {
        "rule": code.co_name,
        "where": f"{os.path.basename(code.co_filename)}:{lineno}",
        "code": linecache.getline(code.co_filename, lineno).strip(),
        "comment": comment,
        "conditions": conditions,
    }


class _DeclarationTracer:
    """Where each declaration of a declaring release was made, so that its fields carry file:line, branch
    and comment as an assignment does: the caller of ``declare_resolution``, or, when the caller is the
    declaring machinery itself (a pass that returned its fields, a plugin's recorded writes), the
    function the source names, at its ``def`` with its docstring."""

    def __init__(self) -> None:
        self.active = False
        self.sites: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}
        try:
            module = importlib.import_module(_DECLARING_MODULE)
            original = module.declare_resolution
        except (ImportError, AttributeError):
            return
        machinery = module.__file__
        tracer = self

        def declare_resolution(server_args: Any, source: str, **fields: Any) -> Any:
            if tracer.active:
                frame = sys._getframe(1)
                if frame.f_code.co_filename == machinery:
                    site = tracer._named(source, frame) or _site(frame.f_code, frame.f_lineno)
                else:
                    site = _site(frame.f_code, frame.f_lineno)
                tracer.sites.setdefault((source, tuple(sorted(fields))), []).append(site)
            return original(server_args, source, **fields)

        # Modules that imported the name already hold the original; later importers read the patched one.
        loaded: Any
        for name, loaded in list(sys.modules.items()):
            if name.startswith("sglang") and getattr(loaded, "declare_resolution", None) is original:
                loaded.declare_resolution = declare_resolution

    @staticmethod
    def _named(source: str, frame: Any) -> dict[str, Any] | None:
        for value in frame.f_locals.values():
            code = getattr(value, "__code__", None)
            if code is not None and getattr(value, "__qualname__", None) == source:
                doc = (getattr(value, "__doc__", None) or "").strip().splitlines()
                site = _site(code, code.co_firstlineno)
                site["comment"] = site["comment"] or (doc[0] if doc else "")
                return site
        return None

    def site(self, source: str, fields: dict[str, Any]) -> dict[str, Any]:
        queue = self.sites.get((source, tuple(sorted(fields))))
        return queue.pop(0) if queue else {"rule": source}


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:
            message = str(record.msg)
        self.lines.append({"level": record.levelname, "logger": record.name, "message": _plain(message)})


# Modules whose globals are SGLang's process-wide records: server args published for the scheduler,
# parallel groups, attention-DP and MoE settings (a release with a runtime context snapshots that itself).
_STATE_MODULES = (
    "sglang.srt.server_args",
    "sglang.srt.distributed.parallel_state",
    "sglang.srt.layers.dp_attention",
    "sglang.srt.layers.moe.utils",
)
# Warn-once memories, found by name in every SGLang module (`_warned_bool_env_var_keys`, flags such as
# `_ssl_verify_warned`, `print_warning_once`'s cache): kept, a warning would show for the first variant only.
_ONCE_NAMES = re.compile(r"warn|once|logged|seen|printed|shown", re.IGNORECASE)
# Cached config loaders (`get_config`, `get_generation_config`, ...): they hand out one shared object per
# model path, which SGLang edits in place (0.5.13's draft ModelConfig renames the cached HF config's
# architecture to Qwen3_5ForCausalLMMTP), so every job reads the checkpoint's config afresh.
_CACHED_NAMES = re.compile(r"warn|once|logged|printed|shown|config", re.IGNORECASE)
_CONTAINERS = (set, dict, list)


def _copy(value: Any) -> Any:
    return type(value)(value) if type(value) in _CONTAINERS else value


def _refill(target: Any, saved: Any) -> None:
    """Put a container's saved contents back into the same object (others may hold a reference)."""
    if isinstance(target, list):
        target[:] = saved
    else:
        target.clear()
        target.update(saved)


class _ModuleGlobals:
    """Some modules' global bindings (`_TP = group`, `_global_server_args = args`, ...), to put back.

    Bindings only: containers filled in place are registries that imports populate once (e.g. MoE
    runner backends); emptying them would break the modules already imported."""

    def __init__(self, modules: list[Any]) -> None:
        self.saved = [(m, {k: v for k, v in vars(m).items() if not k.startswith("__")}) for m in modules]

    def restore(self) -> None:
        for module, bindings in self.saved:
            namespace = vars(module)
            for name, value in bindings.items():
                if namespace.get(name) is not value:
                    namespace[name] = value


class _CleanState:
    """The worker as it was right after importing SGLang, put back before and after every job.

    Resolution writes to os.environ in every release (0.5.16+ sets SGLANG_USE_CUDA_IPC_TRANSPORT, which
    the next resolution then reports as deprecated), publishes process-wide records and remembers what
    it already warned about: without this a variant's logs would depend on the variants before it.
    """

    def __init__(self) -> None:
        self.environ = dict(os.environ)
        self.records = _ModuleGlobals([sys.modules[n] for n in _STATE_MODULES if n in sys.modules])
        self.context = self._snapshot_context()
        self.once_values: list[tuple[Any, str, Any]] = []
        self.caches: list[Any] = []
        self.scanned: set[str] = set()
        self.warn_once = dict(getattr(warnings, "onceregistry", {}))
        self.loggers = self._logger_state()
        self.logging_disabled = logging.root.manager.disable
        self._scan()

    @staticmethod
    def _snapshot_context() -> tuple[Any, Any, dict[str, Any]] | None:
        """Releases with a runtime context (0.5.19, 0.5.23): its own snapshot, plus copies of the dicts
        it hands back by reference (its parallel stamps are updated in place)."""
        rc = sys.modules.get("sglang.srt.runtime_context")
        if rc is None or not hasattr(rc, "snapshot_context") or not hasattr(rc, "restore_context"):
            return None
        try:
            parallel = rc.get_parallel()
            slots = {
                s: dict(getattr(parallel, s))
                for s in type(parallel).__slots__
                if type(getattr(parallel, s, None)) is dict
            }
            return rc, rc.snapshot_context(), slots
        except Exception:
            return None

    @staticmethod
    def _logger_state() -> dict[str, tuple[int, bool, bool]]:
        loggers = [
            logging.getLogger(),
            *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)),
        ]
        return {lg.name: (lg.level, lg.disabled, lg.propagate) for lg in loggers}

    def _scan(self) -> None:
        """Find warn-once memories and cached loaders in SGLang modules not seen yet (model code is
        imported later)."""
        for name, module in list(sys.modules.items()):
            if name in self.scanned or not name.startswith("sglang") or module is None:
                continue
            self.scanned.add(name)
            try:
                items = list(vars(module).items())
            except TypeError:
                continue
            for attr, value in items:
                if attr.startswith("__"):
                    continue
                if isinstance(value, bool) or type(value) in _CONTAINERS:
                    if _ONCE_NAMES.search(attr):
                        self.once_values.append((module, attr, _copy(value)))
                elif (
                    _CACHED_NAMES.search(attr)
                    and callable(getattr(value, "cache_clear", None))
                    and getattr(value, "__module__", None) == name
                ):
                    self.caches.append(value)

    def restore(self) -> None:
        self._scan()
        if dict(os.environ) != self.environ:
            os.environ.clear()
            os.environ.update(self.environ)
        self.records.restore()
        if self.context is not None:
            rc, snapshot, slots = self.context
            rc.restore_context(snapshot)
            parallel = rc.get_parallel()
            for slot, saved in slots.items():
                setattr(parallel, slot, dict(saved))
        for module, attr, saved in self.once_values:
            current = getattr(module, attr, None)
            if type(saved) in _CONTAINERS and type(current) is type(saved):
                _refill(current, saved)
            else:
                setattr(module, attr, _copy(saved))
        for cached in self.caches:
            cached.cache_clear()
        registry = getattr(warnings, "onceregistry", None)
        if isinstance(registry, dict):
            registry.clear()
            registry.update(self.warn_once)
        for name, (level, disabled, propagate) in self.loggers.items():
            lg = logging.getLogger() if name == "root" else logging.getLogger(name)
            if lg.level != level:
                lg.setLevel(level)
            lg.disabled, lg.propagate = disabled, propagate
        if logging.root.manager.disable != self.logging_disabled:
            logging.disable(self.logging_disabled)


# ---- What SGLang's model class builds, on torch's meta device (no weights, no memory, no GPU) ----

# Where multimodal model classes keep their vision tower, on the model or its inner `model`
# (Qwen-VL family: visual; LLaVA & co.: vision_tower; Idefics/Mllama/InternVL: vision_model; ...).
VISION_TOWER_ATTRS = (
    "visual",
    "vision_tower",
    "vision_model",
    "vision_encoder",
    "vision_backbone",
    "image_encoder",
    "vit",
    "vpm",
)
# MoE layers: SGLang's expert layers (FusedMoE and its backend subclasses: EPMoE, DeepEPMoE,
# FlashInferFusedMoE, ...; by class when importable, else by name) and the model blocks that own them
# (Qwen2MoeSparseMoeBlock, DeepseekV2MoE, MixtralMoE, Llama4MoE, ...: a class name *ending* in
# MoE/Moe/MoeBlock/MoELayer). Only the outermost match counts, so a block and the FusedMoE inside it
# are one layer. A name merely containing "Moe" does not count: dense models reuse `Qwen2MoeMLP`, and
# Qwen3.5's vision tower is a `Qwen3VLMoeVisionModel`.
_MOE_LAYER = re.compile(r"FusedMoE|EPMoE")
_MOE_BLOCK = re.compile(r"(MoE|Moe|MoeBlock|MoEBlock|MoELayer|MoeLayer)$")
# Speculative algorithms that run without a draft model.
_NO_DRAFT_ALGORITHMS = frozenset({"NONE", "NGRAM", "LOOKAHEAD"})
# Effective fields that change what the target model class builds; the worker builds once per
# distinct combination (with the job's environment), so variants that share a model share one build.
_MODEL_KEY_FIELDS = (
    "model_path",
    "revision",
    "json_model_override_args",
    "language_model_only",
    "language_only",
    "encoder_only",
    "enable_multimodal",
    "model_impl",
    "trust_remote_code",
    "dtype",
    "quantization",
    "enable_fp32_lm_head",
    "tp_size",
    "pp_size",
    "ep_size",
    "dp_size",
    "attn_dp_size",
    "attn_cp_size",
    "moe_dp_size",
    "enable_dp_attention",
    "enable_dp_lm_head",
    "moe_a2a_backend",
    "moe_runner_backend",
    "moe_dense_tp_size",
    "ep_num_redundant_experts",
    "disable_shared_experts_fusion",
)
# ... and the draft model (on top of the target's fields).
_DRAFT_KEY_FIELDS = (
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "speculative_draft_model_quantization",
    "speculative_moe_runner_backend",
    "speculative_moe_a2a_backend",
    "enable_multi_layer_eagle",
)
# torch factories that take a device: forced onto meta.
_FACTORIES = frozenset(
    {
        "empty",
        "zeros",
        "ones",
        "full",
        "rand",
        "randn",
        "arange",
        "tensor",
        "as_tensor",
        "empty_strided",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
        "linspace",
        "eye",
        "randint",
    }
)


class _NoCuda:
    """torch.cuda.Stream/Event stand-in: constructors grab side streams and events; no driver here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, attr: str) -> Any:
        return lambda *args, **kwargs: None


class _FakeGroup:
    """Stands in for SGLang's GroupCoordinator: construction reads only its shape (size, rank)."""

    def __init__(self, name: str, world_size: int, rank: int) -> None:
        self.unique_name = name
        self.world_size = world_size
        self.rank_in_group = rank
        self.rank = rank
        self.local_rank = rank
        self.ranks = list(range(world_size))
        self.first_rank = 0
        self.last_rank = world_size - 1
        self.is_first_rank = rank == 0
        self.is_last_rank = rank == world_size - 1
        self.next_rank = (rank + 1) % world_size
        self.prev_rank = (rank - 1) % world_size
        self.device_group = None
        self.cpu_group = None
        self.use_pynccl = False
        self.pynccl_comm = None

    def __getattr__(self, attr: str) -> Any:
        raise AttributeError(f"simulated process group {self.unique_name!r} has no {attr!r}")


def _force_meta() -> Any:
    """A torch function mode that puts every new tensor on the meta device, explicit `device=`
    arguments included (0.5.13's qwen3_5.py passes the current CUDA device), and makes .cuda() and
    .to(<device>) of meta tensors no-ops."""
    import torch

    class ForceMeta(torch.overrides.TorchFunctionMode):  # type: ignore[misc]
        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            kwargs = dict(kwargs or {})
            name = getattr(func, "__name__", "")
            if name == "cuda" and args and isinstance(args[0], torch.Tensor):
                return args[0]
            if name == "to" and args and isinstance(args[0], torch.Tensor) and args[0].is_meta:
                rest = [a for a in args[1:] if not isinstance(a, (str, torch.device, int))]
                kwargs.pop("device", None)
                return func(args[0], *rest, **kwargs) if (rest or kwargs) else args[0]
            if "device" in kwargs or name in _FACTORIES:
                kwargs["device"] = "meta"
            return func(*args, **kwargs)

    return ForceMeta()


def _optional_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except Exception:
        return None


def _positive_int(obj: Any, name: str, default: int) -> int:
    try:
        value = getattr(obj, name)
    except Exception:
        return default
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _vision_tower(model: Any) -> Any:
    import torch

    for holder in (model, getattr(model, "model", None)):
        if not isinstance(holder, torch.nn.Module):
            continue
        for attr in VISION_TOWER_ATTRS:
            tower = getattr(holder, attr, None)
            if isinstance(tower, torch.nn.Module):
                return tower
    return None


def _moe_layers(model: Any) -> int:
    layer = _optional_module("sglang.srt.layers.moe.fused_moe_triton.layer")
    fused = getattr(layer, "FusedMoE", None)

    def is_moe(module: Any) -> bool:
        name = type(module).__name__
        return (isinstance(fused, type) and isinstance(module, fused)) or bool(
            _MOE_LAYER.search(name) or _MOE_BLOCK.search(name)
        )

    count = 0
    pending = list(model.children())
    while pending:
        module = pending.pop()
        if is_moe(module):
            count += 1  # outermost only: do not look inside
        else:
            pending.extend(module.children())
    return count


def _param_bytes(module: Any) -> int:
    return sum(int(p.numel()) * int(p.element_size()) for p in module.parameters())


def _builds_draft(effective: dict[str, Any]) -> bool:
    algorithm = effective.get("speculative_algorithm")
    return isinstance(algorithm, str) and bool(algorithm) and algorithm.upper() not in _NO_DRAFT_ALGORITHMS


def _error_text(exc: BaseException) -> str:
    return _plain(f"{type(exc).__name__}: {exc}")[:2000]


class _ModelBuilder:
    """Builds SGLang's model classes on the meta device, once per distinct model question."""

    def __init__(self, stubbed: list[str]) -> None:
        self.stubbed = set(stubbed)
        self.prepared = False
        self.moe_config_error: Exception | None = None
        self.built: dict[str, dict[str, Any]] = {}

    def facts(
        self, server_args: Any, effective: dict[str, Any], env: dict[str, str], capture: _Capture
    ) -> dict[str, Any]:
        """``{"model": {...}}`` or ``{"model_error": "<Type>: <message>"}`` for one resolved variant."""
        target = {"model": {k: effective.get(k) for k in _MODEL_KEY_FIELDS}, "env": env}
        key = json.dumps(target, sort_keys=True, default=repr)
        draft_key = None
        if _builds_draft(effective):
            draft_key = json.dumps(
                {**target, "draft": {k: effective.get(k) for k in _DRAFT_KEY_FIELDS}}, sort_keys=True, default=repr
            )
        wanted = [(k, k == draft_key) for k in (key, draft_key) if k is not None and k not in self.built]
        if wanted:
            self._build(server_args, effective, wanted, capture)
        built = self.built[key]
        if "error" in built:
            return {"model_error": built["error"]}
        facts = {**built["facts"], "draft_architecture": None, "draft_param_bytes_per_rank": 0}
        if draft_key is not None:
            draft = self.built[draft_key]
            facts["seconds"] = round(facts["seconds"] + draft["seconds"], 3)
            if "error" in draft:
                facts["draft_error"] = draft["error"]
            else:
                facts["draft_architecture"] = draft["facts"]["architecture"]
                facts["draft_param_bytes_per_rank"] = draft["facts"]["param_bytes_per_rank"]
        return {"model": facts}

    def _build(
        self, server_args: Any, effective: dict[str, Any], wanted: list[tuple[str, bool]], capture: _Capture
    ) -> None:
        # What construction logs and prints is not the variant's resolution: kept out of its answer.
        heard, capture.lines = capture.lines, []
        quiet = io.StringIO()
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._prepare()
                with self._parallel_scope(server_args, effective):
                    for key, is_draft in wanted:
                        self.built[key] = self._construct(server_args, effective, is_draft)
        except (Exception, SystemExit) as exc:
            for key, _ in wanted:
                self.built.setdefault(
                    key, {"error": _error_text(exc), "seconds": round(time.perf_counter() - started, 3)}
                )
        finally:
            capture.lines = heard

    def _prepare(self) -> None:
        """Once per worker: CUDA streams/events as no-ops, and no fake-kernel registration for the
        stubbed kernel package (0.5.13 registers fake implementations of sgl_kernel ops when model
        modules are imported; the stub has no ops, so their import would fail)."""
        if self.prepared:
            return
        import torch

        torch.cuda.Stream = _NoCuda
        torch.cuda.Event = _NoCuda
        original = torch.library.register_fake
        stubbed = self.stubbed

        def register_fake(op: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(op, str) and op.split("::")[0] in stubbed:
                return args[0] if args else (lambda fn: fn)
            return original(op, *args, **kwargs)

        torch.library.register_fake = register_fake
        self.prepared = True

    @contextlib.contextmanager
    def _parallel_scope(self, server_args: Any, effective: dict[str, Any]) -> Iterator[None]:
        """Tensor-parallel rank 0 of the resolved topology, as the scheduler process sees it, with
        stand-in process groups; every process-wide record is put back afterwards."""
        records = _ModuleGlobals([m for m in map(_optional_module, _STATE_MODULES) if m is not None])
        rc = _optional_module("sglang.srt.runtime_context")
        try:
            if rc is not None and hasattr(rc, "create_context") and hasattr(rc, "use_context"):
                # 0.5.23: a model-owned context, active only while building (the process's own
                # published config is not replaced).
                context = rc.create_context(server_args, role="test", ranks=rc.SpawnRanks(world_rank=0, gpu_id=0))
                with rc.use_context(context):
                    self._fake_groups(rc, context.parallel, effective)
                    self._initialize_moe_config(server_args)
                    yield
            elif rc is not None and hasattr(rc, "publish") and hasattr(rc, "SpawnRanks"):
                # 0.5.20-0.5.21: one process-wide context, published as the scheduler publishes it (and
                # put back by the job's clean state); its group handles are read from it, never from
                # parallel_state's globals ("parallel name 'pp_group' has not been written").
                rc.publish(server_args, role="scheduler", ranks=rc.SpawnRanks(world_rank=0, gpu_id=0))
                self._fake_groups(rc, rc.get_parallel(), effective)
                self._initialize_moe_config(server_args)
                yield
            else:
                # 0.5.13 (and 0.5.19, whose publish shim below fills its runtime context): module
                # globals, put back by `records` (the runtime context by the job's clean state).
                self._fake_legacy_groups(effective)
                publish = getattr(
                    sys.modules.get("sglang.srt.server_args"), "set_global_server_args_for_scheduler", None
                )
                if publish is not None:
                    publish(server_args)
                self._initialize_moe_config(server_args)
                yield
        finally:
            records.restore()

    @staticmethod
    def _fake_groups(rc: Any, parallel: Any, effective: dict[str, Any]) -> None:
        fields = rc._parallel_fields() if hasattr(rc, "_parallel_fields") else ()
        names = sorted(f for f in fields if f.endswith("_group")) or [
            f"{n}_group"
            for n in (
                "tp",
                "pp",
                "moe_ep",
                "moe_dp",
                "moe_tp",
                "attn_tp",
                "attn_cp",
                "shared_experts_tp",
                "dcp",
                "world",
            )
        ]
        tp = int(effective.get("tp_size") or 1)
        pp = int(effective.get("pp_size") or 1)
        groups = {}
        for name in names:
            prefix = name[: -len("_group")]
            if prefix == "world":
                size = _positive_int(parallel, "launch_world_size", tp * pp)
            else:
                size = _positive_int(parallel, f"{prefix}_size", 1)
            rank = _positive_int(parallel, f"{prefix}_rank", 0)
            groups[name] = _FakeGroup(prefix, size, rank if rank < size else 0)
        parallel.override_permanently(**groups)

    @staticmethod
    def _fake_legacy_groups(effective: dict[str, Any]) -> None:
        """Up to ~0.5.18: module globals of parallel_state and dp_attention."""
        ps = importlib.import_module("sglang.srt.distributed.parallel_state")
        dpa = _optional_module("sglang.srt.layers.dp_attention")
        tp = int(effective.get("tp_size") or 1)
        pp = int(effective.get("pp_size") or 1)
        ep = int(effective.get("ep_size") or 1)
        dp = int(effective.get("dp_size") or 1) if effective.get("enable_dp_attention") else 1
        attn_tp = max(tp // dp, 1)
        widths = {
            "_WORLD": tp * pp,
            "_TP": tp,
            "_PP": pp,
            "_ATTN_TP": attn_tp,
            "_ATTN_CP": 1,
            "_DCP": 1,
            "_MOE_EP": ep,
            "_MOE_TP": max(tp // ep, 1),
            "_MOE_DP": 1,
            "_SHARED_EXPERTS_TP": 1,
        }
        for name, size in widths.items():
            if hasattr(ps, name):
                setattr(ps, name, _FakeGroup(name.strip("_").lower(), size, 0))
        attention = {
            "_ATTN_TP_SIZE": attn_tp,
            "_ATTN_TP_RANK": 0,
            "_ATTN_DP_SIZE": dp,
            "_ATTN_DP_RANK": 0,
            "_LOCAL_ATTN_DP_SIZE": dp,
            "_LOCAL_ATTN_DP_RANK": 0,
            "_ENABLE_DP_ATTENTION_FLAG": bool(effective.get("enable_dp_attention")),
        }
        for name, value in attention.items():
            if dpa is not None and hasattr(dpa, name):
                setattr(dpa, name, value)

    def _initialize_moe_config(self, server_args: Any) -> None:
        """As the scheduler does before building the model (0.5.13 takes the args, 0.5.23 reads the
        published context). Dense models do not need it, so a failure does not stop the build; it is
        kept (``moe_config_error``) for `startup_refusal`."""
        import inspect

        self.moe_config_error = None
        moe = _optional_module("sglang.srt.layers.moe")
        initialize = getattr(moe, "initialize_moe_config", None)
        if initialize is None:
            return
        try:
            if inspect.signature(initialize).parameters:
                initialize(server_args)
            else:
                initialize()
        except Exception as exc:
            self.moe_config_error = exc

    def startup_refusal(self, server_args: Any, effective: dict[str, Any], capture: _Capture) -> dict[str, str] | None:
        """What the scheduler's start-up refuses on the simulated GPUs, in SGLang's words, or None.

        The scheduler seeds its MoE settings (``initialize_moe_config``) only for a model config that
        carries one of the top-k attributes its own source lists (read from that source, per release),
        and that call raises for features the GPU generation lacks (0.5.13-0.5.23: single-batch overlap
        on SM90). Anything that keeps the check from running claims nothing."""
        attrs = _scheduler_moe_attrs()
        if not attrs:
            return None
        heard, capture.lines = capture.lines, []
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                self._prepare()
                model_config_cls = importlib.import_module("sglang.srt.configs.model_config").ModelConfig
                text_config = model_config_cls.from_server_args(server_args).hf_text_config
                if not any(hasattr(text_config, a) for a in attrs):
                    return None
                with self._parallel_scope(server_args, effective):
                    refused = self.moe_config_error
        except (Exception, SystemExit):
            return None
        finally:
            capture.lines = heard
        if refused is None:
            return None
        return {
            "type": "StartupRefusal",
            "message": f"{_error_text(refused)} (the scheduler's start-up: {_raised_in(refused)})",
        }

    def _construct(self, server_args: Any, effective: dict[str, Any], is_draft: bool) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            model_config_cls = importlib.import_module("sglang.srt.configs.model_config").ModelConfig
            load_config_cls = importlib.import_module("sglang.srt.configs.load_config").LoadConfig
            loader = importlib.import_module("sglang.srt.model_loader.loader")
            utils = importlib.import_module("sglang.srt.model_loader.utils")
            if is_draft:
                # As the draft worker does: the draft path (None: the target checkpoint, e.g. MTP layers).
                model_config = model_config_cls.from_server_args(
                    server_args,
                    model_path=effective.get("speculative_draft_model_path") or None,
                    model_revision=effective.get("speculative_draft_model_revision"),
                    is_draft_model=True,
                )
            else:
                model_config = model_config_cls.from_server_args(server_args)
            load_config = load_config_cls(load_format="dummy")
            quant_config = loader._get_quantization_config(model_config, load_config)
            with utils.set_default_torch_dtype(model_config.dtype), _force_meta():
                model = loader._initialize_model(model_config, load_config, quant_config)
            tower = _vision_tower(model)
            facts = {
                "architecture": type(model).__name__,
                "vision_tower": type(tower).__name__ if tower is not None else None,
                "moe_layers": _moe_layers(model),
                "param_bytes_per_rank": _param_bytes(model),
                "vision_param_bytes_per_rank": _param_bytes(tower) if tower is not None else 0,
            }
        except (Exception, SystemExit) as exc:
            return {"error": _error_text(exc), "seconds": round(time.perf_counter() - started, 3)}
        seconds = round(time.perf_counter() - started, 3)
        return {"facts": {**facts, "seconds": seconds}, "seconds": seconds}


@functools.cache
def _scheduler_moe_attrs() -> tuple[str, ...]:
    """The config attributes whose presence makes SGLang's scheduler seed its MoE settings, as this
    release's scheduler source lists them (``moe_topk_attrs``); empty when it lists none."""
    spec = importlib.util.find_spec("sglang.srt.managers.scheduler")
    if spec is None or not spec.origin:
        return ()
    try:
        tree = ast.parse(Path(spec.origin).read_text())
    except (OSError, SyntaxError):
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "moe_topk_attrs" for t in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return ()
            return tuple(str(v) for v in value)
    return ()


def _raised_in(exc: BaseException) -> str:
    """The SGLang function and file:line that raised ``exc`` (its innermost frame inside sglang)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}sglang{os.sep}" in f.filename]
    if not frames:
        return "SGLang"
    frame = frames[-1]
    where = frame.filename.split(f"{os.sep}sglang{os.sep}srt{os.sep}", 1)[-1]
    return f"{frame.name}, {where}:{frame.lineno}"


def _resolve(
    module: Any, argv: list[str], tracers: list[_WriteTracer], declarations: _DeclarationTracer
) -> tuple[dict[str, Any], Any]:
    server_args = module.prepare_server_args(list(argv))
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
    if hasattr(server_args, "resolved_dict"):
        effective = server_args.resolved_dict()
    elif dataclasses.is_dataclass(server_args):
        effective = {f.name: getattr(server_args, f.name) for f in dataclasses.fields(server_args)}
    else:
        effective = dict(vars(server_args))
    writes = [w for tracer in tracers for w in tracer.writes]
    # A declaring release's record, in order: each field's value before it is the previous
    # declaration's, or what the argv asked (its raw input).
    current = dict(getattr(server_args, "_raw_input", None) or {})
    for source, fields in getattr(server_args, "_resolved_overrides", None) or []:
        site = declarations.site(source, fields)
        for name, value in fields.items():
            old = current.get(name)
            try:
                changed = not (old is value or bool(old == value))
            except Exception:
                changed = True
            current[name] = value
            writes.append(
                {
                    "field": name,
                    "changed": changed,
                    "old": _jsonable(old),
                    "new": _jsonable(value),
                    "where": "",
                    "code": "",
                    "comment": "",
                    **site,
                }
            )
    return {"effective": _jsonable(effective), "writes": writes}, server_args


def _resolve_job(
    module: Any,
    job: dict[str, Any],
    tracers: list[_WriteTracer],
    declarations: _DeclarationTracer,
    capture: _Capture,
    clean: _CleanState,
    builder: _ModelBuilder,
) -> dict[str, Any]:
    clean.restore()
    capture.lines = []
    for tracer in tracers:
        tracer.writes = []
    declarations.sites = {}
    env = dict(job.get("env") or {})
    result: dict[str, Any] = {"id": job.get("id"), "argv": job["argv"]}
    printed = io.StringIO()
    server_args = None
    t0 = time.perf_counter()
    # A fresh warnings state per job: Python shows a warning once per code location otherwise.
    with warnings.catch_warnings():
        try:
            os.environ.update(env)
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                for tracer in tracers:
                    tracer.active = True
                declarations.active = True
                answer, server_args = _resolve(module, job["argv"], tracers, declarations)
                result.update(answer)
        except SystemExit as exc:  # argparse: unknown flag or bad choice; its last line says which
            lines = [ln for ln in _plain(printed.getvalue()).splitlines() if "error:" in ln]
            result["error"] = {"type": "ArgumentError", "message": lines[-1] if lines else f"exit {exc}"}
        except BaseException as exc:
            result["error"] = {
                "type": type(exc).__name__,
                "message": _plain(str(exc)),
                "traceback": _plain(traceback.format_exc()[-3000:]),
            }
        finally:
            for tracer in tracers:
                tracer.active = False
            declarations.active = False
        result["seconds"] = round(time.perf_counter() - t0, 4)
        result["logs"] = capture.lines
        result["printed"] = _plain(printed.getvalue())[-4000:]
        if job.get("build_model") and server_args is not None and isinstance(result.get("effective"), dict):
            result.update(builder.facts(server_args, result["effective"], env, capture))
            refusal = builder.startup_refusal(server_args, result["effective"], capture)
            if refusal is not None:
                result["error"] = refusal
    clean.restore()
    return result


def _start(profile: dict[str, Any], never_import: list[str], capture: _Capture) -> tuple[dict[str, Any], Any]:
    """Import SGLang under the simulated runner; the first answer describes the release."""
    ready: dict[str, Any] = {"python": sys.executable}
    try:
        ready["sglang_version"] = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        ready["error"] = {"type": "SGLangNotInstalled", "message": f"no 'sglang' package in {sys.executable}"}
        return ready, None
    started = time.perf_counter()
    try:
        ready["stubbed_modules"], ready["kept_from_import"] = _stub_gpu_only_modules(never_import)
        if profile.get("device", "cuda") != "cpu":  # a CPU runner is this machine as it is: nothing to simulate
            _simulate_gpus(profile)
        module = importlib.import_module("sglang.srt.server_args")
        cls = module.ServerArgs
        heard = len(capture.lines)
        ready["parser"] = _describe_parser(cls)
        del capture.lines[heard:]  # deprecation messages rendered while describing: not import logs
        ready["language_model_only_architectures"] = _jsonable(getattr(cls, "LANGUAGE_MODEL_ONLY_ARCHITECTURES", None))
    except Exception as exc:
        ready["error"] = {
            "type": type(exc).__name__,
            "message": _plain(str(exc)),
            "traceback": _plain(traceback.format_exc()[-4000:]),
        }
        return ready, None
    ready["import_seconds"] = round(time.perf_counter() - started, 3)
    ready["import_logs"] = capture.lines
    return ready, module


def main() -> int:
    # Answers go to the original stdout; anything SGLang prints (even from C) goes to stderr.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(payload: dict[str, Any]) -> None:
        answers.write(json.dumps(payload) + "\n")
        answers.flush()

    capture = _Capture()
    original_basic_config = logging.basicConfig

    def basic_config_keeping_capture(*args: Any, **kwargs: Any) -> None:
        original_basic_config(*args, **kwargs)
        logging.getLogger().addHandler(capture)

    logging.basicConfig = basic_config_keeping_capture
    logging.getLogger().addHandler(capture)
    logging.getLogger().setLevel(logging.INFO)
    logging.captureWarnings(True)

    hello = json.loads(sys.stdin.readline())
    ready, module = _start(hello["profile"], hello.get("never_import", []), capture)
    answer(ready)
    if module is None:
        return 0
    phase = _phase_tracer()
    tracers = [phase] if phase else []
    if dataclasses.is_dataclass(module.ServerArgs):
        tracers.append(_server_args_tracer(module.ServerArgs))
    declarations = _DeclarationTracer()
    clean = _CleanState()
    builder = _ModelBuilder(ready.get("stubbed_modules", []))
    warmed = False
    profile = hello["profile"]
    for line in sys.stdin:
        if line.strip():
            job = json.loads(line)
            if job.get("profile", profile) != profile:
                profile = job["profile"]
                _switch_profile(profile, clean)
            if not warmed:
                # The first resolution imports what SGLang imports lazily, and import-time log lines
                # would be the first variant's alone: resolve it once unanswered, from a clean state.
                _resolve_job(module, {**job, "build_model": False}, tracers, declarations, capture, clean, builder)
                warmed = True
            answer(_resolve_job(module, job, tracers, declarations, capture, clean, builder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
